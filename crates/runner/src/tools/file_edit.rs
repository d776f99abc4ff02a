//! `file.edit`: replace an exact text in one file under the write roots. It must be found, and
//! found once unless `replaceAll`; the file is then replaced whole (a temporary file renamed
//! into place in its opened directory, as `file.write` does), and the output is a short
//! unified diff of the change (`similar`).

use std::io::Read;

use rustix::fs::FileType;
use serde_json::{Map, Value, json};

use super::{ToolContext, bool_field, cut_to_bytes, io_error, rename_into_place, string_field, write_temp};
use crate::rpc::ToolOutput;
use crate::toolpack::ToolError;

/// A file larger than this is not edited in memory.
const MAX_FILE_BYTES: u64 = 16 << 20;
const MAX_DIFF_BYTES: usize = 4000;

pub(super) fn run(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let path = string_field(input, "path")?;
    let old = string_field(input, "oldText")?;
    let new = string_field(input, "newText")?;
    let replace_all = bool_field(input, "replaceAll", false)?;
    if old.is_empty() {
        return Err(ToolError::Failed(
            "oldText must not be empty (use file.write to create or replace a whole file)".into(),
        ));
    }
    if old == new {
        return Err(ToolError::Failed("oldText and newText are the same: nothing to change".into()));
    }
    let location = ctx.locate_write(path)?;
    let shown = location.shown.clone();
    match location.file_type() {
        Some(FileType::Directory) => return Err(ToolError::Failed(format!("Cannot edit {shown}: it is a directory"))),
        None => return Err(ToolError::Failed(format!("No such file or directory: {shown}"))),
        Some(_) => {}
    }
    let Some(name) = location.name() else {
        return Err(ToolError::Failed(format!("No such file or directory: {shown}")));
    };
    let opened = ctx.open_write(path)?;
    if !opened.meta.is_file() {
        return Err(ToolError::Failed(format!("Cannot edit {shown}: it is not a regular file")));
    }
    if opened.meta.len() > MAX_FILE_BYTES {
        return Err(ToolError::TooLarge(format!(
            "Cannot edit {shown}: it is larger than {} MiB",
            MAX_FILE_BYTES >> 20
        )));
    }
    let mut bytes = Vec::new();
    opened.file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| io_error("read", &shown, &e))?;
    let current = String::from_utf8(bytes)
        .map_err(|_| ToolError::Failed(format!("Cannot edit {shown}: it is not UTF-8 text")))?;
    let found = current.matches(old).count();
    if found == 0 {
        return Err(ToolError::Failed(format!(
            "oldText not found in {shown}; read the file and copy the text exactly"
        )));
    }
    if found > 1 && !replace_all {
        return Err(ToolError::Failed(format!(
            "oldText matches {found} times in {shown}; add surrounding lines to make it unique, or set replaceAll: true"
        )));
    }
    let updated = if replace_all { current.replace(old, new) } else { current.replacen(old, new, 1) };
    let temp = write_temp(&location.dir, name, &updated).map_err(|e| io_error("write", &shown, &e))?;
    rename_into_place(&location.dir, &temp, name).map_err(|e| io_error("write", &shown, &e))?;
    let mut diff = similar::TextDiff::from_lines(&current, &updated)
        .unified_diff()
        .context_radius(2)
        .header(&shown, &shown)
        .to_string();
    let cut = cut_to_bytes(&mut diff, MAX_DIFF_BYTES);
    if cut > 0 {
        diff.push_str(&format!("\n[diff truncated {cut} bytes]"));
    }
    let plural = if found == 1 { "replacement" } else { "replacements" };
    Ok(ToolOutput {
        title: Some(shown.clone()),
        output: format!("Edited {shown} ({found} {plural})\n{}", diff.trim_end()),
        metadata: json!({"path": shown, "replacements": found}).as_object().cloned(),
        ..ToolOutput::default()
    })
}
