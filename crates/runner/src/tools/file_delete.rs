//! `file.delete`: remove a file, a link (never what it points to) or, with `recursive: true`,
//! a directory and everything in it, under the write roots. Every removal is an `unlinkat` in
//! an opened directory, and each subdirectory is entered with `O_NOFOLLOW`, so a link swapped
//! in meanwhile is removed as a link and never followed.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{AtFlags, FileType};
use rustix::io::Errno;
use serde_json::{Map, Value, json};

use super::{ToolContext, bool_field, io_error, string_field};
use crate::paths::open_child_dir;
use crate::rpc::ToolOutput;

pub(super) fn run(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, String> {
    let path = string_field(input, "path")?;
    let recursive = bool_field(input, "recursive", false)?;
    let entry = ctx.locate_entry(path, "delete")?;
    let shown = entry.shown.clone();
    let kind = entry.kind().ok_or_else(|| format!("No such file or directory: {shown}"))?;
    let removed = if kind == FileType::Directory {
        if !recursive {
            return Err(format!(
                "Cannot delete {shown}: it is a directory (set recursive: true to delete it and everything in it)"
            ));
        }
        let mut removed = 0;
        let name = CString::new(entry.name.as_str()).map_err(|_| format!("Cannot delete {shown}"))?;
        remove_tree(entry.dir.as_fd(), &name, &mut removed).map_err(|e| io_error("delete", &shown, &e))?;
        removed
    } else {
        rustix::fs::unlinkat(&entry.dir, entry.name.as_str(), AtFlags::empty())
            .map_err(|e| io_error("delete", &shown, &e.into()))?;
        0
    };
    let output = if kind == FileType::Directory {
        let plural = if removed == 1 { "entry" } else { "entries" };
        format!("Deleted {shown} and the {removed} {plural} in it")
    } else {
        format!("Deleted {shown}")
    };
    Ok(ToolOutput {
        title: Some(shown.clone()),
        output,
        metadata: json!({"path": shown, "directory": kind == FileType::Directory, "entriesRemoved": removed})
            .as_object()
            .cloned(),
        ..ToolOutput::default()
    })
}

/// Remove the directory `name` of `parent` with everything in it, counting what was in it.
fn remove_tree(parent: BorrowedFd<'_>, name: &CStr, removed: &mut u64) -> std::io::Result<()> {
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
        let gone = if is_dir { remove_tree(dir.as_fd(), &child, removed) } else { Err(Errno::NOTDIR.into()) };
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
