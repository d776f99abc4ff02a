//! Agent runners: for each agent, the controller-owned Unix socket its runner connects to, the
//! runner itself (a hardened container, or a local process), and the session over the socket.
//!
//! - At start every agent gets `.suzumio/run/<agent>/control.sock` (mode 0666 so the container's
//!   unprivileged user can connect; the directory is mounted read-only into the container). It is
//!   bound through `/proc/self/fd/<dir>/control.sock`, so the path the kernel records (and shows
//!   in the container's `/proc/net/unix`) names no host directory.
//! - Before a connection is trusted (ARCHITECTURE.md "Threat model"): the peer's uid
//!   (`SO_PEERCRED`) must be the runner's as the backend knows it (for Docker the project
//!   directory's owner, 65534 when root owns it), or the controller's own; at
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
//!   The store holds each command from its `shell.start` on; when the runner that runs it is
//!   gone (its session closed, a new runner about to start or connected without it, a
//!   controller's start or stop), it is marked `lost` with how the runner ended and signalled
//!   once ([`crate::store::Store::record_commands_lost`]).
//! - Every accepted hello is answered with a fresh *resume token*, kept by the controller in
//!   `.suzumio/run/<agent>.resume` (mode 0600, outside the directory mounted into the container)
//!   and by the runner in its non-dumpable memory. A runner that lost its controller while its
//!   background commands run reconnects with it (`hello {resume}`), so a restarted controller
//!   takes over a runner the previous one left running (the backend's `sweep` keeps those
//!   containers when they are what this controller would start).
//!
//! The parts: [`listen`] (the sockets and who may connect), [`handshake`] (the hello),
//! [`session`] (starting a runner, loading it, what it asks of the controller), [`invoke`]
//! (a tool call, its one retry and its cancel), [`commands`] (background commands) and
//! [`resume`] (resume tokens).

mod commands;
mod handshake;
mod invoke;
mod listen;
mod resume;
mod session;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use crate::rpc::PathRule;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::ToolHost;
use super::quota::DiskQuotas;
use super::runner_tools::{RunnerFuture, RunnerTools};
use crate::backend::{ContainerSpec, RunnerBackend};
use crate::config::Prewarm;
use crate::rpc::{self, Connection};
use crate::store::LossCause;
use crate::toolpack::ToolError;
use crate::toolpack::mcp::McpListing;
use listen::RefusalLog;

pub(crate) use commands::{reconcile_ended, record_lost, running_commands};

/// How long a new connection has to complete its hello before it is closed.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(5);
/// Connections of one agent's socket that may be waiting for their hello at once; more are
/// closed as soon as they are accepted. The live session does not count.
pub const MAX_PENDING_HELLOS: usize = 8;

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
        // The project's owner at this start (its containers run as it; root's keep 65534).
        let peer_uids = backend.runner_uid(&root).map(|uid| if uid == me { vec![uid] } else { vec![uid, me] });
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

    /// At `run`'s start (`backend.docker.prewarm`): start the runners that will be needed
    /// first — of the agents with pending signals, or of all agents — in the background.
    pub fn prewarm_at_start(&self) {
        let agents: Vec<String> = match self.tools.project.config.backend.docker.prewarm {
            Prewarm::Off => return,
            Prewarm::All => self.slots.keys().cloned().collect(),
            Prewarm::Pending => match self.tools.store.agents_with_ready_signals() {
                Ok(ready) => ready.into_iter().map(|(agent, _)| agent).collect(),
                Err(e) => {
                    tracing::warn!("prewarm: reading the agents with pending signals: {e}");
                    return;
                }
            },
        };
        for agent in agents {
            self.prewarm_agent(&agent);
        }
    }

    /// Start `agent`'s runner in the background unless it is live, being started, or not
    /// needed (no runner-side tool in its allowlist). A start that fails is only logged: the
    /// first tool call tries again and reports why.
    fn prewarm_agent(&self, agent: &str) {
        let (Some(me), Ok(slot)) = (self.me.upgrade(), self.slot(agent)) else { return };
        if live(slot).is_some() || slot.starting.try_lock().is_err() || self.stopping.is_cancelled() {
            return;
        }
        // A runner that outlived the previous controller (kill -9) takes up its session with
        // its resume token on its own; starting one beside it would race its hello.
        if slot.resume_file.exists() {
            return;
        }
        let project = self.tools.project.snapshot();
        if !project.config.agent(agent).is_some_and(|a| project.registry.uses_runner(a)) {
            return;
        }
        let agent = agent.to_string();
        let stopping = self.stopping.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                started = me.session(&agent) => match started {
                    Ok(_) => tracing::debug!(agent = %agent, "prewarm: runner ready"),
                    Err(e) => tracing::warn!(agent = %agent, "prewarm: the runner did not start: {e}"),
                },
                () = stopping.cancelled() => {}
            }
        });
    }

    /// Stop accepting, tell every runner to stop, then stop them all.
    pub async fn shutdown(&self) {
        self.stopping.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        let mut stopped = Vec::new();
        for slot in self.slots.values() {
            if let Some(conn) = live(slot) {
                let _ =
                    tokio::time::timeout(Duration::from_secs(2), conn.request(rpc::method::SHUTDOWN, json!({}))).await;
                stopped.push(slot.agent.clone());
            }
        }
        let config = &self.tools.project.config;
        match self.backend.stop_all(&config.name, &config.root, Duration::from_secs(3)).await {
            // The runners told to stop cannot resume: their tokens go (the next `run` knows no
            // runner of theirs may still come back, and prewarms).
            Ok(_) => {
                for agent in &stopped {
                    if let Some(slot) = self.slots.get(agent) {
                        let _ = std::fs::remove_file(&slot.resume_file);
                    }
                }
            }
            Err(e) => tracing::warn!("stopping runners: {e}"),
        }
        // The runners it stopped killed what they ran (`shutdown`): the agents learn it at the
        // next run. A runner it had no session with counts when the backend knows it is gone
        // now (Docker stops every container of the project); a local one of an earlier
        // controller is no child of this one and may still reconnect to the next.
        for slot in self.slots.values() {
            let agent = &slot.agent;
            let running = commands::running_commands(&self.tools, agent);
            if running.is_empty() {
                continue;
            }
            let gone = stopped.contains(agent)
                || match self.spec(agent) {
                    Ok(spec) => self.backend.runner_ended(&spec).await.is_some(),
                    Err(_) => false,
                };
            if gone {
                let reason = "the controller stopped, and the runner that ran it with it";
                commands::record_lost(&self.tools, agent, &running, LossCause::Stopped, reason);
            }
        }
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

impl RunnerTools for AgentRunners {
    fn invoke(
        &self,
        agent_id: &str,
        activation_id: &str,
        tool: &str,
        input: Value,
        rules: Vec<PathRule>,
    ) -> RunnerFuture {
        let Some(me) = self.me.upgrade() else {
            return Box::pin(async { Err(ToolError::RunnerLost("the controller is shutting down".to_string())) });
        };
        let (agent, activation, tool) = (agent_id.to_string(), activation_id.to_string(), tool.to_string());
        Box::pin(async move { me.invoke_guarded(&agent, &activation, &tool, input, rules).await })
    }

    fn cancel(&self, agent_id: &str, activation_id: &str) {
        if let Some(me) = self.me.upgrade() {
            let (agent, activation) = (agent_id.to_string(), activation_id.to_string());
            tokio::spawn(async move { me.cancel_calls(&agent, &activation).await });
        }
    }
    fn prewarm(&self, agent_id: &str) {
        if self.tools.project.config.backend.docker.prewarm != Prewarm::Off {
            self.prewarm_agent(agent_id);
        }
    }
}
