//! Why a tool call produced no output: the one error type of every tool path (`execute_tool`,
//! the support broker, the agent runners). Each kind is something different to the user and the
//! model: a call that was never allowed to run, a call a permission decision stopped, a tool that
//! ran and failed, a runner that went away, or our own fault.
//!
//! The message is what the model sees; the kind is recorded with the call.

use crate::toolpack::schema::InputError;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// Refused before it ran: unknown tool, not in the allowlist, input against the schema, the
    /// communication policy, a malformed request.
    #[error("{0}")]
    Rejected(String),
    /// Stopped by a permission decision (a rule or a person).
    #[error("{0}")]
    Denied(String),
    /// The tool ran and failed; the message says why.
    #[error("{0}")]
    Failed(String),
    /// The agent's runner went away (or could not be reached) before the call finished.
    #[error("{0}")]
    RunnerLost(String),
    /// Our fault (the store, a bug); the call may or may not have had effects.
    #[error("{0}")]
    Internal(String),
}

impl ToolError {
    /// The kind as recorded with the call and shown in the API.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::Rejected(_) => "rejected",
            ToolError::Denied(_) => "denied",
            ToolError::Failed(_) => "failed",
            ToolError::RunnerLost(_) => "runner_lost",
            ToolError::Internal(_) => "internal",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            ToolError::Rejected(m)
            | ToolError::Denied(m)
            | ToolError::Failed(m)
            | ToolError::RunnerLost(m)
            | ToolError::Internal(m) => m,
        }
    }

    /// An input that does not match the tool's schema, every failing instance path listed.
    pub fn invalid_input(tool: &str, errors: &[InputError]) -> ToolError {
        ToolError::Rejected(format!("Invalid input for {tool}: {}", describe_input_errors(errors)))
    }
}

pub fn describe_input_errors(errors: &[InputError]) -> String {
    errors
        .iter()
        .map(|e| if e.pointer.is_empty() { e.message.clone() } else { format!("{}: {}", e.pointer, e.message) })
        .collect::<Vec<_>>()
        .join("; ")
}
