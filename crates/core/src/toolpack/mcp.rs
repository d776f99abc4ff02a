//! MCP servers as toolpacks, the parts both sides share: what a runner is told to start
//! ([`McpServerSpec`]), what a server's `tools/list` gave ([`McpListing`], also the
//! `.suzumio/mcp/<id>.json` discovery cache), and how a listed tool becomes the Suzumio tool
//! `<id>.<tool>`: its input schema compiled like a manifest's, its annotations advisory unless
//! the pack says `trusted: true`.
//!
//! Talking to servers is elsewhere: the runner (stdio servers in the agent's container) and the
//! controller (HTTP servers, through the egress rules).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::Digest;

use crate::config::diag::Diagnostics;
use crate::config::model::{McpPackConfig, McpTransport};
use crate::toolpack::manifest::{RunsIn, ToolAnnotations, ToolDefinition};
use crate::toolpack::schema;

/// Where discovered tool lists are kept, under the project directory.
pub const CACHE_DIR: &str = ".suzumio/mcp";

/// At most this many tools are taken from one server (a list past it is cut, with a warning).
pub const MAX_TOOLS: usize = 512;

/// A stdio MCP server the runner starts in the agent's container (`load`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpServerSpec {
    pub id: String,
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Deadline of starting and listing, and of each call.
    pub timeout_ms: u64,
}

impl McpServerSpec {
    /// The spec of a stdio pack; `None` for an HTTP one.
    pub fn of(pack: &McpPackConfig) -> Option<McpServerSpec> {
        match &pack.transport {
            McpTransport::Stdio { command, args, env, cwd } => Some(McpServerSpec {
                id: pack.id.clone(),
                command: command.clone(),
                args: args.clone(),
                env: env.iter().cloned().collect(),
                cwd: cwd.clone(),
                timeout_ms: pack.timeout_ms,
            }),
            McpTransport::Http { .. } => None,
        }
    }
}

/// What one server said when it was started and listed: its `serverInfo`, the protocol version
/// it agreed to and its tools as `tools/list` gave them (raw MCP `Tool` objects, without the
/// pack prefix). `error` says why there is no list.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpListing {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    #[serde(default)]
    pub tools: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl McpListing {
    pub fn failed(id: &str, error: impl std::fmt::Display) -> McpListing {
        McpListing { id: id.to_string(), error: Some(error.to_string()), ..McpListing::default() }
    }

    /// `name version`, for messages.
    pub fn server(&self) -> String {
        match (&self.server_name, &self.server_version) {
            (Some(n), Some(v)) => format!("{n} {v}"),
            (Some(n), None) => n.clone(),
            _ => "the server".into(),
        }
    }

    pub fn tool_names(&self) -> Vec<String> {
        self.tools.iter().filter_map(|t| t.get("name").and_then(Value::as_str)).map(str::to_string).collect()
    }
}

/// The discovery cache of one pack: the listing, and a fingerprint of the transport it was
/// made with (a changed command, URL or environment makes it stale).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpCache {
    pub fingerprint: String,
    pub discovered_at: String,
    pub listing: McpListing,
}

/// A digest of how the server is reached. Values (an environment variable, a header) are only
/// hashed, so the cache file holds no secret.
pub fn fingerprint(pack: &McpPackConfig) -> String {
    let described = match &pack.transport {
        McpTransport::Stdio { command, args, env, cwd } => {
            json!({"stdio": {"command": command, "args": args, "env": env, "cwd": cwd}})
        }
        McpTransport::Http { url, headers } => json!({"http": {"url": url, "headers": headers}}),
    };
    hex::encode(sha2::Sha256::digest(described.to_string().as_bytes()))
}

pub fn cache_path(project_dir: &Path, id: &str) -> PathBuf {
    project_dir.join(CACHE_DIR).join(format!("{id}.json"))
}

/// The cached listing of `pack`, when there is one made with its current transport.
pub fn read_cache(project_dir: &Path, pack: &McpPackConfig) -> Option<McpCache> {
    let text = std::fs::read_to_string(cache_path(project_dir, &pack.id)).ok()?;
    let cache: McpCache = serde_json::from_str(&text).ok()?;
    (cache.fingerprint == fingerprint(pack) && cache.listing.error.is_none()).then_some(cache)
}

/// Write the listing of `pack` atomically (a temporary file renamed over the old one).
pub fn write_cache(project_dir: &Path, pack: &McpPackConfig, listing: &McpListing, now: &str) -> std::io::Result<()> {
    let path = cache_path(project_dir, &pack.id);
    let dir = path.parent().unwrap_or(project_dir);
    std::fs::create_dir_all(dir)?;
    let cache = McpCache { fingerprint: fingerprint(pack), discovered_at: now.to_string(), listing: listing.clone() };
    let text = serde_json::to_string_pretty(&cache).map_err(std::io::Error::other)?;
    let tmp = dir.join(format!(".{}.json.tmp-{}", pack.id, std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)
}

/// The pinned list of a pack as `tools/list` would have given it.
pub fn pinned_tools(pack: &McpPackConfig) -> Option<Vec<Value>> {
    let pinned = pack.pinned.as_ref()?;
    Some(
        pinned
            .iter()
            .map(|t| {
                let mut tool = json!({
                    "name": t.name,
                    "inputSchema": t.input_schema.clone().unwrap_or_else(|| json!({"type": "object"})),
                });
                if let Some(d) = &t.description {
                    tool["description"] = json!(d);
                }
                if let Some(a) = &t.annotations {
                    tool["annotations"] = a.clone();
                }
                tool
            })
            .collect(),
    )
}

/// How `live` differs from the pack's pinned list; `None` when it is not pinned or the same.
pub fn pinned_difference(pack: &McpPackConfig, live: &[Value]) -> Option<ListDiff> {
    Some(diff(&pinned_tools(pack)?, live)).filter(|d| !d.is_empty())
}

/// How a live list differs from the one in use (pinned or cached), by tool name and by what a
/// model is shown (description, input schema).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListDiff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
}

impl ListDiff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

impl std::fmt::Display for ListDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        for (label, names) in [("new", &self.added), ("gone", &self.removed), ("changed", &self.changed)] {
            if !names.is_empty() {
                parts.push(format!("{label}: {}", names.join(", ")));
            }
        }
        f.write_str(&parts.join("; "))
    }
}

pub fn diff(in_use: &[Value], live: &[Value]) -> ListDiff {
    let by_name = |tools: &[Value]| -> BTreeMap<String, Value> {
        tools.iter().filter_map(|t| Some((t.get("name")?.as_str()?.to_string(), t.clone()))).collect()
    };
    let (old, new) = (by_name(in_use), by_name(live));
    let shown = |t: &Value| (t.get("description").cloned(), t.get("inputSchema").cloned());
    ListDiff {
        added: new.keys().filter(|k| !old.contains_key(*k)).cloned().collect(),
        removed: old.keys().filter(|k| !new.contains_key(*k)).cloned().collect(),
        changed: new
            .iter()
            .filter(|(k, t)| old.get(*k).is_some_and(|o| shown(o) != shown(t)))
            .map(|(k, _)| k.clone())
            .collect(),
    }
}

/// The Suzumio tools of an MCP pack from its server's tools. A tool whose name or schema cannot
/// be used is left out with a warning naming it (the rest of the server still works).
pub fn tool_definitions(
    pack: &McpPackConfig,
    tools: &[Value],
    d: &mut Diagnostics,
) -> (Vec<ToolDefinition>, Vec<jsonschema::Validator>) {
    let runs_in = match pack.transport {
        McpTransport::Stdio { .. } => RunsIn::Runner,
        McpTransport::Http { .. } => RunsIn::Controller,
    };
    let mut defs: Vec<ToolDefinition> = Vec::new();
    let mut validators = Vec::new();
    if tools.len() > MAX_TOOLS {
        d.warning(
            Some(&pack.loc),
            "",
            format!("the server lists {} tools; only the first {MAX_TOOLS} are used", tools.len()),
        );
    }
    for tool in tools.iter().take(MAX_TOOLS) {
        let Some(server_name) = tool.get("name").and_then(Value::as_str) else {
            d.warning(Some(&pack.loc), "", "the server listed a tool without a name; it is left out");
            continue;
        };
        let name = format!("{}.{server_name}", pack.id);
        if !crate::toolpack::is_valid_tool_name(&name) {
            d.warning(
                Some(&pack.loc),
                "",
                format!("the server's tool `{server_name}` has a name Suzumio cannot use (A-Z a-z 0-9 _ . -, at most 128 characters with the prefix); it is left out"),
            );
            continue;
        }
        if defs.iter().any(|t| t.name == name) {
            d.warning(Some(&pack.loc), "", format!("the server lists `{server_name}` twice; the first is used"));
            continue;
        }
        let input_schema = match tool.get("inputSchema") {
            Some(s @ Value::Object(_)) => s.clone(),
            _ => json!({"type": "object"}),
        };
        let validator = match schema::compile(&input_schema) {
            Ok(v) => v,
            Err(errors) => {
                d.warning(
                    Some(&pack.loc),
                    "",
                    format!(
                        "the input schema of `{server_name}` does not compile ({}); the tool is left out",
                        schema_reasons(&errors)
                    ),
                );
                continue;
            }
        };
        let output_schema = tool.get("outputSchema").filter(|s| s.is_object()).cloned();
        let output_validator = match output_schema.as_ref().map(schema::compile) {
            Some(Ok(v)) => Some(v),
            Some(Err(errors)) => {
                d.warning(Some(&pack.loc), "", format!("the output schema of `{server_name}` does not compile ({}); results are not checked against it", schema_reasons(&errors)));
                None
            }
            None => None,
        };
        let claimed = annotations_of(tool);
        let annotations = if pack.trusted { claimed.clone() } else { advisory(&claimed) };
        let description = tool
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("{server_name} (from the MCP server {})", pack.id));
        defs.push(ToolDefinition {
            name,
            description,
            input_schema,
            annotations,
            requires_approval: false,
            presentation: None,
            runs_in,
            ends_activation: false,
            deferrable: true,
            support_validator: None,
            output_validator,
            output_schema,
            server_annotations: (!pack.trusted && claimed != ToolAnnotations::default()).then_some(claimed),
            effects: Default::default(),
            declared_at: None,
        });
        validators.push(validator);
    }
    (defs, validators)
}

/// The hints an MCP `Tool` gives (`annotations`, and `title` at either level).
fn annotations_of(tool: &Value) -> ToolAnnotations {
    let a = tool.get("annotations");
    let hint = |key: &str| a.and_then(|a| a.get(key)).and_then(Value::as_bool);
    ToolAnnotations {
        title: a.and_then(|a| a.get("title")).or_else(|| tool.get("title")).and_then(Value::as_str).map(str::to_string),
        read_only_hint: hint("readOnlyHint"),
        destructive_hint: hint("destructiveHint"),
        idempotent_hint: hint("idempotentHint"),
        open_world_hint: hint("openWorldHint"),
    }
}

/// What an untrusted server's hints may still do: make a tool look *more* dangerous. A claim of
/// being read-only, idempotent or not destructive is dropped, so the tool is judged as an
/// unannotated one (in `auto` mode: asked).
fn advisory(claimed: &ToolAnnotations) -> ToolAnnotations {
    ToolAnnotations {
        title: claimed.title.clone(),
        read_only_hint: None,
        destructive_hint: claimed.destructive_hint.filter(|d| *d),
        idempotent_hint: None,
        open_world_hint: claimed.open_world_hint.filter(|o| *o),
    }
}

/// A schema's mistakes in one line: `why at /pointer; …`.
fn schema_reasons(errors: &[schema::SchemaError]) -> String {
    errors.iter().map(|e| format!("{} at {}", e.message, e.pointer)).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::node::Loc;

    fn pack(trusted: bool) -> McpPackConfig {
        McpPackConfig {
            id: "srv".into(),
            transport: McpTransport::Stdio {
                command: "node".into(),
                args: vec!["s.js".into()],
                env: vec![],
                cwd: None,
            },
            trusted,
            pinned: None,
            timeout_ms: 1000,
            loc: Loc::file(Path::new("suzumio.yaml").into()),
        }
    }

    fn listed() -> Vec<Value> {
        vec![
            json!({"name": "echo", "description": "Echo.", "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
                   "annotations": {"readOnlyHint": true, "destructiveHint": false}}),
            json!({"name": "wipe", "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": true}}),
            json!({"name": "bad name!", "inputSchema": {"type": "object"}}),
            json!({"name": "broken", "inputSchema": {"type": 17}}),
        ]
    }

    #[test]
    fn an_untrusted_server_cannot_make_a_tool_look_safe() {
        let mut d = Diagnostics::default();
        let (defs, validators) = tool_definitions(&pack(false), &listed(), &mut d);
        let names: Vec<&str> = defs.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["srv.echo", "srv.wipe"]);
        assert_eq!(validators.len(), 2);
        assert_eq!(d.warnings.len(), 2, "{:?}", d.warnings);
        assert_eq!(defs[0].annotations.read_only_hint, None, "the read-only claim is advisory");
        assert_eq!(defs[0].server_annotations.as_ref().and_then(|a| a.read_only_hint), Some(true));
        assert_eq!(defs[1].annotations.destructive_hint, Some(true), "a warning is kept");
        assert!(schema::check_input(&validators[0], &json!({})).is_err());
        assert_eq!(defs[0].runs_in, RunsIn::Runner);
    }

    #[test]
    fn a_trusted_server_is_taken_at_its_word() {
        let (defs, _) = tool_definitions(&pack(true), &listed(), &mut Diagnostics::default());
        assert_eq!(defs[0].annotations.read_only_hint, Some(true));
        assert_eq!(defs[0].server_annotations, None);
    }

    #[test]
    fn a_diff_names_new_gone_and_changed_tools() {
        let old = vec![json!({"name": "a", "description": "A"}), json!({"name": "b"})];
        let new = vec![json!({"name": "a", "description": "A2"}), json!({"name": "c"})];
        let d = diff(&old, &new);
        assert_eq!(d.to_string(), "new: c; gone: b; changed: a");
        assert!(diff(&old, &old).is_empty());
    }

    #[test]
    fn a_server_may_not_take_a_built_in_namespace_listed_or_not() {
        use crate::config::model::{BuiltinPack, McpPinnedTool, ToolpackRef};
        use crate::toolpack::ToolpackRegistry;
        let loc = Loc::file(Path::new("suzumio.yaml").into());
        let mut file = pack(false);
        file.id = "file".into();
        file.pinned = Some(
            ["read", "shred"]
                .map(|n| McpPinnedTool {
                    name: n.into(),
                    description: None,
                    input_schema: None,
                    annotations: None,
                    loc: loc.clone(),
                })
                .to_vec(),
        );
        // `file` is core's namespace whether or not core is listed.
        for refs in [
            vec![ToolpackRef::Mcp(file.clone()), ToolpackRef::Builtin { pack: BuiltinPack::Core, loc: loc.clone() }],
            vec![ToolpackRef::Mcp(file.clone())],
        ] {
            let mut d = Diagnostics::default();
            assert!(ToolpackRegistry::build(&refs, &mut d).is_none(), "the project does not load");
            let errors: Vec<String> = d.errors.iter().map(|e| e.to_string()).collect();
            assert!(errors.iter().any(|e| e.contains("toolpack id `file` is a built-in namespace")), "{errors:?}");
            assert!(errors.iter().any(|e| e.contains("file.shred is in the built-in namespace `file`")), "{errors:?}");
        }
    }

    #[test]
    fn the_cache_is_stale_once_the_transport_changes() {
        let dir = tempfile::tempdir().unwrap();
        let p = pack(false);
        let listing = McpListing { id: "srv".into(), tools: listed(), ..McpListing::default() };
        write_cache(dir.path(), &p, &listing, "2026-12-01T00:00:00Z").unwrap();
        assert_eq!(read_cache(dir.path(), &p).map(|c| c.listing), Some(listing));
        let mut moved = p.clone();
        moved.transport =
            McpTransport::Stdio { command: "node".into(), args: vec!["t.js".into()], env: vec![], cwd: None };
        assert_eq!(read_cache(dir.path(), &moved), None);
    }
}
