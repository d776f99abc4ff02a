//! What can go wrong between the controller and the container engine, one variant per failure a
//! user can act on. Every message says what happened and what to do; raw engine errors are kept
//! as text in the message, never swallowed.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("Docker engine not reachable at {address}: {cause}. Start it (e.g. `dockerd &` or scripts/setup.sh)")]
    EngineUnreachable { address: String, cause: String },

    #[error(
        "Docker image {image} is not in the engine. Build the default image with `suzumio image build`, \
         the Debian one with `suzumio image build --base debian`, or build {image} yourself and set \
         backend.image (Suzumio never pulls images)"
    )]
    ImageNotFound { image: String },

    #[error("mmdebstrap not found: install it (apt-get install mmdebstrap) to build the Debian image")]
    MmdebstrapMissing,

    #[error("mmdebstrap could not build a Debian {suite} root filesystem: {cause}")]
    Mmdebstrap { suite: String, cause: String },

    #[error("{name:?} is not a Debian package name (lowercase letters, digits and + - .)")]
    InvalidPackage { name: String },

    #[error(
        "--{registry} {spec:?} is not a registry package (a name with an optional version, e.g. \
         `@modelcontextprotocol/server-filesystem@2026.8.31` or `mcp-server-time==2026.10.19`)"
    )]
    InvalidMcpPackage { registry: &'static str, spec: String },

    #[error("the image has no {runtime} to run the MCP servers with: add it with --packages {runtime}")]
    McpRuntimeMissing { runtime: &'static str },

    #[error("could not install the MCP servers {packages} with {tool} on this machine: {cause}")]
    McpInstall { tool: &'static str, packages: String, cause: String },

    #[error("{path} not found ({cause}): install busybox-static (apt-get install busybox-static)")]
    BusyboxMissing { path: PathBuf, cause: String },

    #[error("{path} is not a static busybox ({reason}): install busybox-static (apt-get install busybox-static)")]
    BusyboxNotStatic { path: PathBuf, reason: String },

    #[error("Could not import image {tag}: {cause}")]
    ImageImport { tag: String, cause: String },

    #[error(
        "Runner binary not found at {path}: build the static runner with \
         RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --target x86_64-unknown-linux-gnu -p suzumio-runner"
    )]
    RunnerBinaryMissing { path: PathBuf },

    #[error(
        "{cause}: build it with RUSTFLAGS='-C target-feature=+crt-static' cargo build --release \
         --target x86_64-unknown-linux-gnu -p suzumio-runner (or set SUZUMIO_RUNNER_BIN)"
    )]
    RunnerBinaryNotFound { cause: String },

    #[error("cannot run the runner {path}: {reason}")]
    RunnerBinary { path: PathBuf, reason: String },

    #[error("Mount source {source_path} for {target} does not exist: create it or fix the mount in suzumio.yaml")]
    MountSourceMissing { source_path: PathBuf, target: String },

    #[error("Mount target {target} is used twice in the container of agent {agent} ({first} and {second})")]
    MountConflict { agent: String, target: String, first: String, second: String },

    #[error(
        "Mount target {target} of agent {agent} would cover or sit inside {reserved}, which Suzumio mounts itself: \
         choose a target such as /mnt/<name>"
    )]
    MountShadowsReserved { agent: String, target: String, reserved: String },

    #[error("Agent {agent} is not defined in project {project}")]
    UnknownAgent { project: String, agent: String },

    #[error("Toolpack {pack} cannot be mounted for agent {agent}: {reason}")]
    PackNotMountable { agent: String, pack: String, reason: String },

    #[error("Could not prepare {path} for the container: {source}")]
    HostDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "Container name {name} is taken by a container of another project (root {other_root}). \
         Stop that project, or remove the container with `docker rm -f {name}`"
    )]
    NameTaken { name: String, other_root: String },

    #[error("Container {name} does not exist")]
    ContainerNotFound { name: String },

    /// The engine answered 409 Conflict: the container's removal (`docker rm -f`) is under way.
    #[error("Container {name} is being removed")]
    ContainerRemoving { name: String },

    #[error("Docker could not {action} container {name}: {message}")]
    Container { action: &'static str, name: String, message: String },

    #[error("Docker request failed ({action}): {message}")]
    Engine { action: &'static str, message: String },
}

/// The `DockerResponseServerError` status, if the engine answered with one.
pub(crate) fn status_of(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// The engine's own message for a server error, the error's text otherwise.
pub(crate) fn message_of(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// True when the error means the engine could not be talked to at all (as opposed to an answer).
pub(crate) fn is_transport(e: &bollard::errors::Error) -> bool {
    use bollard::errors::Error as E;
    matches!(
        e,
        E::IOError { .. }
            | E::HyperResponseError { .. }
            | E::HyperLegacyError { .. }
            | E::SocketNotFoundError(_)
            | E::RequestTimeoutError
    )
}
