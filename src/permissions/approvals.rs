//! Durable approval requests: an `ask` decision is stored, the activation is parked
//! (`waiting_approval`) until a person allows or denies it (WebUI, CLI, API) or the agent's
//! `approvalTimeout` passes, and on allow exactly the stored call runs.

use serde_json::Value;

use super::{AskPolicy, Decision};
use crate::activation::run::RunnerTools;
use crate::support::ToolHost;
use crate::support::ToolOutput;
use crate::toolpack::ToolError;

/// One call that was decided `ask`, with what is needed to run it once approved.
pub struct PendingCall<'a> {
    pub agent_id: &'a str,
    pub activation_id: &'a str,
    /// The `tool_calls` row this call was recorded under.
    pub call_id: &'a str,
    pub tool: &'a str,
    pub input: &'a Value,
    pub decision: &'a Decision,
    pub policy: AskPolicy,
}

/// Asks for approval and waits for it; on allow runs the stored call through `runner` or the
/// controller, on deny or timeout returns `ToolError::Denied` with the reason and feedback.
pub async fn ask(_host: &ToolHost, _runner: &dyn RunnerTools, call: PendingCall<'_>) -> Result<ToolOutput, ToolError> {
    Err(ToolError::Denied(format!(
        "{} needs approval ({}), and this controller cannot ask for it yet",
        call.tool, call.decision.reason
    )))
}
