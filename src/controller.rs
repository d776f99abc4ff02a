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

/// Serve the project until `shutdown` resolves. `on_listening` is told the bound address.
pub async fn run(
    dir: &Path,
    options: RunOptions,
    on_listening: impl FnOnce(&ToolHost, SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RunError> {
    let tools = open(dir)?;
    let serve_options = ServeOptions { host: options.host, port: options.port, token: options.token };
    let announce = tools.clone();
    crate::web::serve(tools, serve_options, move |addr| on_listening(&announce, addr), shutdown).await?;
    Ok(())
}
