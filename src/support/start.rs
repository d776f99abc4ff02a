//! Opening a project's state and starting its runners: what `suzumio run`, `suzumio mcp`,
//! `tool call` and `check`'s MCP discovery share. The one place that names a backend kind:
//! everything else asks the [`RunnerBackend`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ToolHost;
use super::quota::DiskQuotas;
use super::runners::{self, AgentRunners};
use crate::backend::{BackendError, ContainerSpec, DockerBackend, ProcessBackend, RunnerBackend};
use crate::clock::SystemClock;
use crate::config::load::ProcessEnv;
use crate::config::{BackendKind, InvalidInput};
use crate::project::Project;
use crate::store::{LossCause, StateFiles, Store, StoreError};

/// Why a project's state could not be opened or its runners started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Invalid(#[from] InvalidInput),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Backend(#[from] BackendError),
    #[error("{0}")]
    Runner(String),
    /// The project's runners belong to another process.
    #[error("{0}")]
    Lock(#[from] super::serving::LockError),
}

/// Load a project and open its state: what every command that touches state shares.
pub fn open(dir: &Path) -> Result<Arc<ToolHost>, StartError> {
    let project = Project::load(dir, &ProcessEnv)?;
    for w in crate::config::diag::sorted(&project.warnings.warnings) {
        tracing::warn!("{w}");
    }
    open_project(project)
}

/// [`open`] of a project already loaded (its warnings are the caller's to show).
pub fn open_project(project: Project) -> Result<Arc<ToolHost>, StartError> {
    let store = Store::open(&project.config, Arc::new(SystemClock))?;
    let state = StateFiles::new(&project.config.root);
    Ok(ToolHost::new(Arc::new(project), store, state))
}

/// [`open`] for commands that only read: the store is opened read-only (no writes, so it works
/// on a full disk).
pub fn open_read_only(dir: &Path) -> Result<Arc<ToolHost>, StartError> {
    let project = Project::load(dir, &ProcessEnv)?;
    for w in crate::config::diag::sorted(&project.warnings.warnings) {
        tracing::warn!("{w}");
    }
    let store = Store::open_read_only(&project.config, Arc::new(SystemClock))?;
    let state = StateFiles::new(&project.config.root);
    Ok(ToolHost::new(Arc::new(project), store, state))
}

/// The runner backend of a project, ready to start runners: Docker (engine reachable, image
/// present — the minimal one is built offline when missing) or local processes. Leftovers of
/// an earlier run are swept when the runners are set up ([`runners`]).
pub async fn backend(tools: &ToolHost, kind: BackendKind) -> Result<Arc<dyn RunnerBackend>, StartError> {
    let config = &tools.project.config;
    match kind {
        BackendKind::Docker => {
            let docker = DockerBackend::connect().await?;
            docker.ensure_image(&config.backend.docker.image).await?;
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
pub async fn runners(tools: &Arc<ToolHost>, kind: BackendKind) -> Result<Arc<AgentRunners>, StartError> {
    let backend = backend(tools, kind).await?;
    let binary = backend.runner_binary()?;
    listening(tools, kind, backend, binary).await
}

/// [`runners`] with a given runner binary.
pub async fn runners_with(
    tools: &Arc<ToolHost>,
    kind: BackendKind,
    binary: PathBuf,
) -> Result<Arc<AgentRunners>, StartError> {
    listening(tools, kind, backend(tools, kind).await?, binary).await
}

/// Sweep what an earlier run left (keeping runners that outlived it unchanged: they resume
/// their sessions with their background commands), then create the agents' sockets.
async fn listening(
    tools: &Arc<ToolHost>,
    kind: BackendKind,
    backend: Arc<dyn RunnerBackend>,
    binary: PathBuf,
) -> Result<Arc<AgentRunners>, StartError> {
    let (config, project) = (&tools.project.config, tools.project.snapshot());
    let specs: Vec<ContainerSpec> = config
        .agents
        .iter()
        .filter_map(|a| ContainerSpec::for_agent(config, &project.registry, &a.id, &binary).ok())
        .collect();
    // What died while no controller ran is lost now, with how it ended: the sweep removes the
    // stopped containers that tell it.
    for spec in &specs {
        runners::reconcile_ended(tools, backend.as_ref(), spec).await;
    }
    // A runner whose one-time token is still on disk never said hello (its controller died while
    // it started): it has no resume token, so it can never take up a session. It goes with the
    // stale ones rather than being kept, to be started afresh when needed.
    let resumable: Vec<ContainerSpec> =
        specs.iter().filter(|s| !s.token_file().is_some_and(|token| token.exists())).cloned().collect();
    let stale = backend.sweep(&config.name, &config.root, &resumable).await?;
    if !stale.is_empty() {
        tracing::info!("removed {} stale container(s) of this project: {}", stale.len(), stale.join(", "));
    }
    for spec in specs.iter().filter(|s| stale.contains(&s.name)) {
        let running = runners::running_commands(tools, &spec.agent);
        let reason = "the controller removed the container that ran it at its start: it was not made from the agent's current configuration";
        runners::record_lost(tools, &spec.agent, &running, LossCause::Removed, reason);
    }
    let runners = AgentRunners::new(tools.clone(), backend, binary);
    // `diskQuota` is the Docker section's; local processes are not confined to begin with.
    if kind == BackendKind::Docker {
        runners.enforce_disk_quotas(DiskQuotas::new(&project));
    }
    runners.listen().map_err(|e| StartError::Runner(format!("cannot create the agents' control sockets: {e}")))?;
    Ok(runners)
}
