//! Unified diffs as models write them (`git diff`, `diff -u`): parsed into per-file patches and
//! applied to a file's text. Shared by the runner, which applies them (`file.patch` with
//! `diff`), and the controller, whose permission rules must see every path a diff touches
//! ([`paths`]) — a path the matcher cannot read is a path it cannot deny.
//!
//! Written here rather than taken from a crate: `file.patch` must report *every* rejected hunk
//! with its file and line and change nothing unless all apply, over several files, and the
//! controller must list a diff's paths without applying it; the patch crates apply one file and
//! stop at the first failure.
//!
//! Rules, like `git apply`: a hunk's context and removed lines must match the file exactly
//! (a trailing `\r` aside); a hunk whose lines are not at the line its header names is applied
//! at the nearest place where they are, after the previous hunk (an offset, reported); hunks
//! apply in order and never overlap. `--- /dev/null` creates a file, `+++ /dev/null` deletes
//! one, renames and binary patches are refused. Text outside the file sections (a model's
//! comments around the diff) is ignored.

use std::fmt;

/// One file's part of a diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    /// `None`: the file is created (`--- /dev/null`).
    pub old_path: Option<String>,
    /// `None`: the file is deleted (`+++ /dev/null`).
    pub new_path: Option<String>,
    pub hunks: Vec<Hunk>,
    /// The 1-based line of the diff where this file's `---` header is.
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    pub old_start: usize,
    pub old_len: usize,
    pub new_start: usize,
    pub new_len: usize,
    pub lines: Vec<HunkLine>,
    /// The 1-based line of the diff where the `@@` header is.
    pub line: usize,
    /// `\ No newline at end of file` followed the old side's last line.
    pub old_no_eol: bool,
    /// … followed the new side's last line.
    pub new_no_eol: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    Context(String),
    Remove(String),
    Add(String),
}

/// Why a diff cannot be read, at which of its lines (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "diff line {}: {}", self.line, self.message)
    }
}

/// Why one hunk (1-based, in its file) does not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HunkError {
    pub hunk: usize,
    /// The diff line of the hunk's header.
    pub diff_line: usize,
    pub message: String,
}

impl FilePatch {
    /// The path the patch is about: the new one, or the old one of a deletion.
    pub fn path(&self) -> &str {
        self.new_path.as_deref().or(self.old_path.as_deref()).unwrap_or_default()
    }

    /// How many lines it adds and removes.
    pub fn counts(&self) -> (usize, usize) {
        let lines = self.hunks.iter().flat_map(|h| &h.lines);
        lines.fold((0, 0), |(a, r), l| match l {
            HunkLine::Add(_) => (a + 1, r),
            HunkLine::Remove(_) => (a, r + 1),
            HunkLine::Context(_) => (a, r),
        })
    }
}

impl Hunk {
    fn header(&self) -> String {
        format!("@@ -{},{} +{},{} @@", self.old_start, self.old_len, self.new_start, self.new_len)
    }

    fn old_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(t) | HunkLine::Remove(t) => Some(t.as_str()),
                HunkLine::Add(_) => None,
            })
            .collect()
    }

    fn new_lines(&self) -> impl Iterator<Item = &str> {
        self.lines.iter().filter_map(|l| match l {
            HunkLine::Context(t) | HunkLine::Add(t) => Some(t.as_str()),
            HunkLine::Remove(_) => None,
        })
    }
}

/// The paths a diff touches, for the permission rules: each file's old and new path, `None`
/// for a diff that cannot be read (so a rule that cannot see its paths does not pass it).
pub fn paths(text: &str) -> Vec<Option<String>> {
    match parse(text) {
        Ok(files) => {
            files.iter().flat_map(|f| [f.old_path.clone(), f.new_path.clone()]).flatten().map(Some).collect::<Vec<_>>()
        }
        Err(_) => vec![None],
    }
}

/// Reads a diff into its files, in order.
pub fn parse(text: &str) -> Result<Vec<FilePatch>, ParseError> {
    // `lines()`, not `split`: the newline that ends the last line does not start an empty one.
    let lines: Vec<&str> = text.lines().collect();
    let err = |line: usize, message: String| ParseError { line, message };
    let mut files: Vec<FilePatch> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let n = i + 1;
        if line.starts_with("rename from ") || line.starts_with("copy from ") {
            return Err(err(
                n,
                "renames and copies are not supported in a diff: use file.move, then a diff of the new path".into(),
            ));
        }
        if line.starts_with("GIT binary patch") || (line.starts_with("Binary files ") && line.ends_with(" differ")) {
            return Err(err(n, "binary patches are not supported".into()));
        }
        if let Some(old) = line.strip_prefix("--- ") {
            let Some(new) = lines.get(i + 1).and_then(|l| l.strip_prefix("+++ ")) else {
                return Err(err(n + 1, "a `--- <old path>` line must be followed by `+++ <new path>`".into()));
            };
            let (old_path, new_path) = header_paths(old, new).map_err(|m| err(n, m))?;
            if let Some(path) = old_path.as_deref().or(new_path.as_deref())
                && files.iter().any(|f| f.path() == path)
            {
                return Err(err(n, format!("{path} appears twice in the diff: put all its hunks under one header")));
            }
            files.push(FilePatch { old_path, new_path, hunks: Vec::new(), line: n });
            i += 2;
            continue;
        }
        if line.starts_with("@@") {
            let Some(file) = files.last_mut() else {
                return Err(err(n, "a hunk before any `--- <old path>` / `+++ <new path>` header".into()));
            };
            let (hunk, next) = parse_hunk(&lines, i)?;
            file.hunks.push(hunk);
            i = next;
            continue;
        }
        i += 1;
    }
    if files.is_empty() {
        return Err(err(1, "no file in the diff: expected `--- a/<path>`, `+++ b/<path>` and `@@ … @@` hunks".into()));
    }
    if let Some(file) = files.iter().find(|f| f.hunks.is_empty()) {
        return Err(err(file.line, format!("{} has no hunk (`@@ -start,count +start,count @@`)", file.path())));
    }
    Ok(files)
}

/// The two header paths, `a/` and `b/` taken off as git writes them, a timestamp after a tab
/// dropped, `/dev/null` read as no file.
fn header_paths(old: &str, new: &str) -> Result<(Option<String>, Option<String>), String> {
    fn clean(raw: &str) -> String {
        let raw = raw.split('\t').next().unwrap_or_default().trim();
        raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')).unwrap_or(raw).to_string()
    }
    let (old, new) = (clean(old), clean(new));
    let null = |p: &str| p == "/dev/null";
    let git_style = (null(&old) || old.starts_with("a/")) && (null(&new) || new.starts_with("b/"));
    let strip = |p: String, prefix: &str| -> Option<String> {
        if null(&p) {
            return None;
        }
        Some(if git_style { p.strip_prefix(prefix).map(str::to_string).unwrap_or(p) } else { p })
    };
    let (old, new) = (strip(old, "a/"), strip(new, "b/"));
    match (&old, &new) {
        (None, None) => Err("both sides are /dev/null: no file".into()),
        (Some(o), Some(n)) if o != n => Err(format!(
            "the old path {o} and the new path {n} differ: renames are not supported in a diff (use file.move, then a diff of the new path)"
        )),
        (Some(p), _) | (_, Some(p)) if p.is_empty() => Err("a header without a path".into()),
        _ => Ok((old, new)),
    }
}

/// One hunk from its `@@` line at `start`; returns it and the index of the line after it.
fn parse_hunk(lines: &[&str], start: usize) -> Result<(Hunk, usize), ParseError> {
    let n = start + 1;
    let header = lines[start];
    let bad = || ParseError {
        line: n,
        message: format!("a hunk header is `@@ -start,count +start,count @@`, got `{header}`"),
    };
    let ranges = header.strip_prefix("@@ ").and_then(|r| r.split_once(" @@")).map(|(r, _)| r).ok_or_else(bad)?;
    let (old, new) = ranges.split_once(' ').ok_or_else(bad)?;
    let range = |text: Option<&str>| -> Option<(usize, usize)> {
        let text = text?;
        match text.split_once(',') {
            Some((s, c)) => Some((s.parse().ok()?, c.parse().ok()?)),
            None => Some((text.parse().ok()?, 1)),
        }
    };
    let (old_start, old_len) = range(old.strip_prefix('-')).ok_or_else(bad)?;
    let (new_start, new_len) = range(new.strip_prefix('+')).ok_or_else(bad)?;
    let mut hunk = Hunk {
        old_start,
        old_len,
        new_start,
        new_len,
        lines: Vec::new(),
        line: n,
        old_no_eol: false,
        new_no_eol: false,
    };
    let (mut old_left, mut new_left) = (old_len, new_len);
    let mut i = start + 1;
    while old_left > 0 || new_left > 0 {
        let Some(&line) = lines.get(i) else {
            return Err(ParseError {
                line: i,
                message: format!(
                    "the diff ends inside the hunk at line {n}: {old_left} old and {new_left} new line(s) missing (its header's counts must match its lines)"
                ),
            });
        };
        // An empty line is a context line whose leading space was lost (editors and models
        // strip trailing blanks).
        let mut chars = line.chars();
        let kind = chars.next();
        let text = chars.as_str();
        let parsed = match kind {
            Some(' ') | None if old_left > 0 && new_left > 0 => HunkLine::Context(text.to_string()),
            Some('-') if old_left > 0 => HunkLine::Remove(text.to_string()),
            Some('+') if new_left > 0 => HunkLine::Add(text.to_string()),
            Some('\\') => {
                mark_no_eol(&mut hunk);
                i += 1;
                continue;
            }
            _ => {
                return Err(ParseError {
                    line: i + 1,
                    message: format!(
                        "the hunk at line {n} expects {old_left} more old and {new_left} more new line(s), got `{}` (its header's counts must match its lines; each line starts with ' ', '-' or '+')",
                        crate::text::cap_chars(line, 80)
                    ),
                });
            }
        };
        match parsed {
            HunkLine::Context(_) => (old_left, new_left) = (old_left - 1, new_left - 1),
            HunkLine::Remove(_) => old_left -= 1,
            HunkLine::Add(_) => new_left -= 1,
        }
        hunk.lines.push(parsed);
        i += 1;
    }
    if lines.get(i).is_some_and(|l| l.starts_with('\\')) {
        mark_no_eol(&mut hunk);
        i += 1;
    }
    Ok((hunk, i))
}

/// `\ No newline at end of file` after the hunk's last line: the side(s) that line is on end
/// without a newline.
fn mark_no_eol(hunk: &mut Hunk) {
    match hunk.lines.last() {
        Some(HunkLine::Context(_)) => (hunk.old_no_eol, hunk.new_no_eol) = (true, true),
        Some(HunkLine::Remove(_)) => hunk.old_no_eol = true,
        Some(HunkLine::Add(_)) => hunk.new_no_eol = true,
        None => {}
    }
}

/// What applying a file's patch gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// `None`: the file is deleted.
    pub content: Option<String>,
    /// Hunks applied away from the line their header names: (hunk, the line it went to).
    pub offsets: Vec<(usize, usize)>,
}

/// Applies `patch` to a file's text (`None`: the file does not exist). Every hunk is tried;
/// the errors of all that do not apply are returned.
pub fn apply(patch: &FilePatch, current: Option<&str>) -> Result<Applied, Vec<HunkError>> {
    let whole = |message: String| vec![HunkError { hunk: 0, diff_line: patch.line, message }];
    let current = match (patch.old_path.is_some(), current) {
        (false, Some(_)) => return Err(whole("the diff creates it (--- /dev/null) but it already exists".into())),
        (true, None) => return Err(whole("no such file".into())),
        (_, current) => current.unwrap_or_default(),
    };
    let crlf = current.split_inclusive('\n').next().is_some_and(|l| l.ends_with("\r\n"));
    let mut ends_with_newline = current.is_empty() || current.ends_with('\n');
    let mut file: Vec<&str> = current.split_inclusive('\n').map(|l| l.trim_end_matches('\n')).collect();
    file.iter_mut().for_each(|l| *l = l.strip_suffix('\r').unwrap_or(l));
    let mut out: Vec<String> = Vec::with_capacity(file.len());
    let mut cursor = 0;
    let mut offset: isize = 0;
    let mut errors = Vec::new();
    let mut offsets = Vec::new();
    for (index, hunk) in patch.hunks.iter().enumerate() {
        let old = hunk.old_lines();
        // `-5,0` inserts after line 5; `-5,3` starts at line 5.
        let stated = if hunk.old_len == 0 { hunk.old_start } else { hunk.old_start.saturating_sub(1) };
        let expected = stated.saturating_add_signed(offset).max(cursor);
        let fits = |at: usize| at + old.len() <= file.len() && file[at..at + old.len()] == old[..];
        let found = if fits(expected) {
            Some(expected)
        } else if old.is_empty() {
            None
        } else {
            (cursor..=file.len().saturating_sub(old.len()))
                .filter(|&at| fits(at))
                .min_by_key(|&at| at.abs_diff(expected))
        };
        let Some(at) = found else {
            errors.push(HunkError {
                hunk: index + 1,
                diff_line: hunk.line,
                message: mismatch(hunk, &file, expected, &old),
            });
            continue;
        };
        if at != stated {
            offsets.push((index + 1, at + 1));
        }
        offset = at as isize - stated as isize;
        out.extend(file[cursor..at].iter().map(|l| l.to_string()));
        out.extend(hunk.new_lines().map(str::to_string));
        cursor = at + old.len();
        if cursor == file.len() {
            if hunk.new_no_eol {
                ends_with_newline = false;
            } else if hunk.old_no_eol {
                ends_with_newline = true;
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    out.extend(file[cursor..].iter().map(|l| l.to_string()));
    if patch.new_path.is_none() {
        if !out.is_empty() {
            return Err(whole(format!(
                "the diff deletes it (+++ /dev/null) but {} of its lines are not removed by the hunks",
                out.len()
            )));
        }
        return Ok(Applied { content: None, offsets });
    }
    let newline = if crlf { "\r\n" } else { "\n" };
    let mut text = out.join(newline);
    if !out.is_empty() && ends_with_newline {
        text.push_str(newline);
    }
    Ok(Applied { content: Some(text), offsets })
}

/// Why a hunk's lines are not where it says (nor anywhere after the previous hunk): the first
/// line that differs at its stated place.
fn mismatch(hunk: &Hunk, file: &[&str], at: usize, old: &[&str]) -> String {
    let header = hunk.header();
    if at + old.len() > file.len() && !file[at.min(file.len())..].iter().zip(old).any(|(f, o)| f != o) {
        return format!(
            "{header}: its {} context/removed line(s) from line {} run past the end of the file ({} lines)",
            old.len(),
            at + 1,
            file.len()
        );
    }
    let differs = (0..old.len()).find(|&k| file.get(at + k) != Some(&old[k]));
    match differs {
        Some(k) => format!(
            "{header}: line {} is `{}` where the diff expects `{}`, and the hunk's lines are found nowhere after the previous hunk",
            at + k + 1,
            crate::text::cap_chars(file.get(at + k).copied().unwrap_or("<end of file>"), 120),
            crate::text::cap_chars(old[k], 120)
        ),
        None => format!("{header}: overlaps the previous hunk"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies a one-file diff to `before`, expecting `after` (`Err` with the messages).
    fn check(before: Option<&str>, diff: &str, after: Result<Option<&str>, &[&str]>) {
        let files = parse(diff).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(files.len(), 1);
        let got = apply(&files[0], before)
            .map(|a| a.content)
            .map_err(|e| e.into_iter().map(|e| e.message).collect::<Vec<_>>());
        match after {
            Ok(after) => assert_eq!(got, Ok(after.map(str::to_string))),
            Err(messages) => {
                let got = got.expect_err("should not apply");
                assert_eq!(got.len(), messages.len(), "{got:?}");
                for (g, m) in got.iter().zip(messages) {
                    assert!(g.contains(m), "`{g}` should contain `{m}`");
                }
            }
        }
    }

    #[test]
    fn a_hunk_replaces_a_line_with_its_context() {
        let diff = "--- a/x.txt\n+++ b/x.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n";
        check(Some("one\ntwo\nthree\n"), diff, Ok(Some("one\nTWO\nthree\n")));
    }

    #[test]
    fn a_hunk_at_the_wrong_line_applies_at_the_nearest_match() {
        let diff = "--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n c\n-d\n+D\n";
        check(Some("a\nb\nc\nd\n"), diff, Ok(Some("a\nb\nc\nD\n")));
    }

    #[test]
    fn context_that_matches_nowhere_is_rejected_naming_the_line() {
        let diff = "--- a/x\n+++ b/x\n@@ -2,2 +2,2 @@\n b\n-c\n+C\n";
        check(Some("a\nb\nX\n"), diff, Err(&["line 3 is `X` where the diff expects `c`"]));
    }

    #[test]
    fn every_bad_hunk_is_reported() {
        let diff = "--- a/x\n+++ b/x\n@@ -1,1 +1,1 @@\n-nope\n+N\n@@ -3,1 +3,1 @@\n-c\n+C\n@@ -4,1 +4,1 @@\n-zip\n+Z\n";
        check(Some("a\nb\nc\nd\n"), diff, Err(&["@@ -1,1 +1,1 @@", "@@ -4,1 +4,1 @@"]));
    }

    #[test]
    fn new_and_deleted_files() {
        check(None, "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n", Ok(Some("hello\nworld\n")));
        check(Some("x\n"), "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+y\n", Err(&["already exists"]));
        check(Some("bye\n"), "--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n", Ok(None));
        check(Some("bye\nstay\n"), "--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n", Err(&["not removed"]));
        check(None, "--- a/gone\n+++ b/gone\n@@ -1 +1 @@\n-a\n+b\n", Err(&["no such file"]));
    }

    #[test]
    fn newline_at_end_of_file_markers() {
        let add_eol = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-last\n\\ No newline at end of file\n+last\n";
        check(Some("last"), add_eol, Ok(Some("last\n")));
        let drop_eol = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-last\n+last\n\\ No newline at end of file\n";
        check(Some("last\n"), drop_eol, Ok(Some("last")));
        // A model that leaves the markers out keeps the file's ending.
        check(Some("a\nb"), "--- a/x\n+++ b/x\n@@ -2 +2 @@\n-b\n+B\n", Ok(Some("a\nB")));
    }

    #[test]
    fn crlf_files_keep_their_line_endings() {
        check(Some("a\r\nb\r\n"), "--- a/x\n+++ b/x\n@@ -1,2 +1,3 @@\n a\n+mid\n b\n", Ok(Some("a\r\nmid\r\nb\r\n")));
    }

    #[test]
    fn an_empty_line_in_a_hunk_is_blank_context() {
        check(Some("a\n\nb\n"), "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n\n-b\n+B\n", Ok(Some("a\n\nB\n")));
    }

    #[test]
    fn several_files_and_the_paths_rules_see() {
        let diff = "Here is the change:\ndiff --git a/src/a.rs b/src/a.rs\nindex 1..2 100644\n--- a/src/a.rs\n+++ b/src/a.rs\n@@ -1 +1 @@\n-x\n+y\n--- /dev/null\n+++ b/docs/new.md\n@@ -0,0 +1 @@\n+hi\n";
        let files = parse(diff).unwrap();
        assert_eq!(files.iter().map(FilePatch::path).collect::<Vec<_>>(), ["src/a.rs", "docs/new.md"]);
        assert_eq!(paths(diff), [Some("src/a.rs".into()), Some("src/a.rs".into()), Some("docs/new.md".into())]);
        assert_eq!(paths("not a diff"), [None]);
    }

    #[test]
    fn malformed_diffs_name_their_line() {
        let bad = |diff: &str, line: usize, text: &str| {
            let e = parse(diff).expect_err("should not parse");
            assert_eq!(e.line, line, "{e}");
            assert!(e.message.contains(text), "{e}");
        };
        bad("--- a/x\n@@ -1 +1 @@\n", 2, "followed by `+++");
        bad("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n+b\n", 5, "diff ends inside the hunk");
        bad("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n-b\n+c\n", 5, "expects 0 more old and 1 more new");
        bad("--- a/x\n+++ b/x\n@@ one @@\n", 3, "hunk header");
        bad("--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n", 1, "renames are not supported");
        bad("--- a/x\n+++ b/x\n", 1, "has no hunk");
        bad("@@ -1 +1 @@\n-a\n+b\n", 1, "before any");
        bad("hello", 1, "no file in the diff");
        bad("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-b\n+c\n", 6, "appears twice");
    }
}
