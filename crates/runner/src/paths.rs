//! Paths as tools see them (`/workspace/...`, `/artifacts/...`, `/mnt/...`) and where they are
//! on disk. In a container the two are the same; the process backend and tests map the three
//! roots to other directories.
//!
//! A tool path is normalized lexically first (relative paths join `/workspace`; `..` stops at
//! `/`), checked against the tool's allowed roots, mapped to disk, and then every symlink along
//! it is resolved — dangling ones included — before the result is checked against the allowed
//! roots again. So neither `..` nor a link (`/workspace/etc -> /etc`) can leave them.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

pub const WORKSPACE: &str = "/workspace";
pub const ARTIFACTS: &str = "/artifacts";
pub const MNT: &str = "/mnt";

/// Linux's own limit on links followed in one lookup.
const MAX_LINK_HOPS: usize = 40;

/// The directories behind `/workspace`, `/artifacts` and `/mnt`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Roots {
    pub workspace: PathBuf,
    pub artifacts: PathBuf,
    pub mnt: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Roots { workspace: WORKSPACE.into(), artifacts: ARTIFACTS.into(), mnt: MNT.into() }
    }
}

/// A checked path: as tools show it, and on disk with every link resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolPath {
    pub shown: String,
    pub real: PathBuf,
}

/// Why a path was refused: outside the roots (with the path as shown), or not resolvable.
#[derive(Debug)]
pub enum PathRefusal {
    OutsideRoots(String),
    Unresolvable(String),
}

impl Roots {
    /// Absolute, normalized tool path for `input` (relative paths resolve under `/workspace`).
    pub fn normalize(input: &str) -> String {
        let joined = if input.starts_with('/') { input.to_string() } else { format!("{WORKSPACE}/{input}") };
        let mut parts: Vec<&str> = Vec::new();
        for part in joined.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    parts.pop();
                }
                other => parts.push(other),
            }
        }
        format!("/{}", parts.join("/"))
    }

    /// Where a normalized tool path is on disk, if it is under one of the three roots.
    pub fn to_disk(&self, shown: &str) -> Option<PathBuf> {
        [(WORKSPACE, &self.workspace), (ARTIFACTS, &self.artifacts), (MNT, &self.mnt)].into_iter().find_map(
            |(root, dir)| {
                let rest = strip_root(shown, root)?;
                Some(if rest.is_empty() { dir.clone() } else { dir.join(rest) })
            },
        )
    }

    /// Check `input` against `allowed` tool roots (e.g. `/workspace`, `/artifacts/pm`).
    pub fn resolve(&self, input: &str, allowed: &[&str]) -> Result<ToolPath, PathRefusal> {
        let shown = Roots::normalize(input);
        let outside = || PathRefusal::OutsideRoots(shown.clone());
        if !allowed.iter().any(|root| strip_root(&shown, root).is_some()) {
            return Err(outside());
        }
        let on_disk = self.to_disk(&shown).ok_or_else(outside)?;
        let real = resolve_links(&on_disk).map_err(|why| PathRefusal::Unresolvable(format!("{why}: {shown}")))?;
        let inside = allowed.iter().filter_map(|root| self.to_disk(root)).any(|root_dir| {
            let root_real = resolve_links(&root_dir).unwrap_or(root_dir);
            real.starts_with(&root_real)
        });
        if !inside {
            return Err(outside());
        }
        Ok(ToolPath { shown, real })
    }
}

/// The part of `path` below `root` (`""` for the root itself), if it is below it.
fn strip_root<'a>(path: &'a str, root: &str) -> Option<&'a str> {
    let root = root.trim_end_matches('/');
    let rest = path.strip_prefix(root)?;
    if rest.is_empty() { Some("") } else { rest.strip_prefix('/') }
}

/// `path` with every symlink along it resolved, like `realpath -m`: components that do not
/// exist are kept as they are, but a link to a missing target is still followed.
pub fn resolve_links(path: &Path) -> Result<PathBuf, String> {
    let mut queue: VecDeque<OsString> = VecDeque::new();
    let mut resolved = PathBuf::from("/");
    let start = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_err(|e| e.to_string())?.join(path)
    };
    push_components(&mut queue, &start);
    let mut hops = 0;
    let mut missing = false;
    while let Some(part) = queue.pop_front() {
        if part == ".." {
            resolved.pop();
            continue;
        }
        let candidate = resolved.join(&part);
        if missing {
            resolved = candidate;
            continue;
        }
        match std::fs::symlink_metadata(&candidate) {
            Ok(meta) if meta.file_type().is_symlink() => {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err("Too many levels of symbolic links".into());
                }
                let target = std::fs::read_link(&candidate).map_err(|e| e.to_string())?;
                if target.is_absolute() {
                    resolved = PathBuf::from("/");
                }
                let mut rest = VecDeque::new();
                push_components(&mut rest, &target);
                rest.extend(queue.drain(..));
                queue = rest;
            }
            Ok(_) => resolved = candidate,
            Err(_) => {
                missing = true;
                resolved = candidate;
            }
        }
    }
    Ok(resolved)
}

fn push_components(queue: &mut VecDeque<OsString>, path: &Path) {
    for component in path.components() {
        match component {
            Component::Normal(part) => queue.push_back(part.to_os_string()),
            Component::ParentDir => queue.push_back("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_never_climbs_above_root() {
        assert_eq!(Roots::normalize("a/b"), "/workspace/a/b");
        assert_eq!(Roots::normalize("../etc/passwd"), "/etc/passwd");
        assert_eq!(Roots::normalize("/workspace/../../x"), "/x");
        assert_eq!(Roots::normalize("/workspace//a/./b/"), "/workspace/a/b");
        assert_eq!(Roots::normalize("."), "/workspace");
    }

    #[test]
    fn roots_match_whole_components() {
        assert_eq!(strip_root("/workspace", "/workspace"), Some(""));
        assert_eq!(strip_root("/workspace/a", "/workspace"), Some("a"));
        assert_eq!(strip_root("/workspaces/a", "/workspace"), None);
        assert_eq!(strip_root("/artifacts/pm/x", "/artifacts/pm"), Some("x"));
        assert_eq!(strip_root("/artifacts/pmx", "/artifacts/pm"), None);
    }
}
