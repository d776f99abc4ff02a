//! `suzumio run`: the running controller for one project. It loads and validates the project,
//! opens its store, recovers from a previous crash, prepares the runner backend (Docker by
//! default; the `process` backend when chosen), creates every agent's control socket, and runs
//! the scheduler (activations run the model loop in this process) and the HTTP API until
//! Ctrl-C or SIGTERM (the given shutdown future), under one cancellation token and task
//! tracker. On the way out activations record that they were stopped and runners are stopped.

mod control;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::activation::Activations;
use crate::backend::BackendError;
use crate::config::{BackendKind, InvalidInput};
use crate::scheduler::Scheduler;
use crate::store::StoreError;
use crate::support::ToolHost;
use crate::support::runners::AgentRunners;
use crate::support::serving::ServeLock;
use crate::support::start::StartError;
use crate::web::{AllowedHost, ServeError, ServeOptions, StreamLimits};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Invalid(#[from] InvalidInput),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Serve(#[from] ServeError),
    #[error("{0}")]
    Backend(#[from] BackendError),
    #[error("{0}")]
    Runner(String),
    /// Another process serves the project (or uses its runners).
    #[error("{0}")]
    Lock(#[from] crate::support::serving::LockError),
    /// `--kickoff` on a project whose coordinator is not an agent.
    #[error("--kickoff: {0}")]
    Kickoff(String),
}

impl From<StartError> for RunError {
    fn from(e: StartError) -> RunError {
        match e {
            StartError::Invalid(e) => RunError::Invalid(e),
            StartError::Store(e) => RunError::Store(e),
            StartError::Backend(e) => RunError::Backend(e),
            StartError::Runner(e) => RunError::Runner(e),
            StartError::Lock(e) => RunError::Lock(e),
        }
    }
}

impl RunError {
    /// Exit code: 2 for what the user must fix in their input, 1 for failures at run time.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Invalid(_) | RunError::Serve(ServeError::TokenRequired(_)) | RunError::Kickoff(_) => 2,
            _ => 1,
        }
    }
}

/// Opening a project and starting its runners live in `support::start` (below the web layer,
/// which needs them too); their `StartError` converts into [`RunError`].
pub use crate::support::start::{backend, open, open_project, open_read_only, runners, runners_with};

pub struct RunOptions {
    pub host: IpAddr,
    pub port: u16,
    pub token: Option<String>,
    /// Overrides `backend.kind`.
    pub backend: Option<BackendKind>,
    /// A one-time browser login code (printed as a link when a token is required).
    pub login_code: Option<String>,
    /// Host names the API answers for besides its own (`--allowed-host`, a reverse proxy's).
    pub allowed_hosts: Vec<AllowedHost>,
    /// Stop once the project is idle: no activation running, nothing pending, nothing due
    /// within a minute.
    pub until_idle: bool,
    /// Start a project that was never started (`initialized`): what `suzumio run` means unless
    /// `--paused`. A stopped, submitted or completed project keeps its status either way.
    pub start: bool,
    /// Send the task to the coordinator as the user's first message (`--kickoff`; also when
    /// the config says `kickoff: true`), unless the project has a message already.
    pub kickoff: bool,
}

/// How a run ended.
#[derive(Debug, Default)]
pub struct RunOutcome {
    /// Activations that failed during this run.
    pub failed_activations: Vec<String>,
    /// Activations of this run whose model made calls refused before they ran, with how many
    /// (an unknown tool, one the agent may not use, one not loaded yet).
    pub rejected_calls: Vec<(String, u64)>,
    /// The run found the project idle with nothing done: no activation ran while it served a
    /// running project.
    pub nothing_to_do: Option<NothingToDo>,
}

/// What a user can do about a run that had nothing to do.
#[derive(Debug)]
pub struct NothingToDo {
    /// The agent a first message would go to (the coordinator, else the first agent).
    pub recipient: String,
    /// The project has no message yet: `--kickoff` would send its task.
    pub kickoff_would_send: bool,
}

/// The kickoff, at the start of a run that asks for it: the project's task as the user's first
/// message to the coordinator. A project that already has a message (an earlier kickoff, or a
/// `suzumio send`) gets none: the task goes once.
fn kickoff(tools: &ToolHost, asked: bool) -> Result<(), RunError> {
    let config = &tools.project.config;
    if !asked && !config.kickoff {
        return Ok(());
    }
    let recipient = config.kickoff_recipient().map_err(RunError::Kickoff)?;
    let first = tools.store.send_first_message(crate::store::SendMessage {
        sender: "user".into(),
        recipient: Some(recipient.to_string()),
        channel: None,
        priority: None,
        body: config.task.trim().to_string(),
        source_agent: None,
        source_activation: None,
    })?;
    match first {
        Some(sent) => tracing::info!("kickoff: the project's task was sent to {recipient} ({})", sent.message_id),
        None if asked => {
            tracing::info!("kickoff: not sent: the project has messages already (the task goes only first)")
        }
        None => {}
    }
    Ok(())
}

/// Nothing runs and nothing is due within a minute: no running activation, no ready signal,
/// no job or nudge coming up. A stopped project is idle once its activations ended.
/// Activations parked for an approval count as idle — nothing moves until a person decides, and
/// an unattended `--until-idle` must not hang on a prompt (the request stays pending and the
/// next run resumes it) — unless a request's deadline falls within the minute.
fn is_idle(tools: &ToolHost, activations: &Activations, scheduler: &Scheduler) -> Result<bool, StoreError> {
    let store = &tools.store;
    let horizon = store.now() + chrono::Duration::seconds(60);
    let parked: Vec<String> = store.parked_activations()?.into_iter().map(|a| a.id).collect();
    let working = activations.running_except(&parked);
    if store.project()?.status != crate::store::ProjectStatus::Running {
        return Ok(working == 0);
    }
    let expiring = store.approvals(true, crate::store::MAX_LIMIT)?.iter().any(|r| r.expires_at <= horizon);
    if expiring {
        return Ok(false);
    }
    let agents_idle =
        store.agents()?.iter().all(|r| r.active_activation_id.as_ref().is_none_or(|id| parked.contains(id)));
    // Signals waiting for a paused agent start nothing until the user resumes it.
    let pending_now = store.has_schedulable_signals()?;
    let pending_soon =
        store.next_signal_ready_at()?.and_then(|t| crate::clock::parse_iso(&t)).is_some_and(|t| t <= horizon);
    let due_soon = scheduler.next_due().is_some_and(|t| t <= horizon);
    Ok(working == 0 && agents_idle && !pending_now && !pending_soon && !due_soon)
}

/// Resolves once the project is idle: looked at after every scheduler tick, and confirmed when
/// a short settle time passes with no new store event (an ending activation may still record
/// a nudge right after its end) and no runner has a background command running.
async fn became_idle(
    tools: Arc<ToolHost>,
    activations: Arc<Activations>,
    scheduler: Arc<Scheduler>,
    runners: Arc<AgentRunners>,
) {
    const SETTLE: std::time::Duration = std::time::Duration::from_millis(300);
    let mut ticks = scheduler.ticks();
    let mut events = tools.store.subscribe();
    loop {
        if ticks.changed().await.is_err() {
            return std::future::pending().await;
        }
        match is_idle(&tools, &activations, &scheduler) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!("checking whether the project is idle: {e}");
                continue;
            }
        }
        while events.try_recv().is_ok() {}
        // Anything recorded within the settle time means work may follow: look again later.
        if tokio::time::timeout(SETTLE, events.recv()).await.is_ok() {
            continue;
        }
        // A background command still running will end with a signal: not idle yet.
        if is_idle(&tools, &activations, &scheduler).unwrap_or(false) && !runners.background_commands_running().await {
            return;
        }
    }
}

/// Who a first message would go to: the coordinator, else the first agent.
fn first_recipient(config: &crate::config::ProjectConfig) -> String {
    match config.kickoff_recipient() {
        Ok(coordinator) => coordinator.to_string(),
        Err(_) => config.agents.first().map(|a| a.id.clone()).unwrap_or_default(),
    }
}

/// How long the permission audit gets to write what is queued, at shutdown.
pub const AUDIT_FLUSH: std::time::Duration = std::time::Duration::from_secs(3);

/// How long activations get to record their end at shutdown, before runners are stopped.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(4);

/// Serve the project and run its agents until `shutdown` resolves (or, with `until_idle`, the
/// project is idle). `on_listening` is told the bound address.
///
/// Order matters: the API port is bound first (a port in use fails the run before any runner
/// starts). At shutdown the API stops accepting, running activations are cancelled and record
/// it ("cancelled by shutdown", their signals back to pending), the scheduler stops, the
/// runners are stopped, and the store is checkpointed.
pub async fn run(
    dir: &Path,
    options: RunOptions,
    on_listening: impl FnOnce(&ToolHost, SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<RunOutcome, RunError> {
    // The project is loaded (read only) to find its root; nothing is opened, bound or
    // recovered before the lock is ours, so a second `run` changes nothing.
    let project = crate::project::Project::load(dir, &crate::config::load::ProcessEnv)?;
    for w in crate::config::diag::sorted(&project.warnings.warnings) {
        tracing::warn!("{w}");
    }
    if options.kickoff {
        project.config.kickoff_recipient().map_err(RunError::Kickoff)?;
    }
    let root = project.config.root.clone();
    let kind = options.backend.unwrap_or(project.config.backend.kind);
    if kind == crate::config::BackendKind::Docker {
        // The engine may map uids (then the containers keep 65534): known once it is connected,
        // which is after the lock; the common case is warned of before anything starts.
        let user = crate::backend::RunnerUser::owner_of(&root);
        for w in crate::backend::owner::workspace_warnings(&project.config, user) {
            tracing::warn!("{w}");
        }
    }
    let mut lock = ServeLock::acquire_for_run(&root, &crate::clock::iso(chrono::Utc::now())).await?;
    let tools = open_project(project)?;
    let started_at = crate::clock::iso(tools.store.now());
    let recovered = tools.store.recover_interrupted("controller restarted")?;
    if !recovered.is_empty() {
        tracing::warn!(
            "{} activation(s) were interrupted by a previous stop; their signals will be delivered again",
            recovered.len()
        );
    }
    let serve_options = ServeOptions {
        host: options.host,
        port: options.port,
        token: options.token,
        login_code: options.login_code,
        allowed_hosts: options.allowed_hosts,
        streams: StreamLimits::default(),
    };
    let listener = crate::web::bind(serve_options).await?;
    let address = listener.local_addr()?;
    // Once the port is ours: a run that cannot serve changes nothing.
    if options.start && tools.store.project()?.status == crate::store::ProjectStatus::Initialized {
        tools.store.set_project_status(crate::store::ProjectStatus::Running)?;
    }
    kickoff(&tools, options.kickoff)?;
    let runners = runners(&tools, kind).await?;
    // In the background, beside the MCP servers' discovery: the first activations' runners.
    runners.prewarm_at_start();
    let _ = runners.discover_mcp().await;
    crate::support::mcp_http::discover(&tools).await;
    // Once the runners exist: a command that needs one hands its call over from now on.
    let (control_socket, socket) = crate::support::control::listen(&root)
        .map_err(|e| RunError::Runner(format!("cannot create the control socket under .suzumio/: {e}")))?;
    lock.announce(&format!("http://{address}"), &socket)?;
    let activations = Activations::new(tools.clone(), runners.clone());
    // Before the scheduler: a parked activation still holds its agent, so nothing else starts.
    activations.resume_parked();
    let scheduler = Arc::new(Scheduler::new(tools.clone(), activations.clone()));
    let stopping = CancellationToken::new();
    let tasks = TaskTracker::new();
    tasks.spawn(scheduler.clone().run(stopping.clone()));
    // What other processes write (`suzumio send`, `wake`, `cancel`) reaches this process's
    // subscribers within FOLLOW_INTERVAL: the scheduler wakes on it, and an activation whose
    // end was recorded elsewhere stops.
    let store = tools.store.clone();
    let following = stopping.clone();
    tasks.spawn(async move { store.follow_other_writers(following).await });
    tasks.spawn(activations.clone().stop_ended_elsewhere(stopping.clone()));
    tasks.spawn(control::serve(control_socket, tools.clone(), runners.clone(), stopping.clone()));
    let mut served = tasks.spawn(listener.serve(tools.clone(), runners.clone(), stopping.clone().cancelled_owned()));
    on_listening(&tools, address);
    let idle = became_idle(tools.clone(), activations.clone(), scheduler.clone(), runners.clone());
    let mut failure = None;
    let mut went_idle = false;
    tokio::select! {
        _ = shutdown => {}
        _ = idle, if options.until_idle => {
            tracing::info!("the project is idle");
            went_idle = true;
        }
        result = &mut served => failure = Some(result),
    }
    stopping.cancel();
    let interrupted = activations.shutdown(SHUTDOWN_GRACE).await;
    if interrupted > 0 {
        tracing::info!("{interrupted} running activation(s) stopped; their signals will be delivered again");
    }
    tasks.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, tasks.wait()).await.is_err() {
        tracing::warn!("the API or the scheduler did not stop within {} s", SHUTDOWN_GRACE.as_secs());
    }
    runners.shutdown().await;
    // Ours to remove: the lock is still held.
    let _ = std::fs::remove_file(&socket);
    drop(lock);
    if !tools.audit.flush_async(AUDIT_FLUSH).await {
        tracing::warn!("the permission audit was not written within {} s", AUDIT_FLUSH.as_secs());
    }
    if let Err(e) = tools.store.checkpoint() {
        tracing::warn!("checkpointing the store: {e}");
    }
    match failure {
        Some(Ok(Err(e))) => return Err(e.into()),
        Some(Err(e)) => return Err(RunError::Runner(format!("the API task failed: {e}"))),
        _ => {}
    }
    let failed_activations = tools.store.activations_failed_since(&started_at)?;
    let rejected_calls = tools.store.activations_with_rejected_calls_since(&started_at)?;
    let running = tools.store.project()?.status == crate::store::ProjectStatus::Running;
    let nothing_to_do = if went_idle && running && tools.store.activations_started_since(&started_at)? == 0 {
        let recipient = first_recipient(&tools.project.config);
        Some(NothingToDo { recipient, kickoff_would_send: !tools.store.has_messages()? })
    } else {
        None
    };
    Ok(RunOutcome { failed_activations, rejected_calls, nothing_to_do })
}
