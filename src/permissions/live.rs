//! Rules and modes changed while the project runs: live rules (added and removed from the CLI,
//! the API and the WebUI) and an agent's permission mode switched at run time. They are the
//! general form of remembered approvals: stored rules (`Store::live_rules_for_call`), read at each
//! tool call and handed to the engine as `Rule`s beside the config's (so the same matcher and the
//! same deny > ask > allow precedence decide), and a mode that replaces the agent's configured
//! `permissionMode` until it is switched back.
//!
//! The bounds a live change cannot cross, whoever makes it:
//! - the allowlist: it is checked before any rule (`calls`), and an `allow` rule that could only
//!   reach tools the agent may not call is refused when it is added;
//! - a config `deny` (or `ask`): a live `allow` only joins the rules, and deny beats ask beats allow;
//! - the runner's path checks: live `deny`/`ask` path rules go to the runner with the config's
//!   (`runner_path_rules`), so a link does not walk around them.
//!
//! Every change is checked as a `suzumio.yaml` rule is (`config::validate::rule_from_parts`),
//! stored with who made it, audited (`audit::ChangeEntry`) and recorded as an event.

use serde::Serialize;

use super::Rule;
use super::audit::{Audit, ChangeEntry, EntryKind};
use crate::config::{AgentConfig, AllowPattern, PermissionMode, RuleDecision};
use crate::project::Project;
use crate::store::{LiveRule, ModeOverride, NewLiveRule, Store, StoreError};

/// How a decision made by a live rule names its source: `live rule 3 (…)`.
pub const LIVE_SOURCE: &str = "live rule";

/// What `suzumio permissions add` and `POST …/permissions/rules` ask for.
#[derive(Debug, Clone, Default)]
pub struct RuleSpec {
    /// None: every agent.
    pub agent: Option<String>,
    pub tool: String,
    pub decision: String,
    pub paths: Option<Vec<String>>,
    pub commands: Option<Vec<String>>,
    pub hosts: Option<Vec<String>>,
    pub reason: Option<String>,
}

/// Why a change was refused.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// A field of the change is wrong: `(JSON pointer into the rule, e.g. `/paths/0`, message)`.
    #[error("{}", describe(.0))]
    Invalid(Vec<(String, String)>),
    #[error("Unknown permission rule: {0} (suzumio permissions list shows the live rules, with their ids)")]
    UnknownRule(String),
    #[error("{0}")]
    Store(#[from] StoreError),
}

fn describe(problems: &[(String, String)]) -> String {
    problems
        .iter()
        .map(|(at, m)| if at.is_empty() { m.clone() } else { format!("{at}: {m}") })
        .collect::<Vec<_>>()
        .join("; ")
}

fn invalid(at: &str, message: impl Into<String>) -> LiveError {
    LiveError::Invalid(vec![(at.to_string(), message.into())])
}

/// A stored live rule as the engine applies it. The row was checked when it was added; one that
/// no longer reads (changed by hand) fails the call rather than being left out.
pub fn rule_of(r: &LiveRule) -> Result<Rule, String> {
    let lists = [Some(r.paths.clone()), Some(r.commands.clone()), Some(r.hosts.clone())]
        .map(|l| l.filter(|items| !items.is_empty()));
    crate::config::validate::rule_from_parts(&r.tool, &r.decision, r.reason.clone(), lists, source_of(r))
        .map_err(|problems| format!("live rule {} in the store does not read: {}", r.id, describe(&problems)))
}

/// `live rule 3 (agent writer, added by cli (alice) at 2026-…)`.
pub fn source_of(r: &LiveRule) -> String {
    let whose = r.agent_id.as_deref().map(|a| format!("agent {a}")).unwrap_or_else(|| "every agent".into());
    format!("{LIVE_SOURCE} {} ({whose}, added by {} at {})", r.id, r.created_by, crate::clock::iso(r.created_at))
}

/// The live rules that can decide a call of `agent` (the project's and its own), as rules.
pub fn rules_for_call(store: &Store, agent: &str) -> Result<Vec<Rule>, String> {
    let rows = store.live_rules_for_call(agent).map_err(|e| format!("cannot read the live permission rules: {e}"))?;
    rows.iter().map(rule_of).collect()
}

/// The agent's mode in force: the one set at run time, else its config's `permissionMode`.
pub fn effective_mode(store: &Store, agent: &AgentConfig) -> Result<PermissionMode, String> {
    let set = store
        .permission_mode_override(&agent.id)
        .map_err(|e| format!("cannot read the permission mode of {}: {e}", agent.id))?;
    match set {
        None => Ok(agent.permission_mode),
        Some(o) => o
            .mode
            .parse()
            .map_err(|_| format!("the permission mode of {} in the store does not read: {}", agent.id, o.mode)),
    }
}

/// Check a live rule against the project and store it, audited.
pub fn add(project: &Project, store: &Store, audit: &Audit, spec: RuleSpec, by: &str) -> Result<LiveRule, LiveError> {
    let agent = match spec.agent.as_deref().map(str::trim).filter(|a| !a.is_empty()) {
        None => None,
        Some(id) => Some(project.config.agent(id).ok_or_else(|| invalid("/agent", unknown_agent(project, id)))?),
    };
    let rule = crate::config::validate::rule_from_parts(
        &spec.tool,
        &spec.decision,
        spec.reason.clone(),
        [spec.paths.clone(), spec.commands.clone(), spec.hosts.clone()],
        String::new(),
    )
    .map_err(LiveError::Invalid)?;
    within_bounds(project, agent, &rule)?;
    let new = NewLiveRule {
        agent_id: agent.map(|a| a.id.as_str()),
        tool: &rule.tool.to_string(),
        decision: rule.decision.as_str(),
        paths: &rule.paths,
        commands: &rule.commands,
        hosts: &rule.hosts,
        reason: rule.reason.as_deref(),
        by,
    };
    let stored = store.add_live_rule(&new)?;
    let described = Rule { source: String::new(), ..rule }.describe();
    let why = stored.reason.as_deref().map(|r| format!(" — {r}")).unwrap_or_default();
    audit.record_change(ChangeEntry {
        time: store.now(),
        kind: EntryKind::Rule,
        agent: stored.agent_id.clone().unwrap_or_else(|| EVERY_AGENT.into()),
        tool: Some(stored.tool.clone()),
        decision: Some(stored.decision.clone()),
        mode: None,
        source: format!("{LIVE_SOURCE} {}", stored.id),
        reason: format!("added by {by}: {described}{why}"),
        user_action: "add".into(),
        by: by.to_string(),
        rule: serde_json::to_value(&stored).ok(),
    });
    Ok(stored)
}

/// What the audit names as the agent of a change for every agent.
pub const EVERY_AGENT: &str = "*";

/// A live rule may not reach what the config keeps out: a tool that no agent it is for may call
/// (the allowlist is checked first at call time anyway; refusing it here tells the person that
/// the rule could never allow anything), nor name no tool at all.
fn within_bounds(project: &Project, agent: Option<&AgentConfig>, rule: &Rule) -> Result<(), LiveError> {
    let registry = &project.registry;
    let matched: Vec<&str> = registry.tools().map(|(_, t)| t.name.as_str()).filter(|t| rule.tool.matches(t)).collect();
    if matched.is_empty() {
        let hint = match &rule.tool {
            AllowPattern::Exact(name) => {
                crate::config::diag::did_you_mean(name, registry.tools().map(|(_, t)| t.name.as_str()))
                    .map(|h| format!(" ({h})"))
                    .unwrap_or_default()
            }
            _ => String::new(),
        };
        return Err(invalid(
            "/tool",
            format!("`{}` matches no tool of this project{hint}; suzumio tools lists them", rule.tool),
        ));
    }
    if rule.decision != RuleDecision::Allow {
        return Ok(());
    }
    let agents: Vec<&AgentConfig> = match agent {
        Some(a) => vec![a],
        None => project.config.agents.iter().collect(),
    };
    let reachable = matched.iter().any(|t| agents.iter().any(|a| registry.may_call(a, t)));
    if reachable {
        return Ok(());
    }
    let whom = match agent {
        Some(a) => format!("{} may not call {} (its allowlist: {})", a.id, rule.tool, allowlist_of(a)),
        None => format!("no agent may call {}", rule.tool),
    };
    Err(invalid(
        "/tool",
        format!(
            "an allow rule cannot reach past the allowlist: {whom}; the allowlist is the agent's `tools` in suzumio.yaml"
        ),
    ))
}

fn allowlist_of(agent: &AgentConfig) -> String {
    let shown: Vec<String> = agent.tools.entries.iter().map(|(p, _)| p.to_string()).collect();
    if shown.is_empty() { "none".into() } else { shown.join(", ") }
}

fn unknown_agent(project: &Project, id: &str) -> String {
    let known: Vec<&str> = project.config.agents.iter().map(|a| a.id.as_str()).collect();
    let hint =
        crate::config::diag::did_you_mean(id, known.iter().copied()).map(|h| format!("{h} ")).unwrap_or_default();
    format!("Unknown agent: {id} ({hint}agents: {})", known.join(", "))
}

/// Remove a live rule by its id (`3`), audited.
pub fn remove(store: &Store, audit: &Audit, id: &str, by: &str) -> Result<LiveRule, LiveError> {
    if id.trim().starts_with("perm_") {
        return Err(invalid(
            "/id",
            format!("`{id}` is a remembered decision, not a live rule: suzumio approvals forget removes it"),
        ));
    }
    let number: i64 = id.trim().trim_start_matches('#').parse().map_err(|_| {
        invalid("/id", format!("`{id}` is not a live rule's id (a number: suzumio permissions list shows them)"))
    })?;
    let removed = store.remove_live_rule(number, by).map_err(|e| match e {
        StoreError::UnknownRule(_) => LiveError::UnknownRule(id.to_string()),
        other => other.into(),
    })?;
    audit.record_change(ChangeEntry {
        time: store.now(),
        kind: EntryKind::Rule,
        agent: removed.agent_id.clone().unwrap_or_else(|| EVERY_AGENT.into()),
        tool: Some(removed.tool.clone()),
        decision: Some(removed.decision.clone()),
        mode: None,
        source: format!("{LIVE_SOURCE} {}", removed.id),
        reason: format!(
            "removed by {by} (it was added by {} at {})",
            removed.created_by,
            crate::clock::iso(removed.created_at)
        ),
        user_action: "remove".into(),
        by: by.to_string(),
        rule: serde_json::to_value(&removed).ok(),
    });
    Ok(removed)
}

/// What a mode switch did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModeChange {
    pub agent: String,
    /// The mode in force from the agent's next call.
    pub mode: &'static str,
    /// The one in force before.
    pub previous: String,
    /// The agent's `permissionMode` in suzumio.yaml.
    pub config_mode: &'static str,
    /// Whether the mode is set at run time (false: the config's is in force).
    pub live: bool,
}

/// The words that take an agent back to its config's mode.
pub const CONFIG_MODE_WORDS: &[&str] = &["config", "reset"];

/// Switch `agent`'s mode (`default`, `auto`, `full-access`) or, with `config`/`reset` (or None),
/// take it back to the config's; audited.
pub fn set_mode(
    project: &Project,
    store: &Store,
    audit: &Audit,
    agent_id: &str,
    mode: Option<&str>,
    by: &str,
) -> Result<ModeChange, LiveError> {
    let agent = project.config.agent(agent_id).ok_or_else(|| invalid("/agent", unknown_agent(project, agent_id)))?;
    let wanted = match mode.map(str::trim).filter(|m| !CONFIG_MODE_WORDS.contains(m)) {
        None => None,
        Some(text) => Some(text.parse::<PermissionMode>().map_err(|_| {
            invalid(
                "/mode",
                format!(
                    "`{text}` is not a permission mode: use one of {}, or `config` for the one in suzumio.yaml",
                    PermissionMode::NAMES.join(", ")
                ),
            )
        })?),
    };
    let config_mode = agent.permission_mode.as_str();
    let previous: Option<ModeOverride> =
        store.set_permission_mode(&agent.id, wanted.map(PermissionMode::as_str), config_mode, by)?;
    let previous = previous.map_or(config_mode.to_string(), |p| p.mode);
    let now = wanted.unwrap_or(agent.permission_mode).as_str();
    let (action, how) = match wanted {
        Some(_) => (
            format!("set {now}"),
            format!("switched to {now} by {by} (was {previous}; suzumio.yaml says {config_mode})"),
        ),
        None => ("reset".to_string(), format!("back to suzumio.yaml's {config_mode} by {by} (was {previous})")),
    };
    audit.record_change(ChangeEntry {
        time: store.now(),
        kind: EntryKind::Mode,
        agent: agent.id.clone(),
        tool: None,
        decision: None,
        mode: Some(now.to_string()),
        source: "permission mode".into(),
        reason: how,
        user_action: action,
        by: by.to_string(),
        rule: None,
    });
    Ok(ModeChange { agent: agent.id.clone(), mode: now, previous, config_mode, live: wanted.is_some() })
}

/// How an agent's mode reads in listings: `auto (set by cli (alice) at …; suzumio.yaml: default)`
/// when set at run time, else the config's.
pub fn mode_line(agent: &AgentConfig, set: Option<&ModeOverride>) -> String {
    match set {
        None => agent.permission_mode.as_str().to_string(),
        Some(o) => format!(
            "{} (set by {} at {}; suzumio.yaml: {})",
            o.mode,
            o.set_by,
            crate::clock::iso(o.set_at),
            agent.permission_mode.as_str()
        ),
    }
}

/// How a live rule reads in listings: `live rule 3: file.write deny paths [secrets/**] — reason
/// (every agent, added by cli (alice) at …)`.
pub fn rule_line(r: &LiveRule) -> String {
    let described = rule_of(r).map(|rule| rule.describe()).unwrap_or_else(|e| e);
    let why = r.reason.as_deref().map(|w| format!(" — {w}")).unwrap_or_default();
    let whose = r.agent_id.as_deref().map(|a| format!("agent {a}")).unwrap_or_else(|| "every agent".into());
    format!(
        "{LIVE_SOURCE} {}: {described}{why} ({whose}, added by {} at {})",
        r.id,
        r.created_by,
        crate::clock::iso(r.created_at)
    )
}

/// The live rules and mode overrides of a project at one moment, for listings (`check`,
/// `permissions list|explain`, the API's agents): read once, asked per agent.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub rules: Vec<LiveRule>,
    pub modes: Vec<ModeOverride>,
}

impl Snapshot {
    pub fn read(store: &Store) -> Result<Snapshot, StoreError> {
        Ok(Snapshot { rules: store.live_rules(None)?, modes: store.permission_mode_overrides()? })
    }

    /// The live rules that apply to `agent` (the project's and its own), as rules.
    pub fn rules_for(&self, agent: &str) -> Result<Vec<Rule>, String> {
        self.rules.iter().filter(|r| r.agent_id.as_deref().is_none_or(|a| a == agent)).map(rule_of).collect()
    }

    /// The mode override of `agent`, if one is set.
    pub fn override_of(&self, agent: &str) -> Option<&ModeOverride> {
        self.modes.iter().find(|m| m.agent_id == agent)
    }

    /// The agent's mode in force.
    pub fn mode_of(&self, agent: &AgentConfig) -> PermissionMode {
        self.override_of(&agent.id).and_then(|o| o.mode.parse().ok()).unwrap_or(agent.permission_mode)
    }
}
