//! `file.glob`: the files below a directory whose path relative to it matches a glob (`*` and
//! `?` within one component, `**` across them, `{a,b}` alternatives), newest first by
//! modification time, at most `limit`, `.gitignore` respected unless `respectGitignore: false`.
//! The walk is [`super::walk`]'s: links are listed, never followed.

use std::ffi::OsStr;
use std::ops::ControlFlow;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType};
use serde_json::{Map, Value, json};

use super::walk::{self, Filters, Limits};
use super::{ToolContext, bool_field, io_error, optional_string, positive, string_field};
use crate::rpc::ToolOutput;
use crate::toolpack::ToolError;

const DEFAULT_LIMIT: u64 = 100;
const MAX_LIMIT: u64 = 1000;

pub(super) fn run(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let pattern = string_field(input, "pattern")?;
    if pattern.starts_with('/') {
        return Err(ToolError::Failed(format!(
            "pattern is relative to path; put the directory in path instead: {pattern}"
        )));
    }
    let path = optional_string(input, "path")?.unwrap_or(".");
    let limit = positive(input, "limit", DEFAULT_LIMIT, MAX_LIMIT)?;
    let matcher = walk::glob("pattern", pattern)?;
    let filters = Filters::new(bool_field(input, "respectGitignore", true)?, None, None)?;
    let dir = ctx.open_read(path)?;
    if !dir.meta.is_dir() {
        return Err(ToolError::Failed(format!("Not a directory: {}", dir.shown)));
    }
    let limits = Limits::search();
    // (modified seconds, nanoseconds, path): every match is kept, so the newest can be picked.
    let mut found: Vec<(i64, u64, String)> = Vec::new();
    let summary = walk::walk(ctx, dir.file.as_fd(), &dir.shown, &filters, &limits, &mut |entry| {
        if entry.kind != FileType::Directory && matcher.is_match(Path::new(OsStr::from_bytes(entry.raw_relative))) {
            let (secs, nanos) = rustix::fs::statat(entry.dir, entry.name, AtFlags::SYMLINK_NOFOLLOW)
                .map_or((0, 0), |s| (s.st_mtime, s.st_mtime_nsec));
            found.push((secs, nanos, join(&dir.shown, &entry.relative)));
        }
        ControlFlow::Continue(())
    })
    .map_err(|e| io_error("list", &dir.shown, &e))?;
    found.sort_by(|a, b| (b.0, b.1).cmp(&(a.0, a.1)).then_with(|| a.2.cmp(&b.2)));
    let total = found.len();
    found.truncate(limit as usize);
    let mut output = if found.is_empty() {
        format!("(no files match {pattern} under {})", dir.shown)
    } else {
        found.iter().map(|(_, _, p)| p.as_str()).collect::<Vec<_>>().join("\n")
    };
    if total > found.len() {
        output.push_str(&format!(
            "\n[{} more matches not shown; raise limit or narrow the pattern]",
            total - found.len()
        ));
    }
    if let Some(note) = summary.note(&limits) {
        output.push('\n');
        output.push_str(&note);
    }
    let metadata = json!({
        "path": dir.shown,
        "pattern": pattern,
        "files": found.len(),
        "totalFiles": total,
        "truncated": total > found.len() || summary.stopped.is_some(),
    });
    Ok(ToolOutput {
        title: Some(format!("{pattern} in {}", dir.shown)),
        output,
        metadata: metadata.as_object().cloned(),
        ..ToolOutput::default()
    })
}

/// The tool path of `relative` below `dir`.
pub(super) fn join(dir: &str, relative: &str) -> String {
    if dir == "/" { format!("/{relative}") } else { format!("{dir}/{relative}") }
}
