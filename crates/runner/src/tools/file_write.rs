//! `file.write`: create or replace a whole file under `/workspace` or the agent's own artifacts
//! directory. The content goes to a temporary file in the opened parent directory that is
//! renamed into place there, so a reader never sees half a file and no link can redirect it.

use rustix::fs::FileType;
use serde_json::{Map, Value, json};

use super::{ToolContext, bool_field, io_error, rename_into_place, string_field, write_temp};
use crate::paths::Roots;
use crate::rpc::ToolOutput;
use crate::toolpack::ToolError;

pub(super) fn run(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let path = string_field(input, "path")?;
    let content = string_field(input, "content")?;
    let create_dirs = bool_field(input, "createDirs", false)?;
    let location = ctx.locate_write(path)?;
    let shown = location.shown.clone();
    if location.file_type() == Some(FileType::Directory) {
        return Err(ToolError::Failed(format!("Cannot write {shown}: it is a directory")));
    }
    let Some(name) = location.rest.last() else { return Err(ToolError::Failed(format!("Cannot write {shown}"))) };
    let parent = if location.name().is_some() {
        location.dir.try_clone().map_err(|e| io_error("write", &shown, &e))?
    } else {
        if !create_dirs {
            return Err(ToolError::Failed(format!(
                "Parent directory does not exist: {} (set createDirs: true to create it)",
                Roots::normalize(&format!("{shown}/.."))
            )));
        }
        location.create_parents(&mut Vec::new()).map_err(|e| io_error("create the directory of", &shown, &e))?
    };
    let temp = write_temp(&parent, name, content).map_err(|e| io_error("write", &shown, &e))?;
    rename_into_place(&parent, &temp, name).map_err(|e| io_error("write", &shown, &e))?;
    let chars = content.chars().count();
    Ok(ToolOutput {
        title: Some(shown.clone()),
        output: format!("Wrote {chars} chars to {shown}"),
        metadata: json!({"path": shown, "chars": chars, "bytes": content.len()}).as_object().cloned(),
        ..ToolOutput::default()
    })
}
