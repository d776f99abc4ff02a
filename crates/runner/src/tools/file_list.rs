//! `file.list`: the entries of a directory under the agent's read roots, as paths relative to
//! it, sorted, depth-first down to `depth` levels, at most `limit` entries. Subdirectories end
//! in `/`; symbolic links are shown as `name -> target` and never followed (so a link cannot
//! lead the walk outside the roots or into a loop).

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{AtFlags, FileType};
use serde_json::{Map, Value, json};

use super::{ToolContext, io_error, positive};
use crate::paths::open_child_dir;
use crate::rpc::ToolOutput;

const DEFAULT_DEPTH: u64 = 1;
const MAX_DEPTH: u64 = 10;
const DEFAULT_LIMIT: u64 = 200;
const MAX_LIMIT: u64 = 2000;
/// Past the limit the walk goes on only to count what was left out, up to this many entries.
const COUNT_CAP: u64 = 100_000;

pub(super) fn run(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, String> {
    let path = match input.get("path") {
        None | Some(Value::Null) => ".",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err("path must be a string".into()),
    };
    let depth = positive(input, "depth", DEFAULT_DEPTH, MAX_DEPTH)?;
    let limit = positive(input, "limit", DEFAULT_LIMIT, MAX_LIMIT)?;
    let dir = ctx.open_read(path)?;
    if !dir.meta.is_dir() {
        return Err(format!("Not a directory: {} (use file.read for files)", dir.shown));
    }
    let mut walk = Walk { limit, lines: Vec::new(), seen: 0, unreadable: 0 };
    walk.visit(dir.file.as_fd(), "", depth).map_err(|e| io_error("list", &dir.shown, &e))?;
    let shown = walk.lines.len() as u64;
    let left_out = walk.seen - shown;
    let mut output = if walk.lines.is_empty() { "(empty directory)".to_string() } else { walk.lines.join("\n") };
    if left_out > 0 {
        let more = if walk.seen >= COUNT_CAP { format!("{left_out} or more") } else { left_out.to_string() };
        output.push_str(&format!("\n[{more} more entries not shown; raise limit or list a subdirectory]"));
    }
    if walk.unreadable > 0 {
        output.push_str(&format!("\n[{} directories could not be read]", walk.unreadable));
    }
    let metadata = json!({
        "path": dir.shown,
        "entries": shown,
        "depth": depth,
        "limit": limit,
        "truncated": left_out > 0,
    });
    Ok(ToolOutput { title: Some(dir.shown), output, metadata: metadata.as_object().cloned(), ..ToolOutput::default() })
}

struct Walk {
    limit: u64,
    lines: Vec<String>,
    /// Entries met so far, shown or not (counting stops at `COUNT_CAP`).
    seen: u64,
    unreadable: u64,
}

impl Walk {
    /// List `dir` (an opened directory); subdirectories are opened from it, never through a link.
    fn visit(&mut self, dir: BorrowedFd<'_>, prefix: &str, levels: u64) -> std::io::Result<()> {
        let mut entries: Vec<(String, CString, FileType)> = Vec::new();
        for entry in rustix::fs::Dir::read_from(dir)?.filter_map(Result::ok) {
            let raw = entry.file_name();
            if raw.to_bytes() == b"." || raw.to_bytes() == b".." {
                continue;
            }
            let kind = match entry.file_type() {
                FileType::Unknown => rustix::fs::statat(dir, raw, AtFlags::SYMLINK_NOFOLLOW)
                    .map_or(FileType::Unknown, |s| FileType::from_raw_mode(s.st_mode)),
                kind => kind,
            };
            entries.push((String::from_utf8_lossy(raw.to_bytes()).into_owned(), raw.to_owned(), kind));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, raw, kind) in entries {
            if self.seen >= COUNT_CAP {
                return Ok(());
            }
            self.seen += 1;
            let relative = format!("{prefix}{name}");
            if self.lines.len() as u64 >= self.limit {
                // Only counting now.
            } else if kind == FileType::Symlink {
                let target = rustix::fs::readlinkat(dir, raw.as_c_str(), Vec::new())
                    .map(|t| String::from_utf8_lossy(t.as_bytes()).into_owned());
                self.lines.push(format!("{relative} -> {}", target.unwrap_or_else(|_| "?".into())));
            } else if kind == FileType::Directory {
                self.lines.push(format!("{relative}/"));
            } else {
                self.lines.push(relative.clone());
            }
            if kind == FileType::Directory && levels > 1 {
                let listed = open_child_dir(dir, raw.as_c_str())
                    .and_then(|child| self.visit(child.as_fd(), &format!("{relative}/"), levels - 1));
                if listed.is_err() {
                    self.unreadable += 1;
                }
            }
        }
        Ok(())
    }
}
