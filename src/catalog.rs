//! The tool catalog: every registered tool with what a person choosing or reviewing tools needs
//! — display name, description, group, annotations, input schema, approval requirement, which
//! agents may call it, whether each of them gets it deferred, and each agent's default
//! permission decision, and which agents have it switched off. One `Serialize` shape for
//! `suzumio tools --json` and `GET /api/projects/:p/tools`, so the two cannot drift.
//!
//! It also owns what a person may switch off and back on for one agent at run time
//! ([`switch`]): a tool of that agent's allowlist, or a group (`group:<name>`, the catalog's
//! `group`) of them; switching on never reaches past the allowlist. The store records the
//! switch; the call pipeline refuses a switched-off tool; the tool list drops it.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::config::AgentConfig;
use crate::permissions::{self, Behavior, audit};
use crate::project::Project;
use crate::store::{StoreError, SwitchTarget, ToolSwitch};
use crate::support::ToolHost;
use crate::toolpack::{TOOL_SEARCH, ToolDefinition, Toolpack};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogEntry {
    pub name: String,
    /// The name a model calls the tool by (`file_write` for `file.write`).
    pub model_name: String,
    /// `presentation.label`, else the annotations' `title`, else the name.
    pub display_name: String,
    pub description: String,
    pub toolpack: String,
    pub toolpack_kind: &'static str,
    /// `presentation.group`, else the pack id.
    pub group: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    pub annotations: BTreeMap<&'static str, bool>,
    /// What an untrusted MCP server claims about the tool: advisory, never used for permissions
    /// (`annotations` is what counts).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub server_annotations: BTreeMap<&'static str, bool>,
    /// With `serverAnnotations`: that they are advisory, why, and how to make them count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_annotations_note: Option<String>,
    pub input_schema: Value,
    pub requires_approval: bool,
    /// Where it runs: `runner` (the agent's container) or `controller`.
    pub runs_in: &'static str,
    pub ends_activation: bool,
    /// Whether `toolLoading: deferred` may hold it back until `tool_search`.
    pub deferrable: bool,
    pub allowed_agents: Vec<String>,
    /// The allowed agents that get it only through `tool_search`.
    pub deferred_for: Vec<String>,
    /// Per allowed agent, the decision for a call with no arguments (rules with argument
    /// matchers may decide a real call differently: `suzumio permissions explain` shows one).
    pub decisions: BTreeMap<String, AgentDecision>,
    /// The allowed agents that have it switched off now, with who switched it and when.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub switched_off_for: BTreeMap<String, SwitchedOff>,
}

/// Who switched a tool off for an agent, and when.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SwitchedOff {
    pub by: String,
    #[serde(with = "crate::clock::iso_serde")]
    pub at: chrono::DateTime<chrono::Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// One agent's default decision for a tool, and what decided it.
#[derive(Debug, Serialize)]
pub struct AgentDecision {
    pub decision: Behavior,
    pub source: String,
}

/// The catalog, in registry order; with `agent`, only the tools it may call. `switches`: the
/// store's switched tools (`Store::all_tool_switches`).
pub fn catalog(project: &Project, agent: Option<&AgentConfig>, switches: &[ToolSwitch]) -> Vec<CatalogEntry> {
    catalog_in(project, agent, &permissions::live::Snapshot::default(), switches)
}

/// [`catalog`] with the decisions the live rules and switched modes of `live` make.
pub fn catalog_in(
    project: &Project,
    agent: Option<&AgentConfig>,
    live: &permissions::live::Snapshot,
    switches: &[ToolSwitch],
) -> Vec<CatalogEntry> {
    let registry = &project.registry;
    let agents: Vec<&AgentConfig> = match agent {
        Some(a) => vec![a],
        None => project.config.agents.iter().collect(),
    };
    let toolsets: Vec<_> = agents.iter().map(|a| (*a, registry.resolve_agent(a))).collect();
    registry
        .tools()
        .filter_map(|(pack, def)| {
            let allowed: Vec<&AgentConfig> =
                toolsets.iter().filter(|(_, set)| set.tools.contains(&def.name)).map(|(a, _)| *a).collect();
            if agent.is_some() && allowed.is_empty() {
                return None;
            }
            let deferred_for = toolsets
                .iter()
                .filter(|(_, set)| set.deferred.contains(&def.name))
                .map(|(a, _)| a.id.clone())
                .collect();
            let decisions = allowed
                .iter()
                .filter_map(|a| {
                    // A live rule that does not read decides nothing here; the call itself fails on it.
                    let extra = live.rules_for(&a.id).unwrap_or_default();
                    let d = permissions::default_for_tool_in(project, a, &def.name, &extra, live.mode_of(a))?;
                    Some((a.id.clone(), AgentDecision { decision: d.behavior, source: d.source }))
                })
                .collect();
            let switched_off_for = switches
                .iter()
                .filter(|s| !s.enabled && s.tool == def.name && allowed.iter().any(|a| a.id == s.agent_id))
                .map(|s| (s.agent_id.clone(), SwitchedOff { by: s.by.clone(), at: s.at, group: s.group.clone() }))
                .collect();
            let presentation = def.presentation.as_ref();
            let claimed = def.server_annotations.as_ref().map(hints).unwrap_or_default();
            Some(CatalogEntry {
                name: def.name.clone(),
                model_name: crate::toolpack::sanitize_tool_name(&def.name),
                display_name: display_name(def),
                description: def.description.clone(),
                toolpack: pack.id.clone(),
                toolpack_kind: pack.kind_name(),
                group: group_of(pack, def),
                icon: presentation.and_then(|p| p.icon.clone()),
                annotations: hints(&def.annotations),
                server_annotations: claimed.clone(),
                server_annotations_note: (!claimed.is_empty()).then(|| {
                    format!(
                        "advisory: claimed by the MCP server {}, which is not trusted, so permissions do not use \
                         them; `trusted: true` on its `- mcp:` entry makes them count",
                        pack.id
                    )
                }),
                input_schema: def.input_schema.clone(),
                requires_approval: def.requires_approval,
                runs_in: def.runs_in.as_str(),
                ends_activation: def.ends_activation,
                deferrable: def.may_defer() && def.name != TOOL_SEARCH,
                allowed_agents: allowed.iter().map(|a| a.id.clone()).collect(),
                deferred_for,
                decisions,
                switched_off_for,
            })
        })
        .collect()
}

/// A tool's group: `presentation.group`, else its pack's id.
pub fn group_of(pack: &Toolpack, def: &ToolDefinition) -> String {
    crate::toolpack::ToolpackRegistry::group_of(pack, def).to_string()
}

/// How a name of `tools on|off` (and the API's routes) names a group: as an allowlist does.
pub use crate::config::GROUP_PREFIX;

/// Why a switch was refused; each says what to do instead.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    #[error("Unknown agent: {agent} (agents: {known})")]
    UnknownAgent { agent: String, known: String },
    #[error("{0}")]
    NotAllowed(String),
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// What one switch did: per name, the tools it named and the ones whose state changed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SwitchReport {
    pub agent: String,
    pub enabled: bool,
    pub by: String,
    pub switched: Vec<SwitchedName>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SwitchedName {
    /// As named: a tool, or `group:<name>`.
    pub name: String,
    pub tools: Vec<String>,
    /// The tools whose state changed (the others already were so).
    pub changed: Vec<String>,
}

/// Which tools of `agent`'s allowlist each of `names` (a tool, or `group:<name>`) stands for.
/// A name the agent does not have is refused with what it does have, so nothing is switched
/// unless every name is right.
pub fn switch_targets(
    project: &Project,
    agent: &AgentConfig,
    names: &[String],
) -> Result<Vec<SwitchTarget>, SwitchError> {
    let registry = &project.registry;
    let allowed = registry.resolve_agent(agent).tools;
    let groups: Vec<(String, String)> =
        allowed.iter().filter_map(|t| registry.tool(t).map(|(pack, def)| (group_of(pack, def), t.clone()))).collect();
    let mut group_names: Vec<&str> = Vec::new();
    for (group, _) in &groups {
        if !group_names.contains(&group.as_str()) {
            group_names.push(group);
        }
    }
    if names.is_empty() {
        return Err(SwitchError::NotAllowed(format!(
            "name at least one tool or group:<name> to switch (tools of {}: {}; groups: {})",
            agent.id,
            allowed.join(", "),
            group_names.join(", ")
        )));
    }
    let mut targets = Vec::new();
    for name in names {
        let name = name.trim();
        if let Some(group) = name.strip_prefix(GROUP_PREFIX) {
            let tools: Vec<String> = groups.iter().filter(|(g, _)| g == group).map(|(_, t)| t.clone()).collect();
            if tools.is_empty() {
                let hint = crate::config::diag::did_you_mean(group, group_names.iter().copied())
                    .map(|m| format!("{m} "))
                    .unwrap_or_default();
                return Err(SwitchError::NotAllowed(format!(
                    "{} has no tool in group `{group}`: {hint}its groups are {}",
                    agent.id,
                    group_names.join(", ")
                )));
            }
            targets.push(SwitchTarget { group: Some(group.to_string()), tools });
        } else if allowed.iter().any(|t| t == name) {
            targets.push(SwitchTarget { group: None, tools: vec![name.to_string()] });
        } else if registry.tool(name).is_some() {
            return Err(SwitchError::NotAllowed(format!(
                "{name} is not in {}'s allowlist (agents.{}.tools in suzumio.yaml): a switch only turns an allowed                  tool off and back on, it never adds one the config does not allow",
                agent.id, agent.base_id
            )));
        } else {
            let hint = crate::config::diag::did_you_mean(name, allowed.iter().map(String::as_str))
                .map(|m| format!(" ({m})"))
                .or_else(|| {
                    group_names.contains(&name).then(|| format!(" ({name} is a group: write {GROUP_PREFIX}{name})"))
                })
                .unwrap_or_default();
            return Err(SwitchError::NotAllowed(format!("Unknown tool: {name}{hint}")));
        }
    }
    Ok(targets)
}

/// Switch `names` off (`enabled: false`) or back on for `agent_id`, as `by` (`cli (alice)`,
/// `webui`, `api`): recorded in the store with its `tools.switched` events, and audited. The
/// agent's next request and next call see it, in this process or in the one serving the
/// project (they share the store).
pub fn switch(
    host: &ToolHost,
    agent_id: &str,
    names: &[String],
    enabled: bool,
    by: &str,
) -> Result<SwitchReport, SwitchError> {
    let project = host.project.snapshot();
    let agent = project.config.agent(agent_id).ok_or_else(|| SwitchError::UnknownAgent {
        agent: agent_id.to_string(),
        known: project.config.agents.iter().map(|a| a.id.as_str()).collect::<Vec<_>>().join(", "),
    })?;
    let targets = switch_targets(&project, agent, names)?;
    let changed = host.store.switch_tools(agent_id, &targets, enabled, by)?;
    let word = if enabled { "on" } else { "off" };
    let mut switched = Vec::new();
    for (target, changed) in targets.into_iter().zip(changed) {
        let name = match &target.group {
            Some(g) => format!("{GROUP_PREFIX}{g}"),
            None => target.tools[0].clone(),
        };
        if !changed.is_empty() {
            host.audit.record(audit::AuditEntry {
                time: host.store.now(),
                kind: audit::EntryKind::Switch,
                agent: agent_id.to_string(),
                activation: None,
                call_id: None,
                tool: name.clone(),
                mode: agent.permission_mode.as_str().to_string(),
                decision: if enabled { Behavior::Allow } else { Behavior::Deny },
                source: by.to_string(),
                reason: format!("switched {word} by {by}: {}", changed.join(", ")),
                risk: None,
                user_action: Some(word.to_string()),
                feedback: None,
                arguments: serde_json::json!({ "tools": changed }),
            });
        }
        switched.push(SwitchedName { name, tools: target.tools, changed });
    }
    Ok(SwitchReport { agent: agent_id.to_string(), enabled, by: by.to_string(), switched })
}

/// Why `tool` may not run for `agent_id` now: it is switched off, by whom, and how to switch
/// it on. What the call pipeline answers a caller who called it anyway.
pub fn switched_off_reason(switch: &ToolSwitch) -> Option<String> {
    if switch.enabled {
        return None;
    }
    let (agent, tool) = (&switch.agent_id, &switch.tool);
    let named = switch.group.as_ref().map(|g| format!(" (with {GROUP_PREFIX}{g})")).unwrap_or_default();
    let on = switch.group.as_ref().map(|g| format!("{GROUP_PREFIX}{g}")).unwrap_or_else(|| tool.clone());
    Some(format!(
        "{tool} is switched off for {agent} by {}{named} at {}: it cannot run until it is switched on again \
         (`suzumio tools on <project> {agent} {on}`, the WebUI's Tools page, or PUT /api/projects/<project>/agents/{agent}/tools/{tool} {{\"enabled\": true}})",
        switch.by,
        crate::clock::iso(switch.at),
    ))
}

fn display_name(def: &ToolDefinition) -> String {
    def.presentation
        .as_ref()
        .and_then(|p| p.label.clone())
        .or_else(|| def.annotations.title.clone())
        .unwrap_or_else(|| def.name.clone())
}

fn hints(a: &crate::toolpack::ToolAnnotations) -> BTreeMap<&'static str, bool> {
    [
        ("readOnlyHint", a.read_only_hint),
        ("destructiveHint", a.destructive_hint),
        ("idempotentHint", a.idempotent_hint),
        ("openWorldHint", a.open_world_hint),
    ]
    .into_iter()
    .filter_map(|(k, v)| Some((k, v?)))
    .collect()
}
