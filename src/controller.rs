//! `suzumio run`: the running controller for one project. It loads and validates the project,
//! opens its store, and serves the API until Ctrl-C (or the given shutdown future). The
//! scheduler and the agents' containers join here with issues [C]–[E].

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use crate::clock::SystemClock;
use crate::config::InvalidInput;
use crate::config::load::ProcessEnv;
use crate::project::Project;
use crate::scheduler::{RecordingLauncher, Scheduler};
use crate::store::{StateFiles, Store, StoreError};
use crate::support::ToolHost;
use crate::web::{ServeError, ServeOptions};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Invalid(#[from] InvalidInput),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Serve(#[from] ServeError),
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

/// Load a project and open its state: what `run` and `ui` share.
pub fn open(dir: &Path) -> Result<Arc<ToolHost>, RunError> {
    let project = Project::load(dir, &ProcessEnv)?;
    for w in crate::config::diag::sorted(&project.warnings.warnings) {
        tracing::warn!("{w}");
    }
    let store = Store::open(&project.config, Arc::new(SystemClock))?;
    let state = StateFiles::new(&project.config.root);
    Ok(ToolHost::new(Arc::new(project), store, state))
}

pub struct RunOptions {
    pub host: IpAddr,
    pub port: u16,
    pub token: Option<String>,
}

/// Serve the project and run its scheduler until `shutdown` resolves. `on_listening` is told
/// the bound address.
pub async fn run(
    dir: &Path,
    options: RunOptions,
    on_listening: impl FnOnce(&ToolHost, SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let tools = open(dir)?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let stop_on_shutdown = stop_tx.clone();
    let scheduler = Arc::new(Scheduler::new(tools.clone(), Arc::new(RecordingLauncher)));
    let scheduler_task = tokio::spawn(scheduler.run(stop_rx));
    let serve_options = ServeOptions { host: options.host, port: options.port, token: options.token };
    let announce = tools.clone();
    let served = crate::web::serve(tools, serve_options, move |addr| on_listening(&announce, addr), async move {
        shutdown.await;
        let _ = stop_on_shutdown.send(true);
    })
    .await;
    let _ = stop_tx.send(true);
    // The scheduler stops at its next await point; a tick in progress finishes its writes first.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), scheduler_task).await;
    served?;
    Ok(())
}
