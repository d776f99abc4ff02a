//! Agent runners: for each agent, the controller-owned Unix socket its runner connects to, the
//! runner itself (a hardened container, or a local process), and the session over the socket.
//!
//! - At start every agent gets `.suzumio/run/<agent>/control.sock` (mode 0666 so the container's
//!   unprivileged user can connect; the directory is mounted read-only into the container).
//! - The first frame on a connection must be `hello` with the agent's token; then the controller
//!   sends `load` (the packs exposing at least one tool allowed for the agent, and its allowed
//!   built-in runner tools) and the session is ready. The socket *is* the identity: requests on
//!   it act as that agent only.
//! - A tool call (`invoke`) starts the runner when needed (lazily, kept warm), waits for its
//!   session, and restarts it when it died. `callSupport`/`recordSignal` from the runner go
//!   through the broker's verification chain.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use serde_json::{Value, json};
use subtle::ConstantTimeEq;
use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::quota::DiskQuotas;
use super::{ToolHost, ToolOutput, broker};
use crate::activation::run::{RunnerFuture, RunnerTools};
use crate::backend::{ContainerSpec, RunnerBackend};
use crate::rpc::{
    self, CallSupportParams, Connection, HandlerFuture, HelloParams, HelloResult, InvokeParams, LoadParams, LoadResult,
    PackSpec, RecordSignalParams, RequestHandler, RpcError,
};
use crate::toolpack::{PackSource, RunsIn, ToolError};

/// How long a started runner has to connect and load.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Upper bound of one tool call over the socket (shell.exec may run 5 minutes).
const INVOKE_TIMEOUT: Duration = Duration::from_secs(330);

pub struct AgentRunners {
    me: Weak<AgentRunners>,
    tools: Arc<ToolHost>,
    backend: Arc<dyn RunnerBackend>,
    runner_binary: PathBuf,
    slots: HashMap<String, Arc<Slot>>,
    /// The accept loops of the agents' sockets.
    tasks: TaskTracker,
    /// Cancelled by [`AgentRunners::shutdown`]: the accept loops stop.
    stopping: CancellationToken,
    /// The agents' disk quotas, when the backend enforces them (see `support::quota`).
    quotas: OnceLock<Arc<DiskQuotas>>,
}

struct Slot {
    agent: String,
    /// The loaded session, when the runner is connected.
    session: Mutex<Option<Connection>>,
    /// Bumped when a session becomes ready, or when loading one failed.
    ready: watch::Sender<u64>,
    /// Why the last runner could not load its toolpacks (reported to waiting calls).
    load_error: Mutex<Option<String>>,
    /// One `ensure_running` at a time per agent.
    starting: tokio::sync::Mutex<()>,
    /// Calls in flight: call id → activation id (for P0 cancel).
    in_flight: Mutex<HashMap<String, String>>,
}

impl AgentRunners {
    pub fn new(tools: Arc<ToolHost>, backend: Arc<dyn RunnerBackend>, runner_binary: PathBuf) -> Arc<AgentRunners> {
        let slots = tools
            .project
            .config
            .agents
            .iter()
            .map(|a| {
                let (ready, _) = watch::channel(0);
                let slot = Slot {
                    agent: a.id.clone(),
                    session: Mutex::new(None),
                    ready,
                    load_error: Mutex::new(None),
                    starting: tokio::sync::Mutex::new(()),
                    in_flight: Mutex::new(HashMap::new()),
                };
                (a.id.clone(), Arc::new(slot))
            })
            .collect();
        Arc::new_cyclic(|me| AgentRunners {
            me: me.clone(),
            tools,
            backend,
            runner_binary,
            slots,
            tasks: TaskTracker::new(),
            stopping: CancellationToken::new(),
            quotas: OnceLock::new(),
        })
    }

    /// Enforce `quotas` on runner-side calls from now on, and measure them until shutdown.
    pub fn enforce_disk_quotas(&self, quotas: DiskQuotas) {
        let quotas = Arc::new(quotas);
        if self.quotas.set(quotas.clone()).is_ok() {
            self.tasks.spawn(quotas.watch(self.tools.store.clone(), self.stopping.clone()));
        }
    }

    /// Create every agent's socket and accept its runner's connections.
    pub fn listen(&self) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        for slot in self.slots.values() {
            let dir = self.tools.project.config.root.join(".suzumio").join("run").join(&slot.agent);
            std::fs::create_dir_all(&dir)?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
            let path = dir.join("control.sock");
            let _ = std::fs::remove_file(&path);
            let listener = UnixListener::bind(&path)?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
            let me = self.me.clone();
            let slot = slot.clone();
            let stopping = self.stopping.clone();
            self.tasks.spawn(async move {
                loop {
                    let accepted = tokio::select! {
                        _ = stopping.cancelled() => return,
                        accepted = listener.accept() => accepted,
                    };
                    let stream = match accepted {
                        Ok((stream, _)) => stream,
                        // Out of file descriptors and the like: wait and go on; one bad moment
                        // must not leave the agent without its socket.
                        Err(e) => {
                            tracing::warn!(agent = %slot.agent, "accepting a runner connection: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    let Some(runners) = me.upgrade() else { return };
                    let handler = Arc::new(SessionHandler {
                        runners: me.clone(),
                        slot: slot.clone(),
                        conn: OnceLock::new(),
                        authenticated: Arc::new(std::sync::atomic::AtomicBool::new(false)),
                    });
                    let (conn, _task) = Connection::spawn(stream, handler.clone());
                    let _ = handler.conn.set(conn);
                    drop(runners);
                }
            });
        }
        Ok(())
    }

    fn slot(&self, agent: &str) -> Result<&Arc<Slot>, ToolError> {
        self.slots.get(agent).ok_or_else(|| ToolError::Rejected(format!("Unknown agent: {agent}")))
    }

    fn spec(&self, agent: &str) -> Result<ContainerSpec, ToolError> {
        let record =
            self.tools.store.agent(agent)?.ok_or_else(|| ToolError::Rejected(format!("Unknown agent: {agent}")))?;
        let p = &self.tools.project;
        ContainerSpec::for_agent(&p.config, &p.registry, agent, &self.runner_binary, &record.token)
            .map_err(|e| ToolError::Internal(e.to_string()))
    }

    /// The agent's ready session: start (or restart) its runner if needed and wait for it.
    /// A runner that cannot be started or reached is `RunnerLost`.
    async fn session(&self, agent: &str) -> Result<Connection, ToolError> {
        let slot = self.slot(agent)?;
        if let Some(conn) = live(slot) {
            return Ok(conn);
        }
        let _starting = slot.starting.lock().await;
        if let Some(conn) = live(slot) {
            return Ok(conn);
        }
        let spec = self.spec(agent)?;
        *slot.load_error.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let mut ready = slot.ready.subscribe();
        self.backend
            .ensure_running(&spec)
            .await
            .map_err(|e| ToolError::RunnerLost(format!("the runner of {agent} could not be started: {e}")))?;
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
            Ok(result) => result,
            Err(_) => Err(ToolError::RunnerLost(format!(
                "the runner of {agent} did not connect within {} s ({})",
                READY_TIMEOUT.as_secs(),
                self.backend.logs_hint(&spec)
            ))),
        }
    }

    /// Start every agent's runner now (instead of at its first tool call).
    pub async fn warm_up(&self) -> Vec<String> {
        let mut errors = Vec::new();
        for agent in self.slots.keys() {
            if let Err(e) = self.session(agent).await {
                errors.push(format!("{agent}: {e}"));
            }
        }
        errors
    }

    /// Run a runner-side tool for an activation.
    pub async fn invoke(
        &self,
        agent: &str,
        activation_id: &str,
        tool: &str,
        input: Value,
    ) -> Result<ToolOutput, ToolError> {
        if let Some(quotas) = self.quotas.get() {
            quotas.admit(agent, tool, &input)?;
        }
        let mut attempts = 0;
        loop {
            attempts += 1;
            let conn = self.session(agent).await?;
            let slot = self.slot(agent)?;
            let call_id = format!("call_{}", uuid::Uuid::now_v7().simple());
            slot.in_flight.lock().unwrap_or_else(|e| e.into_inner()).insert(call_id.clone(), activation_id.to_string());
            let params = InvokeParams {
                activation_id: activation_id.to_string(),
                tool: tool.to_string(),
                input: Some(input.clone()),
                call_id: call_id.clone(),
            };
            let result =
                tokio::time::timeout(INVOKE_TIMEOUT, conn.call::<_, rpc::ToolOutput>(rpc::method::INVOKE, &params))
                    .await;
            slot.in_flight.lock().unwrap_or_else(|e| e.into_inner()).remove(&call_id);
            match result {
                Ok(Ok(out)) => return Ok(ToolOutput { title: out.title, output: out.output, metadata: out.metadata }),
                // The runner went away before answering: once, start it again and retry (the
                // call never ran, or ran in a runner that no longer exists).
                Ok(Err(e)) if e.is_connection_closed() && attempts == 1 => {
                    clear(slot, &conn);
                    continue;
                }
                Ok(Err(e)) if e.is_connection_closed() => {
                    return Err(ToolError::RunnerLost(format!("the runner of {agent} stopped during {tool}")));
                }
                Ok(Err(e)) => return Err(ToolError::Failed(e.message)),
                Err(_) => {
                    return Err(ToolError::Failed(format!(
                        "{tool} did not answer within {} s",
                        INVOKE_TIMEOUT.as_secs()
                    )));
                }
            }
        }
    }

    /// Stop the calls an activation has in flight (P0).
    pub async fn cancel_calls(&self, agent: &str, activation_id: &str) {
        let Ok(slot) = self.slot(agent) else { return };
        let calls: Vec<String> = slot
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, a)| *a == activation_id)
            .map(|(c, _)| c.clone())
            .collect();
        if let Some(conn) = live(slot) {
            for call_id in calls {
                let _ = conn.request(rpc::method::CANCEL, json!({ "callId": call_id })).await;
            }
        }
    }

    /// Stop accepting, tell every runner to stop, then stop them all.
    pub async fn shutdown(&self) {
        self.stopping.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        for slot in self.slots.values() {
            if let Some(conn) = live(slot) {
                let _ =
                    tokio::time::timeout(Duration::from_secs(2), conn.request(rpc::method::SHUTDOWN, json!({}))).await;
            }
        }
        let config = &self.tools.project.config;
        if let Err(e) = self.backend.stop_all(&config.name, &config.root, Duration::from_secs(3)).await {
            tracing::warn!("stopping runners: {e}");
        }
    }

    /// The `load` request for an agent: its allowed built-in runner tools, and each local pack
    /// exposing at least one allowed tool, with the paths the runner sees.
    fn load_params(&self, agent: &str) -> Result<LoadParams, String> {
        let p = &self.tools.project;
        let config = p.config.agent(agent).ok_or_else(|| format!("Unknown agent: {agent}"))?;
        let set = p.registry.resolve_agent(config);
        // The agent's allowed built-ins that run in the runner (local packs' tools come below).
        let builtin_tools = set
            .tools
            .iter()
            .filter(|t| p.registry.tool(t).is_some_and(|(pack, def)| !pack.is_local() && def.runs_in == RunsIn::Runner))
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
        })
    }
}

fn live(slot: &Slot) -> Option<Connection> {
    slot.session.lock().unwrap_or_else(|e| e.into_inner()).as_ref().filter(|c| !c.is_closed()).cloned()
}

fn clear(slot: &Slot, conn: &Connection) {
    let mut session = slot.session.lock().unwrap_or_else(|e| e.into_inner());
    if session.as_ref().is_some_and(|c| c.same_as(conn)) {
        *session = None;
    }
}

/// Handles what one runner connection asks.
struct SessionHandler {
    runners: Weak<AgentRunners>,
    slot: Arc<Slot>,
    conn: OnceLock<Connection>,
    /// Set once `hello` carried the agent's token: only then are other requests served.
    authenticated: Arc<std::sync::atomic::AtomicBool>,
}

impl RequestHandler for SessionHandler {
    fn handle(&self, method: String, params: Value) -> HandlerFuture {
        let runners = self.runners.clone();
        let slot = self.slot.clone();
        let conn = self.conn.get().cloned();
        let auth = self.authenticated.clone();
        Box::pin(async move {
            let runners = runners.upgrade().ok_or_else(|| RpcError::application("the controller is shutting down"))?;
            let authenticated = auth.load(std::sync::atomic::Ordering::SeqCst);
            match method.as_str() {
                rpc::method::HELLO => {
                    let hello: HelloParams = rpc::parse_params(&method, params)?;
                    let record = runners
                        .tools
                        .store
                        .agent(&slot.agent)
                        .map_err(|e| RpcError::internal(e.to_string()))?
                        .ok_or_else(|| RpcError::application(format!("Unknown agent: {}", slot.agent)))?;
                    let conn = conn.ok_or_else(|| RpcError::internal("connection not ready"))?;
                    if !bool::from(hello.token.as_bytes().ct_eq(record.token.as_bytes())) {
                        tracing::warn!(agent = %slot.agent, "runner hello with a wrong token; closing");
                        let closing = conn.clone();
                        tokio::spawn(async move { closing.close().await });
                        return Err(RpcError::application("Invalid agent token"));
                    }
                    if hello.protocol != rpc::PROTOCOL_VERSION {
                        let closing = conn.clone();
                        tokio::spawn(async move { closing.close().await });
                        return Err(RpcError::application(format!(
                            "protocol {} is not supported (the controller speaks {})",
                            hello.protocol,
                            rpc::PROTOCOL_VERSION
                        )));
                    }
                    auth.store(true, std::sync::atomic::Ordering::SeqCst);
                    let load = runners.load_params(&slot.agent).map_err(RpcError::application)?;
                    let agent = slot.agent.clone();
                    let loading = slot.clone();
                    tokio::spawn(async move {
                        let slot = loading;
                        match conn.call::<_, LoadResult>(rpc::method::LOAD, &load).await {
                            Ok(_) => {
                                *slot.session.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn);
                                slot.ready.send_modify(|n| *n += 1);
                                tracing::info!(agent = %agent, "runner connected and loaded");
                            }
                            Err(e) => {
                                tracing::warn!(agent = %agent, "runner failed to load its toolpacks: {}", e.message);
                                *slot.load_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.message);
                                slot.ready.send_modify(|n| *n += 1);
                                conn.close().await;
                            }
                        }
                    });
                    let config = &runners.tools.project.config;
                    Ok(serde_json::to_value(HelloResult {
                        project: config.name.clone(),
                        agent_id: slot.agent.clone(),
                        protocol: rpc::PROTOCOL_VERSION,
                    })
                    .unwrap_or(Value::Null))
                }
                _ if !authenticated => Err(RpcError::application("say hello with the agent token first")),
                rpc::method::CALL_SUPPORT => {
                    let p: CallSupportParams = rpc::parse_params(&method, params)?;
                    let out = broker::call_support(&runners.tools, &slot.agent, p).await.map_err(tool_error_reply)?;
                    Ok(serde_json::to_value(out).unwrap_or(Value::Null))
                }
                rpc::method::RECORD_SIGNAL => {
                    let p: RecordSignalParams = rpc::parse_params(&method, params)?;
                    let signals = broker::record_signal(&runners.tools, &slot.agent, p).map_err(tool_error_reply)?;
                    Ok(serde_json::to_value(signals).unwrap_or(Value::Null))
                }
                other => Err(RpcError::method_not_found(other)),
            }
        })
    }
}

/// A broker refusal as the runner sees it: the message (what the pack's code and the model see)
/// as a `-32000` error, and the kind alongside in `data`.
fn tool_error_reply(e: ToolError) -> RpcError {
    let mut reply = RpcError::application(e.to_string());
    reply.data = Some(json!({ "kind": e.kind() }));
    reply
}

impl RunnerTools for AgentRunners {
    fn invoke(&self, agent_id: &str, activation_id: &str, tool: &str, input: Value) -> RunnerFuture {
        let Some(me) = self.me.upgrade() else {
            return Box::pin(async { Err(ToolError::RunnerLost("the controller is shutting down".to_string())) });
        };
        let (agent, activation, tool) = (agent_id.to_string(), activation_id.to_string(), tool.to_string());
        Box::pin(async move { me.invoke(&agent, &activation, &tool, input).await })
    }

    fn cancel(&self, agent_id: &str, activation_id: &str) {
        if let Some(me) = self.me.upgrade() {
            let (agent, activation) = (agent_id.to_string(), activation_id.to_string());
            tokio::spawn(async move { me.cancel_calls(&agent, &activation).await });
        }
    }
}
