//! Turns `suzumio.yaml` (and everything it imports) into one located [`Node`] tree.
//!
//! The pipeline follows the reference (§2.1): `${VAR}` / `${env:VAR}` substitution in YAML and
//! JSON text, quoting of bare `@import(...)` values, parsing, whole-field `@import(path)`
//! (relative to the importing file; HTTP refused; cycles and depth > 32 refused), then a top-level
//! `extends` list deep-merged under the file. It reports problems into [`Diagnostics`] and keeps
//! going, so the user sees every problem at once. It does not interpret config keys.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::diag::{Diagnostics, display_path};
use crate::config::node::{Loc, Node, Value, parse_json, parse_yaml};

/// Deeper import chains than this are refused (the reference's limit).
pub const MAX_IMPORT_DEPTH: usize = 32;

/// Where environment variables come from; tests pass their own map instead of the process env.
pub trait EnvSource {
    fn var(&self, name: &str) -> Option<String>;
}

pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

/// Largest config or imported file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

pub struct Loader<'e> {
    env: &'e dyn EnvSource,
    pub diags: Diagnostics,
    /// The directory of the root config file: imports read only files under it.
    project_dir: Option<PathBuf>,
}

/// Read a config file: a regular file (a FIFO or a device would block or never end), at most
/// [`MAX_FILE_BYTES`], UTF-8.
// String: a config diagnostic's message; the caller adds the file.
fn read_config_file(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!("it is {} bytes; config files are read up to {MAX_FILE_BYTES} bytes", meta.len()));
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("it grew past {MAX_FILE_BYTES} bytes while being read"));
    }
    Ok(text)
}

impl<'e> Loader<'e> {
    pub fn new(env: &'e dyn EnvSource) -> Self {
        Loader { env, diags: Diagnostics::default(), project_dir: None }
    }

    /// Load a top-level config file. `None` when the file itself could not be read or parsed
    /// (the reason is in `diags`).
    pub fn load_root(&mut self, file: &Path) -> Option<Node> {
        let file: Arc<Path> = Arc::from(file);
        self.project_dir = file.parent().and_then(|d| d.canonicalize().ok());
        let text = match read_config_file(&file) {
            Ok(text) => text,
            Err(e) => {
                self.diags.error(Some(&Loc::file(file.clone())), "", format!("cannot read config file: {e}"));
                return None;
            }
        };
        let mut stack = vec![file.clone()];
        self.parse_structured(&text, file, &mut stack)
    }

    /// Substitute, parse, resolve imports and `extends` of one YAML or JSON document.
    fn parse_structured(&mut self, text: &str, file: Arc<Path>, stack: &mut Vec<Arc<Path>>) -> Option<Node> {
        let substituted = self.substitute_env(text, &file);
        let is_json = file.extension().is_some_and(|e| e == "json");
        let parsed = if is_json {
            parse_json(&substituted, file.clone())
        } else {
            parse_yaml(&quote_bare_imports(&substituted), file.clone())
        };
        let mut node = match parsed {
            Ok(node) => node,
            Err(e) => {
                self.diags.error(Some(&e.loc), "", e.message);
                return None;
            }
        };
        self.resolve_imports(&mut node, stack);
        Some(self.resolve_extends(node))
    }

    /// `${VAR}` and `${env:VAR}` become the variable's value; unset variables become "" with a
    /// warning (the reference substitutes silently, which hides typos). A line that is a comment
    /// (its first non-blank character is `#`) is left as written: a commented-out provider with
    /// `${OPENAI_API_KEY}` must not warn about a key nobody uses.
    fn substitute_env(&mut self, text: &str, file: &Arc<Path>) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        let mut consumed = 0usize;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let offset = consumed + start;
            let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
            if text[line_start..offset].trim_start().starts_with('#') {
                out.push_str("${");
                consumed += start + 2;
                rest = &rest[start + 2..];
                continue;
            }
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                out.push_str(&rest[start..]);
                rest = "";
                break;
            };
            let inner = &after[..end];
            let name = inner.strip_prefix("env:").unwrap_or(inner);
            let valid = !name.is_empty()
                && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if valid {
                match self.env.var(name) {
                    Some(value) => out.push_str(&value),
                    None => {
                        let offset = consumed + start;
                        let line = text[..offset].matches('\n').count() + 1;
                        let col = offset - text[..offset].rfind('\n').map_or(0, |i| i + 1) + 1;
                        self.diags.warning(
                            Some(&Loc::new(file.clone(), line, col)),
                            "",
                            format!("environment variable {name} is not set; substituted an empty string"),
                        );
                    }
                }
            } else {
                out.push_str(&rest[start..start + 3 + end]);
            }
            consumed += start + 3 + end;
            rest = &rest[start + 3 + end..];
        }
        out.push_str(rest);
        out
    }

    fn resolve_imports(&mut self, node: &mut Node, stack: &mut Vec<Arc<Path>>) {
        match &mut node.value {
            Value::Str(s) => {
                if let Some(target) = import_target(s) {
                    let target = target.to_string();
                    *node = self.import(&target, &node.loc, stack);
                }
            }
            Value::Seq(items) => items.iter_mut().for_each(|n| self.resolve_imports(n, stack)),
            Value::Map(entries) => entries.iter_mut().for_each(|(_, n)| self.resolve_imports(n, stack)),
            _ => {}
        }
    }

    /// Replace an `@import(target)` string by the imported content. On error the value becomes
    /// null and the error is recorded at the import site.
    fn import(&mut self, target: &str, site: &Loc, stack: &mut Vec<Arc<Path>>) -> Node {
        let null = Node::new(Value::Null, site.clone());
        let lower = target.to_ascii_lowercase();
        if lower.starts_with("http://") || lower.starts_with("https://") {
            self.diags.error(Some(site), "", "HTTP(S) @import is disabled for reproducibility");
            return null;
        }
        if stack.len() > MAX_IMPORT_DEPTH {
            self.diags.error(Some(site), "", "Maximum @import depth exceeded");
            return null;
        }
        let base = site.file.parent().unwrap_or(Path::new("."));
        let path = base.join(target);
        let path: Arc<Path> = match path.canonicalize() {
            Ok(p) => Arc::from(p),
            Err(e) => {
                self.diags.error(
                    Some(site),
                    "",
                    format!("cannot read @import({target}): {}: {e}", display_path(&path)),
                );
                return null;
            }
        };
        if let Some(dir) = &self.project_dir
            && !path.starts_with(dir)
        {
            self.diags.error(
                Some(site),
                "",
                format!("@import({target}) is outside the project directory: imports read only files under it"),
            );
            return null;
        }
        if stack.iter().any(|p| **p == *path) {
            let chain: Vec<String> = stack.iter().chain(std::iter::once(&path)).map(|p| display_path(p)).collect();
            self.diags.error(Some(site), "", format!("Circular @import detected: {}", chain.join(" -> ")));
            return null;
        }
        let text = match read_config_file(&path) {
            Ok(text) => text,
            Err(e) => {
                self.diags.error(Some(site), "", format!("cannot read @import({target}): {e}"));
                return null;
            }
        };
        let structured = matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json"));
        if !structured {
            // Plain text (e.g. a task in Markdown) is taken as it is, without substitution.
            return Node::new(Value::Str(text), site.clone());
        }
        stack.push(path.clone());
        let node = self.parse_structured(&text, path, stack);
        stack.pop();
        node.unwrap_or(null)
    }

    /// A top-level `extends: [a, b]` merges a, then b, then the document itself on top.
    fn resolve_extends(&mut self, node: Node) -> Node {
        let Value::Map(entries) = node.value else {
            return node;
        };
        let (extends, local): (Vec<_>, Vec<_>) = entries.into_iter().partition(|(k, _)| k.name == "extends");
        let local = Node::new(Value::Map(local), node.loc.clone());
        let Some((key, extends)) = extends.into_iter().next() else {
            return local;
        };
        let Value::Seq(items) = extends.value else {
            self.diags.error(
                Some(&key.loc),
                "extends",
                format!("must be a list of mappings, got {}", extends.kind_name()),
            );
            return local;
        };
        let mut merged: Option<Node> = None;
        for (i, item) in items.into_iter().enumerate() {
            if item.as_map().is_none() {
                if item.value != Value::Null {
                    self.diags.error(
                        Some(&item.loc),
                        format!("{}[{i}]", key.name),
                        format!("must be a mapping, got {}", item.kind_name()),
                    );
                }
                continue;
            }
            merged = Some(match merged {
                None => item,
                Some(base) => deep_merge(base, item),
            });
        }
        match merged {
            None => local,
            Some(base) => deep_merge(base, local),
        }
    }
}

/// `@import(path)` as the whole (trimmed) value → `path`.
fn import_target(value: &str) -> Option<&str> {
    let inner = value.trim().strip_prefix("@import(")?.strip_suffix(')')?.trim();
    let inner = inner
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .or_else(|| inner.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
        .unwrap_or(inner);
    (!inner.is_empty()).then_some(inner)
}

/// `key: @import(x)` and `- @import(x)` are not valid YAML (`@` is reserved); quote them.
fn quote_bare_imports(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        let quoted = ["- @import(", ": @import("].iter().find_map(|marker| {
            let at = body.find(marker)?;
            let value_start = at + marker.len() - "@import(".len();
            let value = body[value_start..].trim_end();
            (value.ends_with(')') && !value.contains('"')).then(|| format!("{}\"{}\"", &body[..value_start], value))
        });
        out.push_str(quoted.as_deref().unwrap_or(body));
        out.push_str(newline);
    }
    out
}

/// Objects merge recursively; lists and scalars are replaced; the overlay wins.
fn deep_merge(base: Node, overlay: Node) -> Node {
    match (base.value, overlay.value) {
        (Value::Map(mut base_entries), Value::Map(overlay_entries)) => {
            for (key, value) in overlay_entries {
                match base_entries.iter().position(|(k, _)| k.name == key.name) {
                    Some(i) => {
                        let (_, old) = base_entries.remove(i);
                        base_entries.insert(i, (key, deep_merge(old, value)));
                    }
                    None => base_entries.push((key, value)),
                }
            }
            Node::new(Value::Map(base_entries), overlay.loc)
        }
        (_, value) => Node::new(value, overlay.loc),
    }
}

/// The directory a config-relative path is resolved against.
pub fn base_dir(file: &Path) -> PathBuf {
    file.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct MapEnv(HashMap<&'static str, &'static str>);
    impl EnvSource for MapEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).map(|v| v.to_string())
        }
    }

    fn substitute(text: &str) -> (String, Vec<String>) {
        let env = MapEnv(HashMap::from([("HOME_DIR", "/home/u"), ("N", "3")]));
        let mut loader = Loader::new(&env);
        let out = loader.substitute_env(text, &Arc::from(Path::new("c.yaml")));
        (out, loader.diags.warnings.iter().map(|w| w.to_string()).collect())
    }

    #[test]
    fn env_substitution_both_forms_and_unset_warns() {
        assert_eq!(substitute("a: ${HOME_DIR}/x ${env:N}\n").0, "a: /home/u/x 3\n");
        let (out, warnings) = substitute("a: 1\nb: x${MISSING}y\n");
        assert_eq!(out, "a: 1\nb: xy\n");
        assert_eq!(warnings, ["c.yaml:2:5: environment variable MISSING is not set; substituted an empty string"]);
    }

    #[test]
    fn non_variable_dollar_braces_are_kept() {
        assert_eq!(substitute("cmd: echo ${1:-x}\n").0, "cmd: echo ${1:-x}\n");
        // Comment lines are left alone, and say nothing about unset variables.
        let (out, warnings) = substitute("a: ${HOME_DIR}\n  # apiKey: ${MISSING} and ${HOME_DIR}\nb: 1\n");
        assert_eq!(out, "a: /home/u\n  # apiKey: ${MISSING} and ${HOME_DIR}\nb: 1\n");
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn bare_imports_get_quoted() {
        assert_eq!(
            quote_bare_imports("task: @import(t.md)\n- @import(a.yaml)\n"),
            "task: \"@import(t.md)\"\n- \"@import(a.yaml)\"\n"
        );
        assert_eq!(import_target("  @import( 'a b.md' ) "), Some("a b.md"));
        assert_eq!(import_target("see @import(x)"), None);
    }

    #[test]
    fn merge_replaces_lists_and_merges_maps() {
        let f: Arc<Path> = Arc::from(Path::new("m.yaml"));
        let a = parse_yaml("x: {a: 1, b: [1, 2]}\ny: 1\n", f.clone()).unwrap();
        let b = parse_yaml("x: {b: [3], c: 2}\n", f).unwrap();
        let merged = deep_merge(a, b).to_json();
        assert_eq!(merged, serde_json::json!({"x": {"a": 1, "b": [3], "c": 2}, "y": 1}));
    }
}
