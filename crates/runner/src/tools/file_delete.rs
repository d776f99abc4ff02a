//! `file.delete`: remove a file, a link (never what it points to) or, with `recursive: true`,
//! a directory and everything in it, under the write roots. Every removal is an `unlinkat` in
//! an opened directory, and each subdirectory is entered with `O_NOFOLLOW`, so a link swapped
//! in meanwhile is removed as a link and never followed.

use std::ffi::CString;
use std::os::fd::AsFd;

use rustix::fs::{AtFlags, FileType};
use serde_json::{Map, Value, json};

use super::{ToolContext, bool_field, io_error, string_field};
use crate::rpc::ToolOutput;
use crate::toolpack::ToolError;
use suzumio_core::fsat::remove_tree;

pub(super) fn run(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let path = string_field(input, "path")?;
    let recursive = bool_field(input, "recursive", false)?;
    let entry = ctx.locate_entry(path, "delete")?;
    let shown = entry.shown.clone();
    let kind = entry.kind().ok_or_else(|| ToolError::Failed(format!("No such file or directory: {shown}")))?;
    let removed = if kind == FileType::Directory {
        if !recursive {
            return Err(ToolError::Failed(format!(
                "Cannot delete {shown}: it is a directory (set recursive: true to delete it and everything in it)"
            )));
        }
        let name =
            CString::new(entry.name.as_str()).map_err(|_| ToolError::Failed(format!("Cannot delete {shown}")))?;
        remove_tree(entry.dir.as_fd(), &name).map_err(|e| io_error("delete", &shown, &e))?
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
