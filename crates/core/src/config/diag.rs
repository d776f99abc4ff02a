//! Diagnostics: the errors and warnings that config and manifest validation collect.
//!
//! Validation never stops at the first problem; it pushes every one into [`Diagnostics`] with a
//! location (file:line:col), the key path inside the document and, for unknown keys, a
//! "did you mean" hint. This module only formats them; it does not decide what is wrong.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::config::node::Loc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Clone, Debug)]
pub struct Diagnostic {
    pub severity: Severity,
    pub loc: Option<Loc>,
    /// Key path inside the document, e.g. `agents.worker.count` or `tools[0].inputSchema`.
    pub path: String,
    /// The toolpack the problem belongs to, when there is one.
    pub pack: Option<String>,
    pub message: String,
    pub hint: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(loc) = &self.loc {
            write!(f, "{loc}: ")?;
        }
        if let Some(pack) = &self.pack {
            write!(f, "toolpack {pack}: ")?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        write!(f, "{}", self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, " ({hint})")?;
        }
        Ok(())
    }
}

/// Everything validation found, errors and warnings kept apart.
#[derive(Debug, Default, Clone)]
pub struct Diagnostics {
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn error(&mut self, loc: Option<&Loc>, path: impl Into<String>, message: impl Into<String>) {
        self.push(Severity::Error, loc, path.into(), message.into(), None);
    }

    pub fn error_hint(
        &mut self,
        loc: Option<&Loc>,
        path: impl Into<String>,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        self.push(Severity::Error, loc, path.into(), message.into(), hint);
    }

    pub fn warning(&mut self, loc: Option<&Loc>, path: impl Into<String>, message: impl Into<String>) {
        self.push(Severity::Warning, loc, path.into(), message.into(), None);
    }

    pub fn warning_hint(
        &mut self,
        loc: Option<&Loc>,
        path: impl Into<String>,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        self.push(Severity::Warning, loc, path.into(), message.into(), hint);
    }

    fn push(&mut self, severity: Severity, loc: Option<&Loc>, path: String, message: String, hint: Option<String>) {
        let diagnostic = Diagnostic { severity, loc: loc.cloned(), path, pack: None, message, hint };
        match severity {
            Severity::Error => self.errors.push(diagnostic),
            Severity::Warning => self.warnings.push(diagnostic),
        }
    }

    /// Merge another set in, tagging what it holds with a toolpack id.
    pub fn extend_for_pack(&mut self, other: Diagnostics, pack: Option<&str>) {
        let tag = |mut d: Diagnostic| {
            if d.pack.is_none() {
                d.pack = pack.map(str::to_string);
            }
            d
        };
        self.errors.extend(other.errors.into_iter().map(tag));
        self.warnings.extend(other.warnings.into_iter().map(tag));
    }

    pub fn extend(&mut self, other: Diagnostics) {
        self.extend_for_pack(other, None);
    }

    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty()
    }
}

/// The error returned when validation found at least one error. Warnings travel along.
#[derive(Debug, thiserror::Error)]
#[error("{}", render_errors(&self.0))]
pub struct InvalidInput(pub Diagnostics);

fn render_errors(d: &Diagnostics) -> String {
    let mut out = String::new();
    for e in sorted(&d.errors) {
        out.push_str(&format!("error: {e}\n"));
    }
    let n = d.errors.len();
    out.push_str(&format!("{n} error{} found", if n == 1 { "" } else { "s" }));
    out
}

/// Diagnostics in reading order: files in the order they first appear, then by line and column.
pub fn sorted(list: &[Diagnostic]) -> Vec<&Diagnostic> {
    let mut files: Vec<&Path> = Vec::new();
    for d in list {
        if let Some(loc) = &d.loc
            && !files.contains(&&*loc.file)
        {
            files.push(&loc.file);
        }
    }
    let mut out: Vec<&Diagnostic> = list.iter().collect();
    out.sort_by_key(|d| match &d.loc {
        None => (0, 0, 0),
        Some(loc) => (1 + files.iter().position(|f| **f == *loc.file).unwrap_or(0), loc.line, loc.col),
    });
    out
}

/// "Did you mean" for a misspelled name among the known ones.
pub fn did_you_mean<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<String> {
    known
        .into_iter()
        .map(|k| (strsim::damerau_levenshtein(&name.to_lowercase(), &k.to_lowercase()), k))
        .filter(|(distance, k)| *distance <= 2.max(k.len() / 3))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| format!("did you mean `{k}`?"))
}

/// Show a path relative to the current directory when it is below it, so messages stay short
/// and clickable; otherwise as given.
pub fn display_path(path: &Path) -> String {
    let cwd: Option<PathBuf> = std::env::current_dir().ok().and_then(|c| c.canonicalize().ok());
    if let Some(cwd) = cwd
        && let Ok(rel) = path.strip_prefix(&cwd)
    {
        return rel.display().to_string();
    }
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_closest_known_key() {
        assert_eq!(did_you_mean("agnets", ["name", "agents", "task"]), Some("did you mean `agents`?".into()));
        assert_eq!(did_you_mean("displayname", ["displayName", "names"]), Some("did you mean `displayName`?".into()));
        assert_eq!(did_you_mean("zzzzzz", ["name", "task"]), None);
    }
}
