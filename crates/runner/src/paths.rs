//! Paths as tools see them (`/workspace/...`, `/artifacts/...`, `/mnt/...`) and how the file
//! tools reach them on disk without a race. In a container the two are the same; the process
//! backend and tests map the three roots to other directories.
//!
//! A tool path is normalized lexically first (relative paths join `/workspace`; `..` stops at
//! `/`) and checked against the tool's allowed roots. It is then never handed to the kernel as
//! a string to walk from `/`: it is opened from a directory fd of its root, so what a
//! concurrent `rename` or `symlink` in a shared directory changes can redirect a lookup only to
//! somewhere else beneath that root.
//!
//! - [`Roots::open`] (read, list, the current content for a patch): first `openat2` from the
//!   root's fd with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`, so the kernel
//!   follows links inside the root and refuses anything that leaves it. When it refuses (a link
//!   to another root, a mount below the root, a kernel without `openat2`), the walk below.
//! - [`Roots::locate`] (write, patch, create directories, delete) and the fallback: a walk one
//!   component at a time, each opened with `O_PATH | O_NOFOLLOW` relative to the fd of the one
//!   before. A component that is a link is read through that same fd (`readlinkat`), so the
//!   link that is followed is the one that was found; its target is taken as a tool path (an
//!   absolute target is mapped back from disk), checked against the allowed roots again, and the
//!   walk starts over from that root's fd. So links inside a root, and links from one allowed
//!   root into another (`/workspace/qa -> /artifacts/qa`), keep working; a link anywhere else
//!   (`/proc/1`, `/etc`, `../../..`) is refused, whenever it was swapped in.
//! - Writes create a temporary file in the opened parent directory and `renameat` it to its
//!   name in the same directory; directories are made with `mkdirat` and entered with
//!   `O_NOFOLLOW`; deletions are `unlinkat` in the opened parent.
//!
//! What cannot be made race-free is refused: a component that is swapped between a directory
//! and a link while it is walked either resolves as one or the other, both checked; a final
//! component that turns into a link between the check and the open fails the open (`ELOOP`) and
//! is walked again, at most [`MAX_LINK_HOPS`] times.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

pub const WORKSPACE: &str = "/workspace";
pub const ARTIFACTS: &str = "/artifacts";
pub const MNT: &str = "/mnt";

/// Linux's own limit on links followed in one lookup.
pub const MAX_LINK_HOPS: usize = 40;

/// How a file or directory is opened for reading: never waiting on a FIFO, never becoming a
/// controlling terminal.
const READ_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::NONBLOCK).union(OFlags::NOCTTY).union(OFlags::CLOEXEC);
/// A step of the walk: whatever the name is, a link included, without following it.
const STEP_FLAGS: OFlags = OFlags::PATH.union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);
const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS).union(ResolveFlags::NO_XDEV);

/// Set when the kernel (or a seccomp filter) does not offer `openat2`: the walk does it all.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

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

/// Why a path was refused: outside the roots (with the path as shown), not resolvable (the
/// whole message), or the filesystem's own error.
#[derive(Debug)]
pub enum PathRefusal {
    OutsideRoots(String),
    Unresolvable(String),
    Io(std::io::Error),
}

impl From<Errno> for PathRefusal {
    fn from(errno: Errno) -> Self {
        PathRefusal::Io(errno.into())
    }
}

/// An existing file or directory, opened for reading beneath an allowed root.
#[derive(Debug)]
pub struct Opened {
    /// The path as the caller gave it, normalized.
    pub shown: String,
    pub file: std::fs::File,
    pub meta: std::fs::Metadata,
}

/// Where a path to create, replace or delete is: the deepest directory on its way that exists,
/// opened beneath an allowed root with every link before it resolved, and what lies below it.
#[derive(Debug)]
pub struct Location {
    /// The path as the caller gave it, normalized.
    pub shown: String,
    /// `dir` as a tool path (links resolved).
    dir_shown: String,
    /// An `O_PATH` fd; every later call names a single component relative to it.
    pub dir: OwnedFd,
    /// Components below `dir`, the final name last: one when the parent exists (the name itself
    /// may or may not exist, and is not a link), more when directories are missing, none when
    /// the path is a root itself.
    pub rest: Vec<String>,
    /// Why the walk stopped before the final name: `ENOENT`, or `ENOTDIR` when a component on
    /// the way is a file.
    stopped: Errno,
}

impl Location {
    /// The final name, when the parent directory exists.
    pub fn name(&self) -> Option<&str> {
        match self.rest.as_slice() {
            [name] => Some(name),
            _ => None,
        }
    }

    /// The path with every link resolved: equal for two inputs that name the same file.
    pub fn resolved(&self) -> String {
        std::iter::once(self.dir_shown.as_str())
            .chain(self.rest.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("/")
    }

    /// What the final name is (not following a link), if it exists.
    pub fn file_type(&self) -> Option<FileType> {
        match self.rest.as_slice() {
            [] => Some(FileType::Directory),
            [name] => rustix::fs::statat(&self.dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
                .ok()
                .map(|s| FileType::from_raw_mode(s.st_mode)),
            _ => None,
        }
    }

    /// The directory this location names, when it exists: opened `O_PATH`, not through a link.
    pub fn open_dir(&self) -> std::io::Result<OwnedFd> {
        match self.rest.as_slice() {
            [] => Ok(self.dir.try_clone()?),
            [name] => Ok(rustix::fs::openat(&self.dir, name.as_str(), STEP_FLAGS | OFlags::DIRECTORY, Mode::empty())?),
            _ => Err(self.stopped.into()),
        }
    }

    /// The error for a path whose parent does not exist (or is not a directory).
    pub fn missing_error(&self) -> std::io::Error {
        self.stopped.into()
    }

    /// Create the missing directories and return the parent directory's fd. Each one made is
    /// pushed to `created` (its parent's fd and name), so a caller can take them back.
    pub fn create_parents(&self, created: &mut Vec<(OwnedFd, String)>) -> std::io::Result<OwnedFd> {
        let mut dir = self.dir.try_clone()?;
        let Some((_, parents)) = self.rest.split_last() else { return Err(Errno::ISDIR.into()) };
        for part in parents {
            match rustix::fs::mkdirat(&dir, part.as_str(), Mode::from_raw_mode(0o777)) {
                Ok(()) => created.push((dir.try_clone()?, part.clone())),
                Err(Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            // Never through a link someone put there meanwhile.
            dir = rustix::fs::openat(&dir, part.as_str(), STEP_FLAGS | OFlags::DIRECTORY, Mode::empty())?;
        }
        Ok(dir)
    }
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
        self.table().into_iter().find_map(|(root, dir)| {
            let rest = strip_root(shown, root)?;
            Some(if rest.is_empty() { dir.to_path_buf() } else { dir.join(rest) })
        })
    }

    /// The tool path of a place on disk (an absolute link target), if it is under a root.
    pub(crate) fn tool_path_of(&self, target: &Path) -> Option<String> {
        self.table().into_iter().find_map(|(root, dir)| {
            let canonical = std::fs::canonicalize(dir).ok();
            let rest = target.strip_prefix(dir).ok().or_else(|| target.strip_prefix(canonical.as_deref()?).ok())?;
            Some(Roots::normalize(&format!("{root}/{}", rest.to_string_lossy())))
        })
    }

    fn table(&self) -> [(&'static str, &Path); 3] {
        [(WORKSPACE, &self.workspace), (ARTIFACTS, &self.artifacts), (MNT, &self.mnt)]
    }

    /// Open the existing file or directory `input` for reading, beneath one of `allowed` (tool
    /// roots such as `/workspace` or `/artifacts/pm`), following links as the module header says.
    pub fn open(&self, input: &str, allowed: &[&str]) -> Result<Opened, PathRefusal> {
        let shown = Roots::normalize(input);
        let (root, rest) = allowed_root(&shown, allowed).ok_or_else(|| PathRefusal::OutsideRoots(shown.clone()))?;
        if !rest.is_empty() && !NO_OPENAT2.load(Ordering::Relaxed) {
            let base = self.open_root(root)?;
            match rustix::fs::openat2(&base, rest, READ_FLAGS, Mode::empty(), BENEATH) {
                Ok(fd) => return opened(shown, fd),
                Err(Errno::NOSYS | Errno::PERM) => NO_OPENAT2.store(true, Ordering::Relaxed),
                // Leaves the root (maybe into another allowed one), crosses a mount, meets a
                // magic link, or the kernel asks to retry: the walk decides.
                Err(Errno::XDEV | Errno::LOOP | Errno::AGAIN | Errno::INVAL) => {}
                Err(e) => return Err(e.into()),
            }
        }
        for _ in 0..MAX_LINK_HOPS {
            let location = self.walk(&shown, allowed)?;
            let fd = match location.rest.as_slice() {
                [] => rustix::fs::openat(&location.dir, ".", READ_FLAGS | OFlags::DIRECTORY, Mode::empty()),
                [name] => {
                    rustix::fs::openat(&location.dir, name.as_str(), READ_FLAGS | OFlags::NOFOLLOW, Mode::empty())
                }
                _ => return Err(location.stopped.into()),
            };
            match fd {
                Ok(fd) => return opened(shown, fd),
                // It became a link after the walk looked at it: walk again.
                Err(Errno::LOOP) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(too_many_links(&shown))
    }

    /// Locate `input`, to be created, replaced or deleted beneath one of `allowed`: every link
    /// on the way is followed, a link in the final component too (even a dangling one), and
    /// each target checked against `allowed` again.
    pub fn locate(&self, input: &str, allowed: &[&str]) -> Result<Location, PathRefusal> {
        self.walk(&Roots::normalize(input), allowed)
    }

    /// The walk of the module header, for a normalized path.
    fn walk(&self, shown: &str, allowed: &[&str]) -> Result<Location, PathRefusal> {
        let outside = || PathRefusal::OutsideRoots(shown.to_string());
        let mut path = shown.to_string();
        let mut hops = 0;
        'start: loop {
            let (root, rest) = allowed_root(&path, allowed).ok_or_else(outside)?;
            let mut dir = self.open_root(root)?;
            let mut dir_shown = root.trim_end_matches('/').to_string();
            let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
            let location = |dir, dir_shown, from: usize, stopped| Location {
                shown: shown.to_string(),
                dir_shown,
                dir,
                rest: parts[from..].iter().map(|p| p.to_string()).collect(),
                stopped,
            };
            for (i, part) in parts.iter().enumerate() {
                let child = match rustix::fs::openat(&dir, *part, STEP_FLAGS, Mode::empty()) {
                    Ok(fd) => fd,
                    Err(Errno::NOENT) => return Ok(location(dir, dir_shown, i, Errno::NOENT)),
                    Err(e) => return Err(e.into()),
                };
                let kind = FileType::from_raw_mode(rustix::fs::fstat(&child)?.st_mode);
                if kind == FileType::Symlink {
                    hops += 1;
                    if hops > MAX_LINK_HOPS {
                        return Err(too_many_links(shown));
                    }
                    let target = rustix::fs::readlinkat(&child, "", Vec::new())?;
                    let target = Path::new(OsStr::from_bytes(target.as_bytes()));
                    let joined = if target.is_absolute() {
                        self.tool_path_of(target).ok_or_else(outside)?
                    } else {
                        format!("{dir_shown}/{}", target.to_string_lossy())
                    };
                    path = Roots::normalize(
                        &[joined.as_str()]
                            .into_iter()
                            .chain(parts[i + 1..].iter().copied())
                            .collect::<Vec<_>>()
                            .join("/"),
                    );
                    continue 'start;
                }
                if i + 1 == parts.len() {
                    return Ok(location(dir, dir_shown, i, Errno::NOENT));
                }
                if kind != FileType::Directory {
                    return Ok(location(dir, dir_shown, i, Errno::NOTDIR));
                }
                dir = child;
                dir_shown = format!("{dir_shown}/{part}");
            }
            return Ok(location(dir, dir_shown, parts.len(), Errno::NOENT));
        }
    }

    /// An `O_PATH` fd of an allowed tool root: the configured directory of its top-level root
    /// (trusted, like the mounts), then each component below it (`pm` of `/artifacts/pm`)
    /// without following links.
    fn open_root(&self, root: &str) -> Result<OwnedFd, PathRefusal> {
        let (top, dir) = self
            .table()
            .into_iter()
            .find(|(top, _)| strip_root(root, top).is_some())
            .ok_or_else(|| PathRefusal::OutsideRoots(root.to_string()))?;
        let mut fd =
            rustix::fs::openat(CWD, dir, STEP_FLAGS.difference(OFlags::NOFOLLOW) | OFlags::DIRECTORY, Mode::empty())?;
        for part in strip_root(root, top).unwrap_or_default().split('/').filter(|p| !p.is_empty()) {
            fd = rustix::fs::openat(&fd, part, STEP_FLAGS | OFlags::DIRECTORY, Mode::empty())?;
        }
        Ok(fd)
    }
}

/// Open a subdirectory `name` of `dir` for listing, never through a link.
pub fn open_child_dir(dir: impl AsFd, name: impl rustix::path::Arg) -> std::io::Result<OwnedFd> {
    Ok(rustix::fs::openat(dir, name, READ_FLAGS | OFlags::DIRECTORY | OFlags::NOFOLLOW, Mode::empty())?)
}

/// Open the entry `name` of `dir` for reading, never through a link (`ELOOP` if it is one).
pub fn open_child_file(dir: impl AsFd, name: impl rustix::path::Arg) -> std::io::Result<std::fs::File> {
    Ok(rustix::fs::openat(dir, name, READ_FLAGS | OFlags::NOFOLLOW, Mode::empty())?.into())
}

fn opened(shown: String, fd: OwnedFd) -> Result<Opened, PathRefusal> {
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(PathRefusal::Io)?;
    Ok(Opened { shown, file, meta })
}

fn too_many_links(shown: &str) -> PathRefusal {
    PathRefusal::Unresolvable(format!("Too many levels of symbolic links: {shown}"))
}

/// The first of `allowed` that `path` is under, and the part of `path` below it.
fn allowed_root<'a, 'p>(path: &'p str, allowed: &[&'a str]) -> Option<(&'a str, &'p str)> {
    allowed.iter().find_map(|root| Some((*root, strip_root(path, root)?)))
}

/// The part of `path` below `root` (`""` for the root itself), if it is below it.
fn strip_root<'a>(path: &'a str, root: &str) -> Option<&'a str> {
    let root = root.trim_end_matches('/');
    let rest = path.strip_prefix(root)?;
    if rest.is_empty() { Some("") } else { rest.strip_prefix('/') }
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
