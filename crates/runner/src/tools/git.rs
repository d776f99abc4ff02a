//! The git pack's read-only tools, `git.status`, `git.diff` and `git.log`, with gitoxide
//! (`gix`) inside the runner, so they work in any image, the minimal one without a `git`
//! binary included. Each takes a `path`: the repository is the nearest directory at or above it
//! holding `.git`, searched only up to the root the path is under (`/workspace`, `/artifacts`,
//! `/mnt`), and only changes (or commits) touching `path` are shown.
//!
//! Confinement: the repository's directory is found through [`crate::paths`] like any read;
//! gix then reads the repository by its path, so the repository and its git directory, once
//! opened, must lie beneath the roots on disk (a `.git` file or link pointing elsewhere is
//! refused), and gix is opened isolated (no system or user configuration, no environment).
//! Worktree content for a diff is read through [`crate::paths`] again. Nothing is written:
//! status does not refresh the index. Changes to paths the call's path rules cover are
//! withheld and counted (`guard.rs`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gix::bstr::ByteSlice;
use gix::status::UntrackedFiles;
use gix::status::index_worktree::Item as WorktreeItem;
use gix::status::plumbing::index_as_worktree_with_renames::Summary;
use serde_json::{Map, Value, json};

use super::guard::Withheld;
use super::{ToolContext, bool_field, cut_to_bytes, optional_string, positive};
use crate::paths::{ARTIFACTS, MNT, PathRefusal, Roots, WORKSPACE};
use crate::rpc::ToolOutput;
use crate::toolpack::ToolError;

const MAX_STATUS_ENTRIES: usize = 500;
const DEFAULT_DIFF_BYTES: u64 = 50_000;
const MAX_DIFF_BYTES: u64 = 200_000;
/// A file larger than this is reported as changed, not diffed.
const MAX_DIFF_FILE_BYTES: u64 = 4 << 20;
const DEFAULT_LOG: u64 = 20;
const MAX_LOG: u64 = 200;
/// Commits a path-filtered log looks at before it stops.
const MAX_LOG_WALK: usize = 20_000;
const LOG_TIME: Duration = Duration::from_secs(20);

/// An opened repository and where the call's `path` is in it.
struct Repo {
    repo: gix::Repository,
    /// The worktree's top as a tool path.
    top: String,
    /// The call's path relative to `top` (`""` for all of it).
    filter: String,
}

impl Repo {
    fn open(ctx: &ToolContext, input: &Map<String, Value>) -> Result<Repo, ToolError> {
        let path = optional_string(input, "path")?.unwrap_or(".");
        let shown = Roots::normalize(path);
        // A path that is gone (a deleted file's history) is looked for from its nearest parent.
        let mut existing = shown.clone();
        let start = loop {
            match ctx.roots.open(&existing, &[WORKSPACE, ARTIFACTS, MNT]) {
                Ok(start) => break start,
                Err(PathRefusal::Io(e))
                    if e.kind() == std::io::ErrorKind::NotFound && existing.matches('/').count() > 1 =>
                {
                    existing = parent(&existing).to_string();
                }
                Err(refusal) => return Err(ctx.read_refusal(&existing, refusal)),
            }
        };
        let mut dir = if start.meta.is_dir() { existing } else { parent(&existing).to_string() };
        let top = loop {
            if ctx.open_read(&format!("{dir}/.git")).is_ok() {
                break dir;
            }
            if [WORKSPACE, ARTIFACTS, MNT].contains(&dir.as_str()) || dir.matches('/').count() <= 1 {
                return Err(ToolError::Failed(format!(
                    "Not a git repository (nor any parent up to {}): {shown}",
                    top_root(&shown)
                )));
            }
            dir = parent(&dir).to_string();
        };
        let disk =
            ctx.roots.to_disk(&top).ok_or_else(|| ToolError::Failed(format!("Not a git repository: {shown}")))?;
        let options = gix::open::Options::isolated();
        let repo = gix::open_opts(&disk, options).map_err(|e| {
            ToolError::Failed(format!("Cannot open the git repository at {top}: {}", one_line(&e.to_string())))
        })?;
        let beneath = ctx.disk_roots();
        for (what, place) in [("git directory", Some(repo.git_dir())), ("worktree", repo.workdir())] {
            let real = place.and_then(|p| std::fs::canonicalize(p).ok());
            if !real.as_deref().is_some_and(|real| beneath.iter().any(|root| real.starts_with(root))) {
                return Err(ToolError::Failed(format!(
                    "Cannot open the git repository at {top}: its {what} is outside the roots"
                )));
            }
        }
        let filter = shown.strip_prefix(&top).unwrap_or_default().trim_start_matches('/').to_string();
        Ok(Repo { repo, top, filter })
    }

    /// Whether the repository-relative `path` is the call's path or below it.
    fn wanted(&self, path: &[u8]) -> bool {
        let filter = self.filter.as_bytes();
        filter.is_empty() || path == filter || (path.starts_with(filter) && path.get(filter.len()) == Some(&b'/'))
    }

    fn shown_filter(&self) -> String {
        if self.filter.is_empty() { self.top.clone() } else { format!("{}/{}", self.top, self.filter) }
    }

    /// `On branch x` (or detached, or no commits yet).
    fn head_line(&self) -> String {
        let head = self.repo.head_name().ok().flatten().map(|name| name.shorten().to_string());
        let id = self.repo.head_id().ok().map(|id| id.shorten_or_id().to_string());
        match (head, id) {
            (Some(branch), Some(id)) => format!("On branch {branch} ({id})"),
            (Some(branch), None) => format!("On branch {branch} (no commits yet)"),
            (None, Some(id)) => format!("HEAD detached at {id}"),
            (None, None) => "No HEAD".to_string(),
        }
    }

    /// The changes between `HEAD` and the index (staged) and between the index and the worktree.
    fn changes(&self, ctx: &ToolContext) -> Result<Changes, ToolError> {
        let failed = |e: gix::Error| {
            ToolError::Failed(format!("git status failed in {}: {}", self.top, one_line(&e.to_string())))
        };
        let items = self
            .repo
            .status(gix::progress::Discard)
            .map_err(failed)?
            .untracked_files(UntrackedFiles::Collapsed)
            .index_worktree_rewrites(None)
            .tree_index_track_renames(gix::status::tree_index::TrackRenames::Disabled)
            .into_iter(None)
            .map_err(failed)?;
        let mut changes = Changes::default();
        for item in items {
            let item = item.map_err(failed)?;
            match item {
                gix::status::Item::TreeIndex(change) => {
                    let path = change.location().to_vec();
                    if !self.wanted(&path) {
                        continue;
                    }
                    let old = change.lhs_fields().map(|(_, _, _, id)| id.to_owned());
                    let new = change.rhs_fields().map(|(_, _, _, id)| id.to_owned());
                    let mark = match (&old, &new) {
                        (None, _) => 'A',
                        (_, None) => 'D',
                        _ => 'M',
                    };
                    changes.staged.push(Change { mark, path, old, new_in_worktree: false, new });
                }
                gix::status::Item::IndexWorktree(item) => {
                    let path = item.rela_path().to_vec();
                    if !self.wanted(&path) {
                        continue;
                    }
                    let Some(summary) = item.summary() else { continue };
                    let mark = match summary {
                        Summary::Added => {
                            changes.untracked.push(path);
                            continue;
                        }
                        Summary::Removed => 'D',
                        Summary::Modified => 'M',
                        Summary::TypeChange => 'T',
                        Summary::Conflict => 'U',
                        Summary::IntentToAdd => 'A',
                        Summary::Renamed | Summary::Copied => 'R',
                    };
                    let old = match &item {
                        WorktreeItem::Modification { entry, .. } => Some(entry.id),
                        _ => None,
                    };
                    changes.unstaged.push(Change { mark, path, old, new_in_worktree: mark != 'D', new: None });
                }
            }
        }
        changes.staged.sort_by(|a, b| a.path.cmp(&b.path));
        changes.unstaged.sort_by(|a, b| a.path.cmp(&b.path));
        changes.untracked.sort();
        self.withhold(ctx, &mut changes);
        Ok(changes)
    }

    /// Leave out the changes whose paths the call's path rules cover, matched on where the
    /// worktree really is (its directory resolved, the entry's path in it).
    fn withhold(&self, ctx: &ToolContext, changes: &mut Changes) {
        if ctx.guard.is_empty() {
            return;
        }
        let top = self
            .repo
            .workdir()
            .and_then(|w| std::fs::canonicalize(w).ok())
            .and_then(|w| ctx.roots.tool_path_of(&w))
            .unwrap_or_else(|| self.top.clone());
        let mut withheld = Withheld::default();
        let mut keep = |path: &[u8]| {
            let shown = Roots::normalize(&format!("{top}/{}", String::from_utf8_lossy(path)));
            match ctx.guard.refusal(&shown) {
                Some(refusal) => {
                    withheld.count(&refusal);
                    false
                }
                None => true,
            }
        };
        changes.staged.retain(|c| keep(&c.path));
        changes.unstaged.retain(|c| keep(&c.path));
        changes.untracked.retain(|p| keep(p));
        changes.withheld = withheld;
    }

    /// A blob's content, unless it is too large to diff.
    fn blob(&self, id: Option<gix::ObjectId>) -> Result<Content, ToolError> {
        let Some(id) = id else { return Ok(Content::Text(String::new())) };
        let header =
            self.repo.find_header(id).map_err(|e| ToolError::Failed(format!("Cannot read object {id}: {e}")))?;
        if header.size() > MAX_DIFF_FILE_BYTES {
            return Ok(Content::TooLarge);
        }
        let blob = self.repo.find_blob(id).map_err(|e| ToolError::Failed(format!("Cannot read object {id}: {e}")))?;
        Ok(Content::of(blob.data.clone()))
    }

    /// A worktree file's content, read beneath the roots like `file.read`.
    fn worktree(&self, ctx: &ToolContext, path: &[u8]) -> Content {
        let shown = format!("{}/{}", self.top, String::from_utf8_lossy(path));
        match ctx.open_read(&shown) {
            Ok(opened) if opened.meta.len() > MAX_DIFF_FILE_BYTES => Content::TooLarge,
            Ok(opened) if opened.meta.is_file() => {
                let mut bytes = Vec::new();
                match opened.file.take(MAX_DIFF_FILE_BYTES).read_to_end(&mut bytes) {
                    Ok(_) => Content::of(bytes),
                    Err(_) => Content::Text(String::new()),
                }
            }
            _ => Content::Text(String::new()),
        }
    }
}

#[derive(Default)]
struct Changes {
    staged: Vec<Change>,
    unstaged: Vec<Change>,
    untracked: Vec<Vec<u8>>,
    /// Entries the path rules withheld.
    withheld: Withheld,
}

struct Change {
    mark: char,
    path: Vec<u8>,
    /// The blob before (`None`: added).
    old: Option<gix::ObjectId>,
    /// The content after is the worktree file's.
    new_in_worktree: bool,
    /// The blob after, when it is in the index (`None` and not in the worktree: deleted).
    new: Option<gix::ObjectId>,
}

enum Content {
    Text(String),
    Binary,
    TooLarge,
}

impl Content {
    fn of(bytes: Vec<u8>) -> Content {
        // Git's own test: a NUL byte in the first 8000 bytes.
        if bytes.iter().take(8000).any(|b| *b == 0) {
            return Content::Binary;
        }
        match String::from_utf8(bytes) {
            Ok(text) => Content::Text(text),
            Err(e) => Content::Text(String::from_utf8_lossy(e.as_bytes()).into_owned()),
        }
    }
}

pub(super) fn status(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let repo = Repo::open(ctx, input)?;
    let changes = repo.changes(ctx)?;
    let mut lines = vec![repo.head_line()];
    let mut listed = 0;
    let mut section = |title: &str, entries: Vec<String>, lines: &mut Vec<String>| {
        if entries.is_empty() {
            return;
        }
        lines.push(format!("{title}:"));
        for entry in entries {
            listed += 1;
            if listed <= MAX_STATUS_ENTRIES {
                lines.push(format!("  {entry}"));
            }
        }
    };
    let show = |c: &Change| format!("{} {}", c.mark, String::from_utf8_lossy(&c.path));
    section("Staged", changes.staged.iter().map(show).collect(), &mut lines);
    section("Not staged", changes.unstaged.iter().map(show).collect(), &mut lines);
    section(
        "Untracked",
        changes.untracked.iter().map(|p| format!("? {}", String::from_utf8_lossy(p))).collect(),
        &mut lines,
    );
    if listed == 0 {
        lines.push("nothing to commit, working tree clean".to_string());
    } else if listed > MAX_STATUS_ENTRIES {
        lines.push(format!("[{} more entries not shown; give a narrower path]", listed - MAX_STATUS_ENTRIES));
    }
    lines.extend(changes.withheld.note());
    let metadata = json!({
        "repository": repo.top,
        "path": repo.shown_filter(),
        "staged": changes.staged.len(),
        "unstaged": changes.unstaged.len(),
        "untracked": changes.untracked.len(),
    });
    Ok(ToolOutput {
        title: Some(repo.shown_filter()),
        output: lines.join("\n"),
        metadata: metadata.as_object().cloned(),
        ..ToolOutput::default()
    })
}

pub(super) fn diff(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let staged = bool_field(input, "staged", false)?;
    let max_bytes = positive(input, "maxBytes", DEFAULT_DIFF_BYTES, MAX_DIFF_BYTES)? as usize;
    let repo = Repo::open(ctx, input)?;
    let changes = repo.changes(ctx)?;
    let list = if staged { &changes.staged } else { &changes.unstaged };
    let mut output = String::new();
    for change in list {
        if output.len() > max_bytes {
            break;
        }
        let path = String::from_utf8_lossy(&change.path);
        let old = repo.blob(change.old)?;
        let new = if change.new_in_worktree { repo.worktree(ctx, &change.path) } else { repo.blob(change.new)? };
        output.push_str(&format!("diff --git a/{path} b/{path}\n"));
        match change.mark {
            'A' => output.push_str("new file\n"),
            'D' => output.push_str("deleted file\n"),
            _ => {}
        }
        match (old, new) {
            (Content::Text(old), Content::Text(new)) => {
                let (a, b) = (format!("a/{path}"), format!("b/{path}"));
                let (a, b) = match change.mark {
                    'A' => ("/dev/null".to_string(), b),
                    'D' => (a, "/dev/null".to_string()),
                    _ => (a, b),
                };
                let text = similar::TextDiff::from_lines(&old, &new)
                    .unified_diff()
                    .context_radius(3)
                    .header(&a, &b)
                    .to_string();
                if text.is_empty() {
                    output.push_str("(only the file mode or type changed)\n");
                }
                output.push_str(&text);
                if !text.is_empty() && !text.ends_with('\n') {
                    output.push('\n');
                }
            }
            (Content::TooLarge, _) | (_, Content::TooLarge) => output.push_str("(file too large to diff)\n"),
            _ => output.push_str(&format!("Binary files a/{path} and b/{path} differ\n")),
        }
    }
    let cut = cut_to_bytes(&mut output, max_bytes);
    let mut output = output.trim_end().to_string();
    if output.is_empty() {
        let which = if staged { "staged changes" } else { "unstaged changes (set staged: true for the index)" };
        output = format!("(no {which} under {})", repo.shown_filter());
    }
    if cut > 0 {
        output.push_str(&format!("\n[diff truncated at {max_bytes} bytes; give a narrower path or raise maxBytes]"));
    }
    if let Some(note) = changes.withheld.note() {
        output.push_str(&format!("\n{note}"));
    }
    let metadata = json!({
        "repository": repo.top,
        "path": repo.shown_filter(),
        "staged": staged,
        "files": list.len(),
        "truncated": cut > 0,
    });
    Ok(ToolOutput {
        title: Some(repo.shown_filter()),
        output,
        metadata: metadata.as_object().cloned(),
        ..ToolOutput::default()
    })
}

pub(super) fn log(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let limit = positive(input, "limit", DEFAULT_LOG, MAX_LOG)? as usize;
    let repo = Repo::open(ctx, input)?;
    let failed =
        |e: gix::Error| ToolError::Failed(format!("git log failed in {}: {}", repo.top, one_line(&e.to_string())));
    let Ok(head) = repo.repo.head_id() else {
        return Ok(ToolOutput {
            title: Some(repo.shown_filter()),
            output: format!("(no commits yet in {})", repo.top),
            metadata: json!({"repository": repo.top, "path": repo.shown_filter(), "commits": 0, "truncated": false})
                .as_object()
                .cloned(),
            ..ToolOutput::default()
        });
    };
    let filter = (!repo.filter.is_empty()).then(|| PathBuf::from(&repo.filter));
    let deadline = Instant::now() + LOG_TIME;
    let mut lines = Vec::new();
    let mut more = false;
    let mut stopped = false;
    let walk = head.ancestors().all().map_err(failed)?;
    for (walked, info) in walk.enumerate() {
        let info = info.map_err(failed)?;
        if lines.len() >= limit {
            more = true;
            break;
        }
        if walked >= MAX_LOG_WALK || Instant::now() >= deadline {
            stopped = true;
            break;
        }
        let commit = info.object().map_err(failed)?;
        if let Some(filter) = &filter
            && !touches(&repo.repo, &commit, filter).map_err(failed)?
        {
            continue;
        }
        let id = commit.id().shorten_or_id().to_string();
        let date = commit.time().ok().and_then(|t| t.format(gix::date::time::format::SHORT).ok()).unwrap_or_default();
        let author = commit.author().map(|a| a.name.to_str_lossy().into_owned()).unwrap_or_default();
        let subject = commit.message().map(|m| m.summary().to_str_lossy().into_owned()).unwrap_or_default();
        lines.push(format!("{id} {date} {author}: {subject}"));
    }
    let count = lines.len();
    let mut output =
        if lines.is_empty() { format!("(no commits touch {})", repo.shown_filter()) } else { lines.join("\n") };
    if more {
        output.push_str("\n[more commits not shown; raise limit]");
    }
    if stopped {
        output.push_str(&format!("\n[stopped after looking at {MAX_LOG_WALK} commits or {} s]", LOG_TIME.as_secs()));
    }
    let metadata = json!({
        "repository": repo.top,
        "path": repo.shown_filter(),
        "commits": count,
        "truncated": more || stopped,
    });
    Ok(ToolOutput {
        title: Some(repo.shown_filter()),
        output,
        metadata: metadata.as_object().cloned(),
        ..ToolOutput::default()
    })
}

/// Whether `commit` changed what is at `path` compared with its first parent (or added it).
fn touches(repo: &gix::Repository, commit: &gix::Commit<'_>, path: &Path) -> Result<bool, gix::Error> {
    let at = |commit: &gix::Commit<'_>| -> Result<Option<gix::ObjectId>, gix::Error> {
        Ok(commit.tree()?.lookup_entry_by_path(path)?.map(|e| e.object_id()))
    };
    let mine = at(commit)?;
    let parent = match commit.parent_ids().next() {
        Some(id) => at(&repo.find_commit(id)?)?,
        None => None,
    };
    Ok(mine != parent)
}

fn parent(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((parent, _)) => parent,
    }
}

fn top_root(shown: &str) -> &'static str {
    [WORKSPACE, ARTIFACTS, MNT]
        .into_iter()
        .find(|root| shown.strip_prefix(root).is_some_and(|rest| rest.is_empty() || rest.starts_with('/')))
        .unwrap_or(WORKSPACE)
}

fn one_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}
