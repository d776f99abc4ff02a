//! Runner lifecycle: where each agent's `suzumio-runner` runs. By default one long-lived,
//! hardened container per agent, running the controller's own static runner (bind-mounted
//! read-only as the entrypoint); or a local process.
//!
//! - [`spec`]: what an agent's container looks like — name, labels, env, the mount table of
//!   DESIGN.md, limits — derived from the project; and the host directories it needs.
//! - [`docker`]: [`DockerBackend`], the bollard client: create/start lazily, recreate when the spec
//!   changed, stop, sweep stale containers, report exits (code, OOM kill).
//! - [`image`]: the offline minimal runner image (busybox-static) and `suzumio image build`;
//!   [`debian`] the Debian one, [`mcp_servers`] the npm and PyPI MCP servers put into it.
//! - [`process`]: [`ProcessBackend`], runners as local child processes (no isolation).
//! - [`runner_binary`]: where the `suzumio-runner` binary a backend runs is found.
//! - [`RunnerBackend`]: the seam. Code above this module holds an `Arc<dyn RunnerBackend>` and
//!   asks it everything that depends on where runners run (start/stop/exit, which runner binary,
//!   how the runner's paths map to the host, where its logs are); only `controller::backend`
//!   matches on the backend kind, to construct one.
//!
//! This module never talks to a runner (that is `rpc` over the socket in the control directory),
//! never decides *when* a container runs (the supervisor does), and never sees model API keys: a
//! container's environment is exactly what its [`ContainerSpec`] was given.

pub mod debian;
pub mod docker;
mod error;
pub mod image;
pub mod mcp_servers;
pub mod owner;
pub mod process;
pub mod runner_binary;
pub mod spec;

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::future::BoxFuture;

pub use debian::{DEBIAN_IMAGE, DEBIAN_PACKAGES, DebianBuild, DebianImage, build_debian_image};
pub use docker::{ContainerHandle, DockerBackend, ExitInfo};
pub use error::BackendError;
pub use image::{ImageInfo, build_minimal_image, ensure_minimal_image, rebuild_minimal_image};
pub use mcp_servers::{MCP_BIN, McpServers};
pub use owner::RunnerUser;
pub use process::ProcessBackend;
pub use runner_binary::RunnerBuild;
pub use spec::{ContainerSpec, HostDir, Limits, MountSpec, TokenReader, container_name};

/// Uid and gid of the images' runner user (`runner` in `runner-image/minimal/etc/passwd`): a
/// container's user when root owns the project directory (otherwise its owner: see [`owner`]).
pub const RUNNER_UID: u32 = 65534;
pub const RUNNER_GID: u32 = 65534;

/// Where the host's static runner binary is mounted (read-only) and executed.
pub const RUNNER_PATH: &str = "/opt/suzumio/suzumio-runner";
/// The agent's control directory, holding the Unix socket to the controller.
pub const CONTROL_DIR: &str = "/run/suzumio";
pub const WORKSPACE_DIR: &str = "/workspace";
pub const ARTIFACTS_DIR: &str = "/artifacts";
pub const TOOLPACKS_DIR: &str = "/toolpacks";

/// Environment variable a runner started by hand may take its one-time token from (backends
/// never set it: an environment is readable by every process of the container's user).
pub const TOKEN_ENV: &str = "SUZUMIO_TOKEN";
/// The file in the agent's control directory holding the one-time token of the runner being
/// started (`/run/suzumio/token` in a container); the controller deletes it at the hello.
pub const TOKEN_FILE: &str = "token";

/// Container labels. `root` tells apart two projects that share a name; `spec` is a fingerprint
/// of everything the container was created from, so a changed spec means a new container.
pub const PROJECT_LABEL: &str = "io.suzumio.project";
pub const AGENT_LABEL: &str = "io.suzumio.agent";
pub const ROOT_LABEL: &str = "io.suzumio.root";
pub const SPEC_LABEL: &str = "io.suzumio.spec";
/// Image label: `minimal` on the image built by [`image`].
pub const IMAGE_KIND_LABEL: &str = "io.suzumio.image";

/// How the supervisor runs an agent's runner, and what it must know of where the runner runs.
/// Every lifecycle call is idempotent: `ensure_running` on a running, unchanged runner returns it
/// as is; `stop` on a missing one succeeds. Paths the runner sees are strings of the runner's
/// file system (`/workspace`, `/toolpacks/<id>`), whatever host directories they map to.
pub trait RunnerBackend: Send + Sync {
    /// The `suzumio-runner` binary this backend can run (put into `ContainerSpec::for_agent`).
    fn runner_binary(&self) -> Result<PathBuf, BackendError>;

    /// Where the runner sees the root of the local toolpack `id`, whose files are at `host_root`.
    fn pack_root_in_runner(&self, id: &str, host_root: &Path) -> PathBuf;

    /// The uid the controller sees (`SO_PEERCRED`) on the connections of the runners of the
    /// project at `root`, when it knows it; `None` when it cannot (then no uid is checked).
    fn runner_uid(&self, root: &Path) -> Option<u32>;

    /// What to look at when a started runner never connected, e.g. "check `docker logs <name>`".
    fn logs_hint(&self, spec: &ContainerSpec) -> String;

    /// Start the runner if it is not running (or was created from another spec), and return it.
    /// A runner it starts gets `spec.runner_token` in the [`TOKEN_FILE`] of its control
    /// directory, written just before it starts (never for a runner kept running).
    fn ensure_running<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Result<ContainerHandle, BackendError>>;

    fn is_running<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Result<bool, BackendError>>;

    /// Stop (SIGTERM, then SIGKILL after `timeout`) and remove the runner.
    fn stop<'a>(&'a self, spec: &'a ContainerSpec, timeout: Duration) -> BoxFuture<'a, Result<(), BackendError>>;

    /// Stop and remove every runner of the project at `root`; returns their names.
    fn stop_all<'a>(
        &'a self,
        project: &'a str,
        root: &'a Path,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Vec<String>, BackendError>>;

    /// Remove what a previous controller of the project at `root` left behind, except the
    /// runners of `current` that still run exactly as this controller would start them: a runner
    /// that outlived its controller keeps its background commands and resumes its session.
    /// Returns the names removed.
    fn sweep<'a>(
        &'a self,
        project: &'a str,
        root: &'a Path,
        current: &'a [ContainerSpec],
    ) -> BoxFuture<'a, Result<Vec<String>, BackendError>>;

    /// Resolves when the runner exits, with how it ended.
    fn wait_exit<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Result<ExitInfo, BackendError>>;

    /// Why the runner of `spec` went away, asked when its session closed unexpectedly: waits up
    /// to `wait` for it to have stopped, then says how it ended and its last log lines.
    fn runner_loss<'a>(&'a self, spec: &'a ContainerSpec, wait: Duration) -> BoxFuture<'a, RunnerLoss>;

    /// How the runner of `spec` ended, when the backend knows that it no longer runs (its
    /// container stopped or is gone; a child process that exited) — asked without a session,
    /// e.g. at a controller's start. `None` while it runs, and when the backend cannot tell
    /// (the engine does not answer; a local runner of an earlier controller is no child of
    /// this one).
    fn runner_ended<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Option<RunnerLoss>>;
}

/// Log lines kept in a [`RunnerLoss`], and how long each may be.
pub const LAST_LOG_LINES: usize = 5;
pub const LAST_LOG_LINE_CHARS: usize = 300;

/// How a runner ended, as far as its backend can tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunnerEnd {
    /// It stopped; `memory_bytes` is its memory limit (named when the OOM killer ended it).
    Exited { exit: ExitInfo, memory_bytes: u64 },
    /// Its container is gone (`docker rm -f`).
    Removed,
    /// It still runs, although its session closed (it closed the socket itself).
    StillRunning,
    /// The backend could not tell (the engine's error).
    Unknown(String),
}

/// Why a runner was lost: how it ended and the last lines it logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerLoss {
    pub end: RunnerEnd,
    pub last_logs: Vec<String>,
}

impl RunnerLoss {
    /// Whether the runner had provably stopped before `instant` (the engine recorded its end,
    /// which comes after the process is gone, earlier than that).
    pub fn stopped_before(&self, instant: std::time::SystemTime) -> bool {
        matches!(&self.end, RunnerEnd::Exited { exit, .. } if exit.finished_at.is_some_and(|t| t < instant))
    }

    /// Keep the last [`LAST_LOG_LINES`] non-empty lines of `text`, each cut to
    /// [`LAST_LOG_LINE_CHARS`], without terminal colours (the runner's log has them).
    pub fn with_logs(end: RunnerEnd, text: &str) -> RunnerLoss {
        let text = anstream::adapter::strip_str(text).to_string();
        let lines: Vec<&str> = text.lines().map(str::trim_end).filter(|l| !l.is_empty()).collect();
        let last_logs = lines[lines.len().saturating_sub(LAST_LOG_LINES)..]
            .iter()
            .map(|l| match l.char_indices().nth(LAST_LOG_LINE_CHARS) {
                Some((cut, _)) => format!("{}…", &l[..cut]),
                None => l.to_string(),
            })
            .collect();
        RunnerLoss { end, last_logs }
    }
}

impl std::fmt::Display for RunnerEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunnerEnd::Exited { exit, memory_bytes } if exit.oom_killed => {
                write!(f, "OOM-killed: the memory limit of {} was reached", human_bytes(*memory_bytes))
            }
            RunnerEnd::Exited { exit, .. } => {
                match exit.code {
                    137 => write!(f, "killed (SIGKILL, exit code 137)")?,
                    143 => write!(f, "stopped (SIGTERM, exit code 143)")?,
                    code => write!(f, "exited with code {code}")?,
                }
                match &exit.error {
                    Some(error) => write!(f, " ({error})"),
                    None => Ok(()),
                }
            }
            RunnerEnd::Removed => write!(f, "its container was removed"),
            RunnerEnd::StillRunning => write!(f, "it closed its connection but still runs"),
            RunnerEnd::Unknown(why) => write!(f, "it went away (how is unknown: {why})"),
        }
    }
}

impl std::fmt::Display for RunnerLoss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.end)?;
        if !self.last_logs.is_empty() {
            write!(f, "; its last log lines:\n{}", self.last_logs.join("\n"))?;
        }
        Ok(())
    }
}

/// `67108864` → `64 MiB` (limits are usually round).
fn human_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{} {unit}", bytes / size);
        }
        if bytes >= size {
            return format!("{:.1} {unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loss_keeps_the_last_lines_of_the_log_capped_and_without_colours() {
        let long = "y".repeat(LAST_LOG_LINE_CHARS + 50);
        let log = format!("1\n2\n\n3\n\x1b[32m INFO\x1b[0m 4\n5\n{long}\n");
        let loss = RunnerLoss::with_logs(RunnerEnd::Removed, &log);
        let kept: Vec<&str> = loss.last_logs.iter().map(String::as_str).collect();
        let cut = format!("{}…", "y".repeat(LAST_LOG_LINE_CHARS));
        assert_eq!(kept, ["2", "3", " INFO 4", "5", cut.as_str()]);
    }

    #[test]
    fn an_oom_kill_names_the_memory_limit() {
        let exit = ExitInfo { code: 137, oom_killed: true, error: None, finished_at: None };
        let end = RunnerEnd::Exited { exit: exit.clone(), memory_bytes: 32 << 20 };
        assert_eq!(end.to_string(), "OOM-killed: the memory limit of 32 MiB was reached");
        let killed = RunnerEnd::Exited { exit: ExitInfo { oom_killed: false, ..exit }, memory_bytes: 32 << 20 };
        assert_eq!(killed.to_string(), "killed (SIGKILL, exit code 137)");
        let half = RunnerEnd::Exited {
            exit: ExitInfo { code: 3, oom_killed: true, error: None, finished_at: None },
            memory_bytes: 1536 << 20,
        };
        assert_eq!(half.to_string(), "OOM-killed: the memory limit of 1.5 GiB was reached");
    }
}
