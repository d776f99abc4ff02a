//! `file.patch`: add, update and delete files in one go. Beyond the reference it is
//! all-or-nothing: every operation is first applied to an in-memory view of the files (so a
//! later operation sees the result of an earlier one), and only when all of them succeed are
//! the new contents written to temporary files and renamed into place, and deletions made.
//! If any operation fails, no file changes.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::{ToolContext, bool_field, io_error, string_field, write_temp};
use crate::paths::{Roots, ToolPath};
use crate::rpc::ToolOutput;

/// The planned state of one file.
struct Planned {
    shown: String,
    /// `None`: deleted.
    content: Option<String>,
    existed: bool,
}

#[derive(Default)]
struct Plan {
    files: HashMap<PathBuf, Planned>,
    order: Vec<PathBuf>,
    /// Directories to create, on disk.
    dirs: BTreeSet<PathBuf>,
}

pub(super) fn run(ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, String> {
    let operations = match input.get("operations") {
        Some(Value::Array(ops)) if !ops.is_empty() => ops,
        _ => return Err("operations must be a non-empty array".into()),
    };
    let mut plan = Plan::default();
    let mut lines = Vec::new();
    for operation in operations {
        let Value::Object(operation) = operation else {
            return Err("Each patch operation must be an object".into());
        };
        let op = match operation.get("op") {
            Some(Value::String(op)) => op.as_str(),
            Some(other) => return Err(format!("Unsupported patch op: {other}")),
            None => return Err("Unsupported patch op: undefined".into()),
        };
        if !matches!(op, "add" | "update" | "delete") {
            return Err(format!("Unsupported patch op: {op}"));
        }
        let path = ctx.write_path(string_field(operation, "path")?)?;
        let line = match op {
            "add" => plan.add(&path, operation)?,
            "update" => plan.update(&path, operation)?,
            _ => plan.delete(&path)?,
        };
        lines.push(line);
    }
    let changed: Vec<String> = plan.order.iter().filter_map(|p| plan.files.get(p)).map(|f| f.shown.clone()).collect();
    plan.commit()?;
    Ok(ToolOutput {
        title: Some(format!("Patched {} file{}", changed.len(), if changed.len() == 1 { "" } else { "s" })),
        output: lines.join("\n"),
        metadata: json!({"operations": operations.len(), "files": changed}).as_object().cloned(),
    })
}

impl Plan {
    fn add(&mut self, path: &ToolPath, operation: &Map<String, Value>) -> Result<String, String> {
        let content = string_field(operation, "content")?;
        let create_dirs = bool_field(operation, "createDirs", false)?;
        if path.real.is_dir() {
            return Err(format!("Cannot write {}: it is a directory", path.shown));
        }
        let parent = path.real.parent().ok_or_else(|| format!("Cannot write {}", path.shown))?;
        if !parent.is_dir() && !self.dirs.contains(parent) {
            if !create_dirs {
                return Err(format!(
                    "Parent directory does not exist: {} (set createDirs: true to create it)",
                    Roots::normalize(&format!("{}/..", path.shown))
                ));
            }
            let mut missing = parent;
            while !missing.is_dir() {
                self.dirs.insert(missing.to_path_buf());
                match missing.parent() {
                    Some(up) => missing = up,
                    None => break,
                }
            }
        }
        let chars = content.chars().count();
        self.set(path, Some(content.to_string()));
        Ok(format!("Added {} ({chars} chars)", path.shown))
    }

    fn update(&mut self, path: &ToolPath, operation: &Map<String, Value>) -> Result<String, String> {
        let search = match operation.get("search") {
            Some(Value::String(s)) if !s.is_empty() => s.as_str(),
            _ => return Err(format!("Patch search text is required for update: {}", path.shown)),
        };
        let replace = match operation.get("replace") {
            None | Some(Value::Null) => "",
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Err("replace must be a string".into()),
        };
        let replace_all = bool_field(operation, "replaceAll", false)?;
        let current = self.current(path)?;
        let matches = current.matches(search).count();
        if matches == 0 {
            return Err(format!("Patch search text not found in {}", path.shown));
        }
        if matches > 1 && !replace_all {
            return Err(format!(
                "Patch search text matched {matches} times in {}; set replaceAll:true or make search text unique",
                path.shown
            ));
        }
        let updated = current.replace(search, replace);
        self.set(path, Some(updated));
        let plural = if matches == 1 { "replacement" } else { "replacements" };
        Ok(format!("Updated {} ({matches} {plural})", path.shown))
    }

    fn delete(&mut self, path: &ToolPath) -> Result<String, String> {
        let exists = match self.files.get(&path.real) {
            Some(planned) => planned.content.is_some(),
            None => {
                if path.real.is_dir() {
                    return Err(format!("Cannot delete {}: it is a directory", path.shown));
                }
                path.real.exists()
            }
        };
        if !exists {
            return Err(format!("No such file or directory: {}", path.shown));
        }
        self.set(path, None);
        Ok(format!("Deleted {}", path.shown))
    }

    /// The content a file has at this point of the plan.
    fn current(&self, path: &ToolPath) -> Result<String, String> {
        match self.files.get(&path.real) {
            Some(Planned { content: Some(content), .. }) => Ok(content.clone()),
            Some(Planned { content: None, .. }) => Err(format!("No such file or directory: {}", path.shown)),
            None => {
                if path.real.is_dir() {
                    return Err(format!("Cannot update {}: it is a directory", path.shown));
                }
                let bytes = std::fs::read(&path.real).map_err(|e| io_error("read", &path.shown, &e))?;
                String::from_utf8(bytes).map_err(|_| format!("Cannot update {}: it is not UTF-8 text", path.shown))
            }
        }
    }

    fn set(&mut self, path: &ToolPath, content: Option<String>) {
        match self.files.get_mut(&path.real) {
            Some(planned) => planned.content = content,
            None => {
                let existed = path.real.exists();
                self.order.push(path.real.clone());
                self.files.insert(path.real.clone(), Planned { shown: path.shown.clone(), content, existed });
            }
        }
    }

    /// Write everything to temporary files first; only then rename and delete. A failure before
    /// the renames removes what was created and changes nothing.
    fn commit(self) -> Result<(), String> {
        let mut created_dirs: Vec<PathBuf> = Vec::new();
        let mut temps: Vec<(PathBuf, &Path, &str)> = Vec::new();
        let undo = |temps: &[(PathBuf, &Path, &str)], dirs: &[PathBuf]| {
            for (temp, _, _) in temps {
                let _ = std::fs::remove_file(temp);
            }
            for dir in dirs.iter().rev() {
                let _ = std::fs::remove_dir(dir);
            }
        };
        for dir in &self.dirs {
            if dir.is_dir() {
                continue;
            }
            if let Err(e) = std::fs::create_dir(dir) {
                undo(&temps, &created_dirs);
                return Err(format!("Cannot create directory {}: {e}", dir.display()));
            }
            created_dirs.push(dir.clone());
        }
        for real in &self.order {
            let planned = &self.files[real];
            let Some(content) = &planned.content else { continue };
            match write_temp(real, content) {
                Ok(temp) => temps.push((temp, real, &planned.shown)),
                Err(e) => {
                    undo(&temps, &created_dirs);
                    return Err(io_error("write", &planned.shown, &e));
                }
            }
        }
        // Renames within one directory and unlinks: nothing left that is likely to fail.
        let mut failures = Vec::new();
        for (temp, real, shown) in &temps {
            if let Err(e) = std::fs::rename(temp, real) {
                let _ = std::fs::remove_file(temp);
                failures.push(io_error("write", shown, &e));
            }
        }
        for real in &self.order {
            let planned = &self.files[real];
            if planned.content.is_none()
                && planned.existed
                && let Err(e) = std::fs::remove_file(real)
            {
                failures.push(io_error("delete", &planned.shown, &e));
            }
        }
        if failures.is_empty() { Ok(()) } else { Err(failures.join("\n")) }
    }
}
