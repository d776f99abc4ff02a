//! `agents`: each entry expanded into its instances (`count: 2` → `w-1`, `w-2`), with its
//! display names, model preset (checked against `backend.runner.models`), tool allowlist,
//! mounts and environment.

use std::collections::BTreeMap;

use super::{budgets, is_safe_id, mounts, permissions};
use crate::config::diag::Diagnostics;
use crate::config::model::*;
use crate::config::read::{Obj, index, join};

/// Senders and recipients that are not agents; no agent may take these ids.
pub const VIRTUAL_PARTICIPANTS: [&str; 3] = ["user", "scheduler", "monitor"];

/// Largest `count` of one agent entry: each instance is a container, a socket and a store row.
pub const MAX_COUNT: usize = 1000;
const AGENT_KEYS: &[&str] = &[
    "role",
    "displayName",
    "names",
    "count",
    "prompt",
    "model",
    "tools",
    "mounts",
    "env",
    "budget",
    "toolLoading",
    "deferredTools",
    "permissions",
    "permissionMode",
];

pub(super) fn read(top: &Obj, models: &ModelsConfig, budget: BudgetLimits, d: &mut Diagnostics) -> Vec<AgentConfig> {
    let Some(node) = top.get("agents") else {
        d.error(Some(&top.node.loc), "agents", "Project config needs at least one agent");
        return Vec::new();
    };
    let Some(agents) = Obj::open(node, "agents", &[], &[], &mut Diagnostics::default()) else {
        d.error(
            Some(&node.loc),
            "agents",
            format!("expected a mapping of agent id to agent, got {}", node.kind_name()),
        );
        return Vec::new();
    };
    if agents.entries().is_empty() {
        d.error(Some(&node.loc), "agents", "Project config needs at least one agent");
    }
    let mut out: Vec<AgentConfig> = Vec::new();
    let mut origin: BTreeMap<String, String> = BTreeMap::new();
    for (key, agent_node) in agents.entries() {
        let base_id = key.name.as_str();
        let path = join("agents", base_id);
        if !is_safe_id(base_id) || base_id.len() > 64 {
            d.error(Some(&key.loc), &path, format!("`{base_id}` is not a valid agent id: use 1–64 of A-Z, a-z, 0-9, dot, underscore or dash, starting with a letter or digit"));
            continue;
        }
        if VIRTUAL_PARTICIPANTS.contains(&base_id) {
            d.error(
                Some(&key.loc),
                &path,
                format!(
                    "`{base_id}` is reserved for a virtual participant ({}); choose another agent id",
                    VIRTUAL_PARTICIPANTS.join(", ")
                ),
            );
            continue;
        }
        let Some(agent) = Obj::open(agent_node, &path, AGENT_KEYS, &[], d) else {
            continue;
        };
        let mut count = agent.int_at_least("count", 1, d).unwrap_or(1) as usize;
        if count > MAX_COUNT {
            d.error(
                Some(&agent.key_loc("count")),
                agent.path_of("count"),
                format!("count is {count}; at most {MAX_COUNT} agents can be made from one entry"),
            );
            count = 1;
        }
        let role = agent.string("role", d).unwrap_or_else(|| base_id.to_string());
        let display_name = agent.string("displayName", d);
        let names = agent.string_list("names", d).unwrap_or_default();
        if !names.is_empty() && names.len() < count {
            d.warning(
                Some(&agent.key_loc("names")),
                agent.path_of("names"),
                format!("has {} name(s) for count {count}; the rest are numbered", names.len()),
            );
        }
        let prompt = agent.string("prompt", d).unwrap_or_default();
        let model = resolve_agent_model(&agent, base_id, models, d);
        let tools = read_allowlist(&agent, "tools", d);
        let tool_loading = read_tool_loading(&agent, d);
        let deferred_tools = read_allowlist(&agent, "deferredTools", d);
        let mounts = agent.get("mounts").map(|n| mounts::read(n, &agent.path_of("mounts"), d)).unwrap_or_default();
        let env = read_agent_env(&agent, d);
        let budget =
            agent.get("budget").map_or(budget, |n| budgets::read_agent(n, &agent.path_of("budget"), budget, d));
        let permission_mode = permissions::mode(&agent, d);
        let agent_permissions = permissions::read(agent.get("permissions"), &agent.path_of("permissions"), true, d);
        for i in 1..=count {
            let (id, display) = if count > 1 {
                let named = names.get(i - 1).map(|(n, _)| n.clone());
                let fallback = display_name.as_ref().map_or_else(|| format!("{base_id}-{i}"), |n| format!("{n} {i}"));
                (format!("{base_id}-{i}"), named.unwrap_or(fallback))
            } else {
                let named = names.first().map(|(n, _)| n.clone());
                (base_id.to_string(), display_name.clone().or(named).unwrap_or_else(|| base_id.to_string()))
            };
            if let Some(previous) = origin.get(&id) {
                d.error(
                    Some(&key.loc),
                    &path,
                    format!(
                        "agent id `{id}` is produced twice (by agents.{previous} and agents.{base_id}); rename one"
                    ),
                );
                continue;
            }
            origin.insert(id.clone(), base_id.to_string());
            out.push(AgentConfig {
                id,
                base_id: base_id.to_string(),
                role: role.clone(),
                display_name: display,
                prompt: prompt.clone(),
                model: model.clone().unwrap_or_default(),
                tools: tools.clone(),
                tool_loading,
                deferred_tools: deferred_tools.clone(),
                mounts: mounts.clone(),
                env: env.clone(),
                budget,
                permission_mode,
                permissions: agent_permissions.clone(),
                loc: key.loc.clone(),
            });
        }
    }
    out
}

fn resolve_agent_model(agent: &Obj, base_id: &str, models: &ModelsConfig, d: &mut Diagnostics) -> Option<String> {
    let own = agent.string("model", d);
    let model = own.clone().or_else(|| models.default_preset.clone());
    let loc = if own.is_some() { agent.key_loc("model") } else { agent.node.loc.clone() };
    match model {
        None if !models.presets.is_empty() => {
            d.error(
                Some(&loc),
                agent.path_of("model"),
                format!("Agent {base_id} needs an explicit model, or set backend.runner.model"),
            );
            None
        }
        Some(p) if !models.presets.is_empty() && models.preset(&p).is_none() => {
            d.error(Some(&loc), agent.path_of("model"), format!("Agent {base_id} selected unknown model preset: {p}"));
            None
        }
        other => other,
    }
}

/// `tools` (the allowlist) or `deferredTools` (the allowed tools loaded only through
/// `tool_search`): tool patterns.
fn read_allowlist(agent: &Obj, key: &str, d: &mut Diagnostics) -> Allowlist {
    let mut out = Allowlist { declared_at: agent.get(key).map(|_| agent.key_loc(key)), ..Allowlist::default() };
    for (i, (text, loc)) in agent.string_list(key, d).unwrap_or_default().into_iter().enumerate() {
        match AllowPattern::parse(&text) {
            Ok(p) if out.entries.iter().any(|(q, _)| *q == p) => {
                d.warning(Some(&loc), index(&agent.path_of(key), i), format!("`{text}` is listed twice"))
            }
            Ok(p) => out.entries.push((p, loc)),
            Err(e) => d.error(Some(&loc), index(&agent.path_of(key), i), e),
        }
    }
    out
}

/// `toolLoading: eager | deferred` (default eager).
fn read_tool_loading(agent: &Obj, d: &mut Diagnostics) -> ToolLoading {
    let Some(text) = agent.string("toolLoading", d) else {
        return ToolLoading::Eager;
    };
    match text.parse::<ToolLoading>() {
        Ok(mode) => mode,
        Err(_) => {
            d.error(
                Some(&agent.key_loc("toolLoading")),
                agent.path_of("toolLoading"),
                format!("toolLoading must be one of eager, deferred; got {text:?}"),
            );
            ToolLoading::Eager
        }
    }
}

fn read_agent_env(agent: &Obj, d: &mut Diagnostics) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for (name, value, loc) in agent.string_map("env", d) {
        let path = join(&agent.path_of("env"), &name);
        let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            d.error(Some(&loc), path, format!("`{name}` is not a valid environment variable name"));
        } else if name.starts_with("SUZUMIO_") {
            d.error(
                Some(&loc),
                path,
                "variables starting with SUZUMIO_ are set by the controller and cannot be configured",
            );
        } else {
            env.insert(name, value);
        }
    }
    env
}
