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
use crate::backend::process::ProcessBackend;
use crate::backend::{BackendError, DockerBackend, RunnerBackend};
use crate::clock::SystemClock;
use crate::config::load::ProcessEnv;
use crate::config::{BackendKind, InvalidInput};
use crate::project::Project;
use crate::scheduler::Scheduler;
use crate::store::{StateFiles, Store, StoreError};
use crate::support::ToolHost;
use crate::support::runners::{AgentRunners, find_runner_binary};
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
/// removed) or local processes.
pub async fn backend(tools: &ToolHost, kind: BackendKind) -> Result<Arc<dyn RunnerBackend>, RunError> {
    let config = &tools.project.config;
    match kind {
        BackendKind::Docker => {
            let docker = DockerBackend::connect().await?;
            docker.ensure_image(&config.backend.image).await?;
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

/// Agent runners for a project, listening on their sockets.
pub async fn runners(tools: &Arc<ToolHost>, kind: BackendKind) -> Result<Arc<AgentRunners>, RunError> {
    let binary = find_runner_binary(kind).map_err(RunError::Runner)?;
    runners_with(tools, kind, binary).await
}

/// [`runners`] with a given runner binary.
pub async fn runners_with(
    tools: &Arc<ToolHost>,
    kind: BackendKind,
    binary: std::path::PathBuf,
) -> Result<Arc<AgentRunners>, RunError> {
    let backend = backend(tools, kind).await?;
    let runners = AgentRunners::new(tools.clone(), backend, binary, kind);
    runners.listen().map_err(|e| RunError::Runner(format!("cannot create the agents' control sockets: {e}")))?;
    Ok(runners)
}

pub struct RunOptions {
    pub host: IpAddr,
    pub port: u16,
    pub token: Option<String>,
    /// Overrides `backend.kind`.
    pub backend: Option<BackendKind>,
}

/// Serve the project and run its agents until `shutdown` resolves. `on_listening` is told the
/// bound address.
pub async fn run(
    dir: &Path,
    options: RunOptions,
    on_listening: impl FnOnce(&ToolHost, SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let tools = open(dir)?;
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
    let scheduler_task = tokio::spawn(scheduler.run(stop_rx));
    let serve_options = ServeOptions { host: options.host, port: options.port, token: options.token };
    let announce = tools.clone();
    let served = crate::web::serve(tools, serve_options, move |addr| on_listening(&announce, addr), async move {
        shutdown.await;
        let _ = stop_on_shutdown.send(true);
    })
    .await;
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), scheduler_task).await;
    runners.shutdown().await;
    served?;
    Ok(())
}
