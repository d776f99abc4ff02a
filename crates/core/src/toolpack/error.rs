//! Why a tool call produced no output: the one error type of every tool path (`execute_tool`,
//! the support broker, the agent runners, the runner's own tools, the JavaScript host's
//! operations, MCP sessions). Each kind is something different to the user and the model: a
//! call that was never allowed to run, a call a permission decision stopped, a tool that ran and
//! failed, a runner that went away, a call stopped on purpose, one that ran out of time or size,
//! or our own fault.
//!
//! The message is what the model sees; the kind is recorded with the call, and crosses the
//! controller ⇄ runner wire as the JSON-RPC error's `data.kind` ([`ToolError::to_rpc`],
//! [`ToolError::from_rpc`]), so neither end decides anything by a message's text.

use serde_json::json;

use crate::rpc::{RpcError, codes};
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
    /// Stopped on purpose while it ran (a P0, `suzumio cancel`, the controller's cancel).
    #[error("{0}")]
    Cancelled(String),
    /// It did not finish within its deadline (a pack's `timeoutMs`, the invoke's bound).
    #[error("{0}")]
    TimedOut(String),
    /// What it was asked to handle (a file, a result) is over a size limit.
    #[error("{0}")]
    TooLarge(String),
    /// Our fault (the store, a bug); the call may or may not have had effects.
    #[error("{0}")]
    Internal(String),
}

impl ToolError {
    /// Every kind, as [`ToolError::kind`] names it.
    pub const KINDS: &[&str] =
        &["rejected", "denied", "failed", "runner_lost", "cancelled", "timed_out", "too_large", "internal"];

    /// The kind as recorded with the call and shown in the API.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::Rejected(_) => "rejected",
            ToolError::Denied(_) => "denied",
            ToolError::Failed(_) => "failed",
            ToolError::RunnerLost(_) => "runner_lost",
            ToolError::Cancelled(_) => "cancelled",
            ToolError::TimedOut(_) => "timed_out",
            ToolError::TooLarge(_) => "too_large",
            ToolError::Internal(_) => "internal",
        }
    }

    /// The error of `kind` (as [`ToolError::kind`] names it) with `message`; an unknown kind
    /// (a peer newer than us) reads as a failure.
    pub fn of_kind(kind: &str, message: String) -> ToolError {
        match kind {
            "rejected" => ToolError::Rejected(message),
            "denied" => ToolError::Denied(message),
            "runner_lost" => ToolError::RunnerLost(message),
            "cancelled" => ToolError::Cancelled(message),
            "timed_out" => ToolError::TimedOut(message),
            "too_large" => ToolError::TooLarge(message),
            "internal" => ToolError::Internal(message),
            _ => ToolError::Failed(message),
        }
    }

    pub fn message(&self) -> &str {
        match self {
            ToolError::Rejected(m)
            | ToolError::Denied(m)
            | ToolError::Failed(m)
            | ToolError::RunnerLost(m)
            | ToolError::Cancelled(m)
            | ToolError::TimedOut(m)
            | ToolError::TooLarge(m)
            | ToolError::Internal(m) => m,
        }
    }

    /// The same kind with the message rewritten (a prefix added, paths mapped).
    pub fn map_message(self, f: impl FnOnce(String) -> String) -> ToolError {
        ToolError::of_kind(self.kind(), f(self.message().to_string()))
    }

    /// An input that does not match the tool's schema, every failing instance path listed.
    pub fn invalid_input(tool: &str, errors: &[InputError]) -> ToolError {
        ToolError::Rejected(format!("Invalid input for {tool}: {}", describe_input_errors(errors)))
    }

    /// As the wire carries it: a `-32000` error whose message is the model's text, unchanged,
    /// and whose `data.kind` is the kind.
    pub fn to_rpc(&self) -> RpcError {
        let mut reply = RpcError::application(self.message());
        reply.data = Some(json!({ "kind": self.kind() }));
        reply
    }

    /// What a peer's error answer means for a tool call: the kind it sent in `data.kind`; a
    /// closed connection is a lost runner; an application error without a kind a failure; a
    /// protocol error (bad params, unknown method, the peer's internal error) is ours.
    pub fn from_rpc(error: RpcError) -> ToolError {
        let kind = error.data.as_ref().and_then(|d| d.get("kind")).and_then(|k| k.as_str()).map(str::to_string);
        match kind {
            Some(kind) => ToolError::of_kind(&kind, error.message),
            None if error.is_connection_closed() => ToolError::RunnerLost(error.message),
            None if error.code == codes::APPLICATION => ToolError::Failed(error.message),
            None => ToolError::Internal(error.message),
        }
    }
}

impl From<ToolError> for RpcError {
    fn from(e: ToolError) -> RpcError {
        e.to_rpc()
    }
}

impl From<RpcError> for ToolError {
    fn from(e: RpcError) -> ToolError {
        ToolError::from_rpc(e)
    }
}

pub fn describe_input_errors(errors: &[InputError]) -> String {
    errors
        .iter()
        .map(|e| if e.pointer.is_empty() { e.message.clone() } else { format!("{}: {}", e.pointer, e.message) })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_crosses_the_wire_as_itself() {
        for kind in ToolError::KINDS {
            let sent = ToolError::of_kind(kind, format!("a {kind} call"));
            assert_eq!(sent.kind(), *kind);
            let wire = serde_json::to_string(&sent.to_rpc()).unwrap();
            let read: RpcError = serde_json::from_str(&wire).unwrap();
            assert_eq!(read.message, format!("a {kind} call"), "the message is not wrapped");
            assert_eq!(ToolError::from_rpc(read), sent);
        }
    }

    #[test]
    fn an_answer_without_a_kind_is_read_by_its_code() {
        assert_eq!(ToolError::from_rpc(RpcError::application("x")), ToolError::Failed("x".into()));
        assert_eq!(ToolError::from_rpc(RpcError::connection_closed()).kind(), "runner_lost");
        assert_eq!(ToolError::from_rpc(RpcError::invalid_params("bad")), ToolError::Internal("bad".into()));
    }
}
