//! `file.read`: a text file as numbered lines (`N: text`), or a directory's sorted entries with
//! `/` after subdirectories, paged by `offset`/`limit` and capped at `maxBytes`.
//!
//! Beyond the reference: the file is streamed (a huge file never sits in memory); an empty
//! file, an empty directory or an offset past the end say so instead of returning nothing; and
//! a page of a file with more lines after it ends with the lines shown, the file's total line
//! count and the offset to continue from.

use std::io::{BufRead, BufReader};

use serde_json::{Map, Value, json};

use rustix::fs::{AtFlags, FileType};

use super::guard::Withheld;
use super::{Opened, ToolContext, cut_to_bytes, io_error, positive, string_field};
use crate::rpc::ToolOutput;
use crate::toolpack::ToolError;

const DEFAULT_LIMIT: u64 = 200;
const MAX_LIMIT: u64 = 2000;
const DEFAULT_MAX_BYTES: u64 = 50_000;
const MAX_MAX_BYTES: u64 = 100_000;
const MAX_LINE_CHARS: usize = 2000;

pub(super) fn run(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let path = string_field(input, "path")?;
    let offset = positive(input, "offset", 1, u64::MAX)?;
    let limit = positive(input, "limit", DEFAULT_LIMIT, MAX_LIMIT)?;
    let max_bytes = positive(input, "maxBytes", DEFAULT_MAX_BYTES, MAX_MAX_BYTES)? as usize;
    let path = ctx.open_read(path)?;
    let page = if path.meta.is_dir() {
        read_directory(ctx, &path, offset, limit).map_err(|e| io_error("list", &path.shown, &e))?
    } else if !path.meta.is_file() {
        // A FIFO is opened without waiting for a writer, but reading it could still wait.
        return Err(ToolError::Failed(format!("Cannot read {}: it is not a regular file or a directory", path.shown)));
    } else {
        read_file(&path.file, offset, limit).map_err(|e| io_error("read", &path.shown, &e))?
    };
    let mut output = page.text;
    let cut = cut_to_bytes(&mut output, max_bytes);
    if cut > 0 {
        output.push_str(&format!("\n[truncated {cut} bytes]"));
    }
    if !page.directory && page.more && page.shown > 0 && cut == 0 {
        let last = offset + page.shown - 1;
        output.push_str(&format!("\n[lines {offset}-{last} of {}; continue with offset {}]", page.total, last + 1));
    }
    let (count_key, total_key) = if page.directory { ("entries", "totalEntries") } else { ("lines", "totalLines") };
    let mut metadata = Map::new();
    metadata.insert("path".into(), json!(path.shown));
    metadata.insert("kind".into(), json!(if page.directory { "directory" } else { "file" }));
    metadata.insert(count_key.into(), json!(page.shown));
    metadata.insert(total_key.into(), json!(page.total));
    metadata.insert("offset".into(), json!(offset));
    metadata.insert("limit".into(), json!(limit));
    metadata.insert("truncated".into(), json!(cut > 0 || page.more));
    Ok(ToolOutput { title: Some(path.shown), output, metadata: Some(metadata), ..ToolOutput::default() })
}

struct Page {
    text: String,
    directory: bool,
    /// Lines or entries in the text.
    shown: u64,
    /// Lines or entries in all.
    total: u64,
    /// Whether any come after the page.
    more: bool,
}

fn read_file(file: &std::fs::File, offset: u64, limit: u64) -> std::io::Result<Page> {
    let mut reader = BufReader::with_capacity(64 << 10, file);
    let mut lines = Vec::new();
    let mut line = Vec::new();
    let mut number = 0u64;
    let last = offset.saturating_add(limit - 1);
    // A line of more than MAX_LINE_CHARS characters is longer than 4 * MAX_LINE_CHARS bytes.
    let keep = 4 * MAX_LINE_CHARS + 1;
    loop {
        let wanted = number + 1 >= offset && number < last;
        let Some(overflow) = read_line(&mut reader, if wanted { keep } else { 0 }, &mut line)? else { break };
        number += 1;
        if !wanted {
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let mut chars = text.char_indices();
        let text = match chars.nth(MAX_LINE_CHARS) {
            Some((end, _)) => format!("{}... (line truncated)", &text[..end]),
            None if overflow => format!("{text}... (line truncated)"),
            None => text.into_owned(),
        };
        lines.push(format!("{number}: {text}"));
    }
    let shown = lines.len() as u64;
    let text = if number == 0 {
        "(empty file)".to_string()
    } else if lines.is_empty() {
        format!("(no lines at offset {offset}; the file has {number} lines)")
    } else {
        lines.join("\n")
    };
    Ok(Page { text, directory: false, shown, total: number, more: number > last })
}

/// Read one line into `out`, keeping at most `keep` bytes; `None` at the end of the file,
/// otherwise whether bytes were dropped. The newline (and a `\r` before it) is not kept.
fn read_line(reader: &mut impl BufRead, keep: usize, out: &mut Vec<u8>) -> std::io::Result<Option<bool>> {
    out.clear();
    let mut any = false;
    let mut overflow = false;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(any.then_some(overflow));
        }
        any = true;
        let (len, ends) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        let room = keep.saturating_sub(out.len());
        overflow |= len > room;
        out.extend_from_slice(&buf[..len.min(room)]);
        reader.consume(if ends { len + 1 } else { len });
        if ends {
            if out.last() == Some(&b'\r') && !overflow {
                out.pop();
            }
            return Ok(Some(overflow));
        }
    }
}

fn read_directory(ctx: &ToolContext, dir: &Opened, offset: u64, limit: u64) -> std::io::Result<Page> {
    let mut entries = Vec::new();
    let mut withheld = Withheld::default();
    let place = ctx.place_of(&dir.file);
    for entry in rustix::fs::Dir::read_from(&dir.file)? {
        let entry = entry?;
        let bytes = entry.file_name().to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        let mut name = String::from_utf8_lossy(bytes).into_owned();
        let kind = match entry.file_type() {
            FileType::Unknown => rustix::fs::statat(&dir.file, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW)
                .map_or(FileType::Unknown, |s| FileType::from_raw_mode(s.st_mode)),
            kind => kind,
        };
        if let Some(refusal) = ctx.withheld_entry(&place, &name, kind == FileType::Symlink) {
            withheld.count(&refusal);
            continue;
        }
        // A link to a directory is shown as one, when it leads to one inside the read roots
        // (resolved as `file.read` of it would be).
        let is_dir = match kind {
            FileType::Directory => true,
            FileType::Symlink => ctx.open_read(&format!("{}/{name}", dir.shown)).is_ok_and(|o| o.meta.is_dir()),
            _ => false,
        };
        if is_dir {
            name.push('/');
        }
        entries.push(name);
    }
    entries.sort();
    let total = entries.len() as u64;
    let start = (offset - 1).min(total) as usize;
    let end = (offset - 1).saturating_add(limit).min(total) as usize;
    let page = &entries[start..end];
    let mut text = if total == 0 {
        "(empty directory)".to_string()
    } else if page.is_empty() {
        format!("(no entries at offset {offset}; the directory has {total} entries)")
    } else {
        page.join("\n")
    };
    if let Some(note) = withheld.note() {
        text.push_str(&format!("\n{note}"));
    }
    Ok(Page { text, directory: true, shown: page.len() as u64, total, more: (end as u64) < total })
}
