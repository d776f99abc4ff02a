//! The built-in runner tools, in Rust, each registered once in [`IMPLEMENTATIONS`] next to its
//! module: `file.read`, `file.write`, `file.patch`, `file.list` and the search and edit tools
//! `file.glob`, `file.grep`, `file.edit`, `file.delete`, `file.move` (core pack), `shell.exec`
//! and the background commands `shell.start`/`check`/`stop`/`list` (shell pack) and the
//! read-only `git.status`, `git.diff`, `git.log` (git pack), with the reference's inputs,
//! defaults, caps, output formats and error texts (reference §4.5–§4.8). Which built-ins run here is declared in their manifests
//! (`runsIn: runner`); a unit test checks that every one of them has an implementation here and
//! nothing here lacks a manifest entry. Beyond the reference: every path is opened beneath its
//! root from a directory fd, each link checked as it is followed, so no link or concurrent
//! rename can lead a tool outside its roots ([`crate::paths`]); and `file.patch` is
//! all-or-nothing.
//!
//! Errors are [`ToolError`]s: the message is the exact text the model sees, and it crosses the
//! wire unchanged as a `-32000` message with the kind in `data.kind` (a malformed input is
//! `rejected`, a cancelled `shell.exec` `cancelled`, a file over a limit `too_large`, the rest
//! `failed`).

mod file_delete;
mod file_edit;
mod file_glob;
mod file_grep;
mod file_list;
mod file_move;
mod file_patch;
mod file_read;
mod file_write;
mod git;
pub mod guard;
pub mod shell_background;
mod shell_exec;
mod walk;

use std::os::fd::OwnedFd;
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::Notify;

use super::paths::{ARTIFACTS, Location, MNT, Opened, PathRefusal, Roots, WORKSPACE};
use crate::rpc::ToolOutput;
use crate::toolpack::ToolError;
pub use guard::PathGuard;
pub use shell_background::BackgroundCommands;
/// How `shell.exec` runs a process, shared with packs' `context.exec`.
pub(crate) use shell_exec::{ProcessRequest, execute};

/// How a built-in runs: filesystem tools block (they run on the blocking pool, off the threads
/// that serve the socket); `shell.exec` is async and can be cancelled; the background-command
/// tools share the runner's [`BackgroundCommands`].
#[derive(Clone, Copy)]
pub enum Implementation {
    Blocking(fn(&ToolContext, &Map<String, Value>) -> Result<ToolOutput, ToolError>),
    Shell,
    Background(shell_background::Op),
}

/// Every built-in runner tool, by name.
pub const IMPLEMENTATIONS: &[(&str, Implementation)] = &[
    ("file.read", Implementation::Blocking(file_read::run)),
    ("file.write", Implementation::Blocking(file_write::run)),
    ("file.patch", Implementation::Blocking(file_patch::run)),
    ("file.list", Implementation::Blocking(file_list::run)),
    ("file.glob", Implementation::Blocking(file_glob::run)),
    ("file.grep", Implementation::Blocking(file_grep::run)),
    ("file.edit", Implementation::Blocking(file_edit::run)),
    ("file.delete", Implementation::Blocking(file_delete::run)),
    ("file.move", Implementation::Blocking(file_move::run)),
    ("git.status", Implementation::Blocking(git::status)),
    ("git.diff", Implementation::Blocking(git::diff)),
    ("git.log", Implementation::Blocking(git::log)),
    ("shell.exec", Implementation::Shell),
    ("shell.start", Implementation::Background(shell_background::Op::Start)),
    ("shell.check", Implementation::Background(shell_background::Op::Check)),
    ("shell.stop", Implementation::Background(shell_background::Op::Stop)),
    ("shell.list", Implementation::Background(shell_background::Op::List)),
];

/// One built-in runner tool: its name and how it runs.
#[derive(Clone, Copy)]
pub struct BuiltinTool {
    name: &'static str,
    implementation: Implementation,
}

impl BuiltinTool {
    pub fn name(self) -> &'static str {
        self.name
    }

    pub fn from_name(name: &str) -> Option<BuiltinTool> {
        IMPLEMENTATIONS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(name, implementation)| BuiltinTool { name, implementation: *implementation })
    }

    /// The names this runner implements, for error messages and the tool-table test.
    pub fn names() -> impl Iterator<Item = &'static str> {
        IMPLEMENTATIONS.iter().map(|(n, _)| *n)
    }
}

/// The built-in tools of one agent: its roots on disk and its own artifacts directory.
#[derive(Clone)]
pub struct BuiltinTools {
    ctx: Arc<ToolContext>,
}

#[derive(Clone)]
pub struct ToolContext {
    roots: Roots,
    /// The call's path rules, applied to what its paths resolve to.
    guard: PathGuard,
    /// The writable artifacts directory as tools see it, `/artifacts/<agent>`.
    own_artifacts: String,
    /// The agent's background commands (they outlive a `load`).
    commands: Arc<BackgroundCommands>,
}

impl BuiltinTools {
    /// Tools for `agent_id`, whose writable artifacts are `/artifacts/<agent_id>`.
    pub fn new(roots: Roots, agent_id: &str) -> BuiltinTools {
        BuiltinTools::with_artifacts_dir(roots, format!("{ARTIFACTS}/{agent_id}"))
    }

    /// Tools whose writable artifacts directory (as tools see it) is `artifacts_dir`.
    pub fn with_artifacts_dir(roots: Roots, artifacts_dir: String) -> BuiltinTools {
        BuiltinTools::with_commands(roots, artifacts_dir, Arc::new(BackgroundCommands::new()))
    }

    /// [`BuiltinTools::with_artifacts_dir`] whose background commands go to `commands`.
    pub fn with_commands(roots: Roots, artifacts_dir: String, commands: Arc<BackgroundCommands>) -> BuiltinTools {
        let own_artifacts = Roots::normalize(&artifacts_dir);
        BuiltinTools { ctx: Arc::new(ToolContext { roots, guard: PathGuard::default(), own_artifacts, commands }) }
    }

    /// The writable artifacts directory as tools see it.
    pub fn artifacts_dir(&self) -> &str {
        &self.ctx.own_artifacts
    }

    /// Run a tool by name (`Unknown tool: <name>` if it is not a built-in).
    pub async fn invoke(&self, tool: &str, input: Value) -> Result<ToolOutput, ToolError> {
        let tool = BuiltinTool::from_name(tool).ok_or_else(|| ToolError::Rejected(format!("Unknown tool: {tool}")))?;
        self.run(tool, input, None).await
    }

    /// Run a tool. `cancel`, when notified, stops a running `shell.exec`.
    pub async fn run(
        &self,
        tool: BuiltinTool,
        input: Value,
        cancel: Option<Arc<Notify>>,
    ) -> Result<ToolOutput, ToolError> {
        self.run_guarded(tool, input, cancel, PathGuard::default()).await
    }

    /// [`BuiltinTools::run`] under the call's path rules (`guard`), which the file and search
    /// tools apply to the paths they resolve.
    pub async fn run_guarded(
        &self,
        tool: BuiltinTool,
        input: Value,
        cancel: Option<Arc<Notify>>,
        guard: PathGuard,
    ) -> Result<ToolOutput, ToolError> {
        let Value::Object(input) = input else {
            return Err(ToolError::Rejected("Tool input must be an object".into()));
        };
        let ctx =
            if guard.is_empty() { self.ctx.clone() } else { Arc::new(ToolContext { guard, ..(*self.ctx).clone() }) };
        let run = match tool.implementation {
            Implementation::Shell => return shell_exec::run(&ctx, &input, cancel).await,
            Implementation::Background(op) => return shell_background::run(op, &ctx, &input).await,
            Implementation::Blocking(run) => run,
        };
        // Filesystem calls block; keep them off the threads that serve the socket.
        tokio::task::spawn_blocking(move || run(&ctx, &input))
            .await
            .unwrap_or_else(|e| Err(ToolError::Failed(format!("{} failed unexpectedly: {e}", tool.name()))))
    }
}

impl ToolContext {
    /// Open an existing file or directory under the read roots.
    fn open_read(&self, input: &str) -> Result<Opened, ToolError> {
        let opened = self
            .roots
            .open(input, &[WORKSPACE, ARTIFACTS, MNT])
            .map_err(|refusal| self.read_refusal(input, refusal))?;
        self.guard.check_fd(&self.roots, input, &opened.file)?;
        Ok(opened)
    }

    /// [`ToolContext::open_read`] without the path rules: for what a tool reads for itself
    /// (a `.gitignore` above a walk) and never shows.
    fn open_read_unguarded(&self, input: &str) -> Result<Opened, ToolError> {
        self.roots.open(input, &[WORKSPACE, ARTIFACTS, MNT]).map_err(|refusal| self.read_refusal(input, refusal))
    }

    /// Where the directory `dir` (opened beneath the roots) really is, read once for all its
    /// entries ([`ToolContext::withheld_entry`]).
    fn place_of(&self, dir: impl std::os::fd::AsFd) -> guard::Place {
        if self.guard.is_empty() {
            return guard::Place::Unchecked;
        }
        PathGuard::real_path(&self.roots, dir).map_or(guard::Place::Unknown, guard::Place::At)
    }

    /// The path rules' refusal of the entry `name` of the directory at `place`, matched on
    /// where it really is; a link entry also on where it leads.
    fn withheld_entry(&self, place: &guard::Place, name: &str, is_link: bool) -> Option<guard::Refusal<'_>> {
        let real = match place {
            guard::Place::Unchecked => return None,
            guard::Place::Unknown => return Some(guard::Refusal::Denied(self.guard.any_rule()?)),
            guard::Place::At(real) => real,
        };
        let path = Roots::normalize(&format!("{real}/{name}"));
        if let Some(refusal) = self.guard.refusal(&path) {
            return Some(refusal);
        }
        if is_link
            && let Ok(target) = self.roots.open(&path, &[WORKSPACE, ARTIFACTS, MNT])
            && let Some(resolved) = PathGuard::real_path(&self.roots, &target.file)
        {
            return self.guard.refusal(&resolved);
        }
        None
    }

    /// Open an existing file under the write roots (the current content of a file to patch).
    fn open_write(&self, input: &str) -> Result<Opened, ToolError> {
        let opened = self
            .roots
            .open(input, &self.write_roots())
            .map_err(|refusal| self.write_refusal(input, "read", refusal))?;
        self.guard.check_fd(&self.roots, input, &opened.file)?;
        Ok(opened)
    }

    /// Locate a path to create, replace or delete under the write roots; the path rules are
    /// matched on the located directory (where its fd really is) and the names below it.
    fn locate_write(&self, input: &str) -> Result<Location, ToolError> {
        let location = self
            .roots
            .locate(input, &self.write_roots())
            .map_err(|refusal| self.write_refusal(input, "write", refusal))?;
        self.guard.check_fd_child(&self.roots, input, &location.dir, Some(&location.rest.join("/")))?;
        Ok(location)
    }

    /// The entry `input` names under the write roots, for deleting or renaming it: its parent
    /// directory opened (every link on the way followed and checked) and its final name, which
    /// is not followed when it is a link. A root itself is refused.
    fn locate_entry(&self, input: &str, action: &str) -> Result<NamedEntry, ToolError> {
        let shown = Roots::normalize(input);
        if self.write_roots().contains(&shown.as_str()) {
            return Err(ToolError::Failed(format!("Cannot {action} {shown}: it is a root directory")));
        }
        let Some((parent, name)) = shown.rsplit_once('/') else {
            return Err(ToolError::Failed(format!("Cannot {action} {shown}")));
        };
        if !self.write_roots().iter().any(|root| shown.strip_prefix(root).is_some_and(|rest| rest.starts_with('/'))) {
            return Err(self.write_refusal(input, action, PathRefusal::OutsideRoots(shown)));
        }
        let location = self.locate_write(if parent.is_empty() { "/" } else { parent })?;
        let dir = location.open_dir().map_err(|e| io_error(action, &shown, &e))?;
        self.guard.check_fd_child(&self.roots, input, &dir, Some(name))?;
        let name = name.to_string();
        Ok(NamedEntry { shown, dir, name })
    }

    /// The three roots' directories on disk, links resolved (for what is opened by path).
    fn disk_roots(&self) -> Vec<std::path::PathBuf> {
        [&self.roots.workspace, &self.roots.artifacts, &self.roots.mnt]
            .into_iter()
            .filter_map(|dir| std::fs::canonicalize(dir).ok())
            .collect()
    }

    fn write_roots(&self) -> [&str; 2] {
        [WORKSPACE, &self.own_artifacts]
    }

    fn read_refusal(&self, input: &str, refusal: PathRefusal) -> ToolError {
        match refusal {
            PathRefusal::OutsideRoots(shown) => {
                ToolError::Failed(format!("Read path must be under /workspace, /artifacts, or /mnt: {shown}"))
            }
            PathRefusal::Unresolvable(why) => ToolError::Failed(why),
            PathRefusal::Io(e) => io_error("read", &Roots::normalize(input), &e),
        }
    }

    fn write_refusal(&self, input: &str, action: &str, refusal: PathRefusal) -> ToolError {
        match refusal {
            PathRefusal::OutsideRoots(shown) => {
                ToolError::Failed(format!("Write path must be under /workspace or {}: {shown}", self.own_artifacts))
            }
            PathRefusal::Unresolvable(why) => ToolError::Failed(why),
            PathRefusal::Io(e) => io_error(action, &Roots::normalize(input), &e),
        }
    }
}

/// An entry to delete or rename: its parent directory and its name there.
struct NamedEntry {
    /// The path as the caller gave it, normalized.
    shown: String,
    /// An `O_PATH` fd of the parent directory.
    dir: OwnedFd,
    name: String,
}

impl NamedEntry {
    /// What the entry is (a link is a link), if it exists.
    fn kind(&self) -> Option<rustix::fs::FileType> {
        rustix::fs::statat(&self.dir, self.name.as_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .map(|s| rustix::fs::FileType::from_raw_mode(s.st_mode))
    }
}

/// A required string field (`<key> must be a string`).
fn string_field<'a>(input: &'a Map<String, Value>, key: &str) -> Result<&'a str, ToolError> {
    match input.get(key) {
        Some(Value::String(s)) => Ok(s),
        _ => Err(ToolError::Rejected(format!("{key} must be a string"))),
    }
}

/// An optional string field (`<key> must be a string`).
fn optional_string<'a>(input: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, ToolError> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ToolError::Rejected(format!("{key} must be a string"))),
    }
}

/// An optional whole number of at least zero, capped (`<key> must be a number of at least 0`).
fn count(input: &Map<String, Value>, key: &str, default: u64, cap: u64) -> Result<u64, ToolError> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(default.min(cap)),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(f) if f.is_finite() && f >= 0.0 => Ok((f.floor() as u64).min(cap)),
            _ => Err(ToolError::Rejected(format!("{key} must be a number of at least 0"))),
        },
        Some(_) => Err(ToolError::Rejected(format!("{key} must be a number of at least 0"))),
    }
}

/// An optional boolean (`<key> must be a boolean`).
fn bool_field(input: &Map<String, Value>, key: &str, default: bool) -> Result<bool, ToolError> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ToolError::Rejected(format!("{key} must be a boolean"))),
    }
}

/// An optional positive whole number, capped (`Expected a positive number`).
fn positive(input: &Map<String, Value>, key: &str, default: u64, cap: u64) -> Result<u64, ToolError> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(default.min(cap)),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(f) if f.is_finite() && f >= 1.0 => Ok((f.floor() as u64).min(cap)),
            _ => Err(ToolError::Rejected("Expected a positive number".into())),
        },
        Some(_) => Err(ToolError::Rejected("Expected a positive number".into())),
    }
}

/// The message for a failed filesystem operation on `shown`.
fn io_error(action: &str, shown: &str, error: &std::io::Error) -> ToolError {
    ToolError::Failed(match error.kind() {
        std::io::ErrorKind::NotFound => format!("No such file or directory: {shown}"),
        std::io::ErrorKind::PermissionDenied => format!("Permission denied: {shown}"),
        _ => format!("Cannot {action} {shown}: {error}"),
    })
}

/// Write `content` to a new temporary file in `dir` next to `name` (keeping the permissions of
/// the file it will replace) and return the temporary name; the caller renames it into place
/// with [`rename_into_place`]. Both stay inside the opened directory, so neither can be
/// redirected by a link.
pub(crate) fn write_temp(dir: &OwnedFd, name: &str, content: impl AsRef<[u8]>) -> std::io::Result<String> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    use std::io::Write;
    let temp = format!(".{name}.suzumio-{}.tmp", uuid::Uuid::new_v4().simple());
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut file = std::fs::File::from(rustix::fs::openat(dir, temp.as_str(), flags, Mode::from_raw_mode(0o666))?);
    let written = (|| {
        file.write_all(content.as_ref())?;
        if let Ok(old) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            rustix::fs::fchmod(&file, Mode::from_raw_mode(old.st_mode & 0o7777))?;
        }
        file.sync_all()
    })();
    match written {
        Ok(()) => Ok(temp),
        Err(e) => {
            let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
            Err(e)
        }
    }
}

/// Rename the temporary file `temp` in `dir` to `name` (removing it if that fails).
pub(crate) fn rename_into_place(dir: &OwnedFd, temp: &str, name: &str) -> std::io::Result<()> {
    rustix::fs::renameat(dir, temp, dir, name).map_err(|e| {
        let _ = rustix::fs::unlinkat(dir, temp, rustix::fs::AtFlags::empty());
        e.into()
    })
}

/// Output cut to at most `max` bytes (on a character boundary); the number of bytes cut.
fn cut_to_bytes(text: &mut String, max: usize) -> usize {
    if text.len() <= max {
        return 0;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    text.truncate(end);
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn positive_numbers() {
        let input = |v: Value| json!({ "n": v }).as_object().cloned().unwrap_or_default();
        assert_eq!(positive(&input(json!(5)), "n", 1, 10), Ok(5));
        assert_eq!(positive(&input(json!(50)), "n", 1, 10), Ok(10));
        assert_eq!(positive(&input(json!(null)), "n", 3, 10), Ok(3));
        assert_eq!(positive(&input(json!(2.7)), "n", 1, 10), Ok(2));
        for bad in [json!(0), json!(-1), json!("5"), json!(0.5), json!(true)] {
            assert_eq!(
                positive(&input(bad), "n", 1, 10),
                Err(ToolError::Rejected("Expected a positive number".into()))
            );
        }
    }

    #[test]
    fn cut_respects_char_boundaries() {
        let mut s = "aé".to_string();
        assert_eq!(cut_to_bytes(&mut s, 2), 2);
        assert_eq!(s, "a");
    }
}
