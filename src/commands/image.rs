//! `suzumio image build`: a runner image built offline, the minimal one or a Debian one.

use crate::backend::{self, BackendError, DebianBuild, McpServers};

use super::{CliError, Output};

/// Which runner image `image build` makes.
#[derive(Clone, Copy)]
pub enum ImageBase {
    /// busybox-static and the runner user (`suzumio-runner:minimal`).
    Minimal,
    /// A Debian made by mmdebstrap from the machine's sources (`suzumio-runner:debian`).
    Debian,
}

/// What `image build` was asked for besides the base.
pub struct ImageBuild {
    pub base: ImageBase,
    pub packages: Vec<String>,
    /// MCP servers from npm and PyPI, for `--base debian`.
    pub mcp: McpServers,
    pub suite: Option<String>,
    pub tag: Option<String>,
    pub force: bool,
}

/// `suzumio image build [--base minimal|debian] [--packages …] [--npm …] [--pip …] [--suite S]
/// [--tag T] [--force]`.
pub async fn build(request: ImageBuild) -> Result<Output, CliError> {
    let ImageBuild { base, packages, mcp, suite, tag, force } = request;
    match base {
        ImageBase::Minimal if !packages.is_empty() || !mcp.is_empty() || suite.is_some() || tag.is_some() => {
            Err(CliError::Input("--packages, --npm, --pip, --suite and --tag apply to --base debian only".to_string()))
        }
        ImageBase::Minimal => {
            backend::build_minimal_image(force).await.map(|info| format!("{info}\n").into()).map_err(CliError::from)
        }
        ImageBase::Debian => {
            let tag = tag.unwrap_or_else(|| backend::DEBIAN_IMAGE.to_string());
            let build = DebianBuild { tag, suite, packages, mcp, force };
            backend::build_debian_image(&build).await.map(|image| format!("{image}\n").into()).map_err(|e| match e {
                e @ (BackendError::InvalidPackage { .. } | BackendError::InvalidMcpPackage { .. }) => {
                    CliError::Input(e.to_string())
                }
                e => CliError::from(e),
            })
        }
    }
}
