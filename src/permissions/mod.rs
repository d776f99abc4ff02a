//! The permission decision: every tool call, whoever makes it (the model loop, `suzumio tool
//! call`, the WebUI, MCP), is decided here once, in `execute_tool`, after the allowlist and the
//! schema check and before dispatch. A decision is `allow`, `ask` (a durable approval request,
//! `approvals.rs`) or `deny` (`ToolError::Denied` with the reason the model reads), and it always
//! says where it came from (`source`), so `suzumio permissions explain` and the audit can show it.
//!
//! Precedence: every matching rule is collected — the project's, the agent's, and the extra ones
//! the caller passes (remembered approvals, live rules added while the project runs, a hook's
//! verdict) — and `deny` beats `ask` beats `allow`. A `shell.exec` line that cannot be parsed confidently is at least `ask`; so is an
//! *opaque* one (it runs code the line does not show: `… | sh`, `python3 -c`, `make`,
//! `shell/opaque.rs`) when a `deny` or `ask` rule looks at the agent's commands — a deny rule
//! that matches what is visible still denies, and no `allow` rule allows it. Only when no rule
//! matched do the mode's defaults apply (`mode.rs`): the agent's mode in force, which a person
//! may have switched while the project runs (`live.rs`).
//!
//! A decision carries its reasons for machines as well as people: a [`ReasonCode`] (what kind
//! of thing decided), the [`RiskCategory`]s the call showed (`categories.rs`, derived in one
//! place from the call's subject and the tool's definition) and the [`UserAction`]s a person may
//! take on it. An optional reviewer model (`reviewer.rs`) may then make an `ask` stricter (or
//! the mode's own default ask looser); `calls` runs it, since it is a model call.

pub mod approvals;
pub mod audit;
pub mod categories;
pub mod live;
pub mod mode;
pub mod questions;
pub mod reviewer;
pub mod rules;
pub mod shell;
#[cfg(test)]
mod tests;

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

pub use categories::RiskCategory;
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

/// What kind of thing made a decision, for machines (the `source` says which one, for people).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasonCode {
    /// A rule of `suzumio.yaml` (or one added while the project runs).
    Rule,
    /// A decision remembered from an approval (`--remember`).
    Remembered,
    /// A pack's `beforeToolCall` hook.
    Hook,
    /// The agent's permission mode, no rule having matched.
    ModeDefault,
    /// The tool's own markings: `requiresApproval`, `readOnlyHint`, `destructiveHint`.
    Annotation,
    /// A coordination tool, which every mode runs.
    Coordination,
    /// A command line that runs code it does not show, under a command rule.
    OpaqueLine,
    /// A command line the parser cannot match with confidence.
    UnparsableLine,
    /// The reviewer model's verdict.
    Reviewer,
    /// The reviewer model was asked but gave no usable verdict (error, time-out, garbage).
    ReviewerUnavailable,
}

impl ReasonCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ReasonCode::Rule => "rule",
            ReasonCode::Remembered => "remembered",
            ReasonCode::Hook => "hook",
            ReasonCode::ModeDefault => "mode_default",
            ReasonCode::Annotation => "annotation",
            ReasonCode::Coordination => "coordination",
            ReasonCode::OpaqueLine => "opaque_line",
            ReasonCode::UnparsableLine => "unparsable_line",
            ReasonCode::Reviewer => "reviewer",
            ReasonCode::ReviewerUnavailable => "reviewer_unavailable",
        }
    }
}

/// What a person asked about a call may do with it, in the order a UI offers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UserAction {
    /// Run this call once.
    AllowOnce,
    /// Run it, and remember the allow (for the activation, the agent or the project).
    AllowRemember,
    /// Refuse it.
    Deny,
    /// Refuse it with a word to the model about what to do instead.
    DenyWithFeedback,
}

impl UserAction {
    pub fn as_str(self) -> &'static str {
        match self {
            UserAction::AllowOnce => "allow_once",
            UserAction::AllowRemember => "allow_remember",
            UserAction::Deny => "deny",
            UserAction::DenyWithFeedback => "deny_with_feedback",
        }
    }

    /// What a person may do with a call decided `behavior`: only an `ask` waits for one.
    pub fn for_behavior(behavior: Behavior) -> Vec<UserAction> {
        match behavior {
            Behavior::Ask => {
                vec![UserAction::AllowOnce, UserAction::AllowRemember, UserAction::Deny, UserAction::DenyWithFeedback]
            }
            Behavior::Allow | Behavior::Deny => Vec::new(),
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
    /// What kind of thing decided.
    pub code: ReasonCode,
    /// What the call was seen to do that a person may care about (`categories.rs`).
    pub categories: Vec<RiskCategory>,
    /// What a person asked about it may do (empty unless it is `ask`).
    pub actions: Vec<UserAction>,
}

impl Decision {
    /// A decision without categories (the engine adds them, [`Decision::seen`]); its actions
    /// follow from `behavior`.
    pub fn new(
        behavior: Behavior,
        source: impl Into<String>,
        reason: impl Into<String>,
        risk: Risk,
        code: ReasonCode,
    ) -> Self {
        Decision {
            behavior,
            source: source.into(),
            reason: reason.into(),
            risk,
            code,
            categories: Vec::new(),
            actions: UserAction::for_behavior(behavior),
        }
    }

    /// The same decision with the categories the call showed.
    pub fn seen(mut self, categories: Vec<RiskCategory>) -> Self {
        self.categories = categories;
        self
    }

    /// The code's, categories' and actions' names, as events and JSON carry them.
    pub fn code_str(&self) -> String {
        self.code.as_str().to_string()
    }

    pub fn category_names(&self) -> Vec<String> {
        self.categories.iter().map(|c| c.as_str().to_string()).collect()
    }

    pub fn action_names(&self) -> Vec<String> {
        self.actions.iter().map(|a| a.as_str().to_string()).collect()
    }

    /// The decision as an approval request stores it and the API shows it.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "behavior": self.behavior,
            "source": self.source,
            "reason": self.reason,
            "risk": self.risk,
            "code": self.code,
            "categories": self.categories,
            "actions": self.actions,
        })
    }
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
    default_for_tool_in(project, agent, tool, &[], agent.permission_mode)
}

/// [`default_for_tool`] with `extra` rules (the live ones) in `mode` (the one in force).
pub fn default_for_tool_in(
    project: &Project,
    agent: &AgentConfig,
    tool: &str,
    extra: &[Rule],
    mode: PermissionMode,
) -> Option<Decision> {
    let (_, def) = project.registry.tool(tool)?;
    let input = Value::Object(serde_json::Map::new());
    Some(decide_in(project, &Call { agent, tool, def, input: &input }, extra, mode))
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

/// Decides one call with the config's rules plus `extra` (remembered approvals, live rules,
/// hook verdicts), in the agent's configured mode.
pub fn decide_with(project: &Project, call: &Call<'_>, extra: &[Rule]) -> Decision {
    decide_in(project, call, extra, call.agent.permission_mode)
}

/// [`decide_with`] in `mode`: the agent's mode in force (`live::effective_mode`).
pub fn decide_in(project: &Project, call: &Call<'_>, extra: &[Rule], mode: PermissionMode) -> Decision {
    let rules = config_rules(project, call.agent);
    decide_rules_in(call, mode, rules.iter().chain(extra))
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

/// The agent's `deny` and `ask` path rules for `tool` — the config's and `extra` (the live
/// rules) — as the runner applies them to the paths it resolves (links followed): an `ask`
/// rule that the call's own paths met is marked `asked`, since the call only runs once a person
/// approved it.
pub fn runner_path_rules(
    project: &Project,
    agent: &AgentConfig,
    (tool, def, input): (&str, &ToolDefinition, &Value),
    extra: &[Rule],
) -> Vec<crate::rpc::PathRule> {
    use crate::rpc::{PathRule, PathRuleDecision};
    let subject = Subject::of(def, input);
    config_rules(project, agent)
        .iter()
        .chain(extra)
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
/// decision is the source), in the agent's configured mode.
pub fn decide_rules<'r>(call: &Call<'_>, rules: impl IntoIterator<Item = &'r Rule>) -> Decision {
    decide_rules_in(call, call.agent.permission_mode, rules)
}

/// [`decide_rules`] in `mode` (the agent's mode in force).
pub fn decide_rules_in<'r>(
    call: &Call<'_>,
    mode: PermissionMode,
    rules: impl IntoIterator<Item = &'r Rule>,
) -> Decision {
    let subject = Subject::of(call.def, call.input);
    let categories = categories::of(call.def, &subject, call.input);
    decide_subject(call, mode, &subject, rules).seen(categories)
}

/// What kind of rule `rule` is, by where it came from.
fn rule_code(rule: &Rule) -> ReasonCode {
    if rule.source.starts_with("hook ") {
        ReasonCode::Hook
    } else if rule.source.starts_with(approvals::REMEMBERED_SOURCE) {
        ReasonCode::Remembered
    } else {
        ReasonCode::Rule
    }
}

fn decide_subject<'r>(
    call: &Call<'_>,
    mode: PermissionMode,
    subject: &Subject,
    rules: impl IntoIterator<Item = &'r Rule>,
) -> Decision {
    let risk = mode::risk(call.def, subject);
    let rules: Vec<&Rule> = rules.into_iter().collect();
    let mut winner: Option<&Rule> = None;
    for rule in rules.iter().copied() {
        if rule.matches(call.tool, subject) && winner.is_none_or(|w| rule.decision > w.decision) {
            winner = Some(rule);
        }
    }
    // A host rule names the host in its canonical form, which is what it matched (and what
    // the audit then shows).
    let matched_host = match subject {
        Subject::Host(Some(host)) => format!(" (host {host})"),
        _ => String::new(),
    };
    let decided = |rule: &Rule| {
        let reason = rule.reason.clone().unwrap_or_else(|| format!("{} matches `{}`", call.tool, rule.describe()));
        let host = if rule.hosts.is_empty() { "" } else { matched_host.as_str() };
        Decision::new(rule.decision.into(), rule.source.clone(), format!("{reason}{host}"), risk, rule_code(rule))
    };
    if let Some(rule) = winner.filter(|w| w.decision == RuleDecision::Deny) {
        return decided(rule);
    }
    // Full access skips this ask only when no deny or ask rule looks at commands (so none
    // could have matched the line).
    let unchecked = |r: &&Rule| guards_commands(r, call.tool);
    if let Subject::Shell(Err(why)) = subject
        && (mode != PermissionMode::FullAccess || rules.iter().any(unchecked))
    {
        return Decision::new(
            Behavior::Ask,
            "shell parser",
            format!("the command line cannot be matched against the rules with confidence: {why}"),
            risk,
            ReasonCode::UnparsableLine,
        );
    }
    // A line that runs code it does not show walks around every command rule; only when one
    // could be walked around (a deny or ask rule looks at commands) is it asked for, so
    // projects without such rules run as before.
    if let Subject::Shell(Ok(commands)) = subject {
        let cautious: Vec<&Rule> = rules.iter().copied().filter(unchecked).collect();
        let parts = rules::opaque_parts(commands, &cautious);
        if let Some(first) = cautious.first()
            && !parts.is_empty()
        {
            return Decision::new(
                Behavior::Ask,
                "opaque line",
                format!(
                    "opaque: {}; {} cannot see what that runs, so a person decides",
                    parts.join("; "),
                    first.source
                ),
                risk,
                ReasonCode::OpaqueLine,
            );
        }
    }
    if let Some(rule) = winner {
        return decided(rule);
    }
    mode::default_decision(mode, call, subject, risk)
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
