//! What the runner answers to the controller: `load` builds the agent's tool table (built-ins
//! and runner packs; a pack that does not load leaves only its own tools answering with its
//! error), `invoke` runs one tool, `cancel` stops a running command,
//! `listCommands`/`stopCommand` for the agent's background commands, `ping` and `shutdown`; and
//! [`RunnerService::report_ended_commands`], which sends `commandFinished` for each background
//! command whose end is unread until the controller (this one or the next) acknowledges it.
//! A failing `load`, `invoke` or `stopCommand` answers with its [`ToolError`]: the message as
//! the model sees it, the kind in `data.kind`. A built-in's call carries the agent's path rules
//! for it, which the tool applies to the paths it resolves (`tools/guard.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use super::mcp::McpServers;
use super::pack_context::ContainerAccess;
use super::packs::{Identity, RunnerPack};
use super::paths::{ARTIFACTS, Roots};
use super::tools::{BackgroundCommands, BuiltinTool, BuiltinTools, PathGuard};
use crate::rpc::{
    CancelParams, CancelResult, CommandFinishedResult, Connection, HandlerFuture, InvokeParams, ListCommandsParams,
    ListCommandsResult, LoadParams, LoadResult, RequestHandler, RpcError, StopCommandParams, ToolOutput, method,
    parse_params,
};
use crate::toolpack::ToolError;

/// How long a request waits for the hello to finish before it is refused.
const SESSION_WAIT: Duration = Duration::from_secs(10);
/// How often unacknowledged command ends are sent again while a session is up.
const REPORT_RETRY: Duration = Duration::from_secs(5);
/// How long one `commandFinished` may wait for its answer.
const REPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Who the runner speaks for, known once the hello is answered.
#[derive(Clone)]
pub(crate) struct Session {
    pub connection: Connection,
    pub project: String,
    pub agent_id: String,
}

enum Tool {
    Builtin(BuiltinTool),
    Pack(RunnerPack),
    /// A tool of a pack that did not load: every call gets the pack's load error, and the
    /// agent's other tools (built-ins, other packs) work as before.
    Broken(ToolError),
}

/// The tools of the last successful `load`.
#[derive(Default)]
struct ToolTable {
    tools: HashMap<String, Tool>,
    builtins: Option<BuiltinTools>,
}

pub(crate) struct RunnerService {
    roots: Roots,
    session: watch::Receiver<Option<Session>>,
    table: RwLock<Arc<ToolTable>>,
    /// One load at a time, so two loads never interleave their packs.
    loading: tokio::sync::Mutex<()>,
    /// Running calls by call id, for `cancel`.
    running: Mutex<HashMap<String, Arc<Notify>>>,
    /// The agent's background commands: they outlive loads and controller connections.
    commands: Arc<BackgroundCommands>,
    /// The agent's stdio MCP servers: like background commands, they outlive loads.
    mcp: Arc<McpServers>,
    shutdown: watch::Sender<bool>,
}

struct Handler(Arc<RunnerService>);

impl RequestHandler for Handler {
    fn handle(&self, method: String, params: Value) -> HandlerFuture {
        let service = self.0.clone();
        Box::pin(async move { service.dispatch(&method, params).await })
    }
}

impl RunnerService {
    pub fn new(roots: Roots, session: watch::Receiver<Option<Session>>, shutdown: watch::Sender<bool>) -> Self {
        RunnerService {
            mcp: McpServers::new(roots.clone(), session.clone()),
            roots,
            session,
            table: RwLock::new(Arc::new(ToolTable::default())),
            loading: tokio::sync::Mutex::new(()),
            running: Mutex::new(HashMap::new()),
            commands: Arc::new(BackgroundCommands::new()),
            shutdown,
        }
    }

    pub fn handler(self: Arc<Self>) -> Arc<dyn RequestHandler> {
        Arc::new(Handler(self))
    }

    /// Stop every running command (on shutdown).
    pub fn cancel_all(&self) {
        for cancel in self.running().values() {
            cancel.notify_one();
        }
    }

    /// Stop the agent's MCP servers (the runner is ending).
    pub async fn stop_mcp_servers(&self) {
        self.mcp.shutdown().await;
    }

    /// The background commands (the runner stays for them when the controller goes).
    pub fn commands(&self) -> &BackgroundCommands {
        &self.commands
    }

    /// Forever: whenever a background command's end is unread and unacknowledged, send
    /// `commandFinished` over the current session; a failed send is tried again on the next
    /// session or after [`REPORT_RETRY`].
    pub async fn report_ended_commands(self: Arc<Self>) {
        let mut session = self.session.clone();
        loop {
            let current = session.borrow_and_update().clone();
            if let Some(current) = current {
                for report in self.commands.take_reports() {
                    let id = report.command_id.clone();
                    let answer = tokio::time::timeout(
                        REPORT_TIMEOUT,
                        current.connection.call::<_, CommandFinishedResult>(method::COMMAND_FINISHED, &report),
                    )
                    .await;
                    let delivered = matches!(answer, Ok(Ok(_)));
                    match answer {
                        Ok(Ok(done)) => {
                            tracing::info!(%id, signal = %done.signal_id, "reported the end of a background command")
                        }
                        Ok(Err(e)) => tracing::warn!(%id, "cannot report the end of a background command: {e}"),
                        Err(_) => {
                            tracing::warn!(%id, "the controller did not acknowledge the end of a background command")
                        }
                    }
                    self.commands.reported(&id, delivered);
                }
            }
            tokio::select! {
                _ = self.commands.ended() => {}
                changed = session.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep(REPORT_RETRY) => {}
            }
        }
    }

    async fn dispatch(&self, name: &str, params: Value) -> Result<Value, RpcError> {
        match name {
            method::PING => Ok(json!({})),
            method::LOAD => {
                let params: LoadParams = parse_params(name, params)?;
                let session = self.session().await?;
                let loaded = self.load(&session, params).await?;
                to_value(&loaded)
            }
            method::INVOKE => {
                let params: InvokeParams = parse_params(name, params)?;
                let output = self.invoke(params).await?;
                to_value(&output)
            }
            method::CANCEL => {
                let params: CancelParams = parse_params(name, params)?;
                let cancel = self.running().get(&params.call_id).cloned();
                if let Some(cancel) = &cancel {
                    cancel.notify_one();
                }
                to_value(&CancelResult { cancelled: cancel.is_some() })
            }
            method::LIST_COMMANDS => {
                let params: ListCommandsParams = parse_params(name, params)?;
                to_value(&ListCommandsResult { commands: self.commands.infos(params.tail_chars.min(64_000)) })
            }
            method::STOP_COMMAND => {
                let params: StopCommandParams = parse_params(name, params)?;
                let info = self.commands.stop(&params.command_id).await?;
                to_value(&info)
            }
            method::SHUTDOWN => {
                self.cancel_all();
                self.commands.kill_all();
                self.mcp.shutdown().await;
                self.shutdown.send_replace(true);
                Ok(json!({}))
            }
            other => Err(RpcError::method_not_found(other)),
        }
    }

    async fn session(&self) -> Result<Session, RpcError> {
        let mut session = self.session.clone();
        match tokio::time::timeout(SESSION_WAIT, session.wait_for(Option::is_some)).await {
            Ok(Ok(current)) => current.clone().ok_or_else(|| RpcError::internal("no session")),
            _ => Err(RpcError::application("The runner has not finished its hello yet")),
        }
    }

    async fn load(&self, session: &Session, params: LoadParams) -> Result<LoadResult, ToolError> {
        let _one_at_a_time = self.loading.lock().await;
        if params.project != session.project {
            return Err(ToolError::Rejected(format!(
                "load is for project {} but this runner serves project {}",
                params.project, session.project
            )));
        }
        if params.agent_id != session.agent_id {
            return Err(ToolError::Rejected(format!(
                "load is for agent {} but this runner serves agent {}",
                params.agent_id, session.agent_id
            )));
        }
        let artifacts_dir = params.artifacts_dir.clone().unwrap_or_else(|| format!("{ARTIFACTS}/{}", params.agent_id));
        let normalized = Roots::normalize(&artifacts_dir);
        if normalized.strip_prefix(ARTIFACTS).is_none_or(|rest| rest.len() < 2 || !rest.starts_with('/')) {
            return Err(ToolError::Rejected(format!(
                "artifactsDir must be a directory under {ARTIFACTS}: {artifacts_dir}"
            )));
        }

        let mut table = ToolTable::default();
        let mut names = Vec::new();
        let mut register = |name: &str, tool: Tool, table: &mut ToolTable| {
            if table.tools.contains_key(name) {
                return Err(ToolError::Rejected(format!("Duplicate runner tool: {name}")));
            }
            names.push(name.to_string());
            table.tools.insert(name.to_string(), tool);
            Ok(())
        };
        for name in &params.builtin_tools {
            let tool = BuiltinTool::from_name(name).ok_or_else(|| {
                let known: Vec<_> = BuiltinTool::names().collect();
                ToolError::Rejected(format!(
                    "Unknown built-in runner tool: {name} (this runner has {})",
                    known.join(", ")
                ))
            })?;
            register(name, Tool::Builtin(tool), &mut table)?;
        }
        if !params.builtin_tools.is_empty() {
            table.builtins =
                Some(BuiltinTools::with_commands(self.roots.clone(), normalized.clone(), self.commands.clone()));
        }
        if let Some(artifacts) = self.roots.to_disk(&normalized) {
            let dirs = [self.roots.workspace.clone(), artifacts];
            crate::quota::enforce(params.disk_quota_bytes, dirs, self.commands.clone()).await;
        }
        let identity = Identity { project: params.project.clone(), agent_id: params.agent_id.clone() };
        let access = Arc::new(ContainerAccess::new(self.roots.clone(), &normalized));
        for spec in &params.packs {
            match RunnerPack::load(spec, &identity, session.connection.clone(), access.clone()).await {
                Ok(pack) => {
                    for name in &spec.tools {
                        register(name, Tool::Pack(pack.clone()), &mut table)?;
                    }
                }
                Err(error) => {
                    tracing::warn!(toolpack = %spec.id, "the pack did not load; its tools answer with its error: {error}");
                    let error = error.map_message(|m| format!("toolpack {} could not be loaded: {m}", spec.id));
                    for name in &spec.tools {
                        register(name, Tool::Broken(error.clone()), &mut table)?;
                    }
                }
            }
        }
        let mcp = self.mcp.load(&params.mcp).await;
        *self.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
        tracing::info!(tools = names.len(), mcp_servers = mcp.len(), "tools loaded");
        Ok(LoadResult { tools: names, mcp })
    }

    async fn invoke(&self, mut params: InvokeParams) -> Result<ToolOutput, ToolError> {
        let table = self.table.read().unwrap_or_else(|p| p.into_inner()).clone();
        let input = match params.input.take() {
            None | Some(Value::Null) => json!({}),
            Some(input) => input,
        };
        if !table.tools.contains_key(&params.tool) && self.mcp.owns(&params.tool) {
            return self.invoke_mcp(&params, input).await;
        }
        let unknown = || ToolError::Rejected(format!("Unknown tool: {}", params.tool));
        let tool = table.tools.get(&params.tool).ok_or_else(unknown)?;
        let cancel = Arc::new(Notify::new());
        let result = match tool {
            Tool::Pack(pack) => {
                self.running().insert(params.call_id.clone(), cancel.clone());
                pack.invoke(&params.activation_id, &params.tool, &input, cancel).await
            }
            Tool::Broken(error) => Err(error.clone()),
            Tool::Builtin(tool) => {
                let builtins = table.builtins.as_ref().ok_or_else(unknown)?;
                self.running().insert(params.call_id.clone(), cancel.clone());
                let guard = PathGuard::new(std::mem::take(&mut params.path_rules));
                builtins.run_guarded(*tool, input, Some(cancel), guard).await
            }
        };
        self.running().remove(&params.call_id);
        result
    }

    /// An MCP tool: cancelled by dropping the request (rmcp then sends `notifications/cancelled`).
    async fn invoke_mcp(&self, params: &InvokeParams, input: Value) -> Result<ToolOutput, ToolError> {
        let cancel = Arc::new(Notify::new());
        self.running().insert(params.call_id.clone(), cancel.clone());
        let result = tokio::select! {
            result = self.mcp.call(&params.tool, input) => result,
            _ = cancel.notified() => Err(ToolError::Cancelled(format!("{} was cancelled", params.tool))),
        };
        self.running().remove(&params.call_id);
        result
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, RpcError> {
    serde_json::to_value(value).map_err(|e| RpcError::internal(e.to_string()))
}
