//! `file.list`: the entries of a directory under the agent's read roots, as paths relative to
//! it, sorted, depth-first down to `depth` levels, at most `limit` entries, filtered by
//! `include`/`exclude` globs and (unless `respectGitignore: false`) `.gitignore` rules.
//! Subdirectories end in `/`; symbolic links are shown as `name -> target` and never followed
//! (so a link cannot lead the walk outside the roots or into a loop). The walk is
//! [`super::walk`]'s.

use std::ops::ControlFlow;
use std::os::fd::AsFd;
use std::time::Instant;

use rustix::fs::FileType;
use serde_json::{Map, Value, json};

use super::walk::{self, Filters, Limits, Stopped};
use super::{ToolContext, bool_field, io_error, optional_string, positive};
use crate::rpc::ToolOutput;
use crate::toolpack::ToolError;

const DEFAULT_DEPTH: u64 = 1;
const MAX_DEPTH: u64 = 10;
const DEFAULT_LIMIT: u64 = 200;
const MAX_LIMIT: u64 = 2000;
/// Past the limit the walk goes on only to count what was left out, up to this many entries.
const COUNT_CAP: u64 = 100_000;

pub(super) fn run(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let path = optional_string(input, "path")?.unwrap_or(".");
    let depth = positive(input, "depth", DEFAULT_DEPTH, MAX_DEPTH)?;
    let limit = positive(input, "limit", DEFAULT_LIMIT, MAX_LIMIT)?;
    let filters = Filters::new(
        bool_field(input, "respectGitignore", true)?,
        optional_string(input, "include")?,
        optional_string(input, "exclude")?,
    )?;
    let dir = ctx.open_read(path)?;
    if !dir.meta.is_dir() {
        return Err(ToolError::Failed(format!("Not a directory: {} (use file.read for files)", dir.shown)));
    }
    let limits = Limits { max_depth: depth, max_visits: COUNT_CAP, deadline: Instant::now() + walk::SEARCH_TIME };
    let mut lines = Vec::new();
    let mut seen = 0u64;
    // With an include glob only the matching files are listed, not the directories on the way.
    let show_dirs = !filters.has_include();
    let summary = walk::walk(ctx, dir.file.as_fd(), &dir.shown, &filters, &limits, &mut |entry| {
        if entry.kind == FileType::Directory && !show_dirs {
            return ControlFlow::Continue(());
        }
        seen += 1;
        if lines.len() as u64 >= limit {
            // Only counting now.
        } else if entry.kind == FileType::Symlink {
            let target = rustix::fs::readlinkat(entry.dir, entry.name, Vec::new())
                .map(|t| String::from_utf8_lossy(t.as_bytes()).into_owned());
            lines.push(format!("{} -> {}", entry.relative, target.unwrap_or_else(|_| "?".into())));
        } else if entry.kind == FileType::Directory {
            lines.push(format!("{}/", entry.relative));
        } else {
            lines.push(entry.relative.clone());
        }
        ControlFlow::Continue(())
    })
    .map_err(|e| io_error("list", &dir.shown, &e))?;
    let shown = lines.len() as u64;
    let left_out = seen - shown;
    let mut output = if lines.is_empty() { "(empty directory)".to_string() } else { lines.join("\n") };
    if left_out > 0 {
        let more = if summary.stopped.is_some() { format!("{left_out} or more") } else { left_out.to_string() };
        output.push_str(&format!("\n[{more} more entries not shown; raise limit or list a subdirectory]"));
    }
    if summary.stopped == Some(Stopped::Time) {
        output.push_str("\n[stopped: the walk took too long; list a subdirectory]");
    }
    if summary.unreadable > 0 {
        output.push_str(&format!("\n[{} directories could not be read]", summary.unreadable));
    }
    if let Some(note) = summary.withheld.note() {
        output.push_str(&format!("\n{note}"));
    }
    let metadata = json!({
        "path": dir.shown,
        "entries": shown,
        "depth": depth,
        "limit": limit,
        "truncated": left_out > 0 || summary.stopped.is_some(),
    });
    Ok(ToolOutput { title: Some(dir.shown), output, metadata: metadata.as_object().cloned(), ..ToolOutput::default() })
}
