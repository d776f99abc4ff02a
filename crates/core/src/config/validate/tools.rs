//! `tools`: the toolpack list (`tools.toolpacks`: built-in names, packaged pack ids or local pack directories with
//! their JavaScript limits) and what `web.fetch` may reach (`tools.webFetch`). Manifests are
//! read by the registry, not here.

use std::path::Path;

use crate::config::diag::Diagnostics;
use crate::config::model::*;
use crate::config::node::{Node, Value};
use crate::config::read::{Obj, index};
use crate::toolpack::packaged;

const TOOLS_KEYS: &[&str] = &["toolpacks", "webFetch"];
const LOCAL_PACK_KEYS: &[&str] = &["path", "id", "timeoutMs", "memoryMb"];
const WEB_FETCH_KEYS: &[&str] = &["allowPrivateAddresses"];
const MCP_KEYS: &[&str] = &["id", "command", "args", "env", "cwd", "url", "headers", "trusted", "tools", "timeoutMs"];
const MCP_TOOL_KEYS: &[&str] = &["name", "description", "inputSchema", "annotations"];
/// Deadline of one MCP call (and of starting a server and listing its tools) unless set.
const MCP_DEFAULT_TIMEOUT_MS: u64 = 60_000;

pub(super) fn read_toolpacks(top: &Obj, config_dir: &Path, d: &mut Diagnostics) -> Vec<ToolpackRef> {
    let default = || {
        let loc = top.node.loc.clone();
        vec![
            ToolpackRef::Builtin { pack: BuiltinPack::Core, loc: loc.clone() },
            ToolpackRef::Builtin { pack: BuiltinPack::Web, loc },
        ]
    };
    let Some(tools_node) = top.get("tools") else {
        return default();
    };
    let Some(tools) = Obj::open(tools_node, "tools", TOOLS_KEYS, &[], d) else {
        return Vec::new();
    };
    let Some(list) = tools.get("toolpacks") else {
        return default();
    };
    let Value::Seq(items) = &list.value else {
        d.error(Some(&list.loc), "tools.toolpacks", format!("expected a list, got {}", list.kind_name()));
        return Vec::new();
    };
    let mut out: Vec<Option<ToolpackRef>> = Vec::new();
    let mut packaged_at = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = index("tools.toolpacks", i);
        match &item.value {
            Value::Str(name) => match (BuiltinPack::from_name(name), packaged::find(name)) {
                (Some(pack), _) => out.push(Some(ToolpackRef::Builtin { pack, loc: item.loc.clone() })),
                // A packaged JavaScript pack: resolved below, once the path entries are known.
                (None, Some(pack)) => {
                    packaged_at.push((out.len(), pack, item, path));
                    out.push(None);
                }
                (None, None) => d.error(
                    Some(&item.loc),
                    path,
                    format!("Unknown built-in toolpack: {name}. Use {{ path: ... }} for local toolpacks."),
                ),
            },
            Value::Map(_) if item.get("mcp").is_some() => {
                if let Some(mcp) = read_mcp(item, &path, d) {
                    out.push(Some(ToolpackRef::Mcp(mcp)));
                }
            }
            Value::Map(_) => {
                let Some(entry) = Obj::open(item, &path, LOCAL_PACK_KEYS, &[], d) else { continue };
                let id = entry.string("id", d);
                let defaults = PackLimits::default();
                let limits = PackLimits {
                    timeout_ms: entry.int_at_least("timeoutMs", 1, d).map_or(defaults.timeout_ms, |v| v as u64),
                    memory_mb: entry.int_at_least("memoryMb", 4, d).map_or(defaults.memory_mb, |v| v as u64),
                };
                let Some(raw) = entry.req_string("path", d) else { continue };
                let loc = entry.key_loc("path");
                let lower = raw.to_ascii_lowercase();
                if lower.starts_with("http://") || lower.starts_with("https://") {
                    d.error(
                        Some(&loc),
                        entry.path_of("path"),
                        "HTTP(S) toolpack paths are disabled for reproducibility",
                    );
                    continue;
                }
                let dir = config_dir.join(&raw);
                match std::fs::metadata(&dir) {
                    Ok(m) if m.is_dir() => {
                        let dir = dir.canonicalize().unwrap_or(dir);
                        out.push(Some(ToolpackRef::Local { path: dir, id, limits, loc: item.loc.clone() }));
                    }
                    Ok(_) => d.error(
                        Some(&loc),
                        entry.path_of("path"),
                        format!("Local toolpack path must be a directory: {raw}"),
                    ),
                    Err(_) => {
                        d.error(Some(&loc), entry.path_of("path"), format!("Local toolpack path does not exist: {raw}"))
                    }
                }
            }
            _ => d.error(
                Some(&item.loc),
                path,
                format!(
                    "expected a built-in name ({}), {{path, id}} or {{mcp: {{id, command | url}}}}, got {}",
                    BuiltinPack::NAMES.join(", "),
                    item.kind_name()
                ),
            ),
        }
    }
    // A packaged pack the project also registers by path (an edited copy): the path wins.
    let by_path: Vec<String> = out
        .iter()
        .flatten()
        .filter_map(|r| match r {
            ToolpackRef::Local { id: Some(id), .. } => Some(id.clone()),
            ToolpackRef::Local { path, .. } => manifest_id(path),
            ToolpackRef::Builtin { .. } | ToolpackRef::Mcp(_) => None,
        })
        .collect();
    for (at, pack, item, path) in packaged_at {
        if by_path.iter().any(|id| id == pack.id) {
            d.warning(
                Some(&item.loc),
                path,
                format!("`{}` is also registered by path; the pack at that path is used", pack.id),
            );
            continue;
        }
        match pack.materialize(config_dir) {
            Ok(root) => {
                out[at] = Some(ToolpackRef::Local {
                    path: root,
                    id: Some(pack.id.to_string()),
                    limits: PackLimits::default(),
                    loc: item.loc.clone(),
                })
            }
            Err(e) => d.error(
                Some(&item.loc),
                path,
                format!("cannot write the packaged toolpack {} into .suzumio/packs: {e}", pack.id),
            ),
        }
    }
    out.into_iter().flatten().collect()
}

/// `- mcp: {id, command, args, env, cwd}` (stdio, in the agent's container) or
/// `- mcp: {id, url, headers}` (Streamable HTTP, from the controller).
fn read_mcp(item: &Node, path: &str, d: &mut Diagnostics) -> Option<McpPackConfig> {
    // An entry with any error is left out, so nothing downstream talks of a server that cannot run.
    let errors_before = d.errors.len();
    let outer = Obj::open(item, path, &["mcp"], &[], d)?;
    let node = outer.get("mcp")?;
    let path = outer.path_of("mcp");
    let Value::Map(_) = &node.value else {
        d.error(
            Some(&node.loc),
            path,
            format!("expected a mapping {{id, command | url, ...}}, got {}", node.kind_name()),
        );
        return None;
    };
    let m = Obj::open(node, &path, MCP_KEYS, &[], d)?;
    let id = m.req_string("id", d);
    if let Some(id) = &id
        && !crate::toolpack::is_valid_pack_id(id)
    {
        d.error(Some(&m.key_loc("id")), m.path_of("id"), format!("invalid toolpack id `{id}`: use A-Z a-z 0-9 _ . -"));
    }
    let trusted = m.bool("trusted", d).unwrap_or(false);
    let timeout_ms = m.int_at_least("timeoutMs", 1, d).map_or(MCP_DEFAULT_TIMEOUT_MS, |v| v as u64);
    let command = m.string("command", d);
    let url = m.string("url", d);
    let stdio_only = ["args", "env", "cwd"].into_iter().filter(|k| m.get(k).is_some());
    let transport = match (command, url) {
        (Some(_), Some(_)) => {
            d.error(
                Some(&m.key_loc("url")),
                m.path_of("url"),
                "give `command` (a stdio server) or `url` (an HTTP server), not both",
            );
            return None;
        }
        (None, None) => {
            d.error(Some(&node.loc), path, "an MCP toolpack needs `command` (a stdio server started in the agent's container) or `url` (a Streamable HTTP server)");
            return None;
        }
        (Some(command), None) => {
            if command.trim().is_empty() {
                d.error(Some(&m.key_loc("command")), m.path_of("command"), "the command is empty");
            }
            if m.get("headers").is_some() {
                d.error(Some(&m.key_loc("headers")), m.path_of("headers"), "`headers` is for an HTTP server (`url`)");
            }
            let args = m.string_list("args", d).unwrap_or_default().into_iter().map(|(a, _)| a).collect();
            let env: Vec<(String, String)> = m.string_map("env", d).into_iter().map(|(k, v, _)| (k, v)).collect();
            let cwd = m.string("cwd", d);
            if let Some(cwd) = &cwd
                && !cwd.starts_with('/')
            {
                d.error(
                    Some(&m.key_loc("cwd")),
                    m.path_of("cwd"),
                    format!("`cwd` is a path inside the container and must be absolute, got `{cwd}`"),
                );
            }
            McpTransport::Stdio { command, args, env, cwd }
        }
        (None, Some(url)) => {
            for key in stdio_only {
                d.error(Some(&m.key_loc(key)), m.path_of(key), format!("`{key}` is for a stdio server (`command`)"));
            }
            if let Err(why) = check_server_url(&url) {
                d.error(Some(&m.key_loc("url")), m.path_of("url"), why);
            }
            let headers = m.string_map("headers", d).into_iter().map(|(k, v, _)| (k, v)).collect();
            McpTransport::Http { url, headers }
        }
    };
    let pinned = m.get("tools").and_then(|tools| read_pinned_tools(tools, &m.path_of("tools"), d));
    if d.errors.len() > errors_before {
        return None;
    }
    Some(McpPackConfig { id: id?, transport, trusted, pinned, timeout_ms, loc: item.loc.clone() })
}

/// What can be said of an MCP server URL without a URL crate: http(s), a host, no credentials.
// String: a config diagnostic's message; the caller adds where it was written.
fn check_server_url(url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
        .ok_or_else(|| format!("an MCP server URL must start with http:// or https://, got `{url}`"))?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() {
        return Err(format!("the MCP server URL `{url}` has no host"));
    }
    if authority.contains('@') {
        return Err("credentials in an MCP server URL are not allowed; put them in `headers`".into());
    }
    Ok(())
}

/// `tools:` of an MCP pack: the pinned list, each a name or `{name, description, inputSchema, annotations}`.
fn read_pinned_tools(node: &Node, path: &str, d: &mut Diagnostics) -> Option<Vec<McpPinnedTool>> {
    let Value::Seq(items) = &node.value else {
        d.error(Some(&node.loc), path, format!("expected a list of tools, got {}", node.kind_name()));
        return None;
    };
    let mut out: Vec<McpPinnedTool> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = index(path, i);
        let tool = match &item.value {
            Value::Str(name) => McpPinnedTool {
                name: name.clone(),
                description: None,
                input_schema: None,
                annotations: None,
                loc: item.loc.clone(),
            },
            Value::Map(_) => {
                let Some(t) = Obj::open(item, &at, MCP_TOOL_KEYS, &[], d) else { continue };
                let Some(name) = t.req_string("name", d) else { continue };
                let input_schema = t.get("inputSchema").map(Node::to_json);
                if let Some(schema) = &input_schema
                    && !schema.is_object()
                {
                    d.error(Some(&t.key_loc("inputSchema")), t.path_of("inputSchema"), "expected a JSON Schema object");
                }
                let annotations = t.get("annotations").map(Node::to_json);
                McpPinnedTool {
                    name,
                    description: t.string("description", d),
                    input_schema,
                    annotations,
                    loc: item.loc.clone(),
                }
            }
            _ => {
                d.error(
                    Some(&item.loc),
                    at,
                    format!("expected a tool name or {{name, inputSchema}}, got {}", item.kind_name()),
                );
                continue;
            }
        };
        if !crate::toolpack::is_valid_tool_name(&tool.name) {
            d.error(
                Some(&item.loc),
                index(path, i),
                format!("invalid MCP tool name `{}`: use A-Z a-z 0-9 _ . -", tool.name),
            );
            continue;
        }
        if out.iter().any(|t| t.name == tool.name) {
            d.error(Some(&item.loc), index(path, i), format!("`{}` is pinned twice", tool.name));
            continue;
        }
        out.push(tool);
    }
    Some(out)
}

/// The `id` a local pack's manifest declares, if it can be read (the registry reports problems).
fn manifest_id(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(crate::toolpack::registry::MANIFEST_FILE)).ok()?;
    let manifest: serde_json::Value = serde_json::from_str(&text).ok()?;
    manifest.get("id")?.as_str().map(str::to_string)
}

/// `tools.webFetch`: what the controller-side `web.fetch` may reach.
pub(super) fn read_web_fetch(top: &Obj, d: &mut Diagnostics) -> WebFetchConfig {
    let mut config = WebFetchConfig::default();
    let Some(node) = top.get("tools").and_then(|t| t.get("webFetch")) else { return config };
    if let Some(w) = Obj::open(node, "tools.webFetch", WEB_FETCH_KEYS, &[], d) {
        config.allow_private_addresses = w.bool("allowPrivateAddresses", d).unwrap_or(false);
    }
    config
}
