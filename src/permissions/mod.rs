//! The permission decision: every tool call, whoever makes it (the model loop, `suzumio tool
//! call`, the WebUI, MCP), is decided here once, in `execute_tool`, after the allowlist and the
//! schema check and before dispatch. A decision is `allow`, `ask` (a durable approval request,
//! `approvals.rs`) or `deny` (`ToolError::Denied` with the reason the model reads), and it always
//! says where it came from (`source`), so `suzumio permissions explain` and the audit can show it.

pub mod approvals;

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::config::AgentConfig;
use crate::project::Project;
use crate::toolpack::ToolDefinition;

/// What happens to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Behavior {
    Allow,
    Ask,
    Deny,
}

/// How risky the call looks, for the person who is asked and for the audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    Low,
    Medium,
    High,
}

/// A decision and its provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub behavior: Behavior,
    /// Which rule, mode, annotation or hook decided: e.g. `project rule 2 (shell.exec: rm *)`,
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

/// Decides one call.
pub fn decide(_project: &Project, call: &Call<'_>) -> Decision {
    if call.def.requires_approval {
        return Decision {
            behavior: Behavior::Ask,
            source: "requiresApproval".to_string(),
            reason: format!("{} is marked requiresApproval", call.tool),
            risk: Risk::Medium,
        };
    }
    Decision { behavior: Behavior::Allow, source: "default".to_string(), reason: String::new(), risk: Risk::Low }
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
pub fn ask_policy(_project: &Project, _agent: &AgentConfig) -> AskPolicy {
    AskPolicy { on_ask: OnAsk::Wait, timeout: Duration::from_secs(24 * 3600) }
}
