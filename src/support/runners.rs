//! Agent runners: for each agent, the controller-owned Unix socket its runner connects to, the
//! runner itself (a hardened container, or a local process), and the session over the socket.
//!
//! - At start every agent gets `.suzumio/run/<agent>/control.sock` (mode 0666 so the container's
//!   unprivileged user can connect; the directory is mounted read-only into the container). It is
//!   bound through `/proc/self/fd/<dir>/control.sock`, so the path the kernel records (and shows
//!   in the container's `/proc/net/unix`) names no host directory.
//! - Before a connection is trusted (ARCHITECTURE.md "Threat model"): the peer's uid
//!   (`SO_PEERCRED`) must be the runner's as the backend knows it, or the controller's own; at
//!   most [`MAX_PENDING_HELLOS`] connections per socket may be waiting for their hello; the first
//!   frame must be `hello`, at most [`rpc::MAX_HELLO_FRAME_BYTES`], within [`HELLO_DEADLINE`].
//! - The hello carries a one-time token: each runner start gets a fresh one in
//!   `.suzumio/run/<agent>/token` (written by the backend just before it starts the runner), and
//!   the first successful hello consumes it and deletes the file. While a session is live (or
//!   loading) every other hello is refused ("a runner for <agent> is already connected") and the
//!   live session is untouched. Refusals are `security.session_refused` events.
//! - After the hello the controller sends `load` (the packs exposing at least one tool allowed
//!   for the agent, and its allowed built-in runner tools) and the session is ready. The socket
//!   *is* the identity: requests on it act as that agent only.
//! - A tool call (`invoke`) starts the runner when needed (lazily, kept warm), waits for its
//!   session, and restarts it when it died. A call is sent at most once (ARCHITECTURE.md
//!   "Delivery semantics"): when the runner dies during it, it fails at once as `RunnerLost`
//!   with how the runner ended (the backend's `runner_loss`), and is not sent again.
//!   `callSupport`/`recordSignal` from the runner go through the broker's verification chain.
//! - Background commands (`shell.start`): the runner reports each unread end with
//!   `commandFinished`, recorded once per command id as a `shell.command_finished` signal
//!   ([`crate::store::Store::record_command_finished`]); the API lists and stops them through
//!   [`AgentRunners::list_commands`] and [`AgentRunners::stop_command`] on the live session.
//! - Every accepted hello is answered with a fresh *resume token*, kept by the controller in
//!   `.suzumio/run/<agent>.resume` (mode 0600, outside the directory mounted into the container)
//!   and by the runner in its non-dumpable memory. A runner that lost its controller while its
//!   background commands run reconnects with it (`hello {resume}`), so a restarted controller
//!   takes over a runner the previous one left running (the backend's `sweep` keeps those
//!   containers when they are what this controller would start).

use std::collections::{HashMap, HashSet};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use subtle::ConstantTimeEq;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::quota::DiskQuotas;
use super::{ToolHost, ToolOutput, broker};
use crate::activation::run::{RunnerFuture, RunnerTools};
use crate::backend::{ContainerSpec, RunnerBackend, RunnerEnd, RunnerLoss, TOKEN_FILE};
use crate::rpc::{
    self, CallSupportParams, CommandFinishedParams, CommandFinishedResult, CommandInfo, Connection, HandlerFuture,
    HelloParams, HelloResult, IncomingRequest, InvokeParams, ListCommandsParams, ListCommandsResult, LoadParams,
    LoadResult, PackSpec, RecordSignalParams, RequestHandler, RpcError, StopCommandParams,
};
use crate::store::Event;
use crate::toolpack::mcp::{McpListing, McpServerSpec};
use crate::toolpack::{PackSource, RunsIn, ToolError};

/// How long a started runner has to connect and load.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Upper bound of one tool call over the socket (shell.exec may run 5 minutes).
const INVOKE_TIMEOUT: Duration = Duration::from_secs(330);
/// How long the backend may take to report how a lost runner ended (it is usually stopped
/// already when its socket closes).
const LOSS_WAIT: Duration = Duration::from_secs(1);
/// How long a `listCommands` or `stopCommand` for the API may take.
const COMMANDS_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a call the runner cancelled by itself waits for the runner's socket to close.
const STOPPING_GRACE: Duration = Duration::from_secs(1);
/// How long a new connection has to complete its hello before it is closed.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(5);
/// Connections of one agent's socket that may be waiting for their hello at once; more are
/// closed as soon as they are accepted. The live session does not count.
pub const MAX_PENDING_HELLOS: usize = 8;
/// Security events recorded per agent per window; more are counted into the next one.
const SECURITY_EVENTS_PER_WINDOW: u32 = 20;
const SECURITY_EVENT_WINDOW: Duration = Duration::from_secs(60);

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
    /// The peer uids accepted on the sockets; `None` when the backend cannot say which uid its
    /// runners have (e.g. Docker with user namespaces), and nothing is checked.
    peer_uids: Option<Vec<u32>>,
}

/// An agent's session: from a successful hello until the connection closes.
enum SessionState {
    /// The hello was accepted and is being answered.
    Claimed,
    /// `load` is in flight.
    Loading(Connection),
    Ready(Connection),
}

impl SessionState {
    fn connection(&self) -> Option<&Connection> {
        match self {
            SessionState::Claimed => None,
            SessionState::Loading(c) | SessionState::Ready(c) => Some(c),
        }
    }

    /// Whether it still holds the agent's one session.
    fn is_open(&self) -> bool {
        self.connection().is_none_or(|c| !c.is_closed())
    }

    fn is(&self, conn: &Connection) -> bool {
        self.connection().is_some_and(|c| c.same_as(conn))
    }
}

struct Slot {
    agent: String,
    /// The agent's control directory on the host (socket and one-time token file).
    run_dir: PathBuf,
    /// The resume token of the last accepted hello (controller-only; not in `run_dir`).
    resume_file: PathBuf,
    /// The one session, from its hello on; a closed one counts as none.
    session: Mutex<Option<SessionState>>,
    /// One-time tokens handed to runners being started and not used yet; the first successful
    /// hello empties it.
    admissions: Mutex<Vec<String>>,
    /// Connections waiting for their hello.
    pending_hellos: Arc<Semaphore>,
    /// Rate limit of the agent's security events.
    refusals: Mutex<RefusalLog>,
    /// Bumped when a session becomes ready, or when loading one failed.
    ready: watch::Sender<u64>,
    /// Why the last runner could not load its toolpacks (reported to waiting calls).
    load_error: Mutex<Option<String>>,
    /// One `ensure_running` at a time per agent.
    starting: tokio::sync::Mutex<()>,
    /// Calls in flight: call id → activation id (for P0 cancel).
    in_flight: Mutex<HashMap<String, String>>,
    /// Calls in flight the controller asked the runner to cancel.
    cancelling: Mutex<HashSet<String>>,
}

impl AgentRunners {
    pub fn new(tools: Arc<ToolHost>, backend: Arc<dyn RunnerBackend>, runner_binary: PathBuf) -> Arc<AgentRunners> {
        let root = tools.project.config.root.clone();
        let slots = tools
            .project
            .config
            .agents
            .iter()
            .map(|a| {
                let (ready, _) = watch::channel(0);
                let slot = Slot {
                    agent: a.id.clone(),
                    resume_file: root.join(".suzumio").join("run").join(format!("{}.resume", a.id)),
                    run_dir: root.join(".suzumio").join("run").join(&a.id),
                    session: Mutex::new(None),
                    admissions: Mutex::new(Vec::new()),
                    pending_hellos: Arc::new(Semaphore::new(MAX_PENDING_HELLOS)),
                    refusals: Mutex::new(RefusalLog::default()),
                    ready,
                    load_error: Mutex::new(None),
                    starting: tokio::sync::Mutex::new(()),
                    in_flight: Mutex::new(HashMap::new()),
                    cancelling: Mutex::new(HashSet::new()),
                };
                (a.id.clone(), Arc::new(slot))
            })
            .collect();
        // The controller's own uid may connect too: a process with it can read the controller's
        // memory and files anyway, so refusing it would protect nothing.
        let me = nix::unistd::geteuid().as_raw();
        let peer_uids = backend.runner_uid().map(|uid| if uid == me { vec![uid] } else { vec![uid, me] });
        Arc::new_cyclic(|me: &Weak<AgentRunners>| {
            tools.link_runners(me.clone());
            AgentRunners {
                me: me.clone(),
                tools,
                backend,
                runner_binary,
                slots,
                tasks: TaskTracker::new(),
                stopping: CancellationToken::new(),
                quotas: OnceLock::new(),
                peer_uids,
            }
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
        if self.peer_uids.is_none() {
            tracing::warn!("the backend cannot say which uid its runners have: peer credentials are not checked");
        }
        for slot in self.slots.values() {
            let dir = &slot.run_dir;
            std::fs::create_dir_all(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
            let _ = std::fs::remove_file(dir.join(TOKEN_FILE));
            let path = dir.join("control.sock");
            let _ = std::fs::remove_file(&path);
            // Bound through the directory's descriptor: the kernel keeps the path as given, and
            // an accepted connection shows it in the peer's `/proc/net/unix` (in the container's
            // network namespace), so it must not be the host path.
            let dir_handle = std::fs::File::open(dir)?;
            let listener = UnixListener::bind(format!("/proc/self/fd/{}/control.sock", dir_handle.as_raw_fd()))?;
            drop(dir_handle);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
            let me = self.me.clone();
            let slot = slot.clone();
            let stopping = self.stopping.clone();
            let tasks = self.tasks.clone();
            let peer_uids = self.peer_uids.clone();
            self.tasks.spawn(async move {
                loop {
                    let accepted = tokio::select! {
                        _ = stopping.cancelled() => return,
                        accepted = listener.accept() => accepted,
                    };
                    let stream = match accepted {
                        Ok((stream, _)) => stream,
                        // Out of file descriptors (EMFILE) and the like: wait and go on; one bad
                        // moment must not leave the agent without its socket.
                        Err(e) => {
                            tracing::warn!(agent = %slot.agent, "accepting a runner connection: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    };
                    let Some(runners) = me.upgrade() else { return };
                    let peer = stream.peer_cred().ok();
                    let (uid, pid) = (peer.map(|p| p.uid()), peer.and_then(|p| p.pid()));
                    if let Some(allowed) = &peer_uids
                        && !uid.is_some_and(|uid| allowed.contains(&uid))
                    {
                        let shown = uid.map_or("unknown".to_string(), |u| u.to_string());
                        let expected = allowed.iter().map(u32::to_string).collect::<Vec<_>>().join(" or ");
                        runners.refused(&slot, format!("peer uid {shown} is not the runner's ({expected})"), uid, pid);
                        continue;
                    }
                    let Ok(permit) = slot.pending_hellos.clone().try_acquire_owned() else {
                        let reason = format!("more than {MAX_PENDING_HELLOS} connections waiting for their hello");
                        runners.refused(&slot, reason, uid, pid);
                        continue;
                    };
                    let (slot, stopping) = (slot.clone(), stopping.clone());
                    tasks.spawn(async move {
                        let _permit = permit;
                        tokio::select! {
                            _ = stopping.cancelled() => {}
                            _ = runners.handshake(&slot, stream, uid, pid) => {}
                        }
                    });
                }
            });
        }
        Ok(())
    }

    /// The hello of a new connection: read it (bounded, with a deadline), check it, answer, and
    /// on success hand the stream to a [`Connection`] and load the session.
    async fn handshake(&self, slot: &Arc<Slot>, stream: UnixStream, uid: Option<u32>, pid: Option<i32>) {
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::with_capacity(4 << 10, read);
        let first =
            tokio::time::timeout(HELLO_DEADLINE, rpc::read_first_request(&mut reader, rpc::MAX_HELLO_FRAME_BYTES))
                .await;
        let request = match first {
            Err(_) => {
                tracing::info!(agent = %slot.agent, "closing a connection that sent no hello within {HELLO_DEADLINE:?}");
                return;
            }
            Ok(Err(e)) if e.is_connection_closed() => return,
            Ok(Err(e)) => {
                tracing::info!(agent = %slot.agent, "closing a connection before its hello: {}", e.message);
                let _ = write.write_all(rpc::response_line(Value::Null, Err(e)).as_bytes()).await;
                return;
            }
            Ok(Ok(request)) => request,
        };
        let id = request.id.clone().unwrap_or(Value::Null);
        let (answer, resumed) = match self.check_hello(slot, request) {
            Ok(answer) => answer,
            Err(refusal) => {
                if let Some(reason) = refusal.security {
                    self.refused(slot, reason, uid, pid);
                }
                let reply = rpc::response_line(id, Err(RpcError::application(refusal.message)));
                let _ = tokio::time::timeout(Duration::from_secs(1), write.write_all(reply.as_bytes())).await;
                return;
            }
        };
        let reply = rpc::response_line(id, Ok(answer));
        let sent = tokio::time::timeout(Duration::from_secs(1), write.write_all(reply.as_bytes())).await;
        if !matches!(sent, Ok(Ok(()))) {
            *slot.session.lock().unwrap_or_else(|e| e.into_inner()) = None;
            return;
        }
        let handler = Arc::new(SessionHandler { runners: self.me.clone(), slot: slot.clone() });
        let (conn, _driver) = Connection::spawn_halves(reader, write, handler);
        *slot.session.lock().unwrap_or_else(|e| e.into_inner()) = Some(SessionState::Loading(conn.clone()));
        tracing::info!(agent = %slot.agent, ?pid, "runner said hello");
        if self.load_session(slot, conn.clone()).await && resumed {
            // No `ensure_running` started this runner: watch it as if it had, when the backend
            // knows it (a kept container; a local runner of an earlier controller is no child of
            // this one, and its socket alone tells when it goes).
            match self.spec(&slot.agent) {
                Ok(spec) if matches!(self.backend.is_running(&spec).await, Ok(true)) => {
                    self.watch_runner(slot, spec, conn)
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(agent = %slot.agent, "cannot watch the resumed runner: {e}"),
            }
        }
    }

    /// Whether `request` is a hello this agent's socket accepts now; on success the one-time
    /// token is used up (and its file deleted) and the session is claimed for this connection,
    /// so that a hello racing it is refused.
    fn check_hello(&self, slot: &Slot, request: IncomingRequest) -> Result<(Value, bool), Refusal> {
        if request.method != rpc::method::HELLO {
            return Err(Refusal::quiet(format!("the first request must be hello, not {}", request.method)));
        }
        let hello: HelloParams =
            rpc::parse_params(&request.method, request.params).map_err(|e| Refusal::quiet(e.message))?;
        if hello.protocol != rpc::PROTOCOL_VERSION {
            return Err(Refusal::quiet(format!(
                "protocol {} is not supported (the controller speaks {})",
                hello.protocol,
                rpc::PROTOCOL_VERSION
            )));
        }
        let mut session = slot.session.lock().unwrap_or_else(|e| e.into_inner());
        if session.as_ref().is_some_and(SessionState::is_open) {
            return Err(Refusal::security(format!("a runner for {} is already connected", slot.agent)));
        }
        let resumed = hello.resume.is_some();
        if let Some(resume) = &hello.resume {
            let expected = std::fs::read_to_string(&slot.resume_file).unwrap_or_default();
            let expected = expected.trim();
            if expected.is_empty() || !bool::from(expected.as_bytes().ct_eq(resume.as_bytes())) {
                return Err(Refusal::security_as(
                    "Invalid resume token",
                    "a hello resuming with a resume token not (or no longer) valid",
                ));
            }
            *session = Some(SessionState::Claimed);
            drop(session);
            tracing::info!(agent = %slot.agent, "a runner resumes its session (it outlived the previous controller)");
        } else {
            let mut admissions = slot.admissions.lock().unwrap_or_else(|e| e.into_inner());
            let known = admissions
                .iter()
                .fold(false, |found, t| found | bool::from(t.as_bytes().ct_eq(hello.token.as_bytes())));
            if !known {
                return Err(Refusal::security_as(
                    "Invalid agent token",
                    "a hello with a token not (or no longer) valid",
                ));
            }
            admissions.clear();
            // Claimed until the connection exists, so that no second hello gets in between.
            *session = Some(SessionState::Claimed);
            drop(admissions);
            drop(session);
        }
        let token_file = slot.run_dir.join(TOKEN_FILE);
        if let Err(e) = std::fs::remove_file(&token_file)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(agent = %slot.agent, "cannot delete the used token file {}: {e}", token_file.display());
        }
        let resume = match write_resume_token(&slot.resume_file) {
            Ok(token) => Some(token),
            Err(e) => {
                tracing::warn!(agent = %slot.agent, "cannot keep a resume token (the runner will not outlive this controller): {e}");
                None
            }
        };
        let config = &self.tools.project.config;
        let answer = serde_json::to_value(HelloResult {
            project: config.name.clone(),
            agent_id: slot.agent.clone(),
            protocol: rpc::PROTOCOL_VERSION,
            resume,
        })
        .unwrap_or(Value::Null);
        Ok((answer, resumed))
    }

    /// Send `load`; the session is ready when it succeeds (then true).
    async fn load_session(&self, slot: &Slot, conn: Connection) -> bool {
        let agent = &slot.agent;
        let outcome = match self.load_params(agent) {
            Ok(load) => conn.call::<_, LoadResult>(rpc::method::LOAD, &load).await.map_err(|e| e.message),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(loaded) => {
                for listing in loaded.mcp {
                    self.tools.mcp_listed(agent, listing);
                }
                let mut session = slot.session.lock().unwrap_or_else(|e| e.into_inner());
                if session.as_ref().is_some_and(|s| s.is(&conn)) {
                    *session = Some(SessionState::Ready(conn));
                }
                drop(session);
                slot.ready.send_modify(|n| *n += 1);
                tracing::info!(agent = %agent, "runner connected and loaded");
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

    /// Log a refused connection or hello and record it as a security event (at most
    /// [`SECURITY_EVENTS_PER_WINDOW`] per agent a minute; the rest are counted into the next).
    fn refused(&self, slot: &Slot, reason: String, peer_uid: Option<u32>, peer_pid: Option<i32>) {
        let suppressed = {
            let mut log = slot.refusals.lock().unwrap_or_else(|e| e.into_inner());
            match log.admit(Instant::now()) {
                Some(suppressed) => suppressed,
                None => return,
            }
        };
        tracing::warn!(agent = %slot.agent, ?peer_uid, ?peer_pid, "refused a connection to the control socket: {reason}");
        let event =
            Event::SecuritySessionRefused { agent_id: slot.agent.clone(), reason, peer_uid, peer_pid, suppressed };
        if let Err(e) = self.tools.store.append_event(event) {
            tracing::warn!(agent = %slot.agent, "cannot record a security event: {e}");
        }
    }

    /// A one-time token for a runner of `agent` started outside the backend (by hand, or by a
    /// test speaking the protocol): accepted by one hello, and only while no session is live.
    pub fn admit_runner(&self, agent: &str) -> Result<String, ToolError> {
        let slot = self.slot(agent)?;
        let token = crate::store::new_token();
        slot.admissions.lock().unwrap_or_else(|e| e.into_inner()).push(token.clone());
        Ok(token)
    }

    fn slot(&self, agent: &str) -> Result<&Arc<Slot>, ToolError> {
        self.slots.get(agent).ok_or_else(|| ToolError::Rejected(format!("Unknown agent: {agent}")))
    }

    fn spec(&self, agent: &str) -> Result<ContainerSpec, ToolError> {
        let p = self.tools.project.snapshot();
        ContainerSpec::for_agent(&p.config, &p.registry, agent, &self.runner_binary)
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
        let mut spec = self.spec(agent)?;
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

    /// Before anything runs: for each MCP server whose tools are not known yet (not pinned, never
    /// listed with its current command), start the runner of one agent that may use it, so its
    /// `load` lists them and the first activation sees them.
    /// Returns a failed listing for each server whose runner could not be started.
    pub async fn discover_mcp(&self) -> Vec<McpListing> {
        let project = self.tools.project.snapshot();
        let mut failed = Vec::new();
        let mut started = std::collections::BTreeSet::new();
        let unlisted = project.unlisted_mcp_packs();
        for pack in unlisted.filter(|m| matches!(m.transport, crate::config::McpTransport::Stdio { .. })) {
            let agent =
                project.config.agents.iter().find(|a| project.mcp_packs_for(&a.id).iter().any(|m| m.id == pack.id));
            let Some(agent) = agent else { continue };
            if started.insert(agent.id.clone()) {
                tracing::info!(mcp = %pack.id, agent = %agent.id, "starting a runner to list the tools of an MCP server");
                if let Err(e) = self.session(&agent.id).await {
                    tracing::warn!(mcp = %pack.id, agent = %agent.id, "cannot list the MCP server's tools: {e}");
                    failed.push(McpListing::failed(&pack.id, format!("the runner of {} did not start: {e}", agent.id)));
                }
            }
        }
        failed
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
        let slot = self.slot(agent)?;
        // Retried (once) only when the call provably never reached a runner: the session was
        // found closed before the request was handed to it (`Connection::request` refuses a
        // closed connection before writing), or the runner had stopped before the request was
        // written (the engine recorded its end earlier). Otherwise a call is never sent again,
        // whatever happens to the runner.
        let mut retried = false;
        loop {
            let mut conn = self.session(agent).await?;
            if conn.is_closed() {
                clear(slot, &conn);
                conn = self.session(agent).await?;
            }
            let call_id = format!("call_{}", uuid::Uuid::now_v7().simple());
            slot.in_flight.lock().unwrap_or_else(|e| e.into_inner()).insert(call_id.clone(), activation_id.to_string());
            let params = InvokeParams {
                activation_id: activation_id.to_string(),
                tool: tool.to_string(),
                input: Some(input.clone()),
                call_id: call_id.clone(),
            };
            let sent_at = std::time::SystemTime::now();
            let result =
                tokio::time::timeout(INVOKE_TIMEOUT, conn.call::<_, rpc::ToolOutput>(rpc::method::INVOKE, &params))
                    .await;
            slot.in_flight.lock().unwrap_or_else(|e| e.into_inner()).remove(&call_id);
            let cancelled_by_us = slot.cancelling.lock().unwrap_or_else(|e| e.into_inner()).remove(&call_id);
            // Past this match the runner went away during the call.
            match result {
                Ok(Ok(out)) => {
                    self.withdraw_read_command(agent, tool, out.metadata.as_ref());
                    return super::tool_results::adapt(&self.tools, agent, tool, out);
                }
                Ok(Err(e)) if e.is_connection_closed() => {}
                // A runner stopping on SIGTERM (`docker stop`) cancels its calls before it
                // closes the socket: a cancel the controller did not ask for is the runner going.
                Ok(Err(e))
                    if !cancelled_by_us
                        && e.message.starts_with(&format!("{tool} was cancelled"))
                        && tokio::time::timeout(STOPPING_GRACE, conn.closed()).await.is_ok() => {}
                Ok(Err(e)) => {
                    return Err(ToolError::Failed(super::tool_results::relocate(
                        &self.tools,
                        self.backend.as_ref(),
                        tool,
                        e.message,
                    )));
                }
                Err(_) => {
                    return Err(ToolError::Failed(format!(
                        "{tool} did not answer within {} s",
                        INVOKE_TIMEOUT.as_secs()
                    )));
                }
            }
            clear(slot, &conn);
            let loss = match self.spec(agent) {
                Ok(spec) => self.backend.runner_loss(&spec, LOSS_WAIT).await,
                Err(e) => RunnerLoss { end: RunnerEnd::Unknown(e.to_string()), last_logs: Vec::new() },
            };
            if !retried && loss.stopped_before(sent_at) {
                tracing::info!(%agent, %tool, "the runner had stopped before the call was sent: sending it to a new one");
                retried = true;
                continue;
            }
            tracing::warn!(%agent, %tool, "runner lost: {loss}");
            return Err(ToolError::RunnerLost(format!("runner lost during {tool}: {loss}")));
        }
    }

    /// A `shell.check` or `shell.stop` that returned a background command's end: its
    /// `shell.command_finished` signal, if it was recorded and is still pending, is withdrawn
    /// (the agent has read what it says).
    fn withdraw_read_command(&self, agent: &str, tool: &str, metadata: Option<&serde_json::Map<String, Value>>) {
        if tool != "shell.check" && tool != "shell.stop" {
            return;
        }
        let Some(metadata) = metadata else { return };
        let (Some(Value::Bool(true)), Some(Value::String(id))) = (metadata.get("endRead"), metadata.get("id")) else {
            return;
        };
        match self.tools.store.withdraw_command_signal(agent, id) {
            Ok(Some(signal)) => {
                tracing::info!(%agent, command = %id, %signal, "withdrew the finish signal of a command whose end was read")
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(%agent, command = %id, "cannot withdraw the finish signal of a read command: {e}"),
        }
    }

    /// Until the session of a runner started for `spec` closes: when the runner stops first (its
    /// socket still open, e.g. held by a process it left), close the session, so that the calls
    /// in flight fail now rather than at their timeout.
    fn watch_runner(&self, slot: &Arc<Slot>, spec: ContainerSpec, conn: Connection) {
        let (backend, stopping, agent) = (self.backend.clone(), self.stopping.clone(), slot.agent.clone());
        self.tasks.spawn(async move {
            tokio::select! {
                _ = stopping.cancelled() => {}
                _ = conn.closed() => {}
                exit = backend.wait_exit(&spec) => match exit {
                    Ok(_) | Err(crate::backend::BackendError::ContainerNotFound { .. }) => {
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
        });
    }

    /// Stop the calls an activation has in flight (P0).
    pub async fn cancel_calls(&self, agent: &str, activation_id: &str) {
        let Ok(slot) = self.slot(agent) else { return };
        let calls: Vec<String> = {
            let in_flight = slot.in_flight.lock().unwrap_or_else(|e| e.into_inner());
            let calls: Vec<String> =
                in_flight.iter().filter(|(_, a)| *a == activation_id).map(|(c, _)| c.clone()).collect();
            // Under the `in_flight` lock: `invoke` forgets a call there first, then here, so no
            // id is left behind.
            slot.cancelling.lock().unwrap_or_else(|e| e.into_inner()).extend(calls.iter().cloned());
            calls
        };
        if let Some(conn) = live(slot) {
            for call_id in calls {
                let _ = conn.request(rpc::method::CANCEL, json!({ "callId": call_id })).await;
            }
        }
    }

    /// The agent's background commands, with up to `tail_chars` of recent output each; `None`
    /// when its runner is not connected (nothing is started for this).
    pub async fn list_commands(&self, agent: &str, tail_chars: usize) -> Result<Option<Vec<CommandInfo>>, ToolError> {
        let slot = self.slot(agent)?;
        let Some(conn) = live(slot) else { return Ok(None) };
        let params = ListCommandsParams { tail_chars };
        let listed = tokio::time::timeout(
            COMMANDS_TIMEOUT,
            conn.call::<_, ListCommandsResult>(rpc::method::LIST_COMMANDS, &params),
        )
        .await
        .map_err(|_| ToolError::RunnerLost(format!("the runner of {agent} did not answer listCommands")))?;
        match listed {
            Ok(listed) => Ok(Some(listed.commands)),
            Err(e) if e.is_connection_closed() => Ok(None),
            Err(e) => Err(ToolError::Failed(e.message)),
        }
    }

    /// Whether any connected runner has a background command running (`--until-idle` waits
    /// for them: their ends are work to come).
    pub async fn background_commands_running(&self) -> bool {
        for agent in self.slots.keys() {
            if let Ok(Some(commands)) = self.list_commands(agent, 0).await
                && commands.iter().any(|c| c.status == rpc::CommandStatus::Running)
            {
                return true;
            }
        }
        false
    }

    /// Stop one of the agent's background commands (for the user; no signal follows).
    pub async fn stop_command(&self, agent: &str, command_id: &str) -> Result<CommandInfo, ToolError> {
        let slot = self.slot(agent)?;
        let conn = live(slot).ok_or_else(|| ToolError::RunnerLost(format!("the runner of {agent} is not running")))?;
        let params = StopCommandParams { command_id: command_id.to_string() };
        let stopped =
            tokio::time::timeout(COMMANDS_TIMEOUT, conn.call::<_, CommandInfo>(rpc::method::STOP_COMMAND, &params))
                .await
                .map_err(|_| ToolError::RunnerLost(format!("the runner of {agent} did not answer stopCommand")))?;
        stopped.map_err(|e| {
            if e.is_connection_closed() {
                ToolError::RunnerLost(format!("the runner of {agent} went away"))
            } else {
                ToolError::Rejected(e.message)
            }
        })
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
        let p = self.tools.project.snapshot();
        let config = p.config.agent(agent).ok_or_else(|| format!("Unknown agent: {agent}"))?;
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
        })
    }
}

/// The agent's loaded session, if it is still open.
fn live(slot: &Slot) -> Option<Connection> {
    match slot.session.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        Some(SessionState::Ready(c)) if !c.is_closed() => Some(c.clone()),
        _ => None,
    }
}

/// Forget `conn` as the agent's session (only that one: a newer session stays).
fn clear(slot: &Slot, conn: &Connection) {
    let mut session = slot.session.lock().unwrap_or_else(|e| e.into_inner());
    if session.as_ref().is_some_and(|s| s.is(conn)) {
        *session = None;
    }
}

/// Why a hello was refused: the message the peer gets, and the reason recorded as a security
/// event (none for what a confused but honest runner does: a wrong protocol, a malformed hello).
struct Refusal {
    message: String,
    security: Option<String>,
}

impl Refusal {
    fn quiet(message: String) -> Refusal {
        Refusal { message, security: None }
    }

    fn security(message: String) -> Refusal {
        Refusal { security: Some(message.clone()), message }
    }

    fn security_as(message: &str, reason: &str) -> Refusal {
        Refusal { message: message.to_string(), security: Some(reason.to_string()) }
    }
}

/// Counts refusals in fixed windows, so that a flood cannot flood the timeline.
#[derive(Default)]
struct RefusalLog {
    window_start: Option<Instant>,
    recorded: u32,
    suppressed: u64,
}

impl RefusalLog {
    /// `Some(suppressed since the last recorded one)` when this refusal is to be recorded.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        if self.window_start.is_none_or(|start| now.duration_since(start) >= SECURITY_EVENT_WINDOW) {
            self.window_start = Some(now);
            self.recorded = 0;
        }
        if self.recorded >= SECURITY_EVENTS_PER_WINDOW {
            self.suppressed += 1;
            return None;
        }
        self.recorded += 1;
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// Handles what one runner connection asks, after its hello.
struct SessionHandler {
    runners: Weak<AgentRunners>,
    slot: Arc<Slot>,
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
                    let out = broker::call_support(&runners.tools, &slot.agent, p).await.map_err(tool_error_reply)?;
                    Ok(serde_json::to_value(out).unwrap_or(Value::Null))
                }
                rpc::method::COMMAND_FINISHED => {
                    let p: CommandFinishedParams = rpc::parse_params(&method, params)?;
                    let finished = command_finished(&runners.tools, &slot.agent, p).map_err(tool_error_reply)?;
                    Ok(serde_json::to_value(finished).unwrap_or(Value::Null))
                }
                rpc::method::RECORD_SIGNAL => {
                    let p: RecordSignalParams = rpc::parse_params(&method, params)?;
                    let signals = broker::record_signal(&runners.tools, &slot.agent, p).map_err(tool_error_reply)?;
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

/// Record the end of one of `agent`'s background commands as its `shell.command_finished`
/// signal, once per command id.
fn command_finished(
    tools: &ToolHost,
    agent: &str,
    p: CommandFinishedParams,
) -> Result<CommandFinishedResult, ToolError> {
    let tail: String = {
        let count = p.output_tail.chars().count();
        p.output_tail.chars().skip(count.saturating_sub(COMMAND_TAIL_CHARS)).collect()
    };
    let payload = json!({
        "commandId": p.command_id,
        "name": p.name,
        "command": p.command,
        "status": p.status,
        "exitCode": p.exit_code,
        "signal": p.signal,
        "output": tail,
        "truncated": p.truncated || p.output_tail.chars().count() > COMMAND_TAIL_CHARS,
        "startedAt": p.started_at,
        "endedAt": p.ended_at,
    });
    let (signal, recorded) = tools.store.record_command_finished(agent, &p.command_id, payload)?;
    if recorded {
        tracing::info!(%agent, command = %p.command_id, signal = %signal.id, "a background command finished");
    }
    Ok(CommandFinishedResult { signal_id: signal.id, recorded })
}

/// Characters of output a `shell.command_finished` signal carries at most.
const COMMAND_TAIL_CHARS: usize = 8_000;

/// A fresh resume token, written to `path` (mode 0600, replacing the previous one atomically).
fn write_resume_token(path: &Path) -> std::io::Result<String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let token = crate::store::new_token();
    let temp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
        file.write_all(token.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written.map(|()| token)
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
