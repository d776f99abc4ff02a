//! `suzumio run`: the running controller for one project. It loads and validates the project,
//! opens its store, recovers from a previous crash, prepares the runner backend (Docker by
//! default; the `process` backend when chosen), creates every agent's control socket, and runs
//! the scheduler (activations run the model loop in this process) and the HTTP API until
//! Ctrl-C (or the given shutdown future). On the way out the runners are stopped.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use crate::activation::Activations;
use crate::backend::{BackendError, DockerBackend, ProcessBackend, RunnerBackend};
use crate::clock::SystemClock;
use crate::config::load::ProcessEnv;
use crate::config::{BackendKind, InvalidInput};
use crate::project::Project;
use crate::scheduler::Scheduler;
use crate::store::{StateFiles, Store, StoreError};
use crate::support::ToolHost;
use crate::support::runners::AgentRunners;
use crate::web::{ServeError, ServeOptions};

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
}

impl RunError {
    /// Exit code: 2 for what the user must fix in their input, 1 for failures at run time.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Invalid(_) | RunError::Serve(ServeError::TokenRequired(_)) => 2,
            _ => 1,
        }
    }
}

/// Load a project and open its state: what every command that touches state shares.
pub fn open(dir: &Path) -> Result<Arc<ToolHost>, RunError> {
    let project = Project::load(dir, &ProcessEnv)?;
    for w in crate::config::diag::sorted(&project.warnings.warnings) {
        tracing::warn!("{w}");
    }
    let store = Store::open(&project.config, Arc::new(SystemClock))?;
    let state = StateFiles::new(&project.config.root);
    Ok(ToolHost::new(Arc::new(project), store, state))
}

/// The runner backend of a project, ready to start runners: Docker (engine reachable, image
/// present — the minimal one is built offline when missing — and leftovers of this project
/// removed) or local processes. The one place that names a backend kind: everything else asks
/// the [`RunnerBackend`].
pub async fn backend(tools: &ToolHost, kind: BackendKind) -> Result<Arc<dyn RunnerBackend>, RunError> {
    let config = &tools.project.config;
    match kind {
        BackendKind::Docker => {
            let docker = DockerBackend::connect().await?;
            docker.ensure_image(&config.backend.docker.image).await?;
            let stale = docker.remove_stale(&config.name, &config.root).await?;
            if !stale.is_empty() {
                tracing::info!("removed {} stale container(s) of this project: {}", stale.len(), stale.join(", "));
            }
            Ok(Arc::new(docker))
        }
        BackendKind::Process => {
            tracing::warn!(
                "backend `process`: runners are local processes with this user's rights, network and files; nothing is isolated"
            );
            Ok(Arc::new(ProcessBackend::new()))
        }
    }
}

/// Agent runners for a project, listening on their sockets, running the runner binary the
/// backend found.
pub async fn runners(tools: &Arc<ToolHost>, kind: BackendKind) -> Result<Arc<AgentRunners>, RunError> {
    let backend = backend(tools, kind).await?;
    let binary = backend.runner_binary()?;
    listening(tools, backend, binary)
}

/// [`runners`] with a given runner binary.
pub async fn runners_with(
    tools: &Arc<ToolHost>,
    kind: BackendKind,
    binary: std::path::PathBuf,
) -> Result<Arc<AgentRunners>, RunError> {
    listening(tools, backend(tools, kind).await?, binary)
}

fn listening(
    tools: &Arc<ToolHost>,
    backend: Arc<dyn RunnerBackend>,
    binary: std::path::PathBuf,
) -> Result<Arc<AgentRunners>, RunError> {
    let runners = AgentRunners::new(tools.clone(), backend, binary);
    runners.listen().map_err(|e| RunError::Runner(format!("cannot create the agents' control sockets: {e}")))?;
    Ok(runners)
}

pub struct RunOptions {
    pub host: IpAddr,
    pub port: u16,
    pub token: Option<String>,
    /// Overrides `backend.kind`.
    pub backend: Option<BackendKind>,
    /// A one-time browser login code (printed as a link when a token is required).
    pub login_code: Option<String>,
    /// Stop once the project is idle: no activation running, nothing pending, nothing due
    /// within a minute.
    pub until_idle: bool,
}

/// How a run ended.
#[derive(Debug, Default)]
pub struct RunOutcome {
    /// Activations that failed during this run.
    pub failed_activations: Vec<String>,
}

/// Whether the project has nothing to do for at least a minute.
fn is_idle(tools: &ToolHost, activations: &Activations, scheduler: &Scheduler) -> bool {
    let store = &tools.store;
    let horizon = store.now() + chrono::Duration::seconds(60);
    if store.project().map(|p| p.status != crate::store::ProjectStatus::Running).unwrap_or(false) {
        return activations.running() == 0;
    }
    let agents_idle = store.agents().map(|a| a.iter().all(|r| r.active_activation_id.is_none())).unwrap_or(false);
    let pending_now = store.has_pending_signals(false).unwrap_or(true);
    let pending_soon = store
        .next_signal_ready_at()
        .ok()
        .flatten()
        .and_then(|t| crate::clock::parse_iso(&t))
        .is_some_and(|t| t <= horizon);
    let due_soon = scheduler.next_due().is_some_and(|t| t <= horizon);
    activations.running() == 0 && agents_idle && !pending_now && !pending_soon && !due_soon
}

/// Serve the project and run its agents until `shutdown` resolves. `on_listening` is told the
/// bound address.
pub async fn run(
    dir: &Path,
    options: RunOptions,
    on_listening: impl FnOnce(&ToolHost, SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<RunOutcome, RunError> {
    let tools = open(dir)?;
    let started_at = crate::clock::iso(tools.store.now());
    let recovered = tools.store.recover_interrupted("controller restarted")?;
    if !recovered.is_empty() {
        tracing::warn!(
            "{} activation(s) were interrupted by a previous stop; their signals will be delivered again",
            recovered.len()
        );
    }
    let kind = options.backend.unwrap_or(tools.project.config.backend.kind);
    let runners = runners(&tools, kind).await?;
    let activations = Activations::new(tools.clone(), runners.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let stop_on_shutdown = stop_tx.clone();
    let scheduler = Arc::new(Scheduler::new(tools.clone(), activations.clone()));
    let scheduler_task = tokio::spawn(scheduler.clone().run(stop_rx));
    let idle = Arc::new(tokio::sync::Notify::new());
    if options.until_idle {
        let (tools, activations, scheduler, idle) =
            (tools.clone(), activations.clone(), scheduler.clone(), idle.clone());
        tokio::spawn(async move {
            // Give the first tick a moment, then require two idle looks in a row.
            let mut idle_looks = 0;
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                idle_looks = if is_idle(&tools, &activations, &scheduler) { idle_looks + 1 } else { 0 };
                if idle_looks >= 3 {
                    idle.notify_one();
                    return;
                }
            }
        });
    }
    let serve_options =
        ServeOptions { host: options.host, port: options.port, token: options.token, login_code: options.login_code };
    let announce = tools.clone();
    let store = tools.store.clone();
    let served = crate::web::serve(tools, serve_options, move |addr| on_listening(&announce, addr), async move {
        tokio::select! {
            _ = shutdown => {}
            _ = idle.notified() => tracing::info!("the project is idle"),
        }
        let _ = stop_on_shutdown.send(true);
    })
    .await;
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), scheduler_task).await;
    runners.shutdown().await;
    served?;
    let failed_activations = store.activations_failed_since(&started_at).unwrap_or_default();
    Ok(RunOutcome { failed_activations })
}
