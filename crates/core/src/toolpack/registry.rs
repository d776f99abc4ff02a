//! The registry of a project's toolpacks: built-in and local packs loaded, checked across packs
//! (duplicate pack ids, duplicate tool names) and indexed by tool name; and per-agent resolution
//! of allowlists into the tools an agent sees and the local packs mounted into its container.
//!
//! A registry is all or nothing: if any pack has an error, `build` returns the diagnostics and no
//! registry, so nothing downstream ever runs with a partial set of tools.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::config::diag::{Diagnostics, did_you_mean};
use crate::config::model::{
    AgentConfig, AllowPattern, BuiltinPack, GROUP_PREFIX, McpPackConfig, PackLimits, ToolLoading, ToolpackRef,
};
use crate::config::node::{Loc, parse_json};
use crate::toolpack::builtin;
use crate::toolpack::manifest::{Manifest, ManifestOrigin, ToolDefinition, WebuiEntry, parse_manifest};
use crate::toolpack::mcp::{self, McpListing};
use crate::toolpack::schema::{self, InputError};

pub const MANIFEST_FILE: &str = "suzumio.toolpack.json";

#[derive(Clone, Debug)]
pub enum PackSource {
    Builtin(BuiltinPack),
    Local {
        root: PathBuf,
        /// Present when the pack declares tools (a WebUI-only pack needs no runner).
        runner_module: Option<PathBuf>,
        controller_module: PathBuf,
        limits: PackLimits,
    },
    /// An MCP server; its tools come from the pinned list or from discovery.
    Mcp(McpPackConfig),
}

#[derive(Clone, Debug)]
pub struct Toolpack {
    pub id: String,
    pub description: Option<String>,
    pub source: PackSource,
    pub tools: Vec<ToolDefinition>,
    validators: Vec<jsonschema::Validator>,
    pub webui: Vec<WebuiEntry>,
}

impl Toolpack {
    pub fn is_local(&self) -> bool {
        matches!(self.source, PackSource::Local { .. })
    }

    pub fn mcp(&self) -> Option<&McpPackConfig> {
        match &self.source {
            PackSource::Mcp(m) => Some(m),
            _ => None,
        }
    }

    pub fn kind_name(&self) -> &'static str {
        match self.source {
            PackSource::Builtin(_) => "builtin",
            PackSource::Local { .. } => "local",
            PackSource::Mcp(_) => "mcp",
        }
    }
}

/// The tool through which an agent with deferred tools loads them (core pack).
pub const TOOL_SEARCH: &str = "tool_search";

/// What one agent may use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentToolset {
    pub agent: String,
    /// Allowed tools, in registry order; with deferred tools, `tool_search` too.
    pub tools: Vec<String>,
    /// The allowed tools held back until `tool_search` activates them (`toolLoading: deferred`
    /// or `deferredTools`, minus tools that cannot be deferred).
    pub deferred: Vec<String>,
    /// Local packs exposing at least one allowed tool: only these are mounted into its container.
    pub mounted_packs: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct ToolpackRegistry {
    packs: Vec<Toolpack>,
    by_tool: BTreeMap<String, (usize, usize)>,
}

impl ToolpackRegistry {
    /// Load every pack the config lists. Errors and warnings go to `d`; `None` when any error.
    pub fn build(refs: &[ToolpackRef], d: &mut Diagnostics) -> Option<ToolpackRegistry> {
        Self::build_with(refs, &BTreeMap::new(), d)
    }

    /// [`build`](Self::build), with the tool lists MCP servers gave (by pack id). A pack that
    /// pins its list uses the pin; one with no list yet has no tools (and a warning).
    pub fn build_with(
        refs: &[ToolpackRef],
        listings: &BTreeMap<String, McpListing>,
        d: &mut Diagnostics,
    ) -> Option<ToolpackRegistry> {
        // Each loaded pack with where the config lists it (location and key path).
        let mut packs: Vec<(Toolpack, Loc, String)> = Vec::new();
        let mut failed = false;
        for (ri, r) in refs.iter().enumerate() {
            let entry_path = format!("tools.toolpacks[{ri}]");
            let mut pd = Diagnostics::default();
            let loaded = match r {
                ToolpackRef::Builtin { pack, loc } => match builtin::manifest(*pack) {
                    Ok(m) => Some((pack_from(m, PackSource::Builtin(*pack)), loc.clone())),
                    Err(e) => {
                        pd.extend(e);
                        None
                    }
                },
                ToolpackRef::Local { path, id, limits, loc } => {
                    load_local(path, id.as_deref(), *limits, loc, &mut pd).map(|p| (p, loc.clone()))
                }
                ToolpackRef::Mcp(m) => Some((load_mcp(m, listings.get(&m.id), &mut pd), m.loc.clone())),
            };
            // Tag problems with the pack id, or what stands for it when the manifest has none.
            let tag = loaded.as_ref().map(|(p, _)| p.id.clone()).or_else(|| match r {
                ToolpackRef::Local { id: Some(id), .. } => Some(id.clone()),
                ToolpackRef::Local { path, .. } => path.file_name().map(|n| n.to_string_lossy().into_owned()),
                ToolpackRef::Builtin { pack, .. } => Some(pack.id().to_string()),
                ToolpackRef::Mcp(m) => Some(m.id.clone()),
            });
            failed |= pd.has_errors() || loaded.is_none();
            d.extend_for_pack(pd, tag.as_deref());
            if let Some((pack, loc)) = loaded {
                if !matches!(pack.source, PackSource::Builtin(_)) && !owns_its_namespace(&pack, &loc, &entry_path, d) {
                    failed = true;
                    continue;
                }
                if packs.iter().any(|(p, _, _)| p.id == pack.id) {
                    d.error(Some(&loc), entry_path, format!("Duplicate toolpack: {}", pack.id));
                    failed = true;
                    continue;
                }
                packs.push((pack, loc, entry_path));
            }
        }
        drop_taken_mcp_names(&mut packs, d);
        let mut by_tool: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for (pi, (pack, loc, entry_path)) in packs.iter().enumerate() {
            for (ti, tool) in pack.tools.iter().enumerate() {
                if let Some((other, _)) = by_tool.get(&tool.name) {
                    let other = &packs[*other].0.id;
                    d.error(
                        Some(loc),
                        entry_path.as_str(),
                        format!("Duplicate tool {} in {other} and {}", tool.name, pack.id),
                    );
                    failed = true;
                } else {
                    by_tool.insert(tool.name.clone(), (pi, ti));
                }
            }
        }
        for (pack, loc, _) in &packs {
            for entry in &pack.webui {
                for related in &entry.related_tools {
                    if !by_tool.contains_key(related) {
                        let mut w = Diagnostics::default();
                        w.warning(
                            Some(loc),
                            "",
                            format!(
                                "WebUI entry {} lists related tool {related}, which no registered toolpack declares",
                                entry.id
                            ),
                        );
                        d.extend_for_pack(w, Some(&pack.id));
                    }
                }
            }
        }
        if failed {
            return None;
        }
        Some(ToolpackRegistry { packs: packs.into_iter().map(|(p, _, _)| p).collect(), by_tool })
    }

    pub fn packs(&self) -> &[Toolpack] {
        &self.packs
    }

    pub fn pack(&self, id: &str) -> Option<&Toolpack> {
        self.packs.iter().find(|p| p.id == id)
    }

    /// Every tool with the pack that declares it, in registration order.
    pub fn tools(&self) -> impl Iterator<Item = (&Toolpack, &ToolDefinition)> {
        self.packs.iter().flat_map(|p| p.tools.iter().map(move |t| (p, t)))
    }

    pub fn tool(&self, name: &str) -> Option<(&Toolpack, &ToolDefinition)> {
        let (pi, ti) = *self.by_tool.get(name)?;
        let pack = &self.packs[pi];
        Some((pack, &pack.tools[ti]))
    }

    /// Check a tool input against the tool's compiled schema.
    pub fn validate_input(&self, tool: &str, input: &serde_json::Value) -> Result<(), Vec<InputError>> {
        let Some(&(pi, ti)) = self.by_tool.get(tool) else {
            return Err(vec![InputError { pointer: String::new(), message: format!("Unknown tool: {tool}") }]);
        };
        schema::check_input(&self.packs[pi].validators[ti], input)
    }

    /// Check a `callSupport` input against the tool's `supportInputSchema`; a tool without one
    /// takes any input there (its runner module already had the model's input checked).
    pub fn validate_support_input(&self, tool: &str, input: &serde_json::Value) -> Result<(), Vec<InputError>> {
        match self.tool(tool).and_then(|(_, def)| def.support_validator.as_ref()) {
            Some(validator) => schema::check_input(validator, input),
            None => Ok(()),
        }
    }

    /// The tools an agent may see and the local packs to mount for it.
    pub fn resolve_agent(&self, agent: &AgentConfig) -> AgentToolset {
        let mut tools = Vec::new();
        let mut deferred = Vec::new();
        let mut mounted_packs = Vec::new();
        for pack in &self.packs {
            let allowed: Vec<&ToolDefinition> =
                pack.tools.iter().filter(|t| t.name != TOOL_SEARCH && agent.tools.allows(&t.name)).collect();
            if pack.is_local() && !allowed.is_empty() {
                mounted_packs.push(pack.id.clone());
            }
            for tool in allowed {
                let held_back = agent.tool_loading == ToolLoading::Deferred || agent.deferred_tools.allows(&tool.name);
                if held_back && tool.may_defer() {
                    deferred.push(tool.name.clone());
                }
                tools.push(tool.name.clone());
            }
        }
        if !deferred.is_empty() && self.by_tool.contains_key(TOOL_SEARCH) {
            tools.push(TOOL_SEARCH.to_string());
        }
        AgentToolset { agent: agent.id.clone(), tools, deferred, mounted_packs }
    }

    /// The catalog group of a pack's tool: its `presentation.group`, else the pack's id.
    pub fn group_of<'a>(pack: &'a Toolpack, tool: &'a ToolDefinition) -> &'a str {
        tool.presentation.as_ref().and_then(|p| p.group.as_deref()).unwrap_or(&pack.id)
    }

    /// Every catalog group and its tools, in registry order (`tool_search` is in none: it is
    /// given with deferred tools, not chosen).
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (pack, tool) in self.tools().filter(|(_, t)| t.name != TOOL_SEARCH) {
            groups.entry(Self::group_of(pack, tool).to_string()).or_default().push(tool.name.clone());
        }
        groups
    }

    /// Fills in the tools of every `group:` entry of the agents' allowlists; a group the
    /// registry does not have is an error at the entry.
    pub fn expand_groups(&self, agents: &mut [AgentConfig], d: &mut Diagnostics) {
        let groups = self.groups();
        for agent in agents.iter_mut() {
            let base = agent.base_id.clone();
            let instance = agent.id != agent.base_id;
            for (key, list) in [("tools", &mut agent.tools), ("deferredTools", &mut agent.deferred_tools)] {
                list.groups.clear();
                for (i, (pattern, loc)) in list.entries.iter().enumerate() {
                    let AllowPattern::Group(group) = pattern else { continue };
                    match groups.get(group) {
                        Some(tools) => {
                            list.groups.insert(group.clone(), tools.clone());
                        }
                        // Instances of one agent share its entries: said once.
                        None if instance => {}
                        None => {
                            let names: Vec<String> = groups.keys().map(|g| format!("{GROUP_PREFIX}{g}")).collect();
                            d.error_hint(
                                Some(loc),
                                format!("agents.{base}.{key}[{i}]"),
                                format!("`{pattern}` is no tool group; the groups are {}", names.join(", ")),
                                did_you_mean(&pattern.to_string(), names.iter().map(String::as_str)),
                            );
                        }
                    }
                }
            }
        }
    }

    /// Whether some tool in `agent`'s allowlist runs in its runner (else it never needs one).
    pub fn uses_runner(&self, agent: &AgentConfig) -> bool {
        self.tools().any(|(_, t)| t.runs_in == super::RunsIn::Runner && agent.tools.allows(&t.name))
    }

    /// Whether `agent` may call `tool`: its allowlist, and `tool_search` exactly when some of
    /// its tools are deferred.
    pub fn may_call(&self, agent: &AgentConfig, tool: &str) -> bool {
        if tool == TOOL_SEARCH {
            return !self.resolve_agent(agent).deferred.is_empty();
        }
        agent.tools.allows(tool)
    }

    /// Warnings for allowlist patterns that match no registered tool (once per configured agent),
    /// and for a local pack's tools no agent may call.
    pub fn check_allowlists(&self, agents: &[AgentConfig], d: &mut Diagnostics) {
        let mut seen: Vec<&str> = Vec::new();
        for agent in agents {
            if seen.contains(&agent.base_id.as_str()) {
                continue;
            }
            seen.push(&agent.base_id);
            for (i, (pattern, loc)) in agent.tools.entries.iter().enumerate() {
                // An unknown group is an error of `expand_groups`.
                if !matches!(pattern, AllowPattern::Group(_)) && !self.by_tool.keys().any(|t| pattern.matches(t)) {
                    let shown = pattern.to_string();
                    let hint = crate::config::diag::did_you_mean(&shown, self.by_tool.keys().map(String::as_str));
                    // A typo in a local pack's tool leaves that pack out of the container.
                    let pack = shown.split_once('.').map(|(p, _)| p).filter(|p| {
                        self.packs
                            .iter()
                            .any(|pk| pk.is_local() && pk.tools.iter().any(|t| t.name.starts_with(&format!("{p}."))))
                    });
                    let unmounted = match pack {
                        Some(p) => format!("; unless another entry allows one of its tools, pack `{p}` is not mounted"),
                        None => String::new(),
                    };
                    d.warning_hint(
                        Some(loc),
                        format!("agents.{}.tools[{i}]", agent.base_id),
                        format!("`{pattern}` matches no registered tool{unmounted}"),
                        hint,
                    );
                }
            }
            let toolset = self.resolve_agent(agent);
            let ends = toolset.tools.iter().any(|t| self.tool(t).is_some_and(|(_, def)| def.ends_activation));
            if !ends {
                let ending: Vec<&str> =
                    self.tools().filter(|(_, def)| def.ends_activation).map(|(_, def)| def.name.as_str()).collect();
                d.warning(
                    Some(&agent.loc),
                    format!("agents.{}.tools", agent.base_id),
                    format!(
                        "this agent can call no tool that ends an activation ({}): its activations end only when \
                         the model stops calling tools",
                        if ending.is_empty() { "none is registered".to_string() } else { ending.join(", ") }
                    ),
                );
            }
            if !toolset.deferred.is_empty() && !self.by_tool.contains_key(TOOL_SEARCH) {
                d.error(
                    Some(&agent.loc),
                    format!("agents.{}.toolLoading", agent.base_id),
                    "this agent's deferred tools are loaded through tool_search, which is in the core pack: \
                     add `core` to tools.toolpacks",
                );
            }
            for (i, (pattern, loc)) in agent.deferred_tools.entries.iter().enumerate() {
                if !toolset.deferred.iter().any(|t| agent.deferred_tools.entry_allows(pattern, t)) {
                    d.warning(
                        Some(loc),
                        format!("agents.{}.deferredTools[{i}]", agent.base_id),
                        format!("`{pattern}` matches none of this agent's deferrable allowed tools"),
                    );
                }
            }
        }
        self.check_unallowed_tools(agents, d);
    }
}

impl ToolpackRegistry {
    /// A local pack's tool in no agent's allowlist: written for nothing, or a name the
    /// allowlists miss. (Built-in packs and MCP servers offer more than a project needs.)
    fn check_unallowed_tools(&self, agents: &[AgentConfig], d: &mut Diagnostics) {
        for pack in self.packs.iter().filter(|p| p.is_local()) {
            for (i, tool) in pack.tools.iter().enumerate() {
                if agents.iter().any(|a| a.tools.allows(&tool.name)) {
                    continue;
                }
                let mut w = Diagnostics::default();
                w.warning(
                    tool.declared_at.as_ref(),
                    format!("tools[{i}]"),
                    format!(
                        "`{}` is in no agent's tools, so no model can call it: add it to `agents.<id>.tools` in the \
                         project config, or remove it from the manifest",
                        tool.name
                    ),
                );
                d.extend_for_pack(w, Some(&pack.id));
            }
        }
    }
}

/// A server names its own tools, so one of them may take a name another pack declares
/// (`file` as the pack id and `read` as a tool is `file.read`): such a tool is left out with a
/// warning, and the project still loads. Declared packs win over servers; among servers, the
/// one listed first.
/// The built-in packs' namespaces: their ids and their tools' prefixes (`file` of `file.read`,
/// `tool_search`), whether the project lists the pack or not.
pub fn builtin_namespaces() -> &'static std::collections::BTreeSet<String> {
    static NAMES: std::sync::OnceLock<std::collections::BTreeSet<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names = std::collections::BTreeSet::new();
        for name in crate::config::model::BuiltinPack::NAMES {
            let Some(pack) = crate::config::model::BuiltinPack::from_name(name) else { continue };
            names.insert(pack.id().to_string());
            if let Ok(manifest) = builtin::manifest(pack) {
                names.extend(manifest.tools.iter().map(|t| namespace_of(&t.name).to_string()));
            }
        }
        names
    })
}

/// `file` of `file.read`; a name without a dot is its own namespace.
fn namespace_of(tool: &str) -> &str {
    tool.split('.').next().unwrap_or(tool)
}

/// A local or MCP pack may not take a built-in namespace, as its id or as its tools' prefix
/// (an MCP server `shell` would otherwise serve `shell.wipe` next to, or instead of, the
/// built-in `shell.*`). Reports each, located; `false` when the pack is refused.
fn owns_its_namespace(pack: &Toolpack, loc: &Loc, entry_path: &str, d: &mut Diagnostics) -> bool {
    let reserved = builtin_namespaces();
    let mut pd = Diagnostics::default();
    let id_taken = reserved.contains(&pack.id);
    if id_taken {
        let listed = reserved.iter().cloned().collect::<Vec<_>>().join(", ");
        pd.error(
            Some(loc),
            entry_path,
            format!("toolpack id `{}` is a built-in namespace (built-in: {listed}); give the pack another id", pack.id),
        );
    }
    for tool in pack.tools.iter().filter(|t| reserved.contains(namespace_of(&t.name))) {
        let fix = if id_taken {
            "its tools take the pack's new id".to_string()
        } else {
            format!("name its tools after the pack ({}.…)", pack.id)
        };
        pd.error(
            Some(loc),
            entry_path,
            format!("{} is in the built-in namespace `{}`; {fix}", tool.name, namespace_of(&tool.name)),
        );
    }
    let owns = !pd.has_errors();
    d.extend_for_pack(pd, Some(&pack.id));
    owns
}

fn drop_taken_mcp_names(packs: &mut [(Toolpack, Loc, String)], d: &mut Diagnostics) {
    let mut taken: std::collections::BTreeSet<String> = packs
        .iter()
        .filter(|(p, _, _)| p.mcp().is_none())
        .flat_map(|(p, _, _)| p.tools.iter().map(|t| t.name.clone()))
        .collect();
    for (pack, loc, _) in packs.iter_mut().filter(|(p, _, _)| p.mcp().is_some()) {
        let mut i = 0;
        while i < pack.tools.len() {
            if taken.insert(pack.tools[i].name.clone()) {
                i += 1;
                continue;
            }
            let mut w = Diagnostics::default();
            w.warning(
                Some(loc),
                "",
                format!(
                    "the server's tool {} has the name of another toolpack's tool; it is left out",
                    pack.tools[i].name
                ),
            );
            d.extend_for_pack(w, Some(&pack.id));
            pack.tools.remove(i);
            pack.validators.remove(i);
        }
    }
}

/// An MCP pack from its pinned list, else from what its server listed.
fn load_mcp(m: &McpPackConfig, listing: Option<&McpListing>, d: &mut Diagnostics) -> Toolpack {
    let tools = match (mcp::pinned_tools(m), listing) {
        (Some(pinned), _) => pinned,
        (None, Some(listing)) if listing.error.is_none() => listing.tools.clone(),
        (None, listing) => {
            let why = listing.and_then(|l| l.error.clone()).map(|e| format!(": {e}")).unwrap_or_default();
            d.warning(
                Some(&m.loc),
                "",
                format!(
                    "the MCP server {} has not listed its tools yet{why}; `suzumio check` or `suzumio run` starts it to list them (or pin them under `tools:`)",
                    m.id
                ),
            );
            Vec::new()
        }
    };
    let (tools, validators) = mcp::tool_definitions(m, &tools, d);
    let description = listing.filter(|l| l.error.is_none()).map(|l| format!("MCP server {}", l.server()));
    Toolpack { id: m.id.clone(), description, source: PackSource::Mcp(m.clone()), tools, validators, webui: Vec::new() }
}

fn pack_from(m: Manifest, source: PackSource) -> Toolpack {
    Toolpack { id: m.id, description: m.description, source, tools: m.tools, validators: m.validators, webui: m.webui }
}

fn load_local(
    root: &Path,
    expected_id: Option<&str>,
    limits: PackLimits,
    site: &Loc,
    d: &mut Diagnostics,
) -> Option<Toolpack> {
    let manifest_path = root.join(MANIFEST_FILE);
    let text = match std::fs::read_to_string(&manifest_path) {
        Ok(t) => t,
        Err(e) => {
            d.error(
                Some(site),
                "",
                format!("cannot read toolpack manifest {}: {e}", crate::config::diag::display_path(&manifest_path)),
            );
            return None;
        }
    };
    let file: Arc<Path> = Arc::from(manifest_path.as_path());
    let node = match parse_json(&text, file) {
        Ok(n) => n,
        Err(e) => {
            d.error(Some(&e.loc), "", e.message);
            return None;
        }
    };
    let manifest = parse_manifest(&node, ManifestOrigin::Local, d)?;
    if let Some(expected) = expected_id
        && expected != manifest.id
    {
        let loc = node.get("id").map_or(manifest.loc.clone(), |n| n.loc.clone());
        d.error(Some(&loc), "id", format!("Toolpack id mismatch: expected {expected}, got {}", manifest.id));
    }
    let controller = module_path(root, manifest.controller.as_ref(), "controller", &manifest.loc, d);
    let runner = if manifest.tools.is_empty() {
        None
    } else {
        module_path(root, manifest.runner.as_ref(), "runner", &manifest.loc, d)
    };
    if d.has_errors() {
        return None;
    }
    let source =
        PackSource::Local { root: root.to_path_buf(), runner_module: runner, controller_module: controller?, limits };
    Some(pack_from(manifest, source))
}

/// Resolve a module path against the pack root: no URLs, no escaping the root (also not through
/// symlinks), `.mjs` only, and the file must exist.
fn module_path(
    root: &Path,
    given: Option<&(String, Loc)>,
    which: &str,
    manifest_loc: &Loc,
    d: &mut Diagnostics,
) -> Option<PathBuf> {
    let default = format!("{which}.mjs");
    let (raw, loc) = given.map_or((default.as_str(), manifest_loc), |(p, l)| (p.as_str(), l));
    let lower = raw.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        d.error(Some(loc), which, format!("HTTP(S) toolpack modules are disabled for reproducibility: {raw}"));
        return None;
    }
    let rel = Path::new(raw);
    let escapes = rel.is_absolute()
        || rel
            .components()
            .try_fold(0i32, |depth, c| match c {
                Component::ParentDir if depth == 0 => None,
                Component::ParentDir => Some(depth - 1),
                Component::Normal(_) => Some(depth + 1),
                _ => Some(depth),
            })
            .is_none();
    if escapes {
        d.error(Some(loc), which, format!("Path is outside toolpack root: {raw}"));
        return None;
    }
    if rel.extension().is_none_or(|e| e != "mjs") {
        d.error(Some(loc), which, format!("Local toolpack {which} module must be a .mjs file: {raw}"));
        return None;
    }
    let path = root.join(rel);
    let resolved = match path.canonicalize() {
        Ok(p) if p.is_file() => p,
        _ => {
            d.error(Some(loc), which, format!("Local toolpack {which} module does not exist: {raw}"));
            return None;
        }
    };
    let canonical_root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    if !resolved.starts_with(&canonical_root) {
        d.error(
            Some(loc),
            which,
            format!("Path is outside toolpack root: {raw} (it is a link to {})", resolved.display()),
        );
        return None;
    }
    Some(resolved)
}
