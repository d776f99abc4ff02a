//! What a pack's controller-side JavaScript may do: the narrow `context.store` API, its own
//! state files (also through `node:fs`, see [`super::pack_files`]), `recordSignal` attributed
//! to the calling activation, time helpers. Each
//! operation checks its arguments and answers with JSON or an error message that becomes a
//! JavaScript `Error`. Callers' identities come from the [`CallScope`] Rust set for the call.
//!
//! A call whose scope has an agent (a support call) acts for that agent: its messages and
//! signals go through [`policy`] exactly as the agent's own `messages.send` and `recordSignal`
//! do, whatever the pack passes. A call without one is the user's (a WebUI entry) or the
//! controller's (a scheduler hook) and may send as `user` or a virtual sender; such code may
//! still send for an agent (`onBehalfOf`, e.g. a job that agent scheduled), under the policy.
//! Policy refusals are [`ToolError::Rejected`] errors; every other error is a failure.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::pack_files::{NO_PROCESSES, PackFiles};
use super::policy::{self, Refused};
use crate::clock::{iso, parse_iso};
use crate::config::Priority;
use crate::js::{CallScope, HostFuture, HostOps};
use crate::project::Project;
use crate::store::{MessageQuery, SendMessage, SignalQuery, SignalRequest, SignalStatus, StateFiles, Store};
use crate::toolpack::ToolError;

pub struct ControllerOps {
    project: Arc<Project>,
    store: Store,
    state: StateFiles,
}

impl ControllerOps {
    pub fn new(project: Arc<Project>, store: Store, state: StateFiles) -> Self {
        ControllerOps { project, store, state }
    }

    /// A signal request from pack code, checked field by field with the reference's messages.
    pub fn signal_request(&self, args: &Value, scope: Option<&CallScope>) -> Result<SignalRequest, ToolError> {
        let Some(obj) = args.as_object() else { return Err(ToolError::Failed("Tool input must be an object".into())) };
        let allowed =
            ["kind", "targetAgent", "targetChannel", "priority", "payload", "status", "usefulEffect", "notBefore"];
        if let Some(extra) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ToolError::Failed(format!("Unknown signal field `{extra}` (allowed: {})", allowed.join(", "))));
        }
        let string = |key: &str| -> Result<Option<String>, ToolError> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(ToolError::Failed(format!("{key} must be a string, got {other}"))),
            }
        };
        let kind = string("kind")?.unwrap_or_default();
        let useful_effect = match obj.get("usefulEffect") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => return Err(ToolError::Failed(format!("Expected boolean, got {other}"))),
        };
        let not_before = match string("notBefore")? {
            None => None,
            Some(text) => Some(
                parse_iso(&text).ok_or_else(|| ToolError::Failed(format!("Invalid notBefore timestamp: {text}")))?,
            ),
        };
        Ok(SignalRequest {
            kind,
            source_agent: scope.and_then(|s| s.agent_id.clone()),
            source_activation: scope.and_then(|s| s.activation_id.clone()),
            target_agent: string("targetAgent")?,
            target_channel: string("targetChannel")?,
            priority: string("priority")?,
            payload: obj.get("payload").cloned().unwrap_or(Value::Null),
            status: string("status")?,
            useful_effect,
            not_before,
        })
    }

    /// A signal from pack code: for the scope's agent (attributed to its activation and checked
    /// by the policy), or unattributed for the user or the controller; no pack records the
    /// controller's own kinds either way.
    fn record_signal(&self, args: &Value, scope: &CallScope) -> Result<Value, ToolError> {
        let request = self.signal_request(args, Some(scope))?;
        match scope.agent_id.as_deref() {
            Some(agent) => {
                let route = policy::Route {
                    recipient: request.target_agent.as_deref(),
                    channel: request.target_channel.as_deref(),
                    priority: policy::priority(request.priority.as_deref(), Priority::P2).map_err(refusal)?,
                };
                policy::check_signal(&self.project.config.communication, agent, &request.kind, route, &request.payload)
                    .map_err(refusal)?;
            }
            None => policy::check_pack_kind(&request.kind).map_err(refusal)?,
        }
        to_json(self.writer(scope).record_signal(request))
    }

    /// The store an operation writes through: in an agent's call (a support call or a tool-call
    /// hook) its writes do not wait for the disk, and the caller makes them durable before it
    /// answers ([`crate::support::ToolHost::support`]), so concurrent calls share their fsyncs
    /// although this thread writes them one at a time. Elsewhere each write is durable itself.
    fn writer(&self, scope: &CallScope) -> Store {
        if scope.agent_id.is_some() { self.store.deferring() } else { self.store.clone() }
    }

    /// `store.sendMessage` (and, with `send: false`, `store.checkMessage`: would it be accepted
    /// now, from this caller?). See the module header for who it is sent as.
    fn send_message(&self, args: &Value, scope: &CallScope, send: bool) -> Result<Value, ToolError> {
        let Some(obj) = args.as_object() else { return Err(ToolError::Failed("Tool input must be an object".into())) };
        let text = |key: &str| obj.get(key).and_then(Value::as_str).map(str::to_string);
        let body = text("body").filter(|b| !b.trim().is_empty());
        if send && body.is_none() {
            return Err(ToolError::Failed("body is required".into()));
        }
        let agent = self.acting_agent(scope, text("onBehalfOf").as_deref()).map_err(refusal)?;
        let (sender, recipient, channel, priority) =
            (text("sender"), text("recipient"), text("channel"), text("priority"));
        let sender = match &agent {
            Some(agent) => {
                let route = policy::Route {
                    recipient: recipient.as_deref(),
                    channel: channel.as_deref(),
                    priority: policy::priority(priority.as_deref(), Priority::P3).map_err(refusal)?,
                };
                policy::check_message(&self.project.config.communication, agent, sender.as_deref(), route)
                    .map_err(refusal)?;
                agent.clone()
            }
            None => sender.unwrap_or_else(|| "user".into()),
        };
        if !send {
            return Ok(Value::Null);
        }
        // Attributed to the scope's activation only when the agent is the scope's own.
        let activation = scope.activation_id.clone().filter(|_| scope.agent_id.is_some());
        let sent = self
            .writer(scope)
            .send_message(SendMessage {
                sender,
                recipient,
                channel,
                priority,
                body: body.unwrap_or_default(),
                source_agent: agent,
                source_activation: activation,
            })
            .map_err(failed)?;
        serde_json::to_value(sent).map_err(failed)
    }

    /// Who a message is sent for: the scope's agent (a support call, which may name only
    /// itself), or the agent trusted code names in `onBehalfOf`, or nobody (the user or the
    /// controller itself).
    fn acting_agent(&self, scope: &CallScope, on_behalf_of: Option<&str>) -> Result<Option<String>, Refused> {
        match (scope.agent_id.as_deref(), on_behalf_of) {
            (Some(agent), Some(named)) if named != agent => Err(Refused(format!(
                "Pack code called by {agent} acts only for {agent}; onBehalfOf {named} is not allowed."
            ))),
            (Some(agent), _) => Ok(Some(agent.to_string())),
            (None, Some(named)) if self.project.config.agent(named).is_none() => {
                Err(Refused(format!("Unknown agent: {named}")))
            }
            (None, named) => Ok(named.map(str::to_string)),
        }
    }

    fn list_agents(&self) -> Result<Value, ToolError> {
        let agents = self.store.agents().map_err(failed)?;
        Ok(Value::Array(agents.into_iter().map(|a| agent_json(&a)).collect()))
    }

    /// The config as packs see it: no providers, keys, headers or environment.
    fn config_view(&self) -> Value {
        let c = &self.project.config;
        json!({
            "name": c.name,
            "task": c.task,
            "channels": c.channels,
            "communication": communication_json(&c.communication),
            "agents": c.agents.iter().map(|a| json!({
                "id": a.id, "role": a.role, "displayName": a.display_name,
                "tools": a.tools.entries.iter().map(|(p, _)| p.to_string()).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "toolpacks": self.project.registry.packs().iter().map(|p| p.id.clone()).collect::<Vec<_>>(),
        })
    }
}

/// An agent as pack code sees it (`context.agents[]`, `store.listAgents()`): no token.
/// `modelAlive`: it has a running activation.
pub(crate) fn agent_json(a: &crate::store::AgentRecord) -> Value {
    let model_alive = a.status.as_str() == "running" && a.active_activation_id.is_some();
    json!({
        "id": a.id, "role": a.role, "displayName": a.display_name, "status": a.status,
        "activeActivationId": a.active_activation_id, "updatedAt": iso(a.updated_at), "modelAlive": model_alive,
    })
}

/// The communication policy as JSON (for packs and the API alike).
pub(crate) fn communication_json(c: &crate::config::CommunicationConfig) -> Value {
    json!({
        "coordinatorAgent": c.coordinator_agent,
        "restrictNonCoordinatorToCoordinator": c.restrict_non_coordinator_to_coordinator,
        "nonCoordinatorMaxPriority": c.non_coordinator_max_priority.as_str(),
    })
}

/// A policy refusal: pack code sees a `RejectedError`.
fn refusal(r: Refused) -> ToolError {
    ToolError::Rejected(r.0)
}

/// A failure whose text is the whole story (the store's, a parse's).
pub(crate) fn failed(e: impl std::fmt::Display) -> ToolError {
    ToolError::Failed(e.to_string())
}

fn to_json<T: serde::Serialize>(v: Result<T, crate::store::StoreError>) -> Result<Value, ToolError> {
    serde_json::to_value(v.map_err(failed)?).map_err(failed)
}

fn limit(args: &Value) -> Option<usize> {
    args.get("limit").and_then(Value::as_u64).map(|l| l as usize)
}

fn str_arg(args: &Value, key: &str) -> Option<String> {
    args.get(key).and_then(Value::as_str).map(str::to_string)
}

impl HostOps for ControllerOps {
    fn call(&self, pack_id: &str, scope: &CallScope, op: &str, args: Value) -> Result<Value, ToolError> {
        if op.starts_with("fs.") || op.starts_with("exec") || op == "runtime.cwd" {
            let files = PackFiles::new(pack_id, self.project.registry.pack(pack_id), &self.state)?;
            if let Some(answer) = files.call(op, &args) {
                return answer;
            }
        }
        match op {
            // In an agent's call both are that agent's signals; `store.recordSignal` is only
            // unattributed (reference §3.4) for the user and the controller.
            "recordSignal" | "store.recordSignal" => self.record_signal(&args, scope),
            "store.sendMessage" => self.send_message(&args, scope, true),
            "store.checkMessage" => self.send_message(&args, scope, false),
            "store.listAgents" => self.list_agents(),
            "store.listMessages" => to_json(self.store.list_messages(&MessageQuery {
                participant_a: str_arg(&args, "participantA").or_else(|| str_arg(&args, "agentA")),
                participant_b: str_arg(&args, "participantB").or_else(|| str_arg(&args, "agentB")),
                channel: str_arg(&args, "channel"),
                limit: limit(&args),
                before_id: str_arg(&args, "beforeId"),
            })),
            "store.listSignals" => {
                let status = match str_arg(&args, "status") {
                    None => None,
                    Some(s) => Some(s.parse::<SignalStatus>().map_err(failed)?),
                };
                to_json(self.store.list_signals(&SignalQuery {
                    target_agent: str_arg(&args, "targetAgent"),
                    status,
                    limit: limit(&args),
                    kind: str_arg(&args, "kind"),
                    before_id: None,
                }))
            }
            "store.projectStats" => to_json(self.store.project_stats()),
            "store.config" => Ok(self.config_view()),
            "store.paths.root" => {
                let root = &self.project.config.root;
                Ok(json!(std::path::absolute(root).unwrap_or_else(|_| root.clone()).display().to_string()))
            }
            "state.read" => {
                let name =
                    str_arg(&args, "name").ok_or_else(|| ToolError::Failed("state.read needs a file name".into()))?;
                self.state.read(pack_id, &name).map(|v| v.unwrap_or(Value::Null)).map_err(failed)
            }
            "state.write" => {
                let name =
                    str_arg(&args, "name").ok_or_else(|| ToolError::Failed("state.write needs a file name".into()))?;
                let value = args.get("value").cloned().unwrap_or(Value::Null);
                self.state.write(pack_id, &name, &value).map(|_| Value::Null).map_err(failed)
            }
            "time.now" => Ok(json!(iso(self.store.now()))),
            "time.nextCron" => {
                let expr = str_arg(&args, "expr")
                    .ok_or_else(|| ToolError::Failed("nextCron needs a cron expression".into()))?;
                let timezone = str_arg(&args, "timezone").unwrap_or_else(|| "UTC".into());
                let after = match str_arg(&args, "after") {
                    Some(text) => {
                        parse_iso(&text).ok_or_else(|| ToolError::Failed(format!("Invalid timestamp: {text}")))?
                    }
                    None => self.store.now(),
                };
                Ok(crate::clock::next_cron(&expr, &timezone, after)
                    .map_err(failed)?
                    .map_or(Value::Null, |t| json!(iso(t))))
            }
            "time.checkTimezone" => {
                let name = str_arg(&args, "timezone")
                    .ok_or_else(|| ToolError::Failed("checkTimezone needs a time zone name".into()))?;
                crate::clock::parse_timezone(&name).map(|_| json!(name)).map_err(failed)
            }
            "uuid" => Ok(json!(uuid::Uuid::new_v4().to_string())),
            "hasPendingSignals" => to_json(self.store.has_pending_signals(false)),
            "hasPendingSignalsForAgent" => {
                let agent = str_arg(&args, "agentId")
                    .ok_or_else(|| ToolError::Failed("hasPendingSignalsForAgent needs an agent id".into()))?;
                let include = args.get("includeNotReady").and_then(Value::as_bool).unwrap_or(false);
                to_json(self.store.has_pending_signals_for_agent(&agent, include))
            }
            other => Err(ToolError::Failed(format!("context operation {other} is not available"))),
        }
    }

    fn call_async(&self, _pack_id: &str, _scope: &CallScope, op: &str, args: Value) -> HostFuture {
        let op = op.to_string();
        Box::pin(async move {
            match op.as_str() {
                "time.sleep" => {
                    let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0).min(600_000);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(Value::Null)
                }
                "exec" => Err(ToolError::Failed(NO_PROCESSES.into())),
                other => Err(ToolError::Failed(format!("context operation {other} is not available"))),
            }
        })
    }
}
