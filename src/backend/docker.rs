//! [`DockerBackend`]: agent containers through the Docker Engine API (bollard).
//!
//! A container is created lazily by `ensure_running` and kept warm across activations. It is
//! labelled with its project, agent, project root and a fingerprint of its spec; a container
//! whose fingerprint differs (changed config, rebuilt image, rebuilt runner) or that is not
//! running is removed and created again, so `ensure_running` is also the restart path after a
//! crash. Containers are never auto-removed or auto-restarted by the engine: the supervisor owns
//! their life, and `sweep` removes what a previous controller left behind — except containers
//! still running from the spec this controller would use, whose runners resume their sessions
//! (and keep their background commands) across a controller restart.
//!
//! Hardening (DESIGN.md "Container shape"): no network unless configured, read-only root, a
//! tmpfs `/tmp`, every capability dropped, `no-new-privileges`, never uid 0: the owner of the
//! project directory, or uid/gid 65534 when root owns it (`owner.rs`), `--init` (so the runner
//! gets SIGTERM), memory (no swap beyond it), CPU and pid limits, rotated logs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use bollard::Docker;
use bollard::errors::Error as DockerError;
use bollard::models::{
    ContainerCreateBody, ContainerStateStatusEnum, HostConfig, HostConfigLogConfig, Mount, MountType,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, LogsOptionsBuilder, RemoveContainerOptionsBuilder,
    StopContainerOptionsBuilder,
};
use futures_util::StreamExt;
use futures_util::future::{BoxFuture, join_all};

use crate::backend::error::{is_transport, message_of, status_of};
use crate::backend::image::{self, ImageInfo};
use crate::backend::runner_binary::{self, RunnerBuild};
use crate::backend::spec::{TMP_SIZE, pack_target};
use crate::backend::{
    AGENT_LABEL, BackendError, ContainerSpec, LAST_LOG_LINES, PROJECT_LABEL, ROOT_LABEL, RunnerBackend, RunnerEnd,
    RunnerLoss, RunnerUser, SPEC_LABEL, TokenReader, WORKSPACE_DIR,
};
use crate::config::DEFAULT_IMAGE;

const DEFAULT_SOCKET: &str = "/var/run/docker.sock";
/// How long `connect` waits for the engine's `/version` answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// bollard gives every request two minutes to answer; a stop must answer well inside that.
const MAX_STOP_TIMEOUT: Duration = Duration::from_secs(100);
/// `docker rm -f` kills the container, then removes it: how long a SIGKILLed container is
/// watched for its removal before it is reported as killed.
const REMOVAL_GRACE: Duration = Duration::from_millis(600);
/// How long the engine may take to answer the wait of a container it reported stopped.
const ENDED_WAIT: Duration = Duration::from_secs(5);

/// A running container, as `ensure_running` left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerHandle {
    pub name: String,
    pub id: String,
    /// True when this call created the container; false when a running one was kept.
    pub created: bool,
}

/// How a container ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitInfo {
    /// The exit code (137 = SIGKILL, from `docker kill` or the OOM killer).
    pub code: i64,
    /// The kernel's OOM killer ended it (memory limit reached).
    pub oom_killed: bool,
    /// The engine's error for the container, if it reported one (e.g. a failed start).
    pub error: Option<String>,
    /// When it stopped, as the engine recorded it (after the process was gone), if known.
    pub finished_at: Option<std::time::SystemTime>,
}

/// The Docker backend; cheap to clone (one connection pool shared by the clones).
#[derive(Clone, Debug)]
pub struct DockerBackend {
    docker: Docker,
    address: String,
    /// Agents started together must not each import the missing default image.
    image_build: Arc<tokio::sync::Mutex<()>>,
    /// The engine maps uids (user namespaces, rootless): the controller cannot know a
    /// container's uid, and containers keep the runner user.
    maps_uids: bool,
}

impl DockerBackend {
    /// Connect to the local engine (`DOCKER_HOST` when it names a `unix://` socket, else
    /// `/var/run/docker.sock`) and agree on an API version with it.
    pub async fn connect() -> Result<DockerBackend, BackendError> {
        let from_env = std::env::var("DOCKER_HOST").ok().and_then(|h| h.strip_prefix("unix://").map(str::to_string));
        DockerBackend::connect_at(from_env.as_deref().unwrap_or(DEFAULT_SOCKET)).await
    }

    /// Connect to the engine listening on the Unix socket at `socket`.
    pub async fn connect_at(socket: &str) -> Result<DockerBackend, BackendError> {
        let address = socket.to_string();
        let unreachable = |cause: String| BackendError::EngineUnreachable { address: address.clone(), cause };
        let docker = Docker::connect_with_unix(socket, 120, bollard::API_DEFAULT_VERSION)
            .map_err(|e| unreachable(describe_transport(&e)))?;
        // bollard speaks the newest API by default; Debian's engine answers 1.41 and refuses newer.
        let docker = match tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version()).await {
            Ok(Ok(docker)) => docker,
            Ok(Err(e)) => return Err(unreachable(describe_transport(&e))),
            Err(_) => return Err(unreachable(format!("no answer within {}s", CONNECT_TIMEOUT.as_secs()))),
        };
        let maps_uids = match docker.info().await {
            Ok(info) => {
                let options = info.security_options.unwrap_or_default();
                options.iter().any(|o| o.contains("name=userns") || o.contains("name=rootless"))
            }
            Err(e) => return Err(unreachable(describe_transport(&e))),
        };
        Ok(DockerBackend { docker, address, image_build: Arc::default(), maps_uids })
    }

    /// The user the containers of the project at `root` run as: its directory's owner (never
    /// root), or the runner user when the engine maps uids.
    pub fn container_user(&self, root: &Path) -> RunnerUser {
        if self.maps_uids { RunnerUser::RUNNER } else { RunnerUser::owner_of(root) }
    }

    /// What, besides the spec, makes a container: the image, the runner binary, the user.
    fn fingerprint(&self, spec: &ContainerSpec, image: &ImageInfo, user: RunnerUser) -> String {
        spec.fingerprint(&format!("{}|{}|{}:{}", image.id, runner_stamp(spec), user.uid, user.gid))
    }

    /// The bollard client, for what this backend does not wrap.
    pub fn client(&self) -> &Docker {
        &self.docker
    }

    /// The socket this backend talks to.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Make sure `image` exists: the default minimal image is built when missing; any other image
    /// must already be there (nothing is pulled).
    pub async fn ensure_image(&self, image: &str) -> Result<ImageInfo, BackendError> {
        if let Some(found) = image::inspect(self, image).await? {
            return Ok(found);
        }
        if image != DEFAULT_IMAGE {
            return Err(BackendError::ImageNotFound { image: image.to_string() });
        }
        let _building = self.image_build.lock().await;
        // Looks again under the lock: another agent's start may have built it meanwhile.
        image::ensure_minimal_image(self, image).await
    }

    /// Start the agent's container unless a running one made from the same spec exists.
    pub async fn ensure_running(&self, spec: &ContainerSpec) -> Result<ContainerHandle, BackendError> {
        let user = self.container_user(&spec.root);
        spec.prepare_host(user)?;
        let image = self.ensure_image(&spec.image).await?;
        let fingerprint = self.fingerprint(spec, &image, user);
        if let Some(existing) = self.inspect(&spec.name).await? {
            let labels = existing.config.as_ref().and_then(|c| c.labels.clone()).unwrap_or_default();
            let root = spec.root.to_string_lossy();
            match labels.get(ROOT_LABEL) {
                Some(r) if *r == root => {}
                other => {
                    let other_root = other.cloned().unwrap_or_else(|| "unknown: not made by Suzumio".to_string());
                    return Err(BackendError::NameTaken { name: spec.name.clone(), other_root });
                }
            }
            let running = existing.state.as_ref().and_then(|s| s.running).unwrap_or(false);
            if running && labels.get(SPEC_LABEL) == Some(&fingerprint) {
                return Ok(ContainerHandle {
                    name: spec.name.clone(),
                    id: existing.id.unwrap_or_default(),
                    created: false,
                });
            }
            tracing::info!(container = %spec.name, running, "replacing container (stopped, or made from another spec)");
            self.remove(&spec.name).await?;
        }
        // After the old container (and every process it had) is gone: nothing but the new
        // runner can read it before its hello.
        spec.write_token_file(if self.maps_uids { TokenReader::Unknown } else { TokenReader::User(user) })?;
        let id = self.create(spec, &fingerprint, user).await?;
        if let Err(e) = self.docker.start_container(&spec.name, None).await {
            // A container that cannot start would only be found and replaced next time.
            let _ = self.remove(&spec.name).await;
            return Err(self.container_error("start", &spec.name, e));
        }
        tracing::info!(container = %spec.name, %id, "container started");
        Ok(ContainerHandle { name: spec.name.clone(), id, created: true })
    }

    /// Whether the container `name` exists and runs.
    pub async fn is_running(&self, name: &str) -> Result<bool, BackendError> {
        Ok(self.inspect(name).await?.and_then(|c| c.state).and_then(|s| s.running).unwrap_or(false))
    }

    /// Stop and remove the container, then start a fresh one from `spec`.
    pub async fn restart(&self, spec: &ContainerSpec, timeout: Duration) -> Result<ContainerHandle, BackendError> {
        self.stop(&spec.name, timeout).await?;
        self.ensure_running(spec).await
    }

    /// SIGTERM the container, SIGKILL it after `timeout` (at most 100 s), and remove it. A
    /// container that is already stopped or gone is not an error.
    pub async fn stop(&self, name: &str, timeout: Duration) -> Result<(), BackendError> {
        let seconds = timeout.min(MAX_STOP_TIMEOUT).as_secs() as i32;
        let options = StopContainerOptionsBuilder::new().t(seconds).build();
        match self.docker.stop_container(name, Some(options)).await {
            // 304: already stopped; 404: already gone.
            Err(e) if !matches!(status_of(&e), Some(304 | 404)) => return Err(self.container_error("stop", name, e)),
            _ => {}
        }
        self.remove(name).await
    }

    /// Stop and remove every container of the project at `root`; returns their names.
    pub async fn stop_all(&self, project: &str, root: &Path, timeout: Duration) -> Result<Vec<String>, BackendError> {
        let names = self.project_containers(project, root).await?;
        let results = join_all(names.iter().map(|n| self.stop(n, timeout))).await;
        results.into_iter().collect::<Result<Vec<()>, _>>()?;
        Ok(names)
    }

    /// Remove (killing if needed) every container labelled with the project at `root`: what a
    /// previous controller left. Call it before starting agents. Returns the names removed.
    pub async fn remove_stale(&self, project: &str, root: &Path) -> Result<Vec<String>, BackendError> {
        let names = self.project_containers(project, root).await?;
        let results = join_all(names.iter().map(|n| self.remove(n))).await;
        results.into_iter().collect::<Result<Vec<()>, _>>()?;
        if !names.is_empty() {
            tracing::info!(project, removed = ?names, "removed stale containers");
        }
        Ok(names)
    }

    /// [`RunnerBackend::sweep`]: remove the project's containers except those of `current` that
    /// run from the same fingerprint.
    pub async fn sweep(
        &self,
        project: &str,
        root: &Path,
        current: &[ContainerSpec],
    ) -> Result<Vec<String>, BackendError> {
        let mut removed = Vec::new();
        for name in self.project_containers(project, root).await? {
            if let Some(spec) = current.iter().find(|s| s.name == name)
                && self.runs_as(spec).await?
            {
                tracing::info!(container = %name, "keeping a runner the previous controller left running");
                continue;
            }
            self.remove(&name).await?;
            removed.push(name);
        }
        if !removed.is_empty() {
            tracing::info!(project, ?removed, "removed stale containers");
        }
        Ok(removed)
    }

    /// Whether the container of `spec` runs, created from `spec` as it is now.
    async fn runs_as(&self, spec: &ContainerSpec) -> Result<bool, BackendError> {
        let Some(existing) = self.inspect(&spec.name).await? else { return Ok(false) };
        let Some(image) = image::inspect(self, &spec.image).await? else { return Ok(false) };
        let fingerprint = self.fingerprint(spec, &image, self.container_user(&spec.root));
        let labels = existing.config.as_ref().and_then(|c| c.labels.clone()).unwrap_or_default();
        let running = existing.state.as_ref().and_then(|s| s.running).unwrap_or(false);
        Ok(running
            && labels.get(ROOT_LABEL).map(String::as_str) == Some(&*spec.root.to_string_lossy())
            && labels.get(SPEC_LABEL) == Some(&fingerprint))
    }

    /// Resolves when the container `name` is not running, with its exit code and whether the
    /// OOM killer ended it. Returns at once for a container that is not running.
    pub async fn wait_exit(&self, name: &str) -> Result<ExitInfo, BackendError> {
        let mut waiting = self.docker.wait_container(name, None);
        let (code, mut error) = match waiting.next().await {
            Some(Ok(r)) => (r.status_code, r.error.and_then(|e| e.message).filter(|m| !m.is_empty())),
            // bollard reports a non-zero exit as an error: it is the answer, not a failure.
            Some(Err(DockerError::DockerContainerWaitError { code, error })) => {
                (code, Some(error).filter(|m| !m.is_empty()))
            }
            Some(Err(e)) if status_of(&e) == Some(409) => {
                return Err(BackendError::ContainerRemoving { name: name.to_string() });
            }
            Some(Err(e)) => return Err(self.container_error("wait for", name, e)),
            None => {
                return Err(BackendError::Container {
                    action: "wait for",
                    name: name.to_string(),
                    message: "the engine closed the wait without an exit code".to_string(),
                });
            }
        };
        // The container may be gone already (stopped and removed meanwhile): then no OOM flag.
        let state = self.inspect(name).await?.and_then(|c| c.state);
        let oom_killed = state.as_ref().and_then(|s| s.oom_killed).unwrap_or(false);
        let finished_at = state
            .as_ref()
            .and_then(|s| s.finished_at.as_deref())
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(std::time::SystemTime::from);
        if error.is_none() {
            error = state.and_then(|s| s.error).filter(|m| !m.is_empty());
        }
        Ok(ExitInfo { code, oom_killed, error, finished_at })
    }

    /// Why the container `name` went away: waits up to `wait` for it to stop, reads its last log
    /// lines while it still exists, and tells a removal (`docker rm -f`) from a kill.
    pub async fn runner_loss(&self, name: &str, memory_bytes: u64, wait: Duration) -> RunnerLoss {
        let exited = tokio::time::timeout(wait, self.wait_exit(name)).await;
        let logs = self.last_logs(name).await;
        let end = match exited {
            Err(_) => RunnerEnd::StillRunning,
            Ok(Err(BackendError::ContainerNotFound { .. } | BackendError::ContainerRemoving { .. })) => {
                RunnerEnd::Removed
            }
            Ok(Err(e)) => RunnerEnd::Unknown(e.to_string()),
            Ok(Ok(exit)) if exit.code == 137 && !exit.oom_killed && self.removed_within(name, REMOVAL_GRACE).await => {
                RunnerEnd::Removed
            }
            Ok(Ok(exit)) => RunnerEnd::Exited { exit, memory_bytes },
        };
        RunnerLoss::with_logs(end, &logs)
    }

    /// The container's last [`LAST_LOG_LINES`] lines (stdout and stderr); empty when it is gone.
    async fn last_logs(&self, name: &str) -> String {
        let options = LogsOptionsBuilder::new().stdout(true).stderr(true).tail(&LAST_LOG_LINES.to_string()).build();
        let mut stream = self.docker.logs(name, Some(options));
        let mut text = String::new();
        while let Ok(Some(Ok(chunk))) = tokio::time::timeout(Duration::from_secs(1), stream.next()).await {
            text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
        }
        text
    }

    /// Whether the container `name` is gone (or being removed) within `grace`.
    async fn removed_within(&self, name: &str, grace: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            match self.docker.inspect_container(name, None).await {
                Err(e) if status_of(&e) == Some(404) => return true,
                Ok(c) if c.state.as_ref().and_then(|s| s.status) == Some(ContainerStateStatusEnum::REMOVING) => {
                    return true;
                }
                _ => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn create(&self, spec: &ContainerSpec, fingerprint: &str, user: RunnerUser) -> Result<String, BackendError> {
        let options = CreateContainerOptionsBuilder::new().name(&spec.name).build();
        match self.docker.create_container(Some(options), create_body(spec, fingerprint, user)).await {
            Ok(created) => {
                for warning in created.warnings.iter().filter(|w| !w.is_empty()) {
                    tracing::warn!(container = %spec.name, %warning, "docker create");
                }
                Ok(created.id)
            }
            Err(e) if status_of(&e) == Some(404) => Err(BackendError::ImageNotFound { image: spec.image.clone() }),
            Err(e) => Err(self.container_error("create", &spec.name, e)),
        }
    }

    /// Force-remove (kill if running); gone already is fine.
    async fn remove(&self, name: &str) -> Result<(), BackendError> {
        let options = RemoveContainerOptionsBuilder::new().force(true).build();
        match self.docker.remove_container(name, Some(options)).await {
            // 404: gone; 409: the engine is already removing it.
            Err(e) if !matches!(status_of(&e), Some(404 | 409)) => Err(self.container_error("remove", name, e)),
            _ => Ok(()),
        }
    }

    async fn inspect(&self, name: &str) -> Result<Option<bollard::models::ContainerInspectResponse>, BackendError> {
        match self.docker.inspect_container(name, None).await {
            Ok(c) => Ok(Some(c)),
            Err(e) if status_of(&e) == Some(404) => Ok(None),
            Err(e) => Err(self.container_error("inspect", name, e)),
        }
    }

    async fn project_containers(&self, project: &str, root: &Path) -> Result<Vec<String>, BackendError> {
        let filters = HashMap::from([(
            "label".to_string(),
            vec![format!("{PROJECT_LABEL}={project}"), format!("{ROOT_LABEL}={}", root.to_string_lossy())],
        )]);
        let options = ListContainersOptionsBuilder::new().all(true).filters(&filters).build();
        let containers =
            self.docker.list_containers(Some(options)).await.map_err(|e| {
                self.engine_error(e, |message| BackendError::Engine { action: "list containers", message })
            })?;
        Ok(containers
            .into_iter()
            .filter_map(|c| c.names.and_then(|n| n.into_iter().next()))
            .map(|n| n.trim_start_matches('/').to_string())
            .collect())
    }

    fn container_error(&self, action: &'static str, name: &str, e: DockerError) -> BackendError {
        if status_of(&e) == Some(404) {
            return BackendError::ContainerNotFound { name: name.to_string() };
        }
        self.engine_error(e, |message| BackendError::Container { action, name: name.to_string(), message })
    }

    /// An engine that stopped answering is reported as unreachable; an answer as `answered`.
    pub(crate) fn engine_error(&self, e: DockerError, answered: impl FnOnce(String) -> BackendError) -> BackendError {
        if is_transport(&e) {
            BackendError::EngineUnreachable { address: self.address.clone(), cause: describe_transport(&e) }
        } else {
            answered(message_of(&e))
        }
    }
}

/// The container body: everything in `spec`, hardened, run as `user`.
fn create_body(spec: &ContainerSpec, fingerprint: &str, user: RunnerUser) -> ContainerCreateBody {
    // uid 0 is never a container's user (`RunnerUser::owner_of` never gives it).
    let user = if user.uid == 0 || user.gid == 0 { RunnerUser::RUNNER } else { user };
    // A user the image's /etc/passwd does not know would get HOME=/, which is read-only.
    let mut env = spec.env.clone();
    env.entry("HOME".to_string()).or_insert_with(|| WORKSPACE_DIR.to_string());
    let labels = HashMap::from([
        (PROJECT_LABEL.to_string(), spec.project.clone()),
        (AGENT_LABEL.to_string(), spec.agent.clone()),
        (ROOT_LABEL.to_string(), spec.root.to_string_lossy().into_owned()),
        (SPEC_LABEL.to_string(), fingerprint.to_string()),
    ]);
    let mounts = spec
        .mounts
        .iter()
        .map(|m| Mount {
            typ: Some(MountType::BIND),
            source: Some(m.source.to_string_lossy().into_owned()),
            target: Some(m.target.clone()),
            read_only: Some(m.readonly),
            ..Default::default()
        })
        .collect();
    let memory = i64::try_from(spec.limits.memory_bytes).unwrap_or(i64::MAX);
    let host_config = HostConfig {
        mounts: Some(mounts),
        network_mode: Some(spec.limits.network.clone()),
        readonly_rootfs: Some(true),
        // exec stays allowed on /tmp: `shell.exec` already runs arbitrary commands and the
        // workspace is executable, so noexec would only break tools that unpack and run helpers
        // there. nosuid/nodev cost nothing.
        tmpfs: Some(HashMap::from([("/tmp".to_string(), format!("rw,exec,nosuid,nodev,size={TMP_SIZE},mode=1777"))])),
        cap_drop: Some(vec!["ALL".to_string()]),
        security_opt: Some(vec!["no-new-privileges".to_string()]),
        init: Some(true),
        memory: Some(memory),
        memory_swap: Some(memory),
        nano_cpus: Some((spec.limits.cpus * 1e9).round() as i64),
        pids_limit: Some(i64::try_from(spec.limits.pids_limit).unwrap_or(i64::MAX)),
        auto_remove: Some(false),
        log_config: Some(HostConfigLogConfig {
            typ: Some("json-file".to_string()),
            config: Some(HashMap::from([
                ("max-size".to_string(), "10m".to_string()),
                ("max-file".to_string(), "2".to_string()),
            ])),
        }),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        entrypoint: Some(spec.entrypoint.clone()),
        cmd: Some(spec.cmd.clone()),
        env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        user: Some(format!("{}:{}", user.uid, user.gid)),
        working_dir: Some(WORKSPACE_DIR.to_string()),
        labels: Some(labels),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// Size and mtime of the runner binary: a rebuilt runner changes the fingerprint.
fn runner_stamp(spec: &ContainerSpec) -> String {
    spec.runner_binary()
        .and_then(|p| std::fs::metadata(p).ok())
        .map(|m| {
            let mtime = m.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).unwrap_or_default();
            format!("{}:{}", m.len(), mtime.as_nanos())
        })
        .unwrap_or_default()
}

/// The root cause of a transport error, without bollard's wrapping.
fn describe_transport(e: &DockerError) -> String {
    match e {
        DockerError::SocketNotFoundError(path) => format!("no socket at {path}"),
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                text = s.to_string();
                source = s.source();
            }
            text
        }
    }
}

impl RunnerBackend for DockerBackend {
    /// The minimal image has no libc: only the static runner runs in it.
    fn runner_binary(&self) -> Result<PathBuf, BackendError> {
        runner_binary::find(RunnerBuild::Static)
    }

    fn pack_root_in_runner(&self, id: &str, _host_root: &Path) -> PathBuf {
        PathBuf::from(pack_target(id))
    }

    fn runner_uid(&self, root: &Path) -> Option<u32> {
        (!self.maps_uids).then(|| self.container_user(root).uid)
    }

    fn logs_hint(&self, spec: &ContainerSpec) -> String {
        format!("check `docker logs {}`", spec.name)
    }

    fn ensure_running<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Result<ContainerHandle, BackendError>> {
        Box::pin(DockerBackend::ensure_running(self, spec))
    }

    fn is_running<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Result<bool, BackendError>> {
        Box::pin(DockerBackend::is_running(self, &spec.name))
    }

    fn stop<'a>(&'a self, spec: &'a ContainerSpec, timeout: Duration) -> BoxFuture<'a, Result<(), BackendError>> {
        Box::pin(DockerBackend::stop(self, &spec.name, timeout))
    }

    fn stop_all<'a>(
        &'a self,
        project: &'a str,
        root: &'a Path,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Vec<String>, BackendError>> {
        Box::pin(DockerBackend::stop_all(self, project, root, timeout))
    }

    fn sweep<'a>(
        &'a self,
        project: &'a str,
        root: &'a Path,
        current: &'a [ContainerSpec],
    ) -> BoxFuture<'a, Result<Vec<String>, BackendError>> {
        Box::pin(DockerBackend::sweep(self, project, root, current))
    }

    fn wait_exit<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Result<ExitInfo, BackendError>> {
        Box::pin(DockerBackend::wait_exit(self, &spec.name))
    }

    fn runner_loss<'a>(&'a self, spec: &'a ContainerSpec, wait: Duration) -> BoxFuture<'a, RunnerLoss> {
        Box::pin(DockerBackend::runner_loss(self, &spec.name, spec.limits.memory_bytes, wait))
    }

    fn runner_ended<'a>(&'a self, spec: &'a ContainerSpec) -> BoxFuture<'a, Option<RunnerLoss>> {
        Box::pin(async move {
            match self.inspect(&spec.name).await {
                Ok(None) => Some(RunnerLoss { end: RunnerEnd::Removed, last_logs: Vec::new() }),
                Ok(Some(c)) if c.state.as_ref().and_then(|s| s.running).unwrap_or(false) => None,
                // Stopped: its wait answers at once, with the exit code and the OOM flag.
                Ok(Some(_)) => {
                    Some(DockerBackend::runner_loss(self, &spec.name, spec.limits.memory_bytes, ENDED_WAIT).await)
                }
                Err(e) => {
                    tracing::warn!(container = %spec.name, "cannot tell whether the runner still runs: {e}");
                    None
                }
            }
        })
    }
}
