//! What a directory tree holds on disk: the one measurement the controller's quota watcher
//! (`support::quota`) and the runner's quota limits (`suzumio_runner::quota`) both take.
//!
//! It counts allocated blocks (what the disk really holds: `fallocate` counts, a sparse file's
//! holes do not), each hard-linked file once, never following a link, and opens every directory
//! from its parent's fd with `O_NOFOLLOW`, so a tree that swaps a directory for a link cannot
//! send the walk anywhere else. A walk visits at most a given number of entries (bounded cost).

use std::collections::HashSet;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};

/// One measurement of one tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Measured {
    /// Allocated bytes of what was visited.
    pub bytes: u64,
    /// False when the tree had more entries than the walk could visit.
    pub complete: bool,
}

/// Allocated bytes under `dir`, visiting at most `max_entries` entries. A directory that
/// cannot be opened holds nothing.
pub fn allocated(dir: &Path, max_entries: u64) -> Measured {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let Ok(root) = rustix::fs::openat(CWD, dir, flags, Mode::empty()) else {
        return Measured { bytes: 0, complete: true };
    };
    let blocks = |st: &rustix::fs::Stat| (st.st_blocks as u64).saturating_mul(512);
    let mut total = rustix::fs::fstat(&root).map_or(0, |st| blocks(&st));
    let mut linked = HashSet::new();
    let mut budget = max_entries;
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
                return Measured { bytes: total, complete: false };
            }
            budget -= 1;
            let Ok(st) = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) else { continue };
            let kind = FileType::from_raw_mode(st.st_mode);
            if kind != FileType::Directory && st.st_nlink > 1 && !linked.insert((st.st_dev, st.st_ino)) {
                continue;
            }
            total = total.saturating_add(blocks(&st));
            if kind == FileType::Directory {
                let mut child = path.clone();
                child.push(name.to_owned());
                pending.push(child);
            }
        }
    }
    Measured { bytes: total, complete: true }
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
pub fn size(bytes: u64) -> String {
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

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(8 << 20), "8.0 MiB");
        assert_eq!(size(5 << 30), "5.0 GiB");
    }

    #[test]
    fn measuring_counts_blocks_once_and_follows_no_link() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/b/data"), vec![1u8; 1 << 20]).unwrap();
        std::fs::hard_link(dir.join("a/b/data"), dir.join("a/again")).unwrap();
        std::os::unix::fs::symlink("/usr", dir.join("usr")).unwrap();
        let used = allocated(dir, 1000);
        assert!(used.complete);
        assert!((1 << 20..(1 << 20) + (64 << 10)).contains(&used.bytes), "{used:?}");
        assert!(!allocated(dir, 2).complete);
    }
}
