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
//! - What a call does to the disk is what its tool declares (`effects.disk` in the manifest,
//!   `toolpack::effects`): reads, calls that free space (`file.delete`, `file.move`, a
//!   `file.patch` or `file.edit` that removes more than it adds, a `shell.exec` line that only
//!   runs `rm`/`rmdir`/`unlink`), writes of texts from the input, or — for anything that
//!   declares nothing, such as local packs' tools — "may add".
//! - While an agent is over its quota, its runner-side calls that may add data fail with "disk
//!   quota exceeded (N of M used)"; reads and calls that free space still run, so the agent can
//!   look for and remove what filled it. The crossing is recorded as `agent.quota_exceeded`;
//!   when a later measurement finds it under again, `agent.quota_ok`.
//! - A write (`file.write`, `file.patch`, `file.edit`) that would take the agent over fails
//!   before it runs, with the same message; what it adds is counted at once, until the next
//!   measurement replaces the estimate with the truth.
//!
//! The runner limits what the agent's processes can write in the meantime (`RLIMIT_FSIZE`, and
//! stopping its background commands once over: `suzumio_runner::quota`); this watcher decides
//! which calls the controller still lets through.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use crate::disk::size;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::backend::spec::{artifacts_dir, workspace_dir};
use crate::permissions::shell;
use crate::project::Project;
use crate::store::{Event, Store};
use crate::toolpack::effects::text_bytes;
use crate::toolpack::{DiskEffect, ToolEffects, ToolError};

/// How often the watcher measures.
pub const MEASURE_EVERY: Duration = Duration::from_secs(1);
/// Entries one measurement of one agent visits at most.
pub const MAX_ENTRIES: u64 = 200_000;

/// Every agent's quota and last measurement.
pub struct DiskQuotas {
    limit: u64,
    agents: HashMap<String, AgentDisk>,
    /// Every tool's declared effects, by name.
    effects: HashMap<String, ToolEffects>,
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
    pub fn new(project: &Project) -> DiskQuotas {
        let config = &project.config;
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
        let effects = project.registry.tools().map(|(_, t)| (t.name.clone(), t.effects.clone())).collect();
        DiskQuotas { limit: config.backend.docker.disk_quota_bytes, agents, effects }
    }

    /// Every agent's quota in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Whether `agent` may run the runner-side `tool` with `input` now.
    pub fn admit(&self, agent: &str, tool: &str, input: &Value) -> Result<(), ToolError> {
        let Some(disk) = self.agents.get(agent) else { return Ok(()) };
        let mut usage = disk.usage.lock().unwrap_or_else(|e| e.into_inner());
        let change = match self.effects.get(tool) {
            Some(effects) => disk.change(effects, input),
            None => Change::MayAdd,
        };
        match change {
            Change::Nothing | Change::Frees => Ok(()),
            _ if usage.over => Err(ToolError::Failed(format!(
                "{}: free space in /workspace or {} first (reads, file.delete, file.move, shrinking edits \
                 and `rm` still run)",
                self.exceeded(usage.used),
                disk.artifacts_shown
            ))),
            Change::MayAdd => Ok(()),
            Change::Adds(adds) => {
                if usage.used.saturating_add(adds) > self.limit {
                    return Err(ToolError::Failed(format!(
                        "{}: writing {} more would go over",
                        self.exceeded(usage.used),
                        size(adds)
                    )));
                }
                usage.used += adds;
                Ok(())
            }
        }
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

/// What one call does to an agent's disk use, as far as can be told before it runs.
#[derive(Debug, PartialEq)]
enum Change {
    /// A read.
    Nothing,
    /// Never adds.
    Frees,
    /// Adds at most this many bytes.
    Adds(u64),
    /// Unknown: may add anything.
    MayAdd,
}

/// Programs that only remove files: a command line of nothing else frees space.
const DELETING_PROGRAMS: &[&str] = &["rm", "rmdir", "unlink"];

impl AgentDisk {
    /// What a call of a tool with these effects does: a write's texts less what it removes
    /// and the file it replaces, a command line that only deletes frees.
    fn change(&self, effects: &ToolEffects, input: &Value) -> Change {
        match &effects.disk {
            DiskEffect::None => Change::Nothing,
            DiskEffect::Frees => Change::Frees,
            DiskEffect::MayAdd => Change::MayAdd,
            DiskEffect::Command => {
                let only_deletes = effects.command_line(input).map(shell::commands).is_some_and(|parsed| {
                    parsed.is_ok_and(|commands| {
                        !commands.is_empty()
                            && commands.iter().all(|c| {
                                c.exact
                                    && !c.wrapper
                                    && c.argv
                                        .first()
                                        .is_some_and(|p| DELETING_PROGRAMS.contains(&p.rsplit('/').next().unwrap_or(p)))
                            })
                    })
                });
                if only_deletes { Change::Frees } else { Change::MayAdd }
            }
            DiskEffect::Writes { adds, removes, replaces } => {
                let old = replaces
                    .as_deref()
                    .and_then(|p| input.pointer(p))
                    .and_then(Value::as_str)
                    .and_then(|p| self.host_path(p))
                    .and_then(|p| std::fs::symlink_metadata(p).ok())
                    .map_or(0, |m| m.len());
                let added = text_bytes(input, adds);
                let removed = text_bytes(input, removes).saturating_add(old);
                if added > removed { Change::Adds(added - removed) } else { Change::Frees }
            }
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

/// Allocated bytes under `dir`, as the module header says.
fn measure(dir: &Path) -> u64 {
    let measured = crate::disk::allocated(dir, MAX_ENTRIES);
    if !measured.complete {
        tracing::warn!("{}: more than {MAX_ENTRIES} entries; the disk quota counts the first ones", dir.display());
    }
    measured.bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn effects(tool: &str) -> ToolEffects {
        use crate::config::BuiltinPack;
        [BuiltinPack::Core, BuiltinPack::Shell]
            .into_iter()
            .flat_map(|p| crate::toolpack::builtin::manifest(p).expect("built-in manifest").tools)
            .find(|t| t.name == tool)
            .map(|t| t.effects)
            .expect("a built-in tool")
    }

    /// What each built-in call does to the disk, as its manifest declares it.
    #[test]
    fn calls_that_free_space_are_told_from_calls_that_add() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("old"), vec![b'x'; 10]).unwrap();
        let disk = AgentDisk {
            dirs: [tmp.path().to_path_buf(), tmp.path().join("artifacts")],
            artifacts_shown: "/artifacts/a".into(),
            usage: Mutex::new(Usage::default()),
        };
        let change = |tool: &str, input: Value| disk.change(&effects(tool), &input);
        let delete = json!({"operations": [{"op": "delete", "path": "a"}]});
        assert_eq!(change("file.patch", delete), Change::Frees);
        let add = json!({"operations": [{"op": "delete", "path": "a"}, {"op": "add", "path": "b", "content": "abc"}]});
        assert_eq!(change("file.patch", add), Change::Adds(3));
        assert_eq!(change("file.edit", json!({"path": "f", "oldText": "a", "newText": "abcd"})), Change::Adds(3));
        assert_eq!(change("file.edit", json!({"path": "f", "oldText": "abcd", "newText": ""})), Change::Frees);
        assert_eq!(change("file.write", json!({"path": "old", "content": "y".repeat(25)})), Change::Adds(15));
        assert_eq!(change("file.write", json!({"path": "old", "content": "y"})), Change::Frees);
        assert_eq!(change("file.delete", json!({"path": "old"})), Change::Frees);
        assert_eq!(change("file.move", json!({"from": "old", "to": "/tmp/x"})), Change::Frees);
        assert_eq!(change("file.read", json!({"path": "old"})), Change::Nothing);
        assert_eq!(change("shell.stop", json!({"id": "cmd_1"})), Change::Nothing);
        assert_eq!(change("shell.exec", json!({"command": "rm -rf big && rmdir d"})), Change::Frees);
        assert_eq!(change("shell.exec", json!({"command": "/bin/rm big"})), Change::Frees);
        for adds in ["rm big; dd if=/dev/zero of=x", "rm $(echo x)", "timeout 5 rm x", "echo hi", "sh -c 'rm x'"] {
            assert_eq!(change("shell.exec", json!({ "command": adds })), Change::MayAdd, "{adds}");
        }
    }
}
