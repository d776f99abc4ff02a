//! `file.grep`: search file contents for a regular expression with ripgrep's own crates
//! (`grep-regex`, `grep-searcher`), in one file or every file below a directory (the walk is
//! [`super::walk`]'s: `.gitignore` respected, links never followed, an `include` glob). Output
//! modes: `matches` (`path:line:text`, context lines as `path-line-text`, `--` between
//! groups), `files` (paths with a match) and `counts` (`path:matching lines`). Files with a
//! NUL byte are binary and skipped, as ripgrep does. Bounded by `maxMatches`, the output size,
//! the entries walked and time.

use std::ops::ControlFlow;
use std::os::fd::AsFd;
use std::time::Instant;

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use rustix::fs::FileType;
use serde_json::{Map, Value, json};

use super::file_glob::join;
use super::walk::{self, Filters, Limits};
use super::{ToolContext, bool_field, count, io_error, optional_string, positive, string_field};
use crate::paths::open_child_file;
use crate::rpc::ToolOutput;
use crate::toolpack::ToolError;

const DEFAULT_MAX_MATCHES: u64 = 100;
const MAX_MAX_MATCHES: u64 = 2000;
const MAX_CONTEXT: u64 = 10;
const MAX_OUTPUT_BYTES: usize = 50_000;
const MAX_LINE_CHARS: usize = 500;
/// A line longer than this (a minified file, a huge log line) ends that file's search.
const MAX_LINE_BUFFER: usize = 16 << 20;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Matches,
    Files,
    Counts,
}

pub(super) fn run(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let pattern = string_field(input, "pattern")?;
    let path = optional_string(input, "path")?.unwrap_or(".");
    let mode = match optional_string(input, "outputMode")?.unwrap_or("matches") {
        "matches" => Mode::Matches,
        "files" => Mode::Files,
        "counts" => Mode::Counts,
        other => return Err(ToolError::Failed(format!("outputMode must be matches, files or counts: {other}"))),
    };
    let max_matches = positive(input, "maxMatches", DEFAULT_MAX_MATCHES, MAX_MAX_MATCHES)?;
    let (before, after) = match mode {
        Mode::Matches => {
            (count(input, "contextBefore", 0, MAX_CONTEXT)?, count(input, "contextAfter", 0, MAX_CONTEXT)?)
        }
        _ => (0, 0),
    };
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(bool_field(input, "caseInsensitive", false)?)
        .line_terminator(Some(b'\n'))
        .build(pattern)
        .map_err(|e| ToolError::Failed(format!("Invalid regex {pattern:?}: {e}")))?;
    let filters = Filters::new(bool_field(input, "respectGitignore", true)?, optional_string(input, "include")?, None)?;
    let mut searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(b'\x00'))
        .line_number(true)
        .before_context(before as usize)
        .after_context(after as usize)
        .stop_on_nonmatch(false)
        .heap_limit(Some(MAX_LINE_BUFFER))
        .build();
    let limits = Limits::search();
    let mut search = Search {
        matcher,
        mode,
        max: max_matches,
        context: before + after > 0,
        deadline: limits.deadline,
        out: Vec::new(),
        out_bytes: 0,
        records: 0,
        matching_lines: 0,
        files: 0,
        binary: 0,
        truncated: false,
    };
    let start = ctx.open_read(path)?;
    let mut note = None;
    if start.meta.is_dir() {
        let summary = walk::walk(ctx, start.file.as_fd(), &start.shown, &filters, &limits, &mut |entry| {
            if entry.kind != FileType::RegularFile {
                return ControlFlow::Continue(());
            }
            // Never through a link swapped in since the directory was read; a FIFO is opened
            // without waiting and then left alone.
            if let Ok(file) = open_child_file(entry.dir, entry.name)
                && file.metadata().is_ok_and(|m| m.is_file())
            {
                search.file(&mut searcher, &file, &join(&start.shown, &entry.relative));
            }
            if search.full() { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        })
        .map_err(|e| io_error("search", &start.shown, &e))?;
        note = summary.note(&limits);
    } else if start.meta.is_file() {
        search.file(&mut searcher, &start.file, &start.shown);
    } else {
        return Err(ToolError::Failed(format!(
            "Cannot search {}: it is not a regular file or a directory",
            start.shown
        )));
    }
    let mut output = if search.out.is_empty() {
        format!("(no matches for {pattern:?} in {})", start.shown)
    } else {
        search.out.join("\n")
    };
    if search.truncated {
        output.push_str(&format!("\n[stopped at {} results; raise maxMatches or narrow the search]", search.records));
    }
    let timed_out = Instant::now() >= search.deadline;
    if timed_out {
        search.truncated = true;
        output.push_str(&format!("\n[stopped after {} s; narrow the search]", walk::SEARCH_TIME.as_secs()));
    }
    if search.binary > 0 {
        let plural = if search.binary == 1 { "" } else { "s" };
        output.push_str(&format!("\n[{} binary file{plural} skipped]", search.binary));
    }
    if let Some(note) = note {
        output.push('\n');
        output.push_str(&note);
    }
    let metadata = json!({
        "path": start.shown,
        "pattern": pattern,
        "outputMode": optional_string(input, "outputMode")?.unwrap_or("matches"),
        "matches": search.matching_lines,
        "files": search.files,
        "binarySkipped": search.binary,
        "truncated": search.truncated,
    });
    Ok(ToolOutput {
        title: Some(format!("{pattern} in {}", start.shown)),
        output,
        metadata: metadata.as_object().cloned(),
        ..ToolOutput::default()
    })
}

/// The results so far, across files.
struct Search {
    matcher: RegexMatcher,
    mode: Mode,
    /// Matching lines (`matches`) or files (`files`, `counts`) to report at most.
    max: u64,
    context: bool,
    deadline: Instant,
    out: Vec<String>,
    out_bytes: usize,
    /// Records reported: matching lines or files, by mode.
    records: u64,
    matching_lines: u64,
    files: u64,
    binary: u64,
    truncated: bool,
}

impl Search {
    fn full(&self) -> bool {
        self.truncated || Instant::now() >= self.deadline
    }

    /// Search one file; its results join the output only if it turned out not to be binary.
    fn file(&mut self, searcher: &mut Searcher, file: &std::fs::File, shown: &str) {
        if self.full() {
            return;
        }
        let matcher = self.matcher.clone();
        let (records, truncated) = (self.records, self.truncated);
        let reader = UntilDeadline { file, deadline: self.deadline };
        let mut sink = FileSink { search: self, shown, lines: Vec::new(), matched: 0, binary: false, broke: false };
        // A read error (or the deadline, or a line past the buffer limit) ends this file's
        // search; what was found before it stays.
        let _ = searcher.search_reader(&matcher, reader, &mut sink);
        let FileSink { lines, matched, binary, .. } = sink;
        if binary {
            // What it matched before the NUL byte was found does not count.
            (self.records, self.truncated) = (records, truncated);
            self.binary += 1;
            return;
        }
        if matched == 0 {
            return;
        }
        self.files += 1;
        self.matching_lines += matched;
        let lines = match self.mode {
            Mode::Matches => lines,
            Mode::Files => vec![shown.to_string()],
            Mode::Counts => vec![format!("{shown}:{matched}")],
        };
        if self.mode != Mode::Matches {
            self.records += 1;
            if self.records >= self.max {
                self.truncated = true;
            }
        }
        if self.context && !self.out.is_empty() {
            self.push("--".to_string());
        }
        for line in lines {
            self.push(line);
        }
    }

    fn push(&mut self, line: String) {
        if self.out_bytes + line.len() + 1 > MAX_OUTPUT_BYTES {
            self.truncated = true;
            return;
        }
        self.out_bytes += line.len() + 1;
        self.out.push(line);
    }
}

/// A file that stops reading at the deadline, so a huge file without matches ends in time too.
struct UntilDeadline<'a> {
    file: &'a std::fs::File,
    deadline: Instant,
}

impl std::io::Read for UntilDeadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if Instant::now() >= self.deadline {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "search deadline"));
        }
        self.file.read(buf)
    }
}

struct FileSink<'a> {
    search: &'a mut Search,
    shown: &'a str,
    lines: Vec<String>,
    matched: u64,
    binary: bool,
    broke: bool,
}

impl FileSink<'_> {
    fn line(&self, separator: char, number: Option<u64>, bytes: &[u8]) -> String {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end_matches(['\n', '\r']);
        let text = match text.char_indices().nth(MAX_LINE_CHARS) {
            Some((end, _)) => format!("{}... (line truncated)", &text[..end]),
            None => text.to_string(),
        };
        format!("{}{separator}{}{separator}{text}", self.shown, number.unwrap_or(0))
    }
}

impl Sink for FileSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, found: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        if Instant::now() >= self.search.deadline {
            return Ok(false);
        }
        match self.search.mode {
            // One match is enough to list the file.
            Mode::Files => {
                self.matched = 1;
                Ok(false)
            }
            Mode::Counts => {
                self.matched += 1;
                Ok(true)
            }
            Mode::Matches => {
                if self.search.records >= self.search.max {
                    self.search.truncated = true;
                    self.broke = true;
                    return Ok(false);
                }
                self.search.records += 1;
                self.matched += 1;
                self.lines.push(self.line(':', found.line_number(), found.bytes()));
                Ok(true)
            }
        }
    }

    fn context(&mut self, _: &Searcher, context: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        if !self.broke {
            self.lines.push(self.line('-', context.line_number(), context.bytes()));
        }
        Ok(Instant::now() < self.search.deadline)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, std::io::Error> {
        self.lines.push("--".to_string());
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, std::io::Error> {
        self.binary = true;
        Ok(false)
    }
}
