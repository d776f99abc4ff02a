//! `file.edit`: replace an exact text in one file under the write roots — or a range of its
//! lines (`startLine`/`endLine`, 1-based and inclusive; `endLine = startLine - 1` inserts before
//! `startLine`), checked against `expectedText` when given so that an edit made from a stale
//! read fails instead of replacing the wrong lines. The text must be found, and found once
//! unless `replaceAll`; the file is then replaced whole (a temporary file renamed into place in
//! its opened directory, as `file.write` does), and the output is a short unified diff of the
//! change (`similar`).

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
    let new = string_field(input, "newText")?;
    let edit = match (input.get("oldText"), input.get("startLine")) {
        (Some(_), Some(_)) => {
            return Err(ToolError::Rejected("give either oldText or startLine/endLine, not both".into()));
        }
        (None, None) => {
            return Err(ToolError::Rejected("give oldText, or startLine (and endLine) to replace lines".into()));
        }
        (Some(_), None) => {
            let old = string_field(input, "oldText")?;
            if old.is_empty() {
                return Err(ToolError::Failed(
                    "oldText must not be empty (use file.write to create or replace a whole file)".into(),
                ));
            }
            if old == new {
                return Err(ToolError::Failed("oldText and newText are the same: nothing to change".into()));
            }
            Edit::Text { old, replace_all: bool_field(input, "replaceAll", false)? }
        }
        (None, Some(_)) => {
            if input.contains_key("replaceAll") {
                return Err(ToolError::Rejected("replaceAll goes with oldText, not with a line range".into()));
            }
            let start = line_field(input, "startLine", 1)?.unwrap_or(1);
            let end = line_field(input, "endLine", 0)?.unwrap_or(start);
            let expected = match input.get("expectedText") {
                None => None,
                Some(Value::String(s)) => Some(s.as_str()),
                Some(_) => return Err(ToolError::Rejected("expectedText must be a string".into())),
            };
            Edit::Lines { start, end, expected }
        }
    };
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
    let (updated, done) = match edit {
        Edit::Text { old, replace_all } => {
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
            let plural = if found == 1 { "replacement" } else { "replacements" };
            (updated, (format!("{found} {plural}"), json!({"replacements": found})))
        }
        Edit::Lines { start, end, expected } => {
            let updated = replace_lines(&current, &shown, start, end, expected, new)?;
            let what = if end < start {
                format!("inserted before line {start}")
            } else {
                format!("lines {start}-{end} replaced")
            };
            (updated, (what, json!({"startLine": start, "endLine": end})))
        }
    };
    if updated == current {
        return Err(ToolError::Failed(format!("The edit leaves {shown} unchanged: nothing to change")));
    }
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
    let (what, mut metadata) = done;
    metadata["path"] = json!(shown);
    Ok(ToolOutput {
        title: Some(shown.clone()),
        output: format!("Edited {shown} ({what})\n{}", diff.trim_end()),
        metadata: metadata.as_object().cloned(),
        ..ToolOutput::default()
    })
}

enum Edit<'a> {
    Text { old: &'a str, replace_all: bool },
    Lines { start: usize, end: usize, expected: Option<&'a str> },
}

/// A line number field (at least `min`), if given.
fn line_field(input: &Map<String, Value>, key: &str, min: u64) -> Result<Option<usize>, ToolError> {
    match input.get(key) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n >= min => Ok(Some(n as usize)),
            _ => Err(ToolError::Rejected(format!("{key} must be a line number ({min} or more), got {v}"))),
        },
    }
}

/// `current` with lines `start..=end` (1-based) replaced by `new` — inserted before `start`
/// when `end` is `start - 1`. `new` gets the file's line ending when it lacks one, unless it
/// replaces the last line of a file that does not end with a newline.
fn replace_lines(
    current: &str,
    shown: &str,
    start: usize,
    end: usize,
    expected: Option<&str>,
    new: &str,
) -> Result<String, ToolError> {
    let lines: Vec<&str> = current.split_inclusive('\n').collect();
    let count = lines.len();
    if end + 1 < start {
        return Err(ToolError::Rejected(format!(
            "endLine ({end}) is before startLine ({start}); use endLine = startLine - 1 to insert before startLine"
        )));
    }
    if start > count + 1 || end > count {
        return Err(ToolError::Failed(format!(
            "{shown} has {count} line(s): lines {start}-{end} are not in it (read it again with file.read)"
        )));
    }
    let replaced: String = lines[start - 1..end].concat();
    if let Some(expected) = expected {
        let strip = |t: &str| t.trim_end_matches(['\n', '\r']).replace("\r\n", "\n");
        if strip(&replaced) != strip(expected) {
            let numbered: String =
                lines[start - 1..end].iter().enumerate().map(|(i, l)| format!("{:>6}\t{l}", start + i)).collect();
            return Err(ToolError::Failed(format!(
                "Lines {start}-{end} of {shown} are not the expectedText; the file is unchanged. They are now:\n{}",
                if numbered.is_empty() {
                    "(no lines: an insertion point)".to_string()
                } else {
                    numbered.trim_end().to_string()
                }
            )));
        }
    }
    let newline = if current.contains("\r\n") { "\r\n" } else { "\n" };
    let at_unterminated_end = end == count && !current.ends_with('\n');
    let mut text = new.to_string();
    if !text.is_empty() && !text.ends_with('\n') && !at_unterminated_end {
        text.push_str(newline);
    }
    let mut out = lines[..start - 1].concat();
    // Inserting after an unterminated last line: it needs its newline first.
    if start == count + 1 && !out.is_empty() && !out.ends_with('\n') {
        out.push_str(newline);
    }
    out.push_str(&text);
    out.push_str(&lines[end..].concat());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::replace_lines;

    fn check(current: &str, start: usize, end: usize, expected: Option<&str>, new: &str, after: Result<&str, &str>) {
        match (replace_lines(current, "/workspace/f", start, end, expected, new), after) {
            (Ok(got), Ok(want)) => assert_eq!(got, want),
            (Err(e), Err(want)) => assert!(e.message().contains(want), "{}", e.message()),
            (got, want) => panic!("got {:?}, want {want:?}", got.map_err(|e| e.message().to_string())),
        }
    }

    #[test]
    fn line_ranges() {
        check("a\nb\nc\n", 2, 2, None, "B", Ok("a\nB\nc\n"));
        check("a\nb\nc\n", 2, 3, Some("b\nc\n"), "X\n", Ok("a\nX\n"));
        check("a\nb\nc\n", 2, 1, None, "new", Ok("a\nnew\nb\nc\n"));
        check("a\nb", 3, 2, None, "c", Ok("a\nb\nc"));
        check("a\nb", 2, 2, None, "B", Ok("a\nB"));
        check("a\r\nb\r\n", 1, 1, Some("a"), "A", Ok("A\r\nb\r\n"));
        check("a\nb\nc\n", 1, 2, None, "", Ok("c\n"));
    }

    #[test]
    fn a_stale_range_is_refused_showing_the_lines() {
        check("a\nb\nc\n", 2, 2, Some("x"), "B", Err("are now:\n     2\tb"));
        check("a\nb\n", 3, 4, None, "B", Err("has 2 line(s)"));
        check("a\n", 3, 1, None, "B", Err("endLine (1) is before startLine (3)"));
    }
}
