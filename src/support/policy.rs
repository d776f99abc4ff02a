//! Who may send what: the one place that decides whether a message or a signal created on
//! behalf of an agent may be recorded. Every such path asks here — `messages.send`, the
//! runner's `recordSignal`, a pack's `context.recordSignal` / `store.recordSignal` /
//! `store.sendMessage` during an agent's support call, and the scheduled jobs an agent created
//! when the scheduler hook sends them — so a side door cannot be more generous than the front.
//!
//! The rules: an agent sends only as itself (never as `user`, `scheduler` or another agent);
//! with `restrictNonCoordinatorToCoordinator` a non-coordinator reaches only the coordinator, at
//! `nonCoordinatorMaxPriority` or lower (reference §4.2, its texts); an agent cannot record the
//! kinds the controller records itself. The user (API, CLI, WebUI) and controller-side code
//! outside an agent's call (scheduler hooks) are not checked here; only the reserved kinds of
//! [`check_pack_kind`] apply to them. This module decides; it records nothing.

use std::str::FromStr;

use serde_json::Value;

use super::InvokeError;
use crate::config::{CommunicationConfig, Priority};
use crate::toolpack::ToolError;

/// Signals only the controller records: a message's signal comes with its message, the others
/// with the built-in tool that records them.
const CONTROLLER_KINDS: &[&str] = &["message.created", "completion.submitted", "coordination.wait_for_signal"];
/// The scheduler's nudges and monitors; nudges are shown to the model as they are written.
const CONTROLLER_PREFIX: &str = "scheduler.";

/// A refusal by one of the rules above; the message names the rule. It is a
/// [`ToolError::Rejected`] wherever it surfaces: the call never ran.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl From<Refused> for ToolError {
    fn from(r: Refused) -> Self {
        ToolError::Rejected(r.0)
    }
}

impl From<Refused> for InvokeError {
    fn from(r: Refused) -> Self {
        InvokeError::Rejected(r.0)
    }
}

/// Where a message or signal goes, and how urgently (already parsed).
#[derive(Clone, Copy, Debug)]
pub struct Route<'a> {
    pub recipient: Option<&'a str>,
    pub channel: Option<&'a str>,
    pub priority: Priority,
}

/// A message `agent` sends, or a pack or scheduled job sends for it: `sender` (when given) is
/// the agent itself, and the route obeys the communication policy.
pub fn check_message(
    policy: &CommunicationConfig,
    agent: &str,
    sender: Option<&str>,
    route: Route<'_>,
) -> Result<(), Refused> {
    check_sender(agent, sender)?;
    if !restricted(policy, agent) {
        return Ok(());
    }
    let coordinator = policy.coordinator_agent.as_deref().unwrap_or_default();
    if given(route.channel).is_some() {
        return Err(Refused(format!(
            "Communication policy allows non-coordinator agents to send direct messages only to {coordinator}; channels are not allowed."
        )));
    }
    if given(route.recipient) != Some(coordinator) {
        return Err(Refused(format!(
            "Communication policy allows non-coordinator agents to message only {coordinator}."
        )));
    }
    check_priority(policy, route.priority)
}

/// A signal `agent` records (from its runner, or a pack in its support call): not a kind the
/// controller records, no other sender in its payload, and under the policy the coordinator as
/// the only target. An untargeted signal wakes nobody, so only its priority is capped
/// (`targetAgent: "user"` counts as no target, as in the store).
pub fn check_signal(
    policy: &CommunicationConfig,
    agent: &str,
    kind: &str,
    route: Route<'_>,
    payload: &Value,
) -> Result<(), Refused> {
    check_pack_kind(kind)?;
    if CONTROLLER_KINDS.contains(&kind) {
        return Err(Refused(format!(
            "Signal kind {kind} is recorded only by the controller's own tool; agents cannot record it."
        )));
    }
    if let Some(named) = payload.get("sender")
        && named.as_str() != Some(agent)
    {
        return Err(Refused(format!(
            "A signal from {agent} carries {agent} as its sender; payload.sender {named} is not allowed."
        )));
    }
    if !restricted(policy, agent) {
        return Ok(());
    }
    let coordinator = policy.coordinator_agent.as_deref().unwrap_or_default();
    if given(route.channel).is_some() {
        return Err(Refused(format!(
            "Communication policy allows non-coordinator agents to signal only {coordinator}; channels are not allowed."
        )));
    }
    if let Some(target) = given(route.recipient).filter(|t| *t != "user")
        && target != coordinator
    {
        return Err(Refused(format!(
            "Communication policy allows non-coordinator agents to signal only {coordinator}."
        )));
    }
    check_priority(policy, route.priority)
}

/// Kinds no pack code and no runner may record, whoever the caller: `message.created` comes
/// only with a message (a forged one would show as a message nobody sent), and `scheduler.*`
/// are the controller's nudges and monitors.
pub fn check_pack_kind(kind: &str) -> Result<(), Refused> {
    if kind == "message.created" {
        return Err(Refused(
            "A message.created signal comes only with its message; send a message (messages.send) instead of recording the signal."
                .into(),
        ));
    }
    if kind.starts_with(CONTROLLER_PREFIX) {
        return Err(Refused(format!(
            "Signal kind {kind} is reserved for the controller's scheduler (its nudges and monitors)."
        )));
    }
    Ok(())
}

/// An agent speaks only as itself.
pub fn check_sender(agent: &str, sender: Option<&str>) -> Result<(), Refused> {
    match sender {
        Some(named) if named != agent => {
            Err(Refused(format!("{agent} can send messages only as itself; sender {named} is not allowed.")))
        }
        _ => Ok(()),
    }
}

/// A priority text as the policy reads it: absent is `default`, an invalid one is refused with
/// the store's text (the store would refuse it too).
pub fn priority(text: Option<&str>, default: Priority) -> Result<Priority, Refused> {
    match given(text) {
        None => Ok(default),
        Some(t) => Priority::from_str(t).map_err(|_| Refused(format!("Invalid priority: {t}"))),
    }
}

/// Blank is absent, as in the store.
fn given(text: Option<&str>) -> Option<&str> {
    text.filter(|t| !t.is_empty())
}

fn restricted(policy: &CommunicationConfig, agent: &str) -> bool {
    // Validation refuses the policy without a coordinator.
    policy.restrict_non_coordinator_to_coordinator && policy.coordinator_agent.as_deref() != Some(agent)
}

fn check_priority(policy: &CommunicationConfig, priority: Priority) -> Result<(), Refused> {
    let max = policy.non_coordinator_max_priority;
    if priority < max {
        return Err(Refused(format!(
            "Communication policy allows non-coordinator priorities {max} or lower; {priority} is not allowed."
        )));
    }
    Ok(())
}
