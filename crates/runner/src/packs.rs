//! Runner packs: each pack's `runner.mjs` in its own [`JsHost`] behind `runner_glue.mjs`
//! (reference §3.3). `callSupport` and `recordSignal` from pack code become requests to the
//! controller over the runner's connection; the activation they speak for comes from the
//! [`CallScope`] of the running call, never from the pack. What pack code does in the container
//! (`context.fs`, `context.exec`, `node:fs`, `node:child_process`) is [`ContainerAccess`]'s.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use tokio::sync::Notify;

use crate::js::{CallScope, HostFuture, HostOps, JsCall, JsError, JsHost, JsLimits, ModuleSpec, RUNNER_GLUE};
use crate::pack_context::ContainerAccess;
use crate::paths::WORKSPACE;
use crate::rpc::{CallSupportParams, Connection, PackSpec, RecordSignalParams, SignalRequest, ToolOutput, method};
use crate::toolpack::ToolError;

/// Identity a pack's context carries (`project`, `agentId`).
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    pub project: String,
    pub agent_id: String,
}

/// One loaded runner pack.
#[derive(Clone)]
pub(crate) struct RunnerPack {
    pub id: String,
    host: JsHost,
    identity: Identity,
    access: Arc<ContainerAccess>,
}

impl RunnerPack {
    /// Start the pack's runtime, call its factory once, and check that every allowed tool has
    /// a handler.
    pub async fn load(
        spec: &PackSpec,
        identity: &Identity,
        connection: Connection,
        access: Arc<ContainerAccess>,
    ) -> Result<RunnerPack, ToolError> {
        let root = Path::new(&spec.root);
        let module = Path::new(&spec.module);
        let module = if module.is_absolute() { module.to_path_buf() } else { root.join(module) };
        let module_name = module.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let module_spec = ModuleSpec {
            pack_id: spec.id.clone(),
            root: root.to_path_buf(),
            module,
            glue: RUNNER_GLUE,
            limits: JsLimits {
                call_timeout: Duration::from_millis(spec.timeout_ms.max(1)),
                memory_bytes: (spec.memory_mb.max(1) as usize) << 20,
            },
        };
        let ops: Arc<dyn HostOps> = Arc::new(ControllerLink { connection, access: access.clone(), module_name });
        let host = JsHost::spawn(module_spec, ops).await.map_err(load_error)?;
        let pack = RunnerPack { id: spec.id.clone(), host, identity: identity.clone(), access };
        let tools = serde_json::to_string(&spec.tools).map_err(|e| ToolError::Internal(e.to_string()))?;
        pack.host
            .call(JsCall {
                export: "load",
                args: vec![pack.base(None), tools],
                scope: CallScope { agent_id: Some(identity.agent_id.clone()), activation_id: None },
            })
            .await
            .map_err(load_error)?;
        Ok(pack)
    }

    /// Call a tool's handler for an activation; the factory runs first with that activation's
    /// context. The pack's deadline covers both, and whatever the handler awaits.
    /// `cancel`, when notified, fires the call's `context.signal` and stops its processes.
    pub async fn invoke(
        &self,
        activation_id: &str,
        tool: &str,
        input: &Value,
        cancel: Arc<Notify>,
    ) -> Result<ToolOutput, ToolError> {
        let running = self.access.begin_call(activation_id);
        let call = self.host.call(JsCall {
            export: "invoke",
            args: vec![self.base(Some(activation_id)), tool.to_string(), input.to_string()],
            scope: CallScope {
                agent_id: Some(self.identity.agent_id.clone()),
                activation_id: Some(activation_id.to_string()),
            },
        });
        tokio::pin!(call);
        let (returned, cancelled) = tokio::select! {
            returned = &mut call => (returned, false),
            _ = cancel.notified() => {
                running.cancel();
                (call.await, true)
            }
        };
        drop(running);
        let returned = returned.map_err(|e| call_error(&self.id, tool, e, cancelled))?;
        crate::toolpack::output::parse_output(&format!("Runner tool {tool} of toolpack {}", self.id), returned)
            .map(ToolOutput::from)
            .map_err(ToolError::Failed)
    }

    fn base(&self, activation_id: Option<&str>) -> String {
        json!({
            "project": self.identity.project,
            "agentId": self.identity.agent_id,
            "activationId": activation_id,
            "workspace": WORKSPACE,
            "toolpackId": self.id,
            "env": self.access.env_json(),
        })
        .to_string()
    }
}

/// What a user sees of a pack that did not load: a thrown error's own message (`Runner module
/// for p did not register x`, or the factory's) with the pack's stack frames, otherwise the
/// host's description (deadline, memory, load with its location).
fn load_error(error: JsError) -> ToolError {
    let kind = kind_of(&error, false);
    let message = match error {
        JsError::Exception { message, stack, .. } => {
            let frames = stack.as_deref().map(crate::js::check::pack_frames).unwrap_or_default();
            if frames.is_empty() { message } else { format!("{message}\n{frames}") }
        }
        other => other.to_string(),
    };
    ToolError::of_kind(kind, message)
}

/// The kind of a pack's failure: a call that failed after it was cancelled was cancelled; the
/// deadline is a timeout; a refusal the pack let escape stays a rejection.
fn kind_of(error: &JsError, cancelled: bool) -> &'static str {
    match error {
        _ if cancelled => "cancelled",
        JsError::Timeout { .. } => "timed_out",
        JsError::Rejected { .. } => "rejected",
        _ => "failed",
    }
}

/// A handler's failure as the author needs it: the pack, the tool, the message and the pack's
/// own stack frames (paths as the runner sees them; the controller maps them to the host's).
fn call_error(pack: &str, tool: &str, error: JsError, cancelled: bool) -> ToolError {
    let kind = kind_of(&error, cancelled);
    let message = match error {
        JsError::Exception { message, stack, .. } => {
            let frames = stack.as_deref().map(crate::js::check::pack_frames).unwrap_or_default();
            if frames.is_empty() {
                format!("toolpack {pack}, tool {tool}: {message}")
            } else {
                format!("toolpack {pack}, tool {tool}: {message}\n{frames}")
            }
        }
        other => other.to_string(),
    };
    ToolError::of_kind(kind, message)
}

/// The host operations of runner pack code: requests to the controller, and the container.
struct ControllerLink {
    connection: Connection,
    access: Arc<ContainerAccess>,
    /// The runner module's file name, for the errors of its `callSupport` calls.
    module_name: String,
}

impl HostOps for ControllerLink {
    fn call(&self, _pack_id: &str, scope: &CallScope, op: &str, args: Value) -> Result<Value, ToolError> {
        self.access
            .call(op, &args, scope.activation_id.as_deref())
            .ok_or_else(|| ToolError::Failed(format!("{op} is not available in the runner")))
    }

    fn call_async(&self, pack_id: &str, scope: &CallScope, op: &str, args: Value) -> HostFuture {
        match op {
            "exec" => {
                let running = self.access.exec(&args, scope.activation_id.as_deref());
                return Box::pin(async move { Ok(running.await) });
            }
            "call.cancelled" => {
                let cancelled = self.access.cancelled(scope.activation_id.as_deref());
                return Box::pin(async move { Ok(Value::Bool(cancelled.await)) });
            }
            _ => {}
        }
        // Every failure reaches pack code as a plain `Error` with the message: a refusal from
        // the controller's broker is no `RejectedError` here, as it never was.
        let connection = self.connection.clone();
        let module_name = self.module_name.clone();
        let pack_id = pack_id.to_string();
        let activation_id = scope.activation_id.clone();
        let op = op.to_string();
        Box::pin(async move {
            let Some(activation_id) = activation_id else {
                return Err(ToolError::Failed(format!(
                    "{op} can only be used while a tool call runs, not while the module loads"
                )));
            };
            match op.as_str() {
                "callSupport" => {
                    let tool = match args.get("tool") {
                        Some(Value::String(tool)) => tool.clone(),
                        _ => return Err(ToolError::Failed("callSupport(tool, input): tool must be a string".into())),
                    };
                    let input = match args.get("input") {
                        None | Some(Value::Null) => Value::Object(Map::new()),
                        Some(input) => input.clone(),
                    };
                    // Said to be a `callSupport` error, so that a refused input reads as what
                    // the module passed, not as the model's input.
                    let from = format!("callSupport({}) from {module_name}", json!(tool));
                    let params = CallSupportParams { activation_id, toolpack_id: pack_id, tool, input };
                    connection
                        .call::<_, Value>(method::CALL_SUPPORT, &params)
                        .await
                        .map_err(|e| ToolError::Failed(format!("{from}: {}", e.message)))
                }
                "recordSignal" => {
                    let signal: SignalRequest = serde_json::from_value(args)
                        .map_err(|e| ToolError::Failed(format!("recordSignal(signal): {e}")))?;
                    let params = RecordSignalParams { activation_id, signal };
                    connection
                        .call::<_, Value>(method::RECORD_SIGNAL, &params)
                        .await
                        .map_err(|e| ToolError::Failed(e.message))
                }
                other => Err(ToolError::Failed(format!("{other} is not available in the runner"))),
            }
        })
    }
}
