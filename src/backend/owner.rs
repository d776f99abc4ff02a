//! Who an agent's container runs as, and whether that user can write its workspace.
//!
//! A container runs as the owner of the project directory (uid and gid of `<root>`), so what a
//! user puts into `workspaces/<agent>/` (a cloned repository, a data set) is the agent's to edit,
//! what the agent writes is the user's on the host, and git sees a repository of its own user.
//! A project directory of root's keeps the runner user (uid 65534): uid 0 is never a
//! container's user, nor gid 0 its group. Docker with user namespaces or rootless maps uids, so
//! there too the containers keep 65534 (`DockerBackend` decides that, not this module).
//!
//! [`unwritable_in`] finds what that user could not change in a directory (not its own, and not
//! writable through its group or for everyone): `check` and `run` name such a workspace with the
//! `chown` that fixes it. This module only reads metadata; it changes nothing.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::backend::{RUNNER_GID, RUNNER_UID};
use crate::config::ProjectConfig;
use crate::config::diag::{Diagnostic, Diagnostics, display_path};
use crate::config::node::Loc;

/// How many entries of a workspace [`unwritable_in`] looks at, at most.
pub const SCAN_LIMIT: usize = 100_000;

/// A container's user and group on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunnerUser {
    pub uid: u32,
    pub gid: u32,
}

impl RunnerUser {
    /// The runner user of the images (`runner`, uid and gid 65534).
    pub const RUNNER: RunnerUser = RunnerUser { uid: RUNNER_UID, gid: RUNNER_GID };

    /// The owner of the project directory at `root`, or [`RunnerUser::RUNNER`] when root owns it
    /// (or it cannot be read).
    pub fn owner_of(root: &Path) -> RunnerUser {
        match std::fs::metadata(root) {
            Ok(meta) if meta.uid() != 0 => {
                RunnerUser { uid: meta.uid(), gid: if meta.gid() == 0 { RUNNER_GID } else { meta.gid() } }
            }
            _ => RunnerUser::RUNNER,
        }
    }

    /// Whether this user may change the entry `meta` describes: its own (it can chmod it), or
    /// writable (and for a directory searchable) through its group or for everyone.
    fn may_change(&self, meta: &std::fs::Metadata) -> bool {
        if meta.uid() == self.uid {
            return true;
        }
        let needed = if meta.is_dir() { 0o3 } else { 0o2 };
        let group = meta.gid() == self.gid && (meta.mode() >> 3) & needed == needed;
        group || meta.mode() & needed == needed
    }
}

impl std::fmt::Display for RunnerUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "uid {} gid {}", self.uid, self.gid)
    }
}

/// What a user cannot change in a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unwritable {
    /// Entries it cannot change, and entries looked at.
    pub count: usize,
    pub scanned: usize,
    /// The scan stopped at [`SCAN_LIMIT`] entries.
    pub truncated: bool,
    /// The first one found, its owner and its permission bits.
    pub example: PathBuf,
    pub owner: (u32, u32),
    pub mode: u32,
}

/// What `user` cannot change in `dir` (links not followed), or `None` when it may change all of
/// it (or `dir` does not exist). The directory itself does not count: the controller gives it to
/// the container's user when the container starts (`ContainerSpec::prepare_host`), so only what
/// a user put inside can stand in the agent's way.
pub fn unwritable_in(dir: &Path, user: RunnerUser) -> Option<Unwritable> {
    let mut stack: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries.filter_map(|e| e.ok()).map(|e| e.path()).collect(),
        Err(_) => return None,
    };
    stack.sort_by(|a, b| b.cmp(a));
    let (mut scanned, mut found): (usize, Option<Unwritable>) = (0, None);
    while let Some(path) = stack.pop() {
        if scanned == SCAN_LIMIT {
            if let Some(found) = &mut found {
                found.truncated = true;
            }
            break;
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        scanned += 1;
        if meta.file_type().is_symlink() {
            continue;
        }
        if !user.may_change(&meta) {
            match &mut found {
                Some(found) => found.count += 1,
                None => {
                    found = Some(Unwritable {
                        count: 1,
                        scanned: 0,
                        truncated: false,
                        example: path.clone(),
                        owner: (meta.uid(), meta.gid()),
                        mode: meta.mode() & 0o7777,
                    })
                }
            }
        }
        if meta.is_dir()
            && let Ok(entries) = std::fs::read_dir(&path)
        {
            let mut children: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
            // Depth first, in name order: the example is the same from run to run.
            children.sort_by(|a, b| b.cmp(a));
            stack.extend(children);
        }
    }
    found.map(|found| Unwritable { scanned, ..found })
}

/// A warning for each agent of `config` whose workspace has entries `user` (its containers'
/// user) cannot change, located at the workspace, with the `chown` that gives it to that user.
pub fn workspace_warnings(config: &ProjectConfig, user: RunnerUser) -> Vec<Diagnostic> {
    let mut warnings = Diagnostics::default();
    for agent in &config.agents {
        let dir = crate::backend::spec::workspace_dir(&config.root, &agent.id);
        let Some(found) = unwritable_in(&dir, user) else { continue };
        let of =
            if found.truncated { format!("the first {}", found.scanned) } else { format!("the {}", found.scanned) };
        let why = if user == RunnerUser::RUNNER && RunnerUser::owner_of(&config.root) == RunnerUser::RUNNER {
            "the runner user, as root owns the project directory (the containers of a project directory of \
             yours run as you)"
        } else {
            "the owner of the project directory"
        };
        let (owner_uid, owner_gid) = found.owner;
        let loc = Loc::file(std::sync::Arc::from(dir.as_path()));
        warnings.warning(
            Some(&loc),
            "",
            format!(
                "agent {} cannot change {} of {of} entries in its workspace (e.g. {}, owned by uid {owner_uid} gid \
                 {owner_gid}, mode {:o}): its container runs as {user}, {why}; fix, as root: chown -R {}:{} {}",
                agent.id,
                found.count,
                display_path(&found.example),
                found.mode,
                user.uid,
                user.gid,
                shell_word(&dir)
            ),
        );
    }
    warnings.warnings
}

/// `path` as a shell word (single-quoted unless it is plain).
pub fn shell_word(path: &Path) -> String {
    let text = path.to_string_lossy();
    if text.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+,:@".contains(c)) {
        text.into_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_directory_of_roots_keeps_the_runner_user_and_a_users_directory_runs_as_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        if nix::unistd::geteuid().is_root() {
            assert_eq!(RunnerUser::owner_of(dir.path()), RunnerUser::RUNNER);
            std::os::unix::fs::chown(dir.path(), Some(4321), Some(0)).unwrap();
            assert_eq!(RunnerUser::owner_of(dir.path()), RunnerUser { uid: 4321, gid: RUNNER_GID }, "never gid 0");
            std::os::unix::fs::chown(dir.path(), Some(4321), Some(4322)).unwrap();
            assert_eq!(RunnerUser::owner_of(dir.path()), RunnerUser { uid: 4321, gid: 4322 });
        }
        assert_eq!(RunnerUser::owner_of(&dir.path().join("missing")), RunnerUser::RUNNER);
    }

    #[test]
    fn what_is_neither_its_own_nor_shared_is_found_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let me = RunnerUser { uid: nix::unistd::geteuid().as_raw(), gid: nix::unistd::getegid().as_raw() };
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a"), "a").unwrap();
        std::fs::write(dir.path().join("b"), "b").unwrap();
        // Read-only files of its own (git's objects) are its to change: it may chmod them.
        std::fs::set_permissions(dir.path().join("b"), std::fs::Permissions::from_mode(0o444)).unwrap();
        assert_eq!(unwritable_in(dir.path(), me), None);

        let other = RunnerUser { uid: me.uid + 1000, gid: me.gid + 1000 };
        let found = unwritable_in(dir.path(), other).expect("another user may change none of it");
        assert_eq!((found.count, found.scanned, found.truncated), (3, 3, false), "the directory itself not counted");
        assert_eq!(found.example, dir.path().join("b"));
        // Shared for everyone, it is the other user's to change too.
        for path in [dir.path().to_path_buf(), dir.path().join("sub")] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        std::fs::set_permissions(dir.path().join("sub/a"), std::fs::Permissions::from_mode(0o666)).unwrap();
        let found = unwritable_in(dir.path(), other).expect("b is not shared");
        assert_eq!((found.count, found.example.clone(), found.mode), (1, dir.path().join("b"), 0o444));
        assert_eq!(unwritable_in(&dir.path().join("missing"), other), None);
    }

    #[test]
    fn paths_become_shell_words() {
        assert_eq!(shell_word(Path::new("/tmp/p/workspaces/a")), "/tmp/p/workspaces/a");
        assert_eq!(shell_word(Path::new("/tmp/my p/it's")), r"'/tmp/my p/it'\''s'");
    }
}
