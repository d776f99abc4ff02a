//! Finding the `suzumio-runner` binary a backend runs. Which builds are acceptable is the
//! backend's call (a container needs the static one, a local process can run either); the search
//! order is shared. This module only looks at the file system: it never builds anything.

use std::path::{Path, PathBuf};

use crate::backend::BackendError;

/// Which runner builds a backend can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunnerBuild {
    /// Only a statically linked runner (it runs inside a minimal container image).
    Static,
    /// The static one, or else the dynamically linked `suzumio-runner` built next to this
    /// executable (it runs on this host).
    Any,
}

/// Where the runner binary is: `SUZUMIO_RUNNER_BIN`, else next to this executable
/// (`suzumio-runner-static`), else the static build of this checkout
/// (`target/x86_64-unknown-linux-gnu/{<profile>,release,debug}/suzumio-runner`), else (for
/// [`RunnerBuild::Any`]) the `suzumio-runner` next to this executable.
pub fn find(build: RunnerBuild) -> Result<PathBuf, BackendError> {
    if let Ok(path) = std::env::var("SUZUMIO_RUNNER_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()
        .map_err(|e| BackendError::RunnerBinaryNotFound { cause: format!("cannot locate this executable ({e})") })?;
    candidates(&exe, build)
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| BackendError::RunnerBinaryNotFound { cause: "no static suzumio-runner found".to_string() })
}

/// The paths [`find`] tries for the controller executable at `exe`, in order.
fn candidates(exe: &Path, build: RunnerBuild) -> Vec<PathBuf> {
    let dir = exe.parent().unwrap_or(Path::new("."));
    // target/<profile>/suzumio → target/x86_64-unknown-linux-gnu/<profile>/suzumio-runner
    let target = dir.parent().unwrap_or(dir);
    let profile = dir.file_name().map(|p| p.to_os_string()).unwrap_or_default();
    let static_dir = target.join("x86_64-unknown-linux-gnu");
    let mut candidates = vec![
        dir.join("suzumio-runner-static"),
        static_dir.join(&profile).join("suzumio-runner"),
        static_dir.join("release").join("suzumio-runner"),
        static_dir.join("debug").join("suzumio-runner"),
    ];
    if build == RunnerBuild::Any {
        candidates.push(dir.join("suzumio-runner"));
    }
    candidates
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_backend_that_runs_any_build_falls_back_to_the_runner_next_to_the_controller() {
        let exe = Path::new("/repo/target/debug/suzumio");
        let strict = candidates(exe, RunnerBuild::Static);
        let any = candidates(exe, RunnerBuild::Any);
        let dynamic = PathBuf::from("/repo/target/debug/suzumio-runner");
        assert!(!strict.contains(&dynamic));
        assert_eq!(any.last(), Some(&dynamic));
        assert_eq!(any[..any.len() - 1], strict[..]);
        assert_eq!(strict[1], PathBuf::from("/repo/target/x86_64-unknown-linux-gnu/debug/suzumio-runner"));
    }
}
