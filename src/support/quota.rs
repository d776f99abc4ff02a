//! The disk quota of each agent (`backend.docker.diskQuota`): what its `/workspace` and its own
//! `/artifacts/<agent>` hold together, measured on the host by the controller.
//!
//! - A watcher measures every agent's two directories every [`MEASURE_EVERY`]; each
//!   measurement visits at most [`MAX_ENTRIES`] entries per agent (bounded cost; a tree larger
//!   than that counts as what was visited, and a warning is logged). It counts allocated
//!   blocks (what the host's disk really holds: `fallocate` counts, a sparse file's holes do
//!   not), each hard-linked file once, never following a link, and opens every directory from
//!   its parent's fd with `O_NOFOLLOW`, so a container that swaps a directory for a link cannot
//!   send the controller's walk anywhere else on the host.
//! - While an agent is over its quota, its runner-side tool calls fail with "disk quota
//!   exceeded (N of M used)" (a `file.patch` that only deletes is still allowed, so the agent
//!   can free space), and the crossing is recorded as `agent.quota_exceeded`; when a later
//!   measurement finds it under again, `agent.quota_ok`.
//! - A `file.write` or `file.patch` that would take the agent over fails before it runs, with
//!   the same message; what it adds is counted at once, until the next measurement replaces the
//!   estimate with the truth.
//!
//! This is detection, not a hard limit: a shell command can write as fast as the disk allows
//! between two measurements, and it is not stopped mid-write. A hard limit needs the kernel: a
//! loop-mounted filesystem image per agent, or XFS project quotas on the host directory.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::backend::spec::{artifacts_dir, workspace_dir};
use crate::config::ProjectConfig;
use crate::store::{Event, Store};
use crate::toolpack::ToolError;

/// How often the watcher measures.
pub const MEASURE_EVERY: Duration = Duration::from_secs(2);
/// Entries one measurement of one agent visits at most.
pub const MAX_ENTRIES: u64 = 200_000;

/// Every agent's quota and last measurement.
pub struct DiskQuotas {
    limit: u64,
    agents: HashMap<String, AgentDisk>,
}

struct AgentDisk {
    /// `/workspace` and `/artifacts/<agent>` on the host.
    dirs: [PathBuf; 2],
    artifacts_shown: String,
    usage: Mutex<Usage>,
}

#[derive(Clone, Copy, Default)]
struct Usage {
    used: u64,
    over: bool,
}

impl DiskQuotas {
    /// The quotas of a project's agents, `backend.docker.diskQuota` each.
    pub fn new(config: &ProjectConfig) -> DiskQuotas {
        let agents = config
            .agents
            .iter()
            .map(|a| {
                let disk = AgentDisk {
                    dirs: [workspace_dir(&config.root, &a.id), artifacts_dir(&config.root, &a.id)],
                    artifacts_shown: format!("/artifacts/{}", a.id),
                    usage: Mutex::new(Usage::default()),
                };
                (a.id.clone(), disk)
            })
            .collect();
        DiskQuotas { limit: config.backend.docker.disk_quota_bytes, agents }
    }

    /// Whether `agent` may run the runner-side `tool` with `input` now.
    pub fn admit(&self, agent: &str, tool: &str, input: &Value) -> Result<(), ToolError> {
        let Some(disk) = self.agents.get(agent) else { return Ok(()) };
        let mut usage = disk.usage.lock().unwrap_or_else(|e| e.into_inner());
        if only_deletes(tool, input) {
            return Ok(());
        }
        if usage.over {
            return Err(ToolError::Failed(format!(
                "{}: free space in /workspace or {} (file.patch deletions still run)",
                self.exceeded(usage.used),
                disk.artifacts_shown
            )));
        }
        let adds = disk.bytes_added(tool, input);
        if adds > 0 {
            if usage.used.saturating_add(adds) > self.limit {
                return Err(ToolError::Failed(format!(
                    "{}: writing {} more would go over",
                    self.exceeded(usage.used),
                    size(adds)
                )));
            }
            usage.used += adds;
        }
        Ok(())
    }

    /// Measure every agent, record the crossings, until `stop`.
    pub async fn watch(self: std::sync::Arc<Self>, store: Store, stop: CancellationToken) {
        loop {
            let quotas = self.clone();
            let measured = tokio::task::spawn_blocking(move || {
                quotas.agents.iter().map(|(agent, disk)| (agent.clone(), disk.measure())).collect::<Vec<_>>()
            });
            let measured = tokio::select! {
                _ = stop.cancelled() => return,
                measured = measured => measured.unwrap_or_default(),
            };
            for (agent, used) in measured {
                if let Some(event) = self.update(&agent, used)
                    && let Err(e) = store.append_event(event)
                {
                    tracing::warn!("recording the disk quota of {agent}: {e}");
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(MEASURE_EVERY) => {}
            }
        }
    }

    /// Take a measurement; the event when it crosses the quota either way.
    fn update(&self, agent: &str, used: u64) -> Option<Event> {
        let disk = self.agents.get(agent)?;
        let mut usage = disk.usage.lock().unwrap_or_else(|e| e.into_inner());
        let over = used > self.limit;
        let crossed = over != usage.over;
        *usage = Usage { used, over };
        let (agent_id, used_bytes, limit_bytes) = (agent.to_string(), used, self.limit);
        match (crossed, over) {
            (false, _) => None,
            (true, true) => {
                tracing::warn!("{agent}: {}", self.exceeded(used));
                Some(Event::AgentQuotaExceeded { agent_id, used_bytes, limit_bytes })
            }
            (true, false) => Some(Event::AgentQuotaOk { agent_id, used_bytes, limit_bytes }),
        }
    }

    fn exceeded(&self, used: u64) -> String {
        format!("disk quota exceeded ({} of {} used)", size(used), size(self.limit))
    }
}

impl AgentDisk {
    /// What a write adds at most: a `file.write`'s content less the file it replaces, a
    /// `file.patch`'s added content and replacement text.
    fn bytes_added(&self, tool: &str, input: &Value) -> u64 {
        let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map_or(0, |s| s.len() as u64);
        match tool {
            "file.write" => {
                let replaced = input.get("path").and_then(Value::as_str).and_then(|p| self.host_path(p));
                let old = replaced.and_then(|p| std::fs::symlink_metadata(p).ok()).map_or(0, |m| m.len());
                text(input, "content").saturating_sub(old)
            }
            "file.patch" => input
                .get("operations")
                .and_then(Value::as_array)
                .map_or(0, |ops| ops.iter().map(|op| text(op, "content") + text(op, "replace")).sum()),
            _ => 0,
        }
    }

    /// Where a plain tool path (no `..`) of the agent's write roots is on the host.
    fn host_path(&self, path: &str) -> Option<PathBuf> {
        let path = if path.starts_with('/') { path.to_string() } else { format!("/workspace/{path}") };
        if path.split('/').any(|p| p == "..") {
            return None;
        }
        let [workspace, artifacts] = &self.dirs;
        let below = |root: &str| path.strip_prefix(root).and_then(|r| r.strip_prefix('/'));
        below("/workspace")
            .map(|r| workspace.join(r))
            .or_else(|| below(&self.artifacts_shown).map(|r| artifacts.join(r)))
    }

    fn measure(&self) -> u64 {
        self.dirs.iter().map(|dir| measure(dir)).sum()
    }
}

/// A `file.patch` whose operations are all deletions frees space and is always allowed.
fn only_deletes(tool: &str, input: &Value) -> bool {
    tool == "file.patch"
        && input.get("operations").and_then(Value::as_array).is_some_and(|ops| {
            !ops.is_empty() && ops.iter().all(|op| op.get("op").and_then(Value::as_str) == Some("delete"))
        })
}

/// Allocated bytes under `dir`, as the module header says.
fn measure(dir: &Path) -> u64 {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let Ok(root) = rustix::fs::openat(CWD, dir, flags, Mode::empty()) else { return 0 };
    let allocated = |st: &rustix::fs::Stat| (st.st_blocks as u64).saturating_mul(512);
    let mut total = rustix::fs::fstat(&root).map_or(0, |st| allocated(&st));
    let mut linked = HashSet::new();
    let mut budget = MAX_ENTRIES;
    // Directories still to list, by their names from `root`: at most two fds are open at a time.
    let mut pending: Vec<Vec<CString>> = vec![Vec::new()];
    while let Some(path) = pending.pop() {
        let Some(fd) = open_below(&root, &path) else { continue };
        let Ok(entries) = rustix::fs::Dir::read_from(&fd) else { continue };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            if budget == 0 {
                tracing::warn!(
                    "{}: more than {MAX_ENTRIES} entries; the disk quota counts the first ones",
                    dir.display()
                );
                return total;
            }
            budget -= 1;
            let Ok(st) = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) else { continue };
            let kind = FileType::from_raw_mode(st.st_mode);
            if kind != FileType::Directory && st.st_nlink > 1 && !linked.insert((st.st_dev, st.st_ino)) {
                continue;
            }
            total = total.saturating_add(allocated(&st));
            if kind == FileType::Directory {
                let mut child = path.clone();
                child.push(name.to_owned());
                pending.push(child);
            }
        }
    }
    total
}

/// The directory at `path` below `root`, each step opened without following a link.
fn open_below(root: &OwnedFd, path: &[CString]) -> Option<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut fd = rustix::fs::openat(root, c".", flags, Mode::empty()).ok()?;
    for name in path {
        fd = rustix::fs::openat(&fd, name.as_c_str(), flags, Mode::empty()).ok()?;
    }
    Some(fd)
}

/// `12.3 MiB`.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(8 << 20), "8.0 MiB");
        assert_eq!(size(5 << 30), "5.0 GiB");
    }

    #[test]
    fn only_a_patch_of_deletions_frees_space() {
        let delete = json!({"operations": [{"op": "delete", "path": "a"}]});
        assert!(only_deletes("file.patch", &delete));
        assert!(!only_deletes("file.patch", &json!({"operations": [{"op": "delete", "path": "a"}, {"op": "add"}]})));
        assert!(!only_deletes("file.patch", &json!({"operations": []})));
        assert!(!only_deletes("shell.exec", &delete));
    }

    #[test]
    fn measuring_counts_blocks_once_and_follows_no_link() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/b/data"), vec![1u8; 1 << 20]).unwrap();
        std::fs::hard_link(dir.join("a/b/data"), dir.join("a/again")).unwrap();
        std::os::unix::fs::symlink("/usr", dir.join("usr")).unwrap();
        let used = measure(dir);
        assert!((1 << 20..(1 << 20) + (64 << 10)).contains(&used), "{used}");
    }
}
