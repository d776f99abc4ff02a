//! `tools`: the toolpack list (`tools.toolpacks`: built-in names, packaged pack ids or local pack directories with
//! their JavaScript limits) and what `web.fetch` may reach (`tools.webFetch`). Manifests are
//! read by the registry, not here.

use std::path::Path;

use crate::config::diag::Diagnostics;
use crate::config::model::*;
use crate::config::node::Value;
use crate::config::read::{Obj, index};
use crate::toolpack::packaged;

const TOOLS_KEYS: &[&str] = &["toolpacks", "webFetch"];
const LOCAL_PACK_KEYS: &[&str] = &["path", "id", "timeoutMs", "memoryMb"];
const WEB_FETCH_KEYS: &[&str] = &["allowPrivateAddresses"];

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
                    "expected a built-in name ({}) or {{path, id}}, got {}",
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
            ToolpackRef::Builtin { .. } => None,
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
