//! `file.patch`: add, update and delete files in one go, given as a list of operations or as a
//! unified diff of several files (`suzumio_core::unified_diff`: strict context, every rejected
//! hunk reported with its file and line). Beyond the reference it is all-or-nothing: every
//! operation or file of the diff is first applied to an in-memory view of the files (so a later
//! operation sees the result of an earlier one), and only when all of them succeed are the new
//! contents written to temporary files and renamed into place, and deletions made. If any
//! operation or hunk fails, no file changes. Operations print the reference's one line each; a
//! diff's output ends with the resulting diff (what was written, as the model can check it).

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::os::fd::OwnedFd;

use rustix::fs::{AtFlags, FileType};
use serde_json::{Map, Value, json};

use super::{ToolContext, bool_field, cut_to_bytes, io_error, rename_into_place, string_field, write_temp};
use crate::paths::{Location, Roots};
use crate::rpc::ToolOutput;
use crate::toolpack::ToolError;
use suzumio_core::unified_diff;

/// The resulting diff is cut here (the files are written whole regardless).
const MAX_DIFF_BYTES: usize = 8000;

/// The planned state of one file.
struct Planned {
    shown: String,
    location: Location,
    /// `None`: deleted.
    content: Option<String>,
    existed: bool,
}

/// Files by their resolved tool path (two names for one file are one entry), in first-use order.
#[derive(Default)]
struct Plan {
    files: HashMap<String, Planned>,
    order: Vec<String>,
    /// Directories to create, as resolved tool paths.
    dirs: BTreeSet<String>,
    /// What each file held before the call, where it was read (an absent file held nothing).
    before: HashMap<String, String>,
}

pub(super) fn run(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let operations = match (input.get("operations"), input.get("diff")) {
        (Some(_), Some(_)) => {
            return Err(ToolError::Rejected("give either operations or diff, not both".into()));
        }
        (None, Some(Value::String(diff))) => return run_diff(ctx, diff),
        (None, Some(_)) => return Err(ToolError::Rejected("diff must be a string holding a unified diff".into())),
        (Some(Value::Array(ops)), None) if !ops.is_empty() => ops,
        _ => return Err(ToolError::Rejected("operations must be a non-empty array".into())),
    };
    let mut plan = Plan::default();
    let mut lines = Vec::new();
    for operation in operations {
        let Value::Object(operation) = operation else {
            return Err(ToolError::Rejected("Each patch operation must be an object".into()));
        };
        let op = match operation.get("op") {
            Some(Value::String(op)) => op.as_str(),
            Some(other) => return Err(ToolError::Rejected(format!("Unsupported patch op: {other}"))),
            None => return Err(ToolError::Rejected("Unsupported patch op: undefined".into())),
        };
        if !matches!(op, "add" | "update" | "delete") {
            return Err(ToolError::Rejected(format!("Unsupported patch op: {op}")));
        }
        let path = string_field(operation, "path")?;
        let location = ctx.locate_write(path)?;
        let line = match op {
            "add" => plan.add(location, operation)?,
            "update" => plan.update(ctx, path, location, operation)?,
            _ => plan.delete(location)?,
        };
        lines.push(line);
    }
    let changed: Vec<String> = plan.order.iter().filter_map(|p| plan.files.get(p)).map(|f| f.shown.clone()).collect();
    plan.commit()?;
    Ok(ToolOutput {
        title: Some(format!("Patched {} file{}", changed.len(), if changed.len() == 1 { "" } else { "s" })),
        output: lines.join("\n"),
        metadata: json!({"operations": operations.len(), "files": changed}).as_object().cloned(),
        ..ToolOutput::default()
    })
}

/// `file.patch` with a unified diff: every file's hunks applied in memory, every failure
/// collected (file, hunk, diff line), and the files written only when none failed.
fn run_diff(ctx: &ToolContext, diff: &str) -> Result<ToolOutput, ToolError> {
    let files = unified_diff::parse(diff).map_err(|e| ToolError::Rejected(format!("Cannot read the diff: {e}")))?;
    let mut plan = Plan::default();
    let mut lines = Vec::new();
    let mut failures = Vec::new();
    for file in &files {
        let path = file.path();
        let location = ctx.locate_write(path)?;
        let shown = location.shown.clone();
        let current = match plan.kind(&location) {
            None => None,
            Some(FileType::Directory) => {
                failures.push(format!("{shown}: it is a directory"));
                continue;
            }
            Some(_) => match plan.current(ctx, path, &location) {
                Ok(text) => Some(text),
                Err(e) => {
                    failures.push(e.message().to_string());
                    continue;
                }
            },
        };
        let applied = match unified_diff::apply(file, current.as_deref()) {
            Ok(applied) => applied,
            Err(errors) => {
                for e in errors {
                    failures.push(match e.hunk {
                        0 => format!("{shown} (diff line {}): {}", e.diff_line, e.message),
                        n => format!("{shown}: hunk {n} (diff line {}) rejected: {}", e.diff_line, e.message),
                    });
                }
                continue;
            }
        };
        let (added, removed) = file.counts();
        let moved: String =
            applied.offsets.iter().map(|(hunk, line)| format!(", hunk {hunk} applied at line {line}")).collect();
        let line = match applied.content {
            None => plan.delete(location).map(|_| format!("Deleted {shown} (-{removed})")),
            Some(content) if current.is_none() => {
                plan.add_text(location, content, true).map(|_| format!("Added {shown} (+{added})"))
            }
            Some(content) => {
                plan.set(location, Some(content));
                Ok(format!("Updated {shown} (+{added} -{removed}{moved})"))
            }
        };
        match line {
            Ok(line) => lines.push(line),
            Err(e) => failures.push(e.message().to_string()),
        }
    }
    if !failures.is_empty() {
        return Err(ToolError::Failed(format!(
            "The diff was not applied; no file was changed:\n{}",
            failures.join("\n")
        )));
    }
    let changed: Vec<String> = plan.order.iter().filter_map(|p| plan.files.get(p)).map(|f| f.shown.clone()).collect();
    let resulting = plan.resulting_diff();
    plan.commit()?;
    Ok(ToolOutput {
        title: Some(format!("Patched {} file{}", changed.len(), if changed.len() == 1 { "" } else { "s" })),
        output: format!("{}\n{resulting}", lines.join("\n")).trim_end().to_string(),
        metadata: json!({"files": changed, "hunks": files.iter().map(|f| f.hunks.len()).sum::<usize>()})
            .as_object()
            .cloned(),
        ..ToolOutput::default()
    })
}

impl Plan {
    fn add(&mut self, location: Location, operation: &Map<String, Value>) -> Result<String, ToolError> {
        let content = string_field(operation, "content")?;
        let create_dirs = bool_field(operation, "createDirs", false)?;
        let shown = location.shown.clone();
        let chars = content.chars().count();
        self.add_text(location, content.to_string(), create_dirs)?;
        Ok(format!("Added {shown} ({chars} chars)"))
    }

    /// Plans `content` as the whole file at `location`, creating its parents if `create_dirs`.
    fn add_text(&mut self, location: Location, content: String, create_dirs: bool) -> Result<(), ToolError> {
        let shown = location.shown.clone();
        if self.kind(&location) == Some(FileType::Directory) {
            return Err(ToolError::Failed(format!("Cannot write {shown}: it is a directory")));
        }
        if location.name().is_none() {
            let resolved = location.resolved();
            let parents: Vec<String> = (1..location.rest.len())
                .map(|n| resolved.rsplitn(n + 1, '/').last().unwrap_or_default().to_string())
                .collect();
            // `parents[0]` is the parent itself; another `add` may already have planned it.
            if !self.dirs.contains(&parents[0]) {
                if !create_dirs {
                    return Err(ToolError::Failed(format!(
                        "Parent directory does not exist: {} (set createDirs: true to create it)",
                        Roots::normalize(&format!("{shown}/.."))
                    )));
                }
                self.dirs.extend(parents);
            }
        }
        self.set(location, Some(content));
        Ok(())
    }

    fn update(
        &mut self,
        ctx: &ToolContext,
        path: &str,
        location: Location,
        operation: &Map<String, Value>,
    ) -> Result<String, ToolError> {
        let shown = location.shown.clone();
        let search = match operation.get("search") {
            Some(Value::String(s)) if !s.is_empty() => s.as_str(),
            _ => return Err(ToolError::Rejected(format!("Patch search text is required for update: {shown}"))),
        };
        let replace = match operation.get("replace") {
            None | Some(Value::Null) => "",
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Err(ToolError::Rejected("replace must be a string".into())),
        };
        let replace_all = bool_field(operation, "replaceAll", false)?;
        let current = self.current(ctx, path, &location)?;
        let matches = current.matches(search).count();
        if matches == 0 {
            return Err(ToolError::Failed(format!("Patch search text not found in {shown}")));
        }
        if matches > 1 && !replace_all {
            return Err(ToolError::Failed(format!(
                "Patch search text matched {matches} times in {shown}; set replaceAll:true or make search text unique"
            )));
        }
        let updated = current.replace(search, replace);
        self.set(location, Some(updated));
        let plural = if matches == 1 { "replacement" } else { "replacements" };
        Ok(format!("Updated {shown} ({matches} {plural})"))
    }

    fn delete(&mut self, location: Location) -> Result<String, ToolError> {
        let shown = location.shown.clone();
        let exists = match self.files.get(&location.resolved()) {
            Some(planned) => planned.content.is_some(),
            None => match location.file_type() {
                Some(FileType::Directory) => {
                    return Err(ToolError::Failed(format!("Cannot delete {shown}: it is a directory")));
                }
                kind => kind.is_some(),
            },
        };
        if !exists {
            return Err(ToolError::Failed(format!("No such file or directory: {shown}")));
        }
        self.set(location, None);
        Ok(format!("Deleted {shown}"))
    }

    /// What the path is at this point of the plan (not following a final link: there is none).
    fn kind(&self, location: &Location) -> Option<FileType> {
        match self.files.get(&location.resolved()) {
            Some(planned) => planned.content.as_ref().map(|_| FileType::RegularFile),
            None => location.file_type(),
        }
    }

    /// The content a file has at this point of the plan.
    fn current(&mut self, ctx: &ToolContext, path: &str, location: &Location) -> Result<String, ToolError> {
        let shown = &location.shown;
        match self.files.get(&location.resolved()) {
            Some(Planned { content: Some(content), .. }) => Ok(content.clone()),
            Some(Planned { content: None, .. }) => {
                Err(ToolError::Failed(format!("No such file or directory: {shown}")))
            }
            None => {
                if location.file_type() == Some(FileType::Directory) {
                    return Err(ToolError::Failed(format!("Cannot update {shown}: it is a directory")));
                }
                let mut opened = ctx.open_write(path)?;
                let mut bytes = Vec::new();
                opened.file.read_to_end(&mut bytes).map_err(|e| io_error("read", shown, &e))?;
                let text = String::from_utf8(bytes)
                    .map_err(|_| ToolError::Failed(format!("Cannot update {shown}: it is not UTF-8 text")))?;
                self.before.insert(location.resolved(), text.clone());
                Ok(text)
            }
        }
    }

    /// The change of every planned file as a unified diff, from what it held before the call
    /// (read by the plan; a file that did not exist held nothing).
    fn resulting_diff(&self) -> String {
        let mut out = String::new();
        for key in &self.order {
            let planned = &self.files[key];
            let shown = &planned.shown;
            let before = match self.before.get(key) {
                Some(text) => text.as_str(),
                None if !planned.existed => "",
                None => {
                    out.push_str(&format!("({shown}: its earlier content was not read)\n"));
                    continue;
                }
            };
            let after = planned.content.as_deref().unwrap_or("");
            let (old, new) = (
                if planned.existed { format!("a{shown}") } else { "/dev/null".into() },
                if planned.content.is_some() { format!("b{shown}") } else { "/dev/null".into() },
            );
            let diff = similar::TextDiff::from_lines(before, after);
            out.push_str(&diff.unified_diff().context_radius(2).header(&old, &new).to_string());
        }
        let cut = cut_to_bytes(&mut out, MAX_DIFF_BYTES);
        if cut > 0 {
            out.push_str(&format!("\n[diff truncated {cut} bytes]"));
        }
        out
    }

    fn set(&mut self, location: Location, content: Option<String>) {
        let key = location.resolved();
        match self.files.get_mut(&key) {
            Some(planned) => planned.content = content,
            None => {
                let existed = location.file_type().is_some();
                self.order.push(key.clone());
                self.files.insert(key, Planned { shown: location.shown.clone(), location, content, existed });
            }
        }
    }

    /// Write everything to temporary files first; only then rename and delete. A failure before
    /// the renames removes what was created and changes nothing.
    fn commit(self) -> Result<(), ToolError> {
        let mut created_dirs: Vec<(OwnedFd, String)> = Vec::new();
        let mut temps: Vec<(OwnedFd, String, &str, &str)> = Vec::new();
        let undo = |temps: &[(OwnedFd, String, &str, &str)], dirs: &[(OwnedFd, String)]| {
            for (dir, temp, _, _) in temps {
                let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
            }
            for (dir, name) in dirs.iter().rev() {
                let _ = rustix::fs::unlinkat(dir, name.as_str(), AtFlags::REMOVEDIR);
            }
        };
        for key in &self.order {
            let planned = &self.files[key];
            let Some(content) = &planned.content else { continue };
            let Some(name) = planned.location.rest.last() else { continue };
            let parent = if planned.location.name().is_some() {
                planned.location.dir.try_clone()
            } else {
                planned.location.create_parents(&mut created_dirs)
            };
            let parent = match parent {
                Ok(parent) => parent,
                Err(e) => {
                    undo(&temps, &created_dirs);
                    return Err(io_error("create the directory of", &planned.shown, &e));
                }
            };
            match write_temp(&parent, name, content) {
                Ok(temp) => temps.push((parent, temp, name, &planned.shown)),
                Err(e) => {
                    undo(&temps, &created_dirs);
                    return Err(io_error("write", &planned.shown, &e));
                }
            }
        }
        // Renames within one directory and unlinks: nothing left that is likely to fail.
        let mut failures = Vec::new();
        for (dir, temp, name, shown) in &temps {
            if let Err(e) = rename_into_place(dir, temp, name) {
                failures.push(io_error("write", shown, &e));
            }
        }
        for key in &self.order {
            let planned = &self.files[key];
            if planned.content.is_none()
                && planned.existed
                && let Some(name) = planned.location.name()
                && let Err(e) = rustix::fs::unlinkat(&planned.location.dir, name, AtFlags::empty())
            {
                failures.push(io_error("delete", &planned.shown, &e.into()));
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(ToolError::Failed(failures.iter().map(ToolError::message).collect::<Vec<_>>().join("\n")))
        }
    }
}
