//! Durable approval requests: an `ask` decision is stored, the activation is parked
//! (`waiting_approval`) until a person allows or denies it (WebUI, CLI, API) or the agent's
//! `approvalTimeout` passes. This module stores and waits; it never runs a call: [`ask`] answers
//! whether the stored call may run, and the call pipeline (`crate::calls`) runs exactly it.
//!
//! The wait is the activation's own task: it spends no model tokens, holds no lock, and other
//! agents' activations run meanwhile. It looks at the request row on every store event of this
//! process and at least every [`POLL`], so a decision written by another process (`suzumio
//! approvals allow` on the shared SQLite file) is seen within a second, and the deadline is
//! checked on the same beat — also for a request adopted after a restart, whose deadline is
//! the stored one. Pre-emption: a P0 ends a parked activation like a running one (cancelled,
//! `Interrupted by P0 signal …`), its pending requests are cancelled in the same transaction,
//! and the P0's activation runs; a cancelled request is never run.
//!
//! Remembered decisions (`--remember`) are rules in the store (`Store::remembered_rules`); until
//! the rule engine reads them in `decide`, they are applied here, before a request is made,
//! with deny before allow.

use std::time::Duration;

use serde_json::{Value, json};

use super::audit::Audit;
use super::{AskPolicy, Behavior, Decision, OnAsk};
use crate::config::AgentConfig;
use crate::project::Project;
use crate::store::{
    ApprovalRecord, ApprovalStatus, Event, NewApproval, RememberedRule, RuleDecision, Store, StoreError,
};
use crate::toolpack::{INVALID_JSON_KEY, ToolError};

/// What the approvals step reads and writes: requests and events in the store, its audit lines,
/// and the project (the agents' modes and policies).
#[derive(Clone, Copy)]
pub struct Approvals<'a> {
    pub store: &'a Store,
    pub audit: &'a Audit,
    pub project: &'a Project,
}

/// How often a waiting call looks at its request when no event of this process woke it.
pub const POLL: Duration = Duration::from_millis(250);

/// One call that was decided `ask`, with what is needed to run it once approved.
pub struct PendingCall<'a> {
    pub agent_id: &'a str,
    pub activation_id: &'a str,
    /// The `tool_calls` row this call was recorded under.
    pub call_id: &'a str,
    /// The model's id of the call in its turn: what names the call across a restart (the
    /// resumed activation records a new `tool_calls` row for it). None outside a model loop.
    pub call_key: Option<&'a str>,
    pub tool: &'a str,
    pub input: &'a Value,
    pub decision: &'a Decision,
    pub policy: AskPolicy,
}

/// Asks for approval and waits for it: `Ok` when the stored call may run (a person allowed it, or
/// a remembered rule does), `ToolError::Denied` with the reason and feedback on deny or timeout.
///
/// A request this activation already holds for the same call (announced with its turn, or made
/// before a restart: the same call key, tool and input) is adopted instead of asking again, so a
/// call has one request however often its activation is resumed.
pub async fn ask(host: Approvals<'_>, call: &PendingCall<'_>) -> Result<(), ToolError> {
    let store = host.store;
    let request = match store.adoptable_approval(call.activation_id, call.call_key, call.tool, call.input)? {
        Some(request) => request,
        None => {
            if let Some(rule) = remembered(store, call.agent_id, call.activation_id, call.tool)? {
                return by_rule(host, call, &rule);
            }
            if call.policy.on_ask == OnAsk::Deny {
                let reason = nobody_asked(call.tool, &call.decision.reason);
                decided(store, call, Behavior::Deny, "permissions.onAsk: deny", &reason)?;
                return Err(ToolError::Denied(reason));
            }
            store.request_approval(new_request(store, call, Some(call.call_id), call.policy))?
        }
    };
    if request.tool_call_id.as_deref() != Some(call.call_id) {
        store.attach_approval(&request.id, call.call_id)?;
    }
    let answered = wait(store, &request).await?;
    store.consume_approval(&answered.id)?;
    audit_resolution(host, call, &answered);
    match answered.status {
        ApprovalStatus::Allowed => Ok(()),
        ApprovalStatus::Cancelled => {
            ended_elsewhere().await;
            Err(ToolError::Denied(denial(&answered)))
        }
        _ => Err(ToolError::Denied(denial(&answered))),
    }
}

/// Who `Store::expire_approval` records as having decided a request that timed out.
const TIMEOUT_RESOLVER: &str = "timeout";

/// The audit line of a request's answer (a person's, the deadline's, or a cancel's), written by
/// the controller whose activation picks it up, whichever process or page made it.
fn audit_resolution(host: Approvals<'_>, call: &PendingCall<'_>, answered: &ApprovalRecord) {
    let (behavior, action) = match answered.status {
        ApprovalStatus::Allowed => (Behavior::Allow, "allow"),
        ApprovalStatus::Cancelled => (Behavior::Deny, "cancelled"),
        _ if answered.resolved_by.as_deref() == Some(TIMEOUT_RESOLVER) => (Behavior::Deny, "timeout"),
        _ => (Behavior::Deny, "deny"),
    };
    let remember = answered.remember.as_deref().map(|r| format!(", remember {r}")).unwrap_or_default();
    let by = answered.resolved_by.as_deref().unwrap_or("unknown");
    host.audit.record_decided(
        super::audit::AuditEntry {
            time: host.store.now(),
            kind: super::audit::EntryKind::Resolution,
            agent: call.agent_id.to_string(),
            activation: Some(call.activation_id.to_string()),
            call_id: Some(call.call_id.to_string()).filter(|c| !c.is_empty()),
            tool: call.tool.to_string(),
            mode: host
                .project
                .config
                .agent(call.agent_id)
                .map(|a| super::live::effective_mode(host.store, a).unwrap_or(a.permission_mode).as_str().to_string())
                .unwrap_or_default(),
            decision: behavior,
            source: format!("approval {} by {by}", answered.id),
            reason: answered.resolution_reason.clone().unwrap_or_else(|| call.decision.reason.clone()),
            risk: Some(call.decision.risk),
            user_action: Some(format!("{action}{remember}")),
            feedback: answered.feedback.clone(),
            arguments: call.input.clone(),
        },
        call.decision,
    );
}

/// The activation ended while its call waited (a P0 cancelled it, in the same transaction as
/// the request): its loop is dropped by that cancel, so nothing of this call may be recorded
/// as if it went on. The pause only bounds the wait should no cancel come.
async fn ended_elsewhere() {
    tokio::time::sleep(Duration::from_secs(5)).await;
}

/// Before the calls of one model turn run: every call that will be `ask`ed gets its request
/// now, so calls of one turn wait together and can be decided one by one or all at once. Calls
/// that are refused anyway (unknown, not allowed, invalid input) are left to `execute_tool`.
/// Each call is `(call key, tool, input)`, the key being the model's id of the call.
pub fn announce_turn(host: Approvals<'_>, agent: &AgentConfig, activation_id: &str, calls: &[(String, String, Value)]) {
    // Decided as the calls will be: with the live rules and the mode in force (what cannot be
    // read is left to each call, which then fails).
    let live = super::live::rules_for_call(host.store, &agent.id);
    let mode = super::live::effective_mode(host.store, agent);
    let (Ok(live), Ok(mode)) = (live, mode) else { return };
    // With a reviewer, an `auto` agent's ask is known only once the reviewer answered, when
    // the call runs: a request announced now could be for a call the reviewer then allows.
    if host.project.config.permissions.reviewer.is_some() && mode == crate::config::PermissionMode::Auto {
        return;
    }
    let mut asked = Vec::new();
    for (key, tool, input) in calls {
        let Some((_, def)) = host.project.registry.tool(tool) else { continue };
        let input = if input.is_null() { json!({}) } else { input.clone() };
        if !agent.tools.allows(tool)
            || input.get(INVALID_JSON_KEY).is_some()
            || host.project.registry.validate_input(tool, &input).is_err()
        {
            continue;
        }
        let decision = super::decide_in(host.project, &super::Call { agent, tool, def, input: &input }, &live, mode);
        if decision.behavior == Behavior::Ask {
            asked.push((key, tool, input, decision));
        }
    }
    // One ask alone is made when its call runs.
    if asked.len() < 2 {
        return;
    }
    let policy = super::ask_policy(host.project, agent);
    if policy.on_ask == OnAsk::Deny {
        return;
    }
    for (key, tool, input, decision) in &asked {
        let call_key = Some(key.as_str());
        let pending =
            PendingCall { agent_id: &agent.id, activation_id, call_id: "", call_key, tool, input, decision, policy };
        let known = host.store.adoptable_approval(activation_id, call_key, tool, input).map(|r| r.is_some());
        let rule = remembered(host.store, &agent.id, activation_id, tool).map(|r| r.is_some());
        let made = match (known, rule) {
            (Ok(false), Ok(false)) => {
                host.store.request_approval(new_request(host.store, &pending, None, policy)).map(drop)
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
            _ => Ok(()),
        };
        // Not announced: the call asks when it runs.
        if let Err(e) = made {
            tracing::warn!(agent = %agent.id, tool, "announcing an approval request: {e}");
        }
    }
}

/// The remembered rule that decides a call of `tool`: a matching deny before a matching allow.
pub fn remembered(
    store: &Store,
    agent: &str,
    activation: &str,
    tool: &str,
) -> Result<Option<RememberedRule>, StoreError> {
    let rules = store.rules_for_call(agent, activation, tool)?;
    let deny = rules.iter().find(|r| r.decision == RuleDecision::Deny);
    Ok(deny.or_else(|| rules.first()).cloned())
}

/// How a decision made by a remembered rule names its source.
pub const REMEMBERED_SOURCE: &str = "remembered rule";

/// Records a decision that did not come from the config as a `permission.decided` event (the
/// approvals step records its own): remembered rules and denials, so a UI can show how a call
/// was authorized or why it was refused.
pub fn record_decision(store: &Store, call: &PendingCall<'_>) {
    let (decision, tool) = (call.decision, call.tool);
    let text = |v: Value| v.as_str().unwrap_or_default().to_string();
    let event = Event::PermissionDecided {
        agent_id: call.agent_id.to_string(),
        activation_id: call.activation_id.to_string(),
        tool_call_id: Some(call.call_id.to_string()).filter(|c| !c.is_empty()),
        tool: tool.to_string(),
        behavior: text(json!(decision.behavior)),
        source: decision.source.clone(),
        reason: decision.reason.clone(),
        risk: text(json!(decision.risk)),
        code: decision.code_str(),
        categories: decision.category_names(),
        actions: decision.action_names(),
    };
    if let Err(e) = store.append_event(event) {
        tracing::error!(agent = %call.agent_id, tool, "recording a permission decision: {e}");
    }
}

/// The remembered decisions (`--remember`) that cover this call, as rules for the decision
/// point: they take part in the same deny > ask > allow precedence as the config's rules, so a
/// remembered allow never beats a configured deny, and a remembered deny always holds.
pub fn remembered_rules_for(
    store: &Store,
    agent: &str,
    activation: &str,
    tool: &str,
) -> Result<Vec<super::Rule>, StoreError> {
    let rules = store.rules_for_call(agent, activation, tool)?;
    Ok(rules
        .into_iter()
        .map(|r| {
            let decision = match r.decision {
                RuleDecision::Allow => crate::config::RuleDecision::Allow,
                RuleDecision::Deny => crate::config::RuleDecision::Deny,
            };
            let from = r.request_id.as_deref().map(|id| format!(", from request {id}")).unwrap_or_default();
            let reason = format!("remembered by {} at {}", r.created_by, crate::clock::iso(r.created_at));
            super::Rule::for_tool(
                crate::config::AllowPattern::Exact(r.tool.clone()),
                decision,
                Some(reason),
                format!("{REMEMBERED_SOURCE} {} ({} scope{from})", r.id, r.scope),
            )
        })
        .collect())
}

/// Who resolves from this process's command line: `cli (<user>)`, the user the OS runs it as
/// (its real uid's name; `$USER` only where the uid has no name, as in a container without a
/// passwd entry for it, then the uid itself).
pub fn cli_user() -> String {
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .or_else(|| std::env::var("USER").or_else(|_| std::env::var("LOGNAME")).ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| format!("uid {uid}"));
    format!("cli ({user})")
}

/// Who decides from the WebUI.
pub const WEBUI_RESOLVER: &str = "webui";

/// Who decides from the HTTP API when the WebUI did not.
pub const API_RESOLVER: &str = "api";

/// Who an MCP client's answer to an elicitation is recorded as: `mcp:<client name>`, the name
/// the client gave at `initialize` (or with the request, on the stateless protocol).
/// The name is the client's own: control characters are dropped and it is cut at 64
/// characters, so it reads as one short line in the records.
pub fn mcp_resolver(client: Option<&str>) -> String {
    let name: String = client.unwrap_or_default().chars().filter(|c| !c.is_control()).take(64).collect();
    let name = name.trim();
    format!("mcp:{}", if name.is_empty() { "unnamed client" } else { name })
}

fn new_request<'a>(
    store: &Store,
    call: &'a PendingCall<'a>,
    tool_call_id: Option<&'a str>,
    policy: AskPolicy,
) -> NewApproval<'a> {
    let d = call.decision;
    let timeout = chrono::Duration::from_std(policy.timeout).unwrap_or(chrono::Duration::MAX);
    let now = store.now();
    let expires = now.checked_add_signed(timeout).unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
    NewApproval {
        agent_id: call.agent_id,
        activation_id: call.activation_id,
        tool_call_id,
        call_key: call.call_key,
        tool: call.tool,
        input: call.input,
        decision: d.to_json(),
        expires_at: crate::clock::iso(expires),
    }
}

/// Waits until the request is decided or its deadline passes (then it is denied). The
/// activation is `waiting_approval` meanwhile, `running` again once it returns.
async fn wait(store: &Store, request: &ApprovalRecord) -> Result<ApprovalRecord, ToolError> {
    let mut events = store.subscribe();
    let deadline = Some(request.expires_at);
    let mut parked = false;
    let answered = loop {
        let current = store
            .approval(&request.id)?
            .ok_or_else(|| ToolError::Internal(format!("approval request {} vanished", request.id)))?;
        if current.status != ApprovalStatus::Pending {
            break current;
        }
        if !parked {
            store.set_waiting_approval(&request.activation_id, true)?;
            parked = true;
        }
        if deadline.is_none_or(|d| d <= store.now()) {
            match store.expire_approval(&request.id, &timed_out(&current))? {
                Some(expired) => break expired,
                None => continue,
            }
        }
        // The turn's other requests (announced, not yet waited on) time out on the same beat,
        // so none shows as pending past its deadline.
        for overdue in store.overdue_approvals(&request.activation_id)? {
            store.expire_approval(&overdue.id, &timed_out(&overdue))?;
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = events.recv() => {}
        }
    };
    if parked && let Err(e) = store.set_waiting_approval(&request.activation_id, false) {
        ended_elsewhere().await;
        return Err(ToolError::Denied(format!(
            "{} did not run: its activation ended while it waited for approval ({e})",
            request.tool
        )));
    }
    Ok(answered)
}

fn by_rule(host: Approvals<'_>, call: &PendingCall<'_>, rule: &RememberedRule) -> Result<(), ToolError> {
    let source = format!(
        "remembered rule {} ({} {} for {}, by {} at {}{})",
        rule.id,
        rule.decision,
        rule.tool,
        rule.scope,
        rule.created_by,
        crate::clock::iso(rule.created_at),
        rule.request_id.as_deref().map(|r| format!(", from request {r}")).unwrap_or_default()
    );
    match rule.decision {
        RuleDecision::Allow => {
            decided(host.store, call, Behavior::Allow, &source, "allowed before")?;
            Ok(())
        }
        RuleDecision::Deny => {
            let reason = format!("Permission denied for {}: denied before ({source})", call.tool);
            decided(host.store, call, Behavior::Deny, &source, &reason)?;
            Err(ToolError::Denied(reason))
        }
    }
}

fn decided(
    store: &Store,
    call: &PendingCall<'_>,
    behavior: Behavior,
    source: &str,
    reason: &str,
) -> Result<(), StoreError> {
    let text = |v: Value| v.as_str().unwrap_or_default().to_string();
    store.append_event(Event::PermissionDecided {
        agent_id: call.agent_id.into(),
        activation_id: call.activation_id.into(),
        tool_call_id: Some(call.call_id.into()).filter(|c: &String| !c.is_empty()),
        tool: call.tool.into(),
        behavior: text(json!(behavior)),
        source: source.into(),
        reason: reason.into(),
        risk: text(json!(call.decision.risk)),
        code: call.decision.code_str(),
        categories: call.decision.category_names(),
        actions: Vec::new(),
    })?;
    Ok(())
}

/// What the model reads when nobody may be asked.
fn nobody_asked(tool: &str, why: &str) -> String {
    format!(
        "Permission denied for {tool}: it needs approval ({why}), and nobody is asked here (permissions.onAsk: deny), \
         so it did not run. Do the task without it, or send the user a message asking them to run it or to allow it."
    )
}

fn timed_out(request: &ApprovalRecord) -> String {
    let waited = (request.expires_at - request.created_at).to_std().unwrap_or_default();
    format!(
        "Permission denied for {}: nobody decided on its approval request within {} (permissions.approvalTimeout), \
         so it did not run. Do the task without it, or send the user a message asking for it.",
        request.tool,
        humane(waited)
    )
}

/// What the model reads for a request that was not allowed.
fn denial(request: &ApprovalRecord) -> String {
    match (request.status, request.resolution_reason.as_deref()) {
        (_, Some(reason)) => reason.to_string(),
        (ApprovalStatus::Cancelled, None) => {
            format!("{} did not run: its approval request was cancelled", request.tool)
        }
        _ => {
            let by = request.resolved_by.as_deref().unwrap_or("the user");
            let feedback = request
                .feedback
                .as_deref()
                .filter(|f| !f.trim().is_empty())
                .map(|f| format!(" Feedback: {f}"))
                .unwrap_or_default();
            format!("Permission denied for {}: {} denied the call ({}).{feedback}", request.tool, by, request.reason())
        }
    }
}

fn humane(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s >= 3600 && s % 3600 == 0 => format!("{} h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}
