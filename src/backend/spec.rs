//! An agent's container, described from the project: name, image, entrypoint, environment, the
//! mount table and the resource limits. Building a spec reads nothing from disk; `prepare_host`
//! creates the directories it mounts.
//!
//! The mount table (DESIGN.md "Mounts"):
//!
//! | host | container | mode |
//! |---|---|---|
//! | the static runner binary | `/opt/suzumio/suzumio-runner` | ro |
//! | `<root>/workspaces/<agent>` | `/workspace` | rw |
//! | `<root>/artifacts/<agent>` | `/artifacts/<agent>` | rw |
//! | `<root>/artifacts/<other>`, every other agent | `/artifacts/<other>` | ro |
//! | `backend.docker.mounts`, then the agent's `mounts` | their `target` | ro unless `readonly: false` |
//! | the root of each local pack in `AgentToolset::mounted_packs` | `/toolpacks/<id>` | ro |
//! | `<root>/.suzumio/run/<agent>` | `/run/suzumio` | ro |
//!
//! The control directory is mounted read-only: the runner only connects to the socket the
//! controller creates there (connecting needs write permission on the socket, not on the
//! directory), and a read-only mount means a container can never remove or replace the socket
//! that is its identity.
//!
//! The runner's one-time token is not in the environment (every process of the container's user
//! can read the init's and the runner's environ): [`ContainerSpec::write_token_file`] puts it in
//! the control directory just before the runner starts, and the controller deletes it at the
//! runner's hello, before any tool can run.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::backend::{
    ARTIFACTS_DIR, BackendError, CONTROL_DIR, RUNNER_PATH, RunnerUser, TOKEN_FILE, TOOLPACKS_DIR, WORKSPACE_DIR,
};
use crate::config::ProjectConfig;
use crate::toolpack::{PackSource, ToolpackRegistry};

/// Size of the container's `/tmp` (tmpfs: its pages count against the memory limit, and a
/// write beyond the size fails with ENOSPC, so `/tmp` never reaches the host's disk).
pub const TMP_SIZE: &str = "64m";

/// Who reads the token file: the runner's user on the host, or unknown (e.g. Docker with user
/// namespaces).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenReader {
    User(RunnerUser),
    Unknown,
}

/// One bind mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountSpec {
    pub source: PathBuf,
    pub target: String,
    pub readonly: bool,
}

/// A host directory the container needs. `runner_writable` ones are mounted read-write and
/// handed to the container user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostDir {
    pub path: PathBuf,
    pub runner_writable: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Docker network mode: `none` unless the project opts in.
    pub network: String,
    pub memory_bytes: u64,
    /// CPUs as a fraction (1.5 = one and a half cores).
    pub cpus: f64,
    pub pids_limit: u64,
}

/// Everything one agent's container is made from. Fields are public so a caller (or a test) can
/// adjust what [`ContainerSpec::for_agent`] derived, e.g. the entrypoint and command.
#[derive(Clone, PartialEq)]
pub struct ContainerSpec {
    pub name: String,
    pub project: String,
    pub agent: String,
    /// The project directory (absolute).
    pub root: PathBuf,
    pub image: String,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// The container's whole environment (no secret of Suzumio's: see the module header).
    pub env: BTreeMap<String, String>,
    pub mounts: Vec<MountSpec>,
    pub host_dirs: Vec<HostDir>,
    pub limits: Limits,
    /// The one-time token of the runner about to start (empty until the controller sets it). Not
    /// part of the fingerprint: a new token never means a new container.
    pub runner_token: String,
}

impl fmt::Debug for ContainerSpec {
    /// The token never reaches a log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: BTreeMap<&str, &str> = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        f.debug_struct("ContainerSpec")
            .field("name", &self.name)
            .field("project", &self.project)
            .field("agent", &self.agent)
            .field("root", &self.root)
            .field("image", &self.image)
            .field("entrypoint", &self.entrypoint)
            .field("cmd", &self.cmd)
            .field("env", &env)
            .field("mounts", &self.mounts)
            .field("host_dirs", &self.host_dirs)
            .field("limits", &self.limits)
            .field("runner_token", &"<redacted>")
            .finish()
    }
}

/// `suzumio-<project>-<agent>`, with every character Docker refuses in a name replaced by `-`.
pub fn container_name(project: &str, agent: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '-' }).collect()
    };
    format!("suzumio-{}-{}", clean(project), clean(agent))
}

/// The host directory mounted at `/workspace` for `agent`.
pub fn workspace_dir(root: &Path, agent: &str) -> PathBuf {
    root.join("workspaces").join(agent)
}

/// The host directory mounted at `/artifacts/<agent>`.
pub fn artifacts_dir(root: &Path, agent: &str) -> PathBuf {
    root.join("artifacts").join(agent)
}

/// Where a container sees the root of the local toolpack `id`.
pub fn pack_target(id: &str) -> String {
    format!("{TOOLPACKS_DIR}/{id}")
}

impl ContainerSpec {
    /// The container of `agent_id`: the runner at `runner_binary` as entrypoint, the agent's
    /// configured `env` plus `SUZUMIO_PROJECT`/`SUZUMIO_AGENT` as environment (nothing else: no
    /// model keys, no host variables, no token).
    pub fn for_agent(
        config: &ProjectConfig,
        registry: &ToolpackRegistry,
        agent_id: &str,
        runner_binary: &Path,
    ) -> Result<ContainerSpec, BackendError> {
        let agent = config
            .agent(agent_id)
            .ok_or_else(|| BackendError::UnknownAgent { project: config.name.clone(), agent: agent_id.to_string() })?;
        let root = config.root.clone();
        let run_dir = root.join(".suzumio").join("run").join(&agent.id);
        let workspace = workspace_dir(&root, &agent.id);

        let mut table = MountTable::new(&agent.id);
        table.push(runner_binary.to_path_buf(), RUNNER_PATH, true)?;
        table.push(workspace.clone(), WORKSPACE_DIR, false)?;
        let mut host_dirs = vec![HostDir { path: workspace, runner_writable: true }];
        for other in &config.agents {
            let dir = artifacts_dir(&root, &other.id);
            let own = other.id == agent.id;
            table.push(dir.clone(), &format!("{ARTIFACTS_DIR}/{}", other.id), !own)?;
            // Every agent's artifacts directory is created writable for its owner, so the mount
            // exists (as the owner's) even before the owner's container first starts.
            host_dirs.push(HostDir { path: dir, runner_writable: true });
        }
        // An agent's own mount replaces a project-wide one at the same target.
        for m in config.backend.docker.mounts.iter().filter(|m| !agent.mounts.iter().any(|a| a.target == m.target)) {
            table.push_configured(m.source.clone(), &m.target, m.readonly)?;
        }
        for m in &agent.mounts {
            table.push_configured(m.source.clone(), &m.target, m.readonly)?;
        }
        let toolset = registry.resolve_agent(agent);
        for id in &toolset.mounted_packs {
            let not_mountable = |reason: &str| BackendError::PackNotMountable {
                agent: agent.id.clone(),
                pack: id.clone(),
                reason: reason.into(),
            };
            if id == "." || id == ".." || id.contains('/') {
                return Err(not_mountable("its id is not a usable directory name"));
            }
            match registry.pack(id).map(|p| &p.source) {
                Some(PackSource::Local { root, .. }) => table.push(root.clone(), &pack_target(id), true)?,
                Some(PackSource::Builtin(_)) => return Err(not_mountable("it is a built-in pack")),
                Some(PackSource::Mcp(_)) => return Err(not_mountable("it is an MCP server (the runner starts it)")),
                None => return Err(not_mountable("it is not registered")),
            }
        }
        table.push(run_dir.clone(), CONTROL_DIR, true)?;
        host_dirs.push(HostDir { path: run_dir, runner_writable: false });

        let mut env: BTreeMap<String, String> = agent.env.clone();
        env.insert("SUZUMIO_PROJECT".into(), config.name.clone());
        env.insert("SUZUMIO_AGENT".into(), agent.id.clone());

        Ok(ContainerSpec {
            name: container_name(&config.name, &agent.id),
            project: config.name.clone(),
            agent: agent.id.clone(),
            root,
            image: config.backend.docker.image.clone(),
            entrypoint: vec![RUNNER_PATH.to_string()],
            cmd: Vec::new(),
            env,
            mounts: table.mounts,
            host_dirs,
            limits: Limits {
                network: config.backend.docker.network.clone(),
                memory_bytes: config.backend.docker.memory_bytes,
                cpus: config.backend.docker.cpus,
                pids_limit: config.backend.docker.pids_limit,
            },
            runner_token: String::new(),
        })
    }

    /// Where the runner's one-time token is written on the host, if the spec has a control
    /// directory.
    pub fn token_file(&self) -> Option<PathBuf> {
        self.source_of(CONTROL_DIR).map(|dir| dir.join(TOKEN_FILE))
    }

    /// Write `runner_token` to [`ContainerSpec::token_file`] for a runner about to start as
    /// `reader`. Mode 0400, owned by the runner when the controller can chown (it runs as root);
    /// a runner the file cannot be given to gets it world-readable (0444) in the controller's
    /// 0755 directory. A stale file is replaced, never written through.
    pub fn write_token_file(&self, reader: TokenReader) -> Result<(), BackendError> {
        use std::io::Write;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let Some(path) = self.token_file() else { return Ok(()) };
        let fail = |source: std::io::Error| BackendError::HostDir { path: path.clone(), source };
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(fail(e)),
            _ => {}
        }
        let me = nix::unistd::geteuid();
        let mut file =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o400).open(&path).map_err(fail)?;
        file.write_all(self.runner_token.as_bytes()).map_err(fail)?;
        match reader {
            TokenReader::User(user) if user.uid == me.as_raw() => {}
            TokenReader::User(user) if me.is_root() => {
                let (owner, group) = (nix::unistd::Uid::from_raw(user.uid), nix::unistd::Gid::from_raw(user.gid));
                nix::unistd::fchown(&file, Some(owner), Some(group)).map_err(|e| fail(e.into()))?;
            }
            TokenReader::User(_) | TokenReader::Unknown => {
                file.set_permissions(std::fs::Permissions::from_mode(0o444)).map_err(fail)?
            }
        }
        Ok(())
    }

    /// The host path mounted as the runner binary, if any.
    pub fn runner_binary(&self) -> Option<&Path> {
        self.source_of(RUNNER_PATH)
    }

    /// The host path mounted at `target` in the container, if any.
    pub fn source_of(&self, target: &str) -> Option<&Path> {
        self.mounts.iter().find(|m| m.target == target).map(|m| m.source.as_path())
    }

    /// Create the host directories and check that every mount source exists.
    ///
    /// Directories the container writes are given to `user`, the container's user, when the
    /// controller runs as root (the normal case with a rootful engine). A controller running as
    /// `user` itself has nothing to change; otherwise chown is not permitted, and they are made
    /// world-writable (0777) instead, so the container user can still write. Only the directory
    /// itself is changed, never content a user put inside it.
    pub fn prepare_host(&self, user: RunnerUser) -> Result<(), BackendError> {
        use std::os::unix::fs::PermissionsExt;
        let me = nix::unistd::geteuid();
        let is_root = me.is_root();
        for dir in &self.host_dirs {
            let fail = |source: std::io::Error| BackendError::HostDir { path: dir.path.clone(), source };
            refuse_symlinks(&self.root, &dir.path).map_err(fail)?;
            std::fs::create_dir_all(&dir.path).map_err(fail)?;
            let mode = match (dir.runner_writable, is_root) {
                // Whatever the umask, the container user must be able to reach the socket inside.
                (false, _) => 0o755,
                (true, true) => {
                    let (uid, gid) = (nix::unistd::Uid::from_raw(user.uid), nix::unistd::Gid::from_raw(user.gid));
                    nix::unistd::chown(&dir.path, Some(uid), Some(gid)).map_err(|e| fail(e.into()))?;
                    continue;
                }
                (true, false) if user.uid == me.as_raw() => continue,
                (true, false) => 0o777,
            };
            std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(mode)).map_err(fail)?;
        }
        for m in &self.mounts {
            if std::fs::metadata(&m.source).is_err() {
                return Err(if m.target == RUNNER_PATH {
                    BackendError::RunnerBinaryMissing { path: m.source.clone() }
                } else {
                    BackendError::MountSourceMissing { source_path: m.source.clone(), target: m.target.clone() }
                });
            }
        }
        Ok(())
    }

    /// A stable digest of the spec plus `extra` (what the spec alone does not pin, such as the
    /// image id): equal digests mean an existing container can be kept.
    pub fn fingerprint(&self, extra: &str) -> String {
        let mut text = String::new();
        let mut line = |parts: &[&str]| {
            for p in parts {
                text.push_str(p);
                text.push('\u{1f}');
            }
            text.push('\n');
        };
        line(&["name", &self.name, &self.project, &self.agent, &self.root.to_string_lossy(), &self.image]);
        line(&[&["entrypoint"], self.entrypoint.iter().map(String::as_str).collect::<Vec<_>>().as_slice()].concat());
        line(&[&["cmd"], self.cmd.iter().map(String::as_str).collect::<Vec<_>>().as_slice()].concat());
        for (k, v) in &self.env {
            line(&["env", k, v]);
        }
        for m in &self.mounts {
            line(&["mount", &m.source.to_string_lossy(), &m.target, if m.readonly { "ro" } else { "rw" }]);
        }
        let l = &self.limits;
        line(&[
            "limits",
            &l.network,
            &l.memory_bytes.to_string(),
            &l.cpus.to_string(),
            &l.pids_limit.to_string(),
            TMP_SIZE,
        ]);
        line(&["extra", extra]);
        format!("{:016x}", fnv1a64(text.as_bytes()))
    }
}

/// A directory the controller creates, chowns and mounts read-write must not be (or lie under) a
/// symlink inside the project: a project from elsewhere could otherwise point `workspaces/<agent>`
/// at `/` and have it chowned and mounted writable. Checked from `root` down to `path`.
fn refuse_symlinks(root: &Path, path: &Path) -> std::io::Result<()> {
    let Ok(relative) = path.strip_prefix(root) else {
        return Ok(());
    };
    let mut current = root.to_path_buf();
    for part in relative.components() {
        current.push(part);
        match std::fs::symlink_metadata(&current) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(std::io::Error::other(format!(
                    "{} is a symlink; Suzumio creates and mounts this directory itself and will not follow a link there",
                    current.display()
                )));
            }
            Ok(_) => {}
            Err(_) => break, // missing: create_dir_all makes real directories from here on
        }
    }
    Ok(())
}

/// Mounts in order, refusing a target used twice (Docker would refuse the container with a less
/// helpful message).
struct MountTable<'a> {
    agent: &'a str,
    mounts: Vec<MountSpec>,
}

impl<'a> MountTable<'a> {
    fn new(agent: &'a str) -> Self {
        MountTable { agent, mounts: Vec::new() }
    }

    /// A mount from `suzumio.yaml`: besides a duplicate target, refuse one that would cover or sit
    /// inside a path the controller mounts (`/run` would hide the control socket, `/opt` the
    /// runner); config validation refuses only targets on or under its reserved list.
    fn push_configured(&mut self, source: PathBuf, target: &str, readonly: bool) -> Result<(), BackendError> {
        let owned = [RUNNER_PATH, WORKSPACE_DIR, ARTIFACTS_DIR, TOOLPACKS_DIR, CONTROL_DIR];
        if let Some(reserved) = owned.iter().find(|r| overlaps(Path::new(r), Path::new(target))) {
            return Err(BackendError::MountShadowsReserved {
                agent: self.agent.to_string(),
                target: target.to_string(),
                reserved: reserved.to_string(),
            });
        }
        self.push(source, target, readonly)
    }

    fn push(&mut self, source: PathBuf, target: &str, readonly: bool) -> Result<(), BackendError> {
        if let Some(first) = self.mounts.iter().find(|m| m.target == target) {
            return Err(BackendError::MountConflict {
                agent: self.agent.to_string(),
                target: target.to_string(),
                first: first.source.display().to_string(),
                second: source.display().to_string(),
            });
        }
        self.mounts.push(MountSpec { source, target: target.to_string(), readonly });
        Ok(())
    }
}

/// True when one path is the other or lies under it (component-wise: `/run` covers `/run/suzumio`,
/// `/runner` does not).
fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// FNV-1a: tiny, and stable across Rust releases (std's hasher is not promised to be).
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_what_docker_accepts() {
        assert_eq!(container_name("review-demo", "worker-1"), "suzumio-review-demo-worker-1");
        assert_eq!(container_name("My Project/ä", "pm"), "suzumio-My-Project---pm");
    }

    #[test]
    fn fnv_matches_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
