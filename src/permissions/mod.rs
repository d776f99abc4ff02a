//! The permission decision: every tool call, whoever makes it (the model loop, `suzumio tool
//! call`, the WebUI, MCP), is decided here once, in `execute_tool`, after the allowlist and the
//! schema check and before dispatch. A decision is `allow`, `ask` (a durable approval request,
//! `approvals.rs`) or `deny` (`ToolError::Denied` with the reason the model reads), and it always
//! says where it came from (`source`), so `suzumio permissions explain` and the audit can show it.
//!
//! Precedence: every matching rule is collected — the project's, the agent's, and the extra ones
//! the caller passes (remembered approvals, a hook's verdict) — and `deny` beats `ask` beats
//! `allow`. A `shell.exec` line that cannot be parsed confidently is at least `ask`; so is an
//! *opaque* one (it runs code the line does not show: `… | sh`, `python3 -c`, `make`,
//! `shell/opaque.rs`) when a `deny` or `ask` rule looks at the agent's commands — a deny rule
//! that matches what is visible still denies, and no `allow` rule allows it. Only when no rule
//! matched do the mode's defaults apply (`mode.rs`).

pub mod approvals;
pub mod audit;
pub mod mode;
pub mod questions;
pub mod rules;
pub mod shell;
#[cfg(test)]
mod tests;

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

pub use rules::{Matches, Rule, Subject};

use crate::config::{AgentConfig, DEFAULT_APPROVAL_TIMEOUT, OnAskSetting, PermissionMode, RuleDecision};
use crate::project::Project;
use crate::toolpack::ToolDefinition;

/// What happens to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Behavior {
    Allow,
    Ask,
    Deny,
}

impl Behavior {
    pub fn as_str(self) -> &'static str {
        match self {
            Behavior::Allow => "allow",
            Behavior::Ask => "ask",
            Behavior::Deny => "deny",
        }
    }
}

impl From<RuleDecision> for Behavior {
    fn from(d: RuleDecision) -> Self {
        match d {
            RuleDecision::Allow => Behavior::Allow,
            RuleDecision::Ask => Behavior::Ask,
            RuleDecision::Deny => Behavior::Deny,
        }
    }
}

/// How risky the call looks, for the person who is asked and for the audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    Low,
    Medium,
    High,
}

impl Risk {
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
        }
    }
}

/// A decision and its provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub behavior: Behavior,
    /// Which rule, mode, annotation or hook decided: e.g. `project rule 2 (suzumio.yaml:14)`,
    /// `mode full-access`, `requiresApproval`.
    pub source: String,
    pub reason: String,
    pub risk: Risk,
}

/// One call, as the decision point sees it (the input already passed the tool's schema).
pub struct Call<'a> {
    pub agent: &'a AgentConfig,
    pub tool: &'a str,
    pub def: &'a ToolDefinition,
    pub input: &'a Value,
}

/// Decides one call with the rules of `suzumio.yaml` only.
pub fn decide(project: &Project, call: &Call<'_>) -> Decision {
    decide_with(project, call, &[])
}

/// What a tool catalog shows (`check`, `tools`, the API's tool list): the decision a call of
/// `tool` by `agent` gets when no rule looks at its arguments (its input `{}`).
pub fn default_for_tool(project: &Project, agent: &AgentConfig, tool: &str) -> Option<Decision> {
    let (_, def) = project.registry.tool(tool)?;
    let input = Value::Object(serde_json::Map::new());
    Some(decide(project, &Call { agent, tool, def, input: &input }))
}

/// The rules from `suzumio.yaml` that apply to `agent`: the project's, then the agent's.
pub fn config_rules(project: &Project, agent: &AgentConfig) -> Vec<Rule> {
    let project_rules =
        project.config.permissions.rules.iter().enumerate().map(|(i, r)| Rule::from_config(r, "project", i + 1));
    let agent_scope = format!("agent {}", agent.id);
    let agent_rules =
        agent.permissions.rules.iter().enumerate().map(|(i, r)| Rule::from_config(r, &agent_scope, i + 1));
    project_rules.chain(agent_rules).collect()
}

/// Decides one call with the config's rules plus `extra` (remembered approvals, hook verdicts).
pub fn decide_with(project: &Project, call: &Call<'_>, extra: &[Rule]) -> Decision {
    let rules = config_rules(project, call.agent);
    decide_rules(call, rules.iter().chain(extra))
}

/// Why `call`'s command line is opaque to the command rules among `rules` (empty when it is
/// not, or is not a command line): what `permissions explain` shows.
pub fn opaque_parts(call: &Call<'_>, rules: &[Rule]) -> Vec<String> {
    match Subject::of(call.def, call.input) {
        Subject::Shell(Ok(commands)) => {
            let cautious: Vec<&Rule> = rules.iter().filter(|r| guards_commands(r, call.tool)).collect();
            rules::opaque_parts(&commands, &cautious)
        }
        _ => Vec::new(),
    }
}

/// The agent's `deny` and `ask` path rules for `tool`, as the runner applies them to the paths
/// it resolves (links followed): an `ask` rule that the call's own paths met is marked
/// `asked`, since the call only runs once a person approved it.
pub fn runner_path_rules(
    project: &Project,
    agent: &AgentConfig,
    tool: &str,
    def: &ToolDefinition,
    input: &Value,
) -> Vec<crate::rpc::PathRule> {
    use crate::rpc::{PathRule, PathRuleDecision};
    let subject = Subject::of(def, input);
    config_rules(project, agent)
        .iter()
        .filter(|r| !r.paths.is_empty() && r.tool.matches(tool))
        .filter_map(|r| {
            let decision = match r.decision {
                RuleDecision::Deny => PathRuleDecision::Deny,
                RuleDecision::Ask => PathRuleDecision::Ask,
                RuleDecision::Allow => return None,
            };
            let asked = decision == PathRuleDecision::Ask && r.matches(tool, &subject);
            Some(PathRule { decision, paths: r.paths.clone(), source: r.source.clone(), asked })
        })
        .collect()
}

/// A `deny` or `ask` rule that looks at the commands of `tool`'s line: what an opaque or
/// unparsable line could walk around.
fn guards_commands(rule: &Rule, tool: &str) -> bool {
    rule.decision != RuleDecision::Allow && !rule.commands.is_empty() && rule.tool.matches(tool)
}

/// The engine without the project: `rules` in order (the first matching rule of the winning
/// decision is the source).
pub fn decide_rules<'r>(call: &Call<'_>, rules: impl IntoIterator<Item = &'r Rule>) -> Decision {
    let subject = Subject::of(call.def, call.input);
    let risk = mode::risk(call.def, &subject);
    let mode = call.agent.permission_mode;
    let rules: Vec<&Rule> = rules.into_iter().collect();
    let mut winner: Option<&Rule> = None;
    for rule in rules.iter().copied() {
        if rule.matches(call.tool, &subject) && winner.is_none_or(|w| rule.decision > w.decision) {
            winner = Some(rule);
        }
    }
    // A host rule names the host in its canonical form, which is what it matched (and what
    // the audit then shows).
    let matched_host = match &subject {
        Subject::Host(Some(host)) => format!(" (host {host})"),
        _ => String::new(),
    };
    let decided = |rule: &Rule| {
        let reason = rule.reason.clone().unwrap_or_else(|| format!("{} matches `{}`", call.tool, rule.describe()));
        let host = if rule.hosts.is_empty() { "" } else { matched_host.as_str() };
        Decision {
            behavior: rule.decision.into(),
            source: rule.source.clone(),
            reason: format!("{reason}{host}"),
            risk,
        }
    };
    if let Some(rule) = winner.filter(|w| w.decision == RuleDecision::Deny) {
        return decided(rule);
    }
    // Full access skips this ask only when no deny or ask rule looks at commands (so none
    // could have matched the line).
    let unchecked = |r: &&Rule| guards_commands(r, call.tool);
    if let Subject::Shell(Err(why)) = &subject
        && (mode != PermissionMode::FullAccess || rules.iter().any(unchecked))
    {
        return Decision {
            behavior: Behavior::Ask,
            source: "shell parser".into(),
            reason: format!("the command line cannot be matched against the rules with confidence: {why}"),
            risk,
        };
    }
    // A line that runs code it does not show walks around every command rule; only when one
    // could be walked around (a deny or ask rule looks at commands) is it asked for, so
    // projects without such rules run as before.
    if let Subject::Shell(Ok(commands)) = &subject {
        let cautious: Vec<&Rule> = rules.iter().copied().filter(unchecked).collect();
        let parts = rules::opaque_parts(commands, &cautious);
        if let Some(first) = cautious.first()
            && !parts.is_empty()
        {
            return Decision {
                behavior: Behavior::Ask,
                source: "opaque line".into(),
                reason: format!(
                    "opaque: {}; {} cannot see what that runs, so a person decides",
                    parts.join("; "),
                    first.source
                ),
                risk,
            };
        }
    }
    if let Some(rule) = winner {
        return decided(rule);
    }
    mode::default_decision(mode, call, &subject, risk)
}

/// What to do when a call is `ask` and nobody may be there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnAsk {
    /// Park the activation until a person decides or `timeout` passes (then deny).
    Wait,
    /// Refuse at once, with a reason the model can act on.
    Deny,
}

#[derive(Debug, Clone, Copy)]
pub struct AskPolicy {
    pub on_ask: OnAsk,
    pub timeout: Duration,
}

/// The agent's `permissions.onAsk` / `approvalTimeout` (project level, agent override).
pub fn ask_policy(project: &Project, agent: &AgentConfig) -> AskPolicy {
    let p = &project.config.permissions;
    let on_ask = match agent.permissions.on_ask.or(p.on_ask).unwrap_or_default() {
        OnAskSetting::Wait => OnAsk::Wait,
        OnAskSetting::Deny => OnAsk::Deny,
    };
    let timeout = agent.permissions.approval_timeout.or(p.approval_timeout).unwrap_or(DEFAULT_APPROVAL_TIMEOUT);
    AskPolicy { on_ask, timeout }
}

/// The text a model reads for a denied call: what was denied, why, and what it can do instead.
pub fn denial_message(tool: &str, decision: &Decision) -> String {
    format!(
        "Permission denied for {tool}: {} (decided by {}). Do not retry the same call; choose another way, or ask the user to change the permissions.",
        decision.reason, decision.source
    )
}
