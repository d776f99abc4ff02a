//! The store's errors: one variant per failure a caller (agent, user, toolpack) can act on,
//! carrying the reference's exact text where the reference defines one (§3.6, §4.2), plus the
//! database and filesystem failures underneath.
//!
//! The texts are part of the contract: they reach models as tool errors and JS packs as `Error`
//! messages, and the reference's tests match on them. Do not reword them.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("Message needs recipient or channel")]
    MessageNeedsTarget,

    #[error("Message cannot have both recipient and channel")]
    MessageBothTargets,

    /// Not in the reference (which leaves the case undefined): a signal with both targets would
    /// be ambiguous between "this agent" and "everybody on the channel", so it is refused.
    #[error("Signal cannot have both targetAgent and targetChannel; set one of them")]
    SignalBothTargets,

    #[error("Unknown agent: {0}")]
    UnknownAgent(String),

    #[error("Unknown channel: {0}")]
    UnknownChannel(String),

    #[error("Invalid priority: {0}")]
    InvalidPriority(String),

    /// `what` is the kind of status (`signal`, `project`, `agent`, ...), so the signal case reads
    /// exactly `Invalid signal status: <x>` as in the reference.
    #[error("Invalid {what} status: {value}")]
    InvalidStatus { what: &'static str, value: String },

    #[error("Targeted signals cannot be closed; omit the target or omit status")]
    TargetedSignalClosed,

    #[error("kind is required")]
    KindRequired,

    #[error("Unknown message: {0}")]
    UnknownMessage(String),

    #[error("Unknown activation: {0}")]
    UnknownActivation(String),

    #[error("Activation {activation} belongs to agent {owner}, not {agent}")]
    ActivationOfOtherAgent { activation: String, owner: String, agent: String },

    #[error("Activation {id} is not running (it is {status})")]
    ActivationNotRunning { id: String, status: String },

    /// The store refuses a second activation for an agent: two at once would race on the same
    /// history and workspace. The scheduler finishes (or cancels) the old one first.
    #[error("Agent {agent} already has a running activation {activation}; finish or cancel it first")]
    AgentBusy { agent: String, activation: String },

    #[error("Signal {signal} is not pending for agent {agent}; it cannot be delivered to a new activation")]
    SignalNotPending { signal: String, agent: String },

    #[error("Unknown tool call: {0}")]
    UnknownToolCall(String),

    #[error("Unknown approval request: {0}")]
    UnknownApproval(String),

    /// A shortened id (`approvals allow <prefix>`) that more than one request starts with.
    #[error("Approval request id {prefix} is ambiguous: it starts {}; give more of it", .matches.join(", "))]
    AmbiguousApproval { prefix: String, matches: Vec<String> },

    #[error("Approval request {id} is already {status}; only a pending request can be allowed or denied")]
    ApprovalResolved { id: String, status: String },

    /// `reason` says when: "the call it asked for ended with the controller's restart at …".
    #[error(
        "request {id} expired: {reason}; deciding it would run nothing, so make the call again if it is still wanted"
    )]
    ApprovalExpired { id: String, reason: String },

    #[error("Unknown question: {0}")]
    UnknownQuestion(String),

    /// A shortened id (`answer <prefix>`) that more than one question starts with.
    #[error("Question id {prefix} is ambiguous: it starts {}; give more of it", .matches.join(", "))]
    AmbiguousQuestion { prefix: String, matches: Vec<String> },

    #[error("Question {id} is already {status}; only a pending question can be answered")]
    QuestionClosed { id: String, status: String },

    /// `field` is the answer's JSON pointer (`/answer`, `/choice`).
    #[error("Answer to question {id} refused: {field} {reason}")]
    BadAnswer { id: String, field: &'static str, reason: String },

    #[error("Unknown permission rule: {0}")]
    UnknownRule(String),

    #[error("Tool call {id} already finished (it is {status})")]
    ToolCallFinished { id: String, status: String },

    #[error(
        "{path} has schema version {found}, but this suzumio knows versions up to {known}; \
         use a newer suzumio for this project"
    )]
    SchemaTooNew { path: PathBuf, found: i64, known: i64 },

    #[error("{path} uses journal mode `{mode}`, WAL could not be enabled")]
    NotWal { path: PathBuf, mode: String },

    #[error("cannot create the state directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// SQLite could not write because the file system is full. Nothing was half-recorded: the
    /// transaction rolled back.
    #[error("the disk is full ({dir}): free space and retry")]
    DiskFull { dir: PathBuf },

    /// A read-only handle (what `status` and `signals` open, so they work on a full disk) was
    /// asked to write.
    #[error("the state database was opened read-only; this command cannot change it")]
    ReadOnly,

    #[error("state database error: {0}")]
    Database(#[from] rusqlite::Error),

    #[error("{0}")]
    Io(#[from] std::io::Error),
}
