//! The `process` backend: each agent's runner as a local child process, for machines without
//! Docker. It runs the same runner binary with the same protocol, with the container paths mapped
//! to host directories (`/workspace` → `<root>/workspaces/<agent>`, `/artifacts` →
//! `<root>/artifacts`, `/mnt` → an empty per-agent directory; configured mounts are not mapped;
//! toolpacks are read at their host paths).
//! It does NOT isolate anything: the runner runs as the controller's user with its network and
//! file system (its one-time token is in `<root>/.suzumio/run/<agent>/token`, next to the socket,
//! as in a container; any process of this user could read it, and far more). Chosen explicitly (`backend.kind: process`); the controller warns when it is used.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use std::os::unix::process::ExitStatusExt;

use futures_util::future::BoxFuture;
use tokio::process::{Child, Command};

use super::runner_binary::{self, RunnerBuild};
use super::{
    BackendError, ContainerHandle, ContainerSpec, ExitInfo, RUNNER_PATH, RunnerBackend, RunnerEnd, RunnerLoss,
    RunnerUser, TokenReader, WORKSPACE_DIR,
};

#[derive(Default)]
pub struct ProcessBackend {
    children: Mutex<HashMap<String, Child>>,
}

impl ProcessBackend {
    pub fn new() -> Self {
        ProcessBackend::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Child>> {
        self.children.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The host directory the runner sees as `/mnt` (configured mounts are not mapped here).
pub fn mnt_dir(root: &Path, agent: &str) -> PathBuf {
    root.join(".suzumio").join("mnt").join(agent)
}

pub fn socket_path(root: &Path, agent: &str) -> PathBuf {
    root.join(".suzumio").join("run").join(agent).join("control.sock")
}

fn spawn(spec: &ContainerSpec) -> Result<Child, BackendError> {
    let binary = spec.runner_binary().map(Path::to_path_buf).ok_or_else(|| BackendError::RunnerBinary {
        path: PathBuf::from(RUNNER_PATH),
        reason: "no runner binary in the spec".into(),
    })?;
    let root = &spec.root;
    let workspace = spec
        .source_of(WORKSPACE_DIR)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| root.join("workspaces").join(&spec.agent));
    let mnt = mnt_dir(root, &spec.agent);
    for dir in [&workspace, &root.join("artifacts").join(&spec.agent), &mnt] {
        std::fs::create_dir_all(dir).map_err(|source| BackendError::HostDir { path: dir.clone(), source })?;
    }
    let run_dir = socket_path(root, &spec.agent).parent().map(Path::to_path_buf).unwrap_or_default();
    std::fs::create_dir_all(&run_dir).map_err(|source| BackendError::HostDir { path: run_dir.clone(), source })?;
    let me = RunnerUser { uid: nix::unistd::geteuid().as_raw(), gid: nix::unistd::getegid().as_raw() };
    spec.write_token_file(TokenReader::User(me))?;
    let mut command = Command::new(&binary);
    command
        .env_clear()
        // The runner writes into the controller's stderr: as much as the controller does by
        // default (warnings), or what `SUZUMIO_LOG` asks of both. A container's runner logs
        // more (`info`): its lines are kept apart, in `docker logs`, and quoted when it dies.
        .env("SUZUMIO_LOG", std::env::var("SUZUMIO_LOG").unwrap_or_else(|_| "warn".into()))
        .envs(&spec.env)
        .env("PATH", std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()))
        .env("SUZUMIO_SOCKET", socket_path(root, &spec.agent))
        .env("SUZUMIO_WORKSPACE", &workspace)
        .env("SUZUMIO_ARTIFACTS", root.join("artifacts"))
        .env("SUZUMIO_MNT", &mnt)
        .current_dir(&workspace)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    command
        .spawn()
        .map_err(|e| BackendError::RunnerBinary { path: binary.clone(), reason: format!("cannot start it: {e}") })
}

impl RunnerBackend for ProcessBackend {
    /// Either build runs on this host; the static one is still preferred, as for Docker.
    fn runner_binary(&self) -> Result<PathBuf, BackendError> {
        runner_binary::find(RunnerBuild::Any)
    }

    /// The runner reads packs where they are: nothing is mounted.
    fn pack_root_in_runner(&self, _id: &str, host_root: &Path) -> PathBuf {
        host_root.to_path_buf()
    }

    /// The runner runs as the controller's user.
    fn runner_uid(&self, _root: &Path) -> Option<u32> {
        Some(nix::unistd::geteuid().as_raw())
    }

    /// The child inherits the controller's stdout and stderr.
    fn logs_hint(&self, _spec: &ContainerSpec) -> String {
        "its log is in the controller's stderr".to_string()
    }

    fn ensure_running<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Result<ContainerHandle, BackendError>> {
        Box::pin(async move {
            let mut children = self.lock();
            if let Some(child) = children.get_mut(&spec.agent)
                && matches!(child.try_wait(), Ok(None))
            {
                let id = child.id().map(|p| p.to_string()).unwrap_or_default();
                return Ok(ContainerHandle { name: spec.name.clone(), id, created: false });
            }
            let child = spawn(spec)?;
            let id = child.id().map(|p| p.to_string()).unwrap_or_default();
            children.insert(spec.agent.clone(), child);
            Ok(ContainerHandle { name: spec.name.clone(), id, created: true })
        })
    }

    fn is_running<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Result<bool, BackendError>> {
        Box::pin(async move { Ok(self.lock().get_mut(&spec.agent).is_some_and(|c| matches!(c.try_wait(), Ok(None)))) })
    }

    fn stop<'a>(&'a self, spec: &'a ContainerSpec, timeout: Duration) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(async move {
            let child = self.lock().remove(&spec.agent);
            if let Some(child) = child {
                stop_child(child, timeout).await;
            }
            Ok(())
        })
    }

    /// Local runners are this process's children: none of an earlier controller is known here
    /// (one that outlived it reconnects by itself, or stops).
    fn sweep<'a>(
        &'a self,
        _project: &'a str,
        _root: &'a Path,
        _current: &'a [ContainerSpec],
    ) -> BoxFuture<'a, Result<Vec<String>, BackendError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn stop_all<'a>(
        &'a self,
        _project: &'a str,
        _root: &'a Path,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Vec<String>, BackendError>> {
        Box::pin(async move {
            let children: Vec<(String, Child)> = self.lock().drain().collect();
            let names = children.iter().map(|(a, _)| a.clone()).collect();
            for (_, child) in children {
                stop_child(child, timeout).await;
            }
            Ok(names)
        })
    }

    fn wait_exit<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Result<ExitInfo, BackendError>> {
        Box::pin(async move {
            loop {
                {
                    let mut children = self.lock();
                    match children.get_mut(&spec.agent).map(|c| c.try_wait()) {
                        Some(Ok(Some(status))) => {
                            return Ok(ExitInfo {
                                // Killed by a signal: the shell's convention, as Docker reports it.
                                code: status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(137) as i64,
                                oom_killed: false,
                                error: None,
                                // Seen by polling: no exact time.
                                finished_at: None,
                            });
                        }
                        None => return Ok(ExitInfo { code: 0, oom_killed: false, error: None, finished_at: None }),
                        _ => {}
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }

    /// The child's exit status; its log went to the controller's stderr, so no lines here.
    fn runner_loss<'a>(&'a self, spec: &'a ContainerSpec, wait: Duration) -> BoxFuture<'a, RunnerLoss> {
        Box::pin(async move {
            let end = match tokio::time::timeout(wait, self.wait_exit(spec)).await {
                Err(_) => RunnerEnd::StillRunning,
                Ok(Err(e)) => RunnerEnd::Unknown(e.to_string()),
                // No memory limit applies to a local process.
                Ok(Ok(exit)) => RunnerEnd::Exited { exit, memory_bytes: 0 },
            };
            RunnerLoss { end, last_logs: Vec::new() }
        })
    }

    /// Known only for this controller's own children (an earlier controller's runner, if it
    /// lives, reconnects by itself).
    fn runner_ended<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Option<RunnerLoss>> {
        Box::pin(async move {
            let exited = self.lock().get_mut(&spec.agent).is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
            if !exited {
                return None;
            }
            Some(self.runner_loss(spec, Duration::from_secs(1)).await)
        })
    }
}

/// SIGTERM, then SIGKILL after `timeout`.
async fn stop_child(mut child: Child, timeout: Duration) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
    }
    if tokio::time::timeout(timeout, child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}
