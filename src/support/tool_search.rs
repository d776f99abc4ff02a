//! `tool_search`: how an agent with deferred tools (`toolLoading: deferred`, `deferredTools`)
//! sees and loads them. Its model starts with the tools that cannot be deferred plus this one;
//! `list` shows what is loaded, activated and available (one line each), `activate` loads tools
//! by exact name or by a query over names and descriptions. Activations are stored per agent
//! (`Store::activate_tools`), so they stay for the agent's history, and the model loop adds
//! them to the tool list from the next model step.
//!
//! Only the agent's own allowlist is ever searched, less the tools switched off for it: a tool
//! it may not use is answered exactly like a tool that does not exist.

use serde_json::{Value, json};

use super::ToolHost;
use super::builtin_tools::Caller;
use crate::config::AgentConfig;
use crate::support::ToolOutput;
use crate::toolpack::{AgentToolset, TOOL_SEARCH, ToolError, ToolpackRegistry, sanitize_tool_name};

/// At most this many tools are activated by one query.
const QUERY_ACTIVATES: usize = 5;
/// At most this many lines per section of a listing.
const LIST_CAP: usize = 100;

/// An agent's tools by loading state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loading {
    /// Sent to the model from the start (not deferred; `tool_search` itself excluded).
    pub loaded: Vec<String>,
    /// Deferred tools it activated, oldest first.
    pub activated: Vec<String>,
    /// Deferred tools it can still activate.
    pub available: Vec<String>,
}

impl Loading {
    pub fn of(toolset: &AgentToolset, activated: &[String]) -> Loading {
        let activated: Vec<String> = activated.iter().filter(|t| toolset.deferred.contains(t)).cloned().collect();
        Loading {
            loaded: toolset
                .tools
                .iter()
                .filter(|t| *t != TOOL_SEARCH && !toolset.deferred.contains(t))
                .cloned()
                .collect(),
            available: toolset.deferred.iter().filter(|t| !activated.contains(t)).cloned().collect(),
            activated,
        }
    }
}

/// The first sentence of a description, for one-line listings.
pub fn one_line(description: &str) -> String {
    let first = description.lines().next().unwrap_or_default();
    let end = first.find(". ").map(|i| i + 1).unwrap_or(first.len());
    crate::text::cap_chars(&first[..end], 160)
}

/// Whether every word of `query` is in the tool's name or description (case-insensitive).
fn matches(registry: &ToolpackRegistry, tool: &str, words: &[String]) -> bool {
    let description = registry.tool(tool).map(|(_, d)| d.description.to_lowercase()).unwrap_or_default();
    let name = tool.to_lowercase();
    words.iter().all(|w| name.contains(w.as_str()) || description.contains(w.as_str()))
}

fn words(query: Option<&str>) -> Vec<String> {
    query.unwrap_or_default().split_whitespace().map(str::to_lowercase).collect()
}

pub fn search(host: &ToolHost, caller: &Caller, input: &Value) -> Result<ToolOutput, ToolError> {
    let project = host.project.snapshot();
    let registry = &project.registry;
    let agent: &AgentConfig = host
        .project
        .config
        .agent(&caller.agent_id)
        .ok_or_else(|| ToolError::Rejected(format!("Unknown agent: {}", caller.agent_id)))?;
    let mut toolset = registry.resolve_agent(agent);
    // A tool switched off for the agent is not its to list or activate until it is back on.
    let off: Vec<String> = host
        .store
        .tool_switches(&agent.id)
        .map_err(|e| ToolError::Internal(e.to_string()))?
        .into_iter()
        .filter(|s| !s.enabled)
        .map(|s| s.tool)
        .collect();
    toolset.tools.retain(|t| !off.contains(t));
    toolset.deferred.retain(|t| !off.contains(t));
    let activated = host.store.activated_tools(&agent.id).map_err(|e| ToolError::Internal(e.to_string()))?;
    let loading = Loading::of(&toolset, &activated);
    let query = input.get("query").and_then(Value::as_str);
    let names: Vec<String> = input
        .get("names")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    match input.get("mode").and_then(Value::as_str).unwrap_or("list") {
        "activate" => activate(host, caller, registry, &loading, query, &names),
        _ => Ok(list(registry, &loading, query)),
    }
}

/// A tool as a list shows it: the name the model calls it by, and the tool's own name when that
/// differs (`file_write (file.write)`).
fn named(tool: &str) -> String {
    let safe = sanitize_tool_name(tool);
    if safe == tool { safe } else { format!("{safe} ({tool})") }
}

fn list(registry: &ToolpackRegistry, loading: &Loading, query: Option<&str>) -> ToolOutput {
    let words = words(query);
    let mut out = String::new();
    for (title, tools) in
        [("Loaded", &loading.loaded), ("Activated", &loading.activated), ("Available to activate", &loading.available)]
    {
        let shown: Vec<&String> = tools.iter().filter(|t| matches(registry, t, &words)).collect();
        out.push_str(&format!("{title} ({}):\n", shown.len()));
        for tool in shown.iter().take(LIST_CAP) {
            let description = registry.tool(tool).map(|(_, d)| one_line(&d.description)).unwrap_or_default();
            out.push_str(&format!("- {}: {description}\n", named(tool)));
        }
        if shown.len() > LIST_CAP {
            out.push_str(&format!("- … {} more: narrow the query\n", shown.len() - LIST_CAP));
        }
    }
    if !loading.available.is_empty() {
        out.push_str("\nActivate with {\"mode\": \"activate\", \"names\": [\"…\"]} or {\"mode\": \"activate\", \"query\": \"…\"}.");
    }
    let model_names: serde_json::Map<String, Value> = [&loading.loaded, &loading.activated, &loading.available]
        .into_iter()
        .flatten()
        .map(|t| (t.clone(), Value::String(sanitize_tool_name(t))))
        .collect();
    let metadata = json!({
        "loaded": loading.loaded, "activated": loading.activated, "available": loading.available,
        "modelNames": model_names,
    });
    ToolOutput {
        title: Some("Tools".into()),
        output: out.trim_end().to_string(),
        metadata: metadata.as_object().cloned(),
        ..ToolOutput::default()
    }
}

fn activate(
    host: &ToolHost,
    caller: &Caller,
    registry: &ToolpackRegistry,
    loading: &Loading,
    query: Option<&str>,
    names: &[String],
) -> Result<ToolOutput, ToolError> {
    let mut chosen: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    // A model may name a tool as it sees it (`file_write`) or as the registry does.
    let known = loading.loaded.iter().chain(&loading.activated).chain(&loading.available);
    let names: Vec<String> = names
        .iter()
        .map(|n| known.clone().find(|t| *t == n || sanitize_tool_name(t) == *n).cloned().unwrap_or_else(|| n.clone()))
        .collect();
    for name in &names {
        if loading.available.contains(name) {
            if !chosen.contains(name) {
                chosen.push(name.clone());
            }
        } else if loading.loaded.contains(name) || loading.activated.contains(name) || name == TOOL_SEARCH {
            notes.push(format!("{name} is already loaded"));
        } else {
            // Not the agent's: the same answer as for a tool that does not exist.
            return Err(ToolError::Rejected(format!(
                "Unknown tool: {name}. Call tool_search with mode \"list\" to see the tools you can activate."
            )));
        }
    }
    let words = words(query);
    if !words.is_empty() {
        // Tools whose name matches come before those only their description matches.
        let mut hits: Vec<&String> = loading.available.iter().filter(|t| matches(registry, t, &words)).collect();
        hits.sort_by_key(|t| !words.iter().all(|w| t.to_lowercase().contains(w.as_str())));
        for hit in hits.into_iter().take(QUERY_ACTIVATES) {
            if !chosen.contains(hit) {
                chosen.push(hit.clone());
            }
        }
    }
    if chosen.is_empty() {
        if !notes.is_empty() {
            return Ok(ToolOutput::new("Tools", format!("Nothing to activate: {}.", notes.join("; "))));
        }
        return Err(ToolError::Rejected(match query {
            Some(q) => {
                format!("No tool you can activate matches {q:?}. Call tool_search with mode \"list\" to see them.")
            }
            None => "Give names or a query to activate tools.".to_string(),
        }));
    }
    host.store
        .activate_tools(&caller.agent_id, Some(&caller.activation_id), &chosen)
        .map_err(|e| ToolError::Internal(e.to_string()))?;
    let mut out = format!("Activated {} tool(s); you can call them from your next step:\n", chosen.len());
    for tool in &chosen {
        let description = registry.tool(tool).map(|(_, d)| one_line(&d.description)).unwrap_or_default();
        out.push_str(&format!("- {}: {description}\n", named(tool)));
    }
    for note in notes {
        out.push_str(&format!("({note})\n"));
    }
    let model_names: Vec<String> = chosen.iter().map(|t| sanitize_tool_name(t)).collect();
    let metadata = json!({ "activated": chosen, "modelNames": model_names });
    Ok(ToolOutput {
        title: Some("Tools activated".into()),
        output: out.trim_end().to_string(),
        metadata: metadata.as_object().cloned(),
        ..ToolOutput::default()
    })
}

/// The characters of the tool definitions an agent's deferred loading keeps out of its first
/// request (names, descriptions and schemas as sent), minus `tool_search`'s own.
pub fn deferred_chars(registry: &ToolpackRegistry, toolset: &AgentToolset) -> (usize, usize) {
    let size = |tool: &str| {
        registry
            .tool(tool)
            .map(|(_, d)| tool.len() + d.description.len() + d.input_schema.to_string().len())
            .unwrap_or(0)
    };
    let deferred: usize = toolset.deferred.iter().map(|t| size(t)).sum();
    let search = if toolset.deferred.is_empty() { 0 } else { size(TOOL_SEARCH) };
    (deferred, search)
}
