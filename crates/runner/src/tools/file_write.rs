//! `file.write`: create or replace a whole file under `/workspace` or the agent's own artifacts
//! directory. The content goes to a temporary file that is renamed into place, so a reader
//! never sees half a file.

use serde_json::{Map, Value, json};

use super::{ToolContext, bool_field, io_error, string_field, write_temp};
use crate::paths::Roots;
use crate::rpc::ToolOutput;

pub(super) fn run(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, String> {
    let path = string_field(input, "path")?;
    let content = string_field(input, "content")?;
    let create_dirs = bool_field(input, "createDirs", false)?;
    let path = ctx.write_path(path)?;
    if path.real.is_dir() {
        return Err(format!("Cannot write {}: it is a directory", path.shown));
    }
    let parent = path.real.parent().ok_or_else(|| format!("Cannot write {}", path.shown))?;
    if !parent.is_dir() {
        if !create_dirs {
            return Err(format!(
                "Parent directory does not exist: {} (set createDirs: true to create it)",
                Roots::normalize(&format!("{}/..", path.shown))
            ));
        }
        std::fs::create_dir_all(parent).map_err(|e| io_error("create the directory of", &path.shown, &e))?;
    }
    let temp = write_temp(&path.real, content).map_err(|e| io_error("write", &path.shown, &e))?;
    if let Err(e) = std::fs::rename(&temp, &path.real) {
        let _ = std::fs::remove_file(&temp);
        return Err(io_error("write", &path.shown, &e));
    }
    let chars = content.chars().count();
    Ok(ToolOutput {
        title: Some(path.shown.clone()),
        output: format!("Wrote {chars} chars to {}", path.shown),
        metadata: json!({"path": path.shown, "chars": chars, "bytes": content.len()}).as_object().cloned(),
    })
}
