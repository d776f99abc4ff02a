//! Directory-fd file operations shared by the runner (`file.delete`, packs' `context.fs`) and
//! the controller (packs' `node:fs` in their own directories): everything relative to an open
//! directory and never through a link, so a path swapped mid-operation cannot lead outside.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Open the directory `name` of `dir`, never through a link (`ELOOP`/`ENOTDIR` if it is one).
pub fn open_child_dir(dir: impl AsFd, name: impl rustix::path::Arg) -> std::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
}

/// Remove the directory `name` of `parent` with everything in it; returns how many entries were
/// in it. A link inside is removed, never followed; an entry swapped from a directory to a link
/// or file while the tree is removed is removed as a file.
pub fn remove_tree(parent: BorrowedFd<'_>, name: &CStr) -> std::io::Result<u64> {
    let mut removed = 0;
    remove_into(parent, name, &mut removed)?;
    Ok(removed)
}

fn remove_into(parent: BorrowedFd<'_>, name: &CStr, removed: &mut u64) -> std::io::Result<()> {
    let dir = open_child_dir(parent, name)?;
    let mut children: Vec<(CString, FileType)> = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir)? {
        let entry = entry?;
        let raw = entry.file_name();
        if raw.to_bytes() != b"." && raw.to_bytes() != b".." {
            children.push((raw.to_owned(), entry.file_type()));
        }
    }
    for (child, kind) in children {
        let is_dir = match kind {
            FileType::Unknown => rustix::fs::statat(&dir, child.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory),
            kind => kind == FileType::Directory,
        };
        let gone = if is_dir { remove_into(dir.as_fd(), &child, removed) } else { Err(Errno::NOTDIR.into()) };
        match gone {
            Ok(()) => {}
            // Not a directory (or no longer one: a link or file swapped in): removed as a file.
            Err(e) if [Errno::NOTDIR, Errno::LOOP].iter().any(|c| e.raw_os_error() == Some(c.raw_os_error())) => {
                rustix::fs::unlinkat(&dir, child.as_c_str(), AtFlags::empty())?;
            }
            Err(e) => return Err(e),
        }
        *removed += 1;
    }
    Ok(rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?)
}

/// The `kind` packs' `stat`/`readdir` report (`file`, `directory`, `symlink`, …).
pub fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "char",
        _ => "other",
    }
}

/// The entries of an open directory as packs' `readdir` reports them: `[{name, kind}]` sorted by
/// name, without `.` and `..`; an entry whose type the file system does not say is asked with
/// `lstat` (relative to the directory, never followed).
pub fn dir_entries(dir: impl AsFd) -> Result<serde_json::Value, Errno> {
    let mut entries = Vec::new();
    for entry in rustix::fs::Dir::read_from(&dir)? {
        let entry = entry?;
        let raw = entry.file_name();
        if raw.to_bytes() == b"." || raw.to_bytes() == b".." {
            continue;
        }
        let kind = match entry.file_type() {
            FileType::Unknown => rustix::fs::statat(&dir, raw, AtFlags::SYMLINK_NOFOLLOW)
                .map_or(FileType::Unknown, |s| FileType::from_raw_mode(s.st_mode)),
            kind => kind,
        };
        entries.push((String::from_utf8_lossy(raw.to_bytes()).into_owned(), kind_name(kind)));
    }
    entries.sort();
    Ok(entries.into_iter().map(|(name, kind)| serde_json::json!({ "name": name, "kind": kind })).collect())
}

/// What packs' `stat` reports of a file, in `node:fs`'s names (times in milliseconds).
pub fn stat_json(meta: &std::fs::Metadata) -> serde_json::Value {
    use std::os::unix::fs::MetadataExt;
    let ms = |t: std::io::Result<std::time::SystemTime>| {
        t.ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    serde_json::json!({
        "kind": kind_name(FileType::from_raw_mode(meta.mode())),
        "size": meta.len(), "mode": meta.mode(), "uid": meta.uid(), "gid": meta.gid(),
        "dev": meta.dev(), "ino": meta.ino(), "nlink": meta.nlink(),
        "mtimeMs": ms(meta.modified()), "atimeMs": ms(meta.accessed()),
        "ctimeMs": (meta.ctime() as f64) * 1000.0 + (meta.ctime_nsec() as f64) / 1e6,
    })
}

/// The Node-style error code of an OS error (`ENOENT`, `EACCES`, …), `EIO` when it has none.
pub fn error_code(error: &std::io::Error) -> String {
    match error.raw_os_error() {
        Some(n) => format!("{:?}", nix::errno::Errno::from_raw(n)),
        None => "EIO".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_removed_with_its_count_and_a_link_in_it_is_not_followed() {
        let tmp = std::env::temp_dir().join(format!("suzumio-fsat-{}", std::process::id()));
        let outside = tmp.join("outside");
        std::fs::create_dir_all(tmp.join("t/a/b")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(tmp.join("t/a/b/f"), "x").unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, tmp.join("t/link")).unwrap();
        let root = open_child_dir(rustix::fs::CWD, tmp.as_path()).unwrap();
        let removed = remove_tree(root.as_fd(), c"t").unwrap();
        assert_eq!(removed, 4, "a, a/b, a/b/f and the link");
        assert!(!tmp.join("t").exists());
        assert!(outside.join("keep").exists(), "the link's target is untouched");
        assert_eq!(kind_name(FileType::Directory), "directory");
        assert_eq!(error_code(&std::io::Error::from_raw_os_error(2)), "ENOENT");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
