//! The tool catalog: every registered tool with what a person choosing or reviewing tools needs
//! — display name, description, group, annotations, input schema, approval requirement, which
//! agents may call it, whether each of them gets it deferred, and each agent's default
//! permission decision. One `Serialize` shape for `suzumio tools --json` and
//! `GET /api/projects/:p/tools`, so the two cannot drift.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::config::AgentConfig;
use crate::permissions::{self, Behavior};
use crate::project::Project;
use crate::toolpack::{TOOL_SEARCH, ToolDefinition};

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
}

/// One agent's default decision for a tool, and what decided it.
#[derive(Debug, Serialize)]
pub struct AgentDecision {
    pub decision: Behavior,
    pub source: String,
}

/// The catalog, in registry order; with `agent`, only the tools it may call.
pub fn catalog(project: &Project, agent: Option<&AgentConfig>) -> Vec<CatalogEntry> {
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
                    let d = permissions::default_for_tool(project, a, &def.name)?;
                    Some((a.id.clone(), AgentDecision { decision: d.behavior, source: d.source }))
                })
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
                group: crate::toolpack::ToolpackRegistry::group_of(pack, def).to_string(),
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
            })
        })
        .collect()
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
