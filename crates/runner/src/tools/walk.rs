//! The tree walk that `file.list`, `file.glob` and `file.grep` share: depth-first, each
//! directory's entries sorted by name, every subdirectory opened from its parent's fd with
//! `O_NOFOLLOW` (so the walk never leaves the directory it started from, however the tree is
//! renamed or relinked meanwhile), links reported and never followed, `.gitignore` rules
//! (`ignore`'s matcher, with git's precedence) and include/exclude globs (`globset`) applied,
//! and bounded in entries visited and in time. Entries the call's path rules cover
//! (`guard.rs`, matched on where each entry really is) are withheld and counted.
//!
//! Why not `ignore::WalkBuilder`: it opens every directory by its path string, which a
//! concurrent rename can redirect outside the roots; here no path string is ever opened.
//! Names that are not UTF-8 are matched by their bytes and shown lossily.

use std::ffi::{CStr, CString, OsStr};
use std::io::Read;
use std::ops::ControlFlow;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use globset::{GlobBuilder, GlobMatcher};
use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustix::fs::{AtFlags, FileType};

use super::ToolContext;
use super::guard::Withheld;
use crate::paths::{open_child_dir, open_child_file};
use crate::toolpack::ToolError;

/// A `.gitignore` larger than this is not read (git itself has no limit; this is a guard).
const MAX_GITIGNORE_BYTES: u64 = 1 << 20;
/// How deep the search tools descend at most.
pub(super) const MAX_SEARCH_DEPTH: u64 = 64;
/// Entries a search tool looks at before it stops, whatever it found.
pub(super) const MAX_SEARCH_VISITS: u64 = 200_000;
/// How long a search tool walks before it stops and reports what it has.
pub(super) const SEARCH_TIME: Duration = Duration::from_secs(20);

/// Which entries a walk reports.
pub(super) struct Filters {
    gitignore: bool,
    include: Option<GlobMatcher>,
    exclude: Option<GlobMatcher>,
}

impl Filters {
    /// `include` selects files (not directories); `exclude` drops files and whole directories.
    /// A glob without `/` matches an entry's name at any depth, one with `/` its path relative
    /// to where the walk started; `*` does not cross `/`, `**` does.
    pub(super) fn new(gitignore: bool, include: Option<&str>, exclude: Option<&str>) -> Result<Filters, ToolError> {
        Ok(Filters {
            gitignore,
            include: include.map(|g| glob("include", g)).transpose()?,
            exclude: exclude.map(|g| glob("exclude", g)).transpose()?,
        })
    }

    pub(super) fn has_include(&self) -> bool {
        self.include.is_some()
    }

    fn matches(glob: &GlobMatcher, relative: &[u8], name: &[u8]) -> bool {
        glob.is_match(Path::new(OsStr::from_bytes(relative))) || glob.is_match(Path::new(OsStr::from_bytes(name)))
    }
}

/// A glob as the tools take it (`Invalid <key> glob ...` when it is not one).
pub(super) fn glob(key: &str, pattern: &str) -> Result<GlobMatcher, ToolError> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| ToolError::Failed(format!("Invalid {key} glob {pattern:?}: {}", e.kind())))
}

/// One entry the walk reports.
pub(super) struct Entry<'a> {
    /// The directory it is in, opened beneath the walk's start.
    pub dir: BorrowedFd<'a>,
    /// Its name in `dir`, as the filesystem has it.
    pub name: &'a CStr,
    /// Its path relative to the start, `/`-separated, lossily UTF-8.
    pub relative: String,
    /// The same, as the filesystem has it (for matching).
    pub raw_relative: &'a [u8],
    /// Its type, a link never resolved.
    pub kind: FileType,
}

/// How far a walk goes.
pub(super) struct Limits {
    /// 1: only the start's own entries.
    pub max_depth: u64,
    /// Entries looked at (reported or not) before the walk stops.
    pub max_visits: u64,
    pub deadline: Instant,
}

impl Limits {
    /// The limits of the search tools.
    pub(super) fn search() -> Limits {
        Limits { max_depth: MAX_SEARCH_DEPTH, max_visits: MAX_SEARCH_VISITS, deadline: Instant::now() + SEARCH_TIME }
    }
}

/// Why a walk ended before it had seen everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stopped {
    Visits,
    Time,
    /// The visitor asked to stop.
    Visitor,
}

/// What a walk met besides its entries.
#[derive(Default)]
pub(super) struct Summary {
    pub unreadable: u64,
    pub stopped: Option<Stopped>,
    /// Entries the path rules withheld (never shown, never entered).
    pub withheld: Withheld,
}

impl Summary {
    /// A line for the end of a tool's output when the walk did not see everything.
    pub(super) fn note(&self, limits: &Limits) -> Option<String> {
        let mut notes = Vec::new();
        match self.stopped {
            Some(Stopped::Visits) => {
                notes.push(format!("[stopped after {} entries; narrow the path]", limits.max_visits))
            }
            Some(Stopped::Time) => notes.push("[stopped: the walk took too long; narrow the path]".to_string()),
            _ => {}
        }
        if self.unreadable > 0 {
            notes.push(format!("[{} directories could not be read]", self.unreadable));
        }
        notes.extend(self.withheld.note());
        (!notes.is_empty()).then(|| notes.join("\n"))
    }
}

/// Walk below the directory `start` (opened beneath the roots; `shown` is its tool path),
/// calling `visit` for each entry that passes `filters`, a directory before what is in it.
pub(super) fn walk(
    ctx: &ToolContext,
    start: BorrowedFd<'_>,
    shown: &str,
    filters: &Filters,
    limits: &Limits,
    visit: &mut dyn FnMut(&Entry<'_>) -> ControlFlow<()>,
) -> std::io::Result<Summary> {
    let ignores = if filters.gitignore { ancestor_ignores(ctx, shown) } else { Vec::new() };
    let mut walker = Walker { ctx, filters, limits, ignores, visited: 0, summary: Summary::default(), visit };
    let entries = read_sorted(start)?;
    let _ = walker.visit_dir(start, entries, Path::new(shown), b"", 0);
    Ok(walker.summary)
}

struct Walker<'a, 'v> {
    ctx: &'a ToolContext,
    filters: &'a Filters,
    limits: &'a Limits,
    /// The `.gitignore`s that apply here, outermost first.
    ignores: Vec<Gitignore>,
    visited: u64,
    summary: Summary,
    visit: &'v mut dyn FnMut(&Entry<'_>) -> ControlFlow<()>,
}

impl Walker<'_, '_> {
    fn visit_dir(
        &mut self,
        dir: BorrowedFd<'_>,
        entries: Vec<(CString, FileType)>,
        path: &Path,
        relative: &[u8],
        depth: u64,
    ) -> ControlFlow<()> {
        let pushed = self.filters.gitignore && {
            let own = read_gitignore(dir, path);
            own.map(|g| self.ignores.push(g)).is_some()
        };
        let result = self.visit_entries(dir, entries, path, relative, depth);
        if pushed {
            self.ignores.pop();
        }
        result
    }

    fn visit_entries(
        &mut self,
        dir: BorrowedFd<'_>,
        entries: Vec<(CString, FileType)>,
        path: &Path,
        relative: &[u8],
        depth: u64,
    ) -> ControlFlow<()> {
        let place = self.ctx.place_of(dir);
        for (name, kind) in entries {
            if self.visited >= self.limits.max_visits {
                return self.stop(Stopped::Visits);
            }
            if Instant::now() >= self.limits.deadline {
                return self.stop(Stopped::Time);
            }
            self.visited += 1;
            let bytes = name.to_bytes();
            let is_dir = kind == FileType::Directory;
            let child_path = path.join(OsStr::from_bytes(bytes));
            if self.filters.gitignore && ((is_dir && bytes == b".git") || self.ignored(&child_path, is_dir)) {
                continue;
            }
            let child_relative = if relative.is_empty() { bytes.to_vec() } else { [relative, b"/", bytes].concat() };
            if let Some(exclude) = &self.filters.exclude
                && Filters::matches(exclude, &child_relative, bytes)
            {
                continue;
            }
            if !is_dir
                && let Some(include) = &self.filters.include
                && !Filters::matches(include, &child_relative, bytes)
            {
                continue;
            }
            // Matched on where the entry really is (the directory's fd, its name there), a
            // link also on where it leads; a withheld directory is not entered.
            if let Some(refusal) =
                self.ctx.withheld_entry(&place, &String::from_utf8_lossy(bytes), kind == FileType::Symlink)
            {
                self.summary.withheld.count(&refusal);
                continue;
            }
            let entry = Entry {
                dir,
                name: &name,
                relative: String::from_utf8_lossy(&child_relative).into_owned(),
                raw_relative: &child_relative,
                kind,
            };
            if (self.visit)(&entry).is_break() {
                return self.stop(Stopped::Visitor);
            }
            if is_dir && depth + 1 < self.limits.max_depth {
                let opened = open_child_dir(dir, name.as_c_str());
                let listed = opened.and_then(|child| Ok((read_sorted(child.as_fd())?, child)));
                match listed {
                    Ok((entries, child)) => {
                        if self.visit_dir(child.as_fd(), entries, &child_path, &child_relative, depth + 1).is_break() {
                            return ControlFlow::Break(());
                        }
                    }
                    Err(_) => self.summary.unreadable += 1,
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn stop(&mut self, why: Stopped) -> ControlFlow<()> {
        self.summary.stopped.get_or_insert(why);
        ControlFlow::Break(())
    }

    /// Git's precedence: the innermost `.gitignore` with a rule for the path decides.
    fn ignored(&self, path: &Path, is_dir: bool) -> bool {
        for gitignore in self.ignores.iter().rev() {
            match gitignore.matched(path, is_dir) {
                Match::None => continue,
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
            }
        }
        false
    }
}

/// The entries of a directory (not `.` and `..`), sorted by their names as shown.
fn read_sorted(dir: BorrowedFd<'_>) -> std::io::Result<Vec<(CString, FileType)>> {
    let mut entries = Vec::new();
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
        entries.push((raw.to_owned(), kind));
    }
    entries.sort_by(|a, b| String::from_utf8_lossy(a.0.to_bytes()).cmp(&String::from_utf8_lossy(b.0.to_bytes())));
    Ok(entries)
}

/// The `.gitignore` of the directory `dir` (whose path is `path`), if it has a readable one.
fn read_gitignore(dir: BorrowedFd<'_>, path: &Path) -> Option<Gitignore> {
    let file = open_child_file(dir, ".gitignore").ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    parse_gitignore(file, path)
}

fn parse_gitignore(file: std::fs::File, path: &Path) -> Option<Gitignore> {
    let mut bytes = Vec::new();
    file.take(MAX_GITIGNORE_BYTES).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let mut builder = GitignoreBuilder::new(path);
    for line in text.lines() {
        // A line git would not understand is skipped, as git skips it.
        let _ = builder.add_line(None, line);
    }
    builder.build().ok().filter(|g| !g.is_empty())
}

/// The `.gitignore`s of the directories above `shown`, up to the repository's top (the first
/// one holding `.git`) or the root it is under, outermost first. Each is opened beneath the
/// read roots like any `file.read`.
fn ancestor_ignores(ctx: &ToolContext, shown: &str) -> Vec<Gitignore> {
    let mut found = Vec::new();
    let mut dir = shown.to_string();
    while let Some((parent, _)) = dir.rsplit_once('/') {
        if parent.is_empty() {
            break;
        }
        dir = parent.to_string();
        if let Ok(opened) = ctx.open_read_unguarded(&format!("{dir}/.gitignore"))
            && opened.meta.is_file()
            && let Some(gitignore) = parse_gitignore(opened.file, Path::new(&dir))
        {
            found.push(gitignore);
        }
        if ctx.open_read_unguarded(&format!("{dir}/.git")).is_ok() || is_top_root(&dir) {
            break;
        }
    }
    found.reverse();
    found
}

fn is_top_root(dir: &str) -> bool {
    [crate::paths::WORKSPACE, crate::paths::ARTIFACTS, crate::paths::MNT].contains(&dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_without_a_slash_match_names_at_any_depth() {
        let g = glob("include", "*.rs").unwrap();
        assert!(Filters::matches(&g, b"src/a/main.rs", b"main.rs"));
        assert!(!Filters::matches(&g, b"src/a/main.rsx", b"main.rsx"));
        let g = glob("include", "src/*.rs").unwrap();
        assert!(Filters::matches(&g, b"src/main.rs", b"main.rs"));
        assert!(!Filters::matches(&g, b"src/a/main.rs", b"main.rs"));
        let g = glob("include", "src/**/*.rs").unwrap();
        assert!(Filters::matches(&g, b"src/a/main.rs", b"main.rs"));
    }

    #[test]
    fn a_bad_glob_is_refused_with_its_reason() {
        let err = glob("include", "a[").unwrap_err();
        assert!(err.message().starts_with("Invalid include glob \"a[\": "), "{err}");
    }
}
