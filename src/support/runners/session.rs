//! An agent's session: its runner started (or restarted) when a call needs it and waited for,
//! its `load` sent, the runner watched so that a stopped one fails its calls at once, and the
//! requests the runner makes of the controller (`callSupport`, `recordSignal`,
//! `commandFinished`, `mcpToolsChanged`).

use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{Value, json};

use super::commands::{command_finished, reconcile_ended, record_runner_loss, running_commands};
use super::{AgentRunners, SessionState, Slot, live};
use crate::backend::ContainerSpec;
use crate::rpc::{
    self, CallSupportParams, CommandFinishedParams, Connection, HandlerFuture, LoadParams, LoadResult, PackSpec,
    RecordSignalParams, RequestHandler, RpcError,
};
use crate::support::broker;
use crate::toolpack::mcp::{McpListing, McpServerSpec};
use crate::toolpack::{PackSource, RunsIn, ToolError};

/// How long a started runner has to connect and load.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a runner whose session closed has to be seen stopped before its background
/// commands are taken as lost (it usually is already; one that still runs may resume).
const LOSS_WAIT: Duration = Duration::from_secs(5);

impl AgentRunners {
    /// Send `load`; the session is ready when it succeeds (then true).
    pub(super) async fn load_session(&self, slot: &Slot, conn: Connection) -> bool {
        let agent = &slot.agent;
        let outcome = match self.load_params(agent) {
            Ok(load) => conn.call::<_, LoadResult>(rpc::method::LOAD, &load).await.map_err(|e| e.message),
            Err(e) => Err(e.to_string()),
        };
        match outcome {
            Ok(loaded) => {
                for listing in loaded.mcp {
                    self.tools.mcp_listed(agent, listing);
                }
                {
                    let mut session = slot.session.lock().unwrap_or_else(|e| e.into_inner());
                    if session.as_ref().is_some_and(|s| s.is(&conn)) {
                        *session = Some(SessionState::Ready(conn.clone()));
                    }
                }
                slot.ready.send_modify(|n| *n += 1);
                tracing::info!(agent = %agent, "runner connected and loaded");
                self.reconcile_listed(slot, &conn).await;
                true
            }
            Err(message) => {
                tracing::warn!(agent = %agent, "runner failed to load its toolpacks: {message}");
                *slot.load_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(message);
                slot.ready.send_modify(|n| *n += 1);
                conn.close().await;
                false
            }
        }
    }

    /// The agent's ready session: start (or restart) its runner if needed and wait for it.
    /// A runner that cannot be started or reached is `RunnerLost`.
    pub(super) async fn session(&self, agent: &str) -> Result<Connection, ToolError> {
        let slot = self.slot(agent)?;
        if let Some(conn) = live(slot) {
            return Ok(conn);
        }
        let _starting = slot.starting.lock().await;
        if let Some(conn) = live(slot) {
            return Ok(conn);
        }
        let mut spec = self.spec(agent)?;
        // Before a new runner replaces a dead one, and while nothing else starts one: what the
        // dead one ran is lost, with how it ended (which its replacement would hide).
        reconcile_ended(&self.tools, self.backend.as_ref(), &spec).await;
        *slot.load_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let mut ready = slot.ready.subscribe();
        // Admitted before the start (the new runner may say hello at once); kept only when the
        // backend really started a runner with it, which then holds the only copy.
        let token = crate::store::new_token();
        slot.admissions.lock().unwrap_or_else(|e| e.into_inner()).push(token.clone());
        spec.runner_token = token.clone();
        let started = self.backend.ensure_running(&spec).await;
        {
            let mut admissions = slot.admissions.lock().unwrap_or_else(|e| e.into_inner());
            match &started {
                // Older tokens went with the runners that were replaced.
                Ok(handle) if handle.created => admissions.retain(|t| *t == token),
                // A runner already running (and starting up) keeps the token it was given.
                _ => admissions.retain(|t| *t != token),
            }
        }
        let handle =
            started.map_err(|e| ToolError::RunnerLost(format!("the runner of {agent} could not be started: {e}")))?;
        if handle.created {
            self.tools.runner_starts.count(agent);
        }
        let waited = tokio::time::timeout(READY_TIMEOUT, async {
            loop {
                if let Some(conn) = live(slot) {
                    return Ok(conn);
                }
                if let Some(error) = slot.load_error.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    return Err(ToolError::RunnerLost(format!(
                        "the runner of {agent} could not load its toolpacks: {error}"
                    )));
                }
                if ready.changed().await.is_err() {
                    return Err(ToolError::RunnerLost("the controller is shutting down".to_string()));
                }
            }
        })
        .await;
        match waited {
            Ok(Ok(conn)) => {
                if handle.created {
                    self.watch_runner(slot, spec, conn.clone());
                }
                Ok(conn)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ToolError::RunnerLost(format!(
                "the runner of {agent} did not connect within {} s ({})",
                READY_TIMEOUT.as_secs(),
                self.backend.logs_hint(&spec)
            ))),
        }
    }

    /// Until the session of a runner started for `spec` closes: when the runner stops first (its
    /// socket still open, e.g. held by a process it left), close the session, so that the calls
    /// in flight fail now rather than at their timeout. Once the session is over (unless the
    /// controller is stopping), the background commands the store shows running for the agent
    /// are lost if the runner is gone, with how it ended.
    pub(super) fn watch_runner(&self, slot: &Arc<Slot>, spec: ContainerSpec, conn: Connection) {
        let (backend, stopping, agent) = (self.backend.clone(), self.stopping.clone(), slot.agent.clone());
        let tools = self.tools.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                _ = stopping.cancelled() => {}
                _ = conn.closed() => {}
                exit = backend.wait_exit(&spec) => match exit {
                    Ok(_)
                    | Err(
                        crate::backend::BackendError::ContainerNotFound { .. }
                        | crate::backend::BackendError::ContainerRemoving { .. },
                    ) => {
                        tracing::info!(%agent, "the runner stopped: closing its session");
                        conn.abort();
                    }
                    // The engine could not be asked: the socket is still watched.
                    Err(e) => {
                        tracing::warn!(%agent, "cannot watch the runner's container: {e}");
                        tokio::select! {
                            _ = stopping.cancelled() => {}
                            _ = conn.closed() => {}
                        }
                    }
                },
            }
            if stopping.is_cancelled() {
                return;
            }
            // Taken now, before a new runner can have started anything.
            let running = running_commands(&tools, &agent);
            if running.is_empty() {
                return;
            }
            let loss = tokio::select! {
                _ = stopping.cancelled() => return,
                loss = backend.runner_loss(&spec, LOSS_WAIT) => loss,
            };
            if !record_runner_loss(&tools, &agent, &running, &loss) {
                tracing::info!(%agent, "the runner's session closed but its end is not known ({loss}): its background commands are looked at again later");
            }
        });
    }

    /// The `load` request for an agent: its allowed built-in runner tools, and each local pack
    /// exposing at least one allowed tool, with the paths the runner sees.
    fn load_params(&self, agent: &str) -> Result<LoadParams, ToolError> {
        let p = self.tools.project.snapshot();
        let config = p.config.agent(agent).ok_or_else(|| ToolError::Rejected(format!("Unknown agent: {agent}")))?;
        let set = p.registry.resolve_agent(config);
        // The agent's allowed built-ins that run in the runner (local packs' tools come below).
        let builtin_tools = set
            .tools
            .iter()
            .filter(|t| {
                p.registry.tool(t).is_some_and(|(pack, def)| {
                    matches!(pack.source, PackSource::Builtin(_)) && def.runs_in == RunsIn::Runner
                })
            })
            .cloned()
            .collect();
        let mut packs = Vec::new();
        for id in &set.mounted_packs {
            let Some(pack) = p.registry.pack(id) else { continue };
            let PackSource::Local { root, runner_module: Some(module), limits, .. } = &pack.source else { continue };
            let relative = module
                .strip_prefix(root.canonicalize().unwrap_or(root.clone()))
                .unwrap_or(Path::new("runner.mjs"))
                .to_path_buf();
            let pack_root = self.backend.pack_root_in_runner(id, root);
            packs.push(PackSpec {
                id: id.clone(),
                root: pack_root.display().to_string(),
                module: pack_root.join(relative).display().to_string(),
                tools: pack.tools.iter().filter(|t| config.tools.allows(&t.name)).map(|t| t.name.clone()).collect(),
                timeout_ms: limits.timeout_ms,
                memory_mb: limits.memory_mb,
            });
        }
        Ok(LoadParams {
            project: p.config.name.clone(),
            agent_id: agent.to_string(),
            packs,
            builtin_tools,
            artifacts_dir: None,
            mcp: p.mcp_packs_for(agent).into_iter().filter_map(McpServerSpec::of).collect(),
            // Only where the controller enforces it, which is in containers (`support::start`):
            // a runner on the host must never limit the host's processes.
            disk_quota_bytes: self.quotas.get().map(|q| q.limit()),
        })
    }
}

/// Handles what one runner connection asks, after its hello.
pub(super) struct SessionHandler {
    pub runners: Weak<AgentRunners>,
    pub slot: Arc<Slot>,
}

impl RequestHandler for SessionHandler {
    fn handle(&self, method: String, params: Value) -> HandlerFuture {
        let runners = self.runners.clone();
        let slot = self.slot.clone();
        Box::pin(async move {
            let runners = runners.upgrade().ok_or_else(|| RpcError::application("the controller is shutting down"))?;
            match method.as_str() {
                rpc::method::HELLO => Err(RpcError::application("hello was already said on this connection")),
                rpc::method::CALL_SUPPORT => {
                    let p: CallSupportParams = rpc::parse_params(&method, params)?;
                    let out = broker::call_support(&runners.tools, &slot.agent, p).await.map_err(RpcError::from)?;
                    Ok(serde_json::to_value(out).unwrap_or(Value::Null))
                }
                rpc::method::COMMAND_FINISHED => {
                    let p: CommandFinishedParams = rpc::parse_params(&method, params)?;
                    let finished = command_finished(&runners.tools, &slot.agent, p).map_err(RpcError::from)?;
                    Ok(serde_json::to_value(finished).unwrap_or(Value::Null))
                }
                rpc::method::RECORD_SIGNAL => {
                    let p: RecordSignalParams = rpc::parse_params(&method, params)?;
                    let signals = broker::record_signal(&runners.tools, &slot.agent, p).map_err(RpcError::from)?;
                    Ok(serde_json::to_value(signals).unwrap_or(Value::Null))
                }
                rpc::method::MCP_TOOLS_CHANGED => {
                    let listing: McpListing = rpc::parse_params(&method, params)?;
                    runners.tools.mcp_listed(&slot.agent, listing);
                    Ok(json!({}))
                }
                other => Err(RpcError::method_not_found(other)),
            }
        })
    }
}
