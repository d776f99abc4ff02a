//! What a built-in tool's call does to the world, declared once in its manifest entry
//! (`effects`, a key only built-in manifests may use) and read by everyone who needs to know —
//! so no code switches on a tool's name:
//!
//! - `touches`: what permission rules match on — the paths at some JSON pointers of the input
//!   (`{"paths": ["/path"]}`, and with `"diffs": ["/diff"]` every path a unified diff there
//!   names), a command line (`{"command": "/command"}`) or a URL's host (`{"url": "/url"}`).
//! - `disk`: how a call changes the agent's disk use, for the quota — `"none"` (reads),
//!   `"frees"` (never adds: deletes, moves), `{"adds": [...], "removes": [...], "replaces": ptr}`
//!   (the bytes of the texts at `adds`, less those at `removes` and the file at `replaces`), or
//!   `"command"` (a command line that only deletes frees; any other may add). A tool that
//!   declares nothing may add anything (local packs', MCP servers' tools).
//! - `coordination`: the call only reaches other agents and the user (messages, waiting,
//!   submitting): every mode runs it, and the wake-loop guard does not count it as work.
//! - `withdrawsRead`: a result that reports a background command's end withdraws that
//!   command's pending `shell.command_finished` signal (the agent has read it).
//!
//! Why the manifest and not a Rust table next to each implementation: the controller decides
//! on runner-side tools it does not link (the runner crate stays out of the controller), and
//! the manifest is the one declaration both binaries read.

use serde_json::Value as Json;

use crate::config::diag::Diagnostics;
use crate::config::node::Value;
use crate::config::read::Obj;

/// A tool's declared effects; the default (nothing declared) is what an unknown tool may do.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolEffects {
    pub touches: Touches,
    /// With `Touches::Paths`: pointers to unified diffs, whose files are touched paths too.
    pub diffs: Vec<String>,
    pub disk: DiskEffect,
    pub coordination: bool,
    pub withdraws_read: bool,
}

/// What permission rules match a call on.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Touches {
    #[default]
    Nothing,
    /// The paths at these JSON pointers (`*` steps over every item of an array).
    Paths(Vec<String>),
    /// The command line at this pointer.
    Command(String),
    /// The URL at this pointer (rules match its host).
    Url(String),
}

/// How a call changes the agent's disk use.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum DiskEffect {
    /// Nothing declared: it may write anything.
    #[default]
    MayAdd,
    /// Reads only.
    None,
    /// Never adds (deletes, moves).
    Frees,
    /// Writes texts from the input: `adds` less `removes`, less the file at `replaces`.
    Writes { adds: Vec<String>, removes: Vec<String>, replaces: Option<String> },
    /// Judged by its command line: one that only deletes frees, any other may add.
    Command,
}

impl ToolEffects {
    /// The command line of a call of a tool that touches one.
    pub fn command_line<'a>(&self, input: &'a Json) -> Option<&'a str> {
        match &self.touches {
            Touches::Command(pointer) => input.pointer(pointer).and_then(Json::as_str),
            _ => None,
        }
    }
}

/// The values at a JSON pointer whose steps may be `*` (every item of an array); `~1` and `~0`
/// are `/` and `~` as in RFC 6901. Shared by `presentation.target` and `effects`.
pub fn values_at<'a>(value: &'a Json, pointer: &str) -> Vec<&'a Json> {
    let mut out = Vec::new();
    collect(value, pointer.trim_start_matches('/'), &mut out);
    out
}

fn collect<'a>(value: &'a Json, pointer: &str, out: &mut Vec<&'a Json>) {
    if pointer.is_empty() {
        out.push(value);
        return;
    }
    let (head, rest) = pointer.split_once('/').unwrap_or((pointer, ""));
    match (head, value) {
        ("*", Json::Array(items)) => items.iter().for_each(|v| collect(v, rest, out)),
        (key, Json::Object(map)) => {
            if let Some(v) = map.get(&key.replace("~1", "/").replace("~0", "~")) {
                collect(v, rest, out)
            }
        }
        (i, Json::Array(items)) => {
            if let Some(v) = i.parse::<usize>().ok().and_then(|i| items.get(i)) {
                collect(v, rest, out)
            }
        }
        _ => {}
    }
}

/// The total length of the strings at some pointers of an input.
pub fn text_bytes(input: &Json, pointers: &[String]) -> u64 {
    pointers.iter().flat_map(|p| values_at(input, p)).filter_map(Json::as_str).map(|s| s.len() as u64).sum()
}

const EFFECT_KEYS: &[&str] = &["touches", "disk", "coordination", "withdrawsRead"];
const TOUCH_KEYS: &[&str] = &["paths", "diffs", "command", "url"];
const WRITE_KEYS: &[&str] = &["adds", "removes", "replaces"];

/// A tool entry's `effects` (built-in manifests only; the caller refuses it elsewhere).
pub(super) fn parse(tool: &Obj, d: &mut Diagnostics) -> ToolEffects {
    let mut effects = ToolEffects::default();
    let Some(node) = tool.get("effects") else { return effects };
    let Some(e) = Obj::open(node, &tool.path_of("effects"), EFFECT_KEYS, &[], d) else { return effects };
    if let Some(t) = e.get("touches").and_then(|n| Obj::open(n, &e.path_of("touches"), TOUCH_KEYS, &[], d)) {
        let pointer = |key: &str, d: &mut Diagnostics| t.string(key, d).filter(|p| pointer_ok(&t, key, p, d));
        effects.touches = if let Some(list) = t.string_list("paths", d) {
            effects.diffs = t.string_list("diffs", d).unwrap_or_default().into_iter().map(|(p, _)| p).collect();
            Touches::Paths(list.into_iter().map(|(p, _)| p).collect())
        } else if let Some(p) = pointer("command", d) {
            Touches::Command(p)
        } else if let Some(p) = pointer("url", d) {
            Touches::Url(p)
        } else {
            d.error(Some(&t.node.loc), t.path.clone(), "touches takes one of paths, command or url");
            Touches::Nothing
        };
    }
    if let Some(disk) = e.get("disk") {
        let path = e.path_of("disk");
        effects.disk = match &disk.value {
            Value::Str(s) if s == "none" => DiskEffect::None,
            Value::Str(s) if s == "frees" => DiskEffect::Frees,
            Value::Str(s) if s == "command" => DiskEffect::Command,
            Value::Map(_) => match Obj::open(disk, &path, WRITE_KEYS, &[], d) {
                Some(w) => {
                    let list = |key: &str, d: &mut Diagnostics| {
                        w.string_list(key, d).unwrap_or_default().into_iter().map(|(p, _)| p).collect()
                    };
                    DiskEffect::Writes {
                        adds: list("adds", d),
                        removes: list("removes", d),
                        replaces: w.string("replaces", d),
                    }
                }
                None => DiskEffect::MayAdd,
            },
            _ => {
                d.error(Some(&disk.loc), path, "disk is \"none\", \"frees\", \"command\" or {adds, removes, replaces}");
                DiskEffect::MayAdd
            }
        };
    }
    effects.coordination = e.bool("coordination", d).unwrap_or(false);
    effects.withdraws_read = e.bool("withdrawsRead", d).unwrap_or(false);
    effects
}

fn pointer_ok(o: &Obj, key: &str, pointer: &str, d: &mut Diagnostics) -> bool {
    let ok = pointer.starts_with('/');
    if !ok {
        d.error(
            Some(&o.key_loc(key)),
            o.path_of(key),
            format!("expected a JSON pointer like /command, got {pointer:?}"),
        );
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_step_over_arrays() {
        let input = json!({"operations": [{"path": "a", "content": "xy"}, {"path": "b", "content": "z"}]});
        let paths: Vec<_> = values_at(&input, "/operations/*/path").into_iter().filter_map(Json::as_str).collect();
        assert_eq!(paths, ["a", "b"]);
        assert_eq!(text_bytes(&input, &["/operations/*/content".to_string()]), 3);
        assert!(values_at(&input, "/missing").is_empty());
    }
}
