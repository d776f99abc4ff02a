//! `file.move`: rename a file, link or directory to a new path under the write roots, both
//! names resolved to opened parent directories (a final link is moved as the link). Without
//! `overwrite` an existing destination is refused atomically (`RENAME_NOREPLACE`).

use rustix::fs::{AtFlags, RenameFlags};
use rustix::io::Errno;
use serde_json::{Map, Value, json};

use super::{ToolContext, bool_field, io_error, string_field};
use crate::rpc::ToolOutput;
use crate::toolpack::ToolError;

pub(super) fn run(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let overwrite = bool_field(input, "overwrite", false)?;
    let from = ctx.locate_entry(string_field(input, "from")?, "move")?;
    let to = ctx.locate_entry(string_field(input, "to")?, "move to")?;
    if from.kind().is_none() {
        return Err(ToolError::Failed(format!("No such file or directory: {}", from.shown)));
    }
    let flags = if overwrite { RenameFlags::empty() } else { RenameFlags::NOREPLACE };
    let mut renamed = rustix::fs::renameat_with(&from.dir, from.name.as_str(), &to.dir, to.name.as_str(), flags);
    if renamed == Err(Errno::INVAL) && !overwrite {
        // A filesystem without RENAME_NOREPLACE: check, then rename (the one window left).
        renamed = if rustix::fs::statat(&to.dir, to.name.as_str(), AtFlags::SYMLINK_NOFOLLOW).is_ok() {
            Err(Errno::EXIST)
        } else {
            rustix::fs::renameat(&from.dir, from.name.as_str(), &to.dir, to.name.as_str())
        };
    }
    match renamed {
        Ok(()) => {}
        Err(Errno::EXIST) => {
            return Err(ToolError::Failed(format!(
                "Cannot move to {}: it already exists (set overwrite: true to replace it)",
                to.shown
            )));
        }
        Err(Errno::XDEV) => {
            return Err(ToolError::Failed(format!(
                "Cannot move {} to {}: they are on different filesystems (copy with file.read and file.write instead)",
                from.shown, to.shown
            )));
        }
        Err(e) => return Err(io_error(&format!("move {} to", from.shown), &to.shown, &e.into())),
    }
    Ok(ToolOutput {
        title: Some(format!("{} → {}", from.shown, to.shown)),
        output: format!("Moved {} to {}", from.shown, to.shown),
        metadata: json!({"from": from.shown, "to": to.shown}).as_object().cloned(),
        ..ToolOutput::default()
    })
}
