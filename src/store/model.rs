//! The store's record types (what queries return), request types (what writes take) and status
//! enums, with their SQL and JSON text forms.
//!
//! Records serialize with the reference's camelCase field names because the JS toolpack API
//! (`store.listSignals()`, ...) and the web layer hand them out as JSON unchanged. Secrets never
//! serialize: an agent's token is skipped. Nothing here touches the database.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use crate::config::Priority;
use crate::store::StoreError;

/// Declares a status enum with one text form shared by SQL, JSON and `FromStr`, so the three can
/// never drift apart.
macro_rules! status_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = StoreError;
            fn from_str(s: &str) -> Result<Self, StoreError> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(StoreError::InvalidStatus { what: $what, value: other.to_string() }),
                }
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.as_str()))
            }
        }

        impl FromSql for $name {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                value.as_str()?.parse().map_err(|e: StoreError| FromSqlError::Other(Box::new(e)))
            }
        }
    };
}

status_enum!(
    /// Only `running` projects are scheduled.
    ProjectStatus, "project" {
        Initialized => "initialized",
        Running => "running",
        Submitted => "submitted",
        Completed => "completed",
        Stopped => "stopped",
        Failed => "failed",
    }
);

status_enum!(
    /// `stopped` also marks agents that were removed from the config: their rows (and history)
    /// are kept, and the scheduler skips them.
    AgentStatus, "agent" {
        Quiet => "quiet",
        Ready => "ready",
        Running => "running",
        Failed => "failed",
        Stopped => "stopped",
    }
);

status_enum!(
    /// `waiting_approval`: parked on a pending approval request; nothing runs and no model is
    /// called until a person (or the timeout) decides. `waiting_user`: parked the same way on a
    /// question to the user (`ask_user`) until it is answered or its deadline passes.
    ActivationStatus, "activation" {
    Running => "running",
    WaitingApproval => "waiting_approval",
    WaitingUser => "waiting_user",
    Completed => "completed",
    Failed => "failed",
    Cancelled => "cancelled",
    }
);

status_enum!(SignalStatus, "signal" {
    Pending => "pending",
    Delivered => "delivered",
    Closed => "closed",
});

status_enum!(ToolCallStatus, "tool call" {
    Running => "running",
    Completed => "completed",
    Failed => "failed",
});

/// How an activation ends (a running activation cannot "end" as running).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActivationOutcome {
    Completed,
    Failed,
    Cancelled,
}

impl ActivationOutcome {
    pub fn status(self) -> ActivationStatus {
        match self {
            ActivationOutcome::Completed => ActivationStatus::Completed,
            ActivationOutcome::Failed => ActivationStatus::Failed,
            ActivationOutcome::Cancelled => ActivationStatus::Cancelled,
        }
    }
}

/// How a tool call ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolCallOutcome {
    Completed,
    Failed,
}

impl ToolCallOutcome {
    pub fn status(self) -> ToolCallStatus {
        match self {
            ToolCallOutcome::Completed => ToolCallStatus::Completed,
            ToolCallOutcome::Failed => ToolCallStatus::Failed,
        }
    }
}

/// A priority column (`P0`..`P3`). `Priority` lives in the core's config, so the store reads
/// and writes its text form rather than implementing rusqlite's traits for a foreign type.
pub(crate) fn priority_column(r: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<Priority> {
    let text: String = r.get(index)?;
    text.parse()
        .map_err(|e: String| rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, e.into()))
}

/// Parse a caller's priority text; the error is the reference's `Invalid priority: <x>`.
pub fn parse_priority(text: &str) -> Result<Priority, StoreError> {
    text.parse().map_err(|_| StoreError::InvalidPriority(text.to_string()))
}

fn priority_str<S: Serializer>(p: &Priority, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(p.as_str())
}

// ---------------------------------------------------------------------------------------------
// records

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectRecord {
    pub name: String,
    pub task: String,
    pub status: ProjectStatus,
    pub config_json: Option<String>,
    pub submitted_report: Option<String>,
    #[serde(with = "crate::clock::iso_serde")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "crate::clock::iso_serde")]
    pub updated_at: DateTime<Utc>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentRecord {
    pub id: String,
    pub role: String,
    pub display_name: String,
    pub status: AgentStatus,
    /// The agent's private credential (24 random bytes, base64url). Never serialized.
    #[serde(skip)]
    pub token: String,
    pub active_activation_id: Option<String>,
    #[serde(with = "crate::clock::iso_serde")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "crate::clock::iso_serde")]
    pub updated_at: DateTime<Utc>,
    /// Set while the agent is paused (a budget or the wake-loop guard): the scheduler starts
    /// no activation for it, and signals to it stay pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<Pause>,
    /// When it was last resumed: its budgets and the wake-loop guard count from then.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[serde(with = "crate::clock::iso_serde::option")]
    pub resumed_at: Option<DateTime<Utc>>,
}

/// Why an agent is paused, and what ends the pause.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pause {
    /// What the user reads (`suzumio status`, the WebUI banner, the event).
    pub reason: String,
    /// The limit that was hit: `maxTokensPerDay`, …, or `loopGuard`.
    pub limit: String,
    /// `agent` or `project`.
    pub scope: String,
    /// The limit's value when it was hit: raising it above this resumes the agent.
    pub allowed: f64,
    pub used: f64,
    /// When the limit's period ends and the agent resumes by itself (none for a per-activation
    /// limit and the loop guard).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(with = "crate::clock::iso_serde::option")]
    pub until: Option<DateTime<Utc>>,
    /// The activation the pause stopped after it had begun its work: on resume the agent is
    /// told to continue it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_id: Option<String>,
    #[serde(with = "crate::clock::iso_serde")]
    pub paused_at: DateTime<Utc>,
}

/// Tokens and cost of model calls (one call, an activation, an agent's day).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    pub model_calls: u64,
    /// Every input token, cached ones included.
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    /// From the presets' prices; 0 when none are set.
    pub cost: f64,
}

impl TokenUsage {
    /// What token budgets count: input and output.
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    pub fn add(&mut self, other: &TokenUsage) {
        self.model_calls += other.model_calls;
        self.input_tokens += other.input_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.output_tokens += other.output_tokens;
        self.cost += other.cost;
    }
}

/// What the wake-loop guard looks at: an agent's activations since some time, who woke them,
/// and whether any activation of theirs or of the agents that woke them did real work.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WakeWindow {
    pub activations: u64,
    /// Roster agents whose signals started those activations (the agent itself excluded).
    pub woken_by: Vec<String>,
    /// Activations of the agent and of `woken_by` in the window that did more than talk.
    pub with_progress: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageRecord {
    pub id: String,
    pub sender: String,
    pub recipient: Option<String>,
    pub channel: Option<String>,
    #[serde(serialize_with = "priority_str")]
    pub priority: Priority,
    pub body: String,
    pub source_agent: Option<String>,
    pub source_activation: Option<String>,
    #[serde(with = "crate::clock::iso_serde")]
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalRecord {
    pub id: String,
    pub kind: String,
    pub source_agent: Option<String>,
    pub source_activation: Option<String>,
    pub target_agent: Option<String>,
    pub target_channel: Option<String>,
    #[serde(serialize_with = "priority_str")]
    pub priority: Priority,
    pub payload: Value,
    pub status: SignalStatus,
    pub useful_effect: bool,
    #[serde(with = "crate::clock::iso_serde")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "crate::clock::iso_serde::option")]
    pub not_before: Option<DateTime<Utc>>,
    #[serde(with = "crate::clock::iso_serde::option")]
    pub delivered_at: Option<DateTime<Utc>>,
    pub delivered_activation_id: Option<String>,
    /// How many activations it was delivered to: more than one means an earlier one was
    /// interrupted by a controller crash before it finished (delivery is at least once).
    pub deliveries: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivationRecord {
    pub id: String,
    pub agent_id: String,
    pub status: ActivationStatus,
    pub prompt: String,
    pub signal_ids: Vec<String>,
    #[serde(with = "crate::clock::iso_serde")]
    pub started_at: DateTime<Utc>,
    #[serde(with = "crate::clock::iso_serde::option")]
    pub ended_at: Option<DateTime<Utc>>,
    pub error: Option<String>,
    pub text: Option<String>,
    /// None until its first model call is recorded.
    pub usage: Option<ActivationUsage>,
}

/// What an activation's model calls used, as its row keeps it (`usage_json`, kept current by
/// `Store::record_model_usage`): the counts, the cost once one of its models has prices, and
/// the models it called, in the order they were first called.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivationUsage {
    #[serde(default)]
    pub model_calls: u64,
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub cached_input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    #[serde(default)]
    pub models: Vec<String>,
}

/// A full tool call row, input and output included. Status views use [`ToolStat`] and
/// [`ToolCallSummary`], which never carry them.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRecord {
    pub id: String,
    pub activation_id: String,
    pub agent_id: String,
    pub tool: String,
    pub toolpack_id: Option<String>,
    pub status: ToolCallStatus,
    pub input: Value,
    pub output: Option<Value>,
    pub error: Option<String>,
    #[serde(with = "crate::clock::iso_serde")]
    pub started_at: DateTime<Utc>,
    #[serde(with = "crate::clock::iso_serde::option")]
    pub finished_at: Option<DateTime<Utc>>,
    /// Why a failed call failed: `rejected`, `denied`, `failed`, `runner_lost` or `internal`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageSent {
    pub message_id: String,
    pub signal_ids: Vec<String>,
}

/// Two participants of direct messages (`a < b`), with how many messages went between them.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectPair {
    pub a: String,
    pub b: String,
    pub count: u64,
    pub last_message_id: String,
    #[serde(with = "crate::clock::iso_serde")]
    pub last_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalCounts {
    pub total: u64,
    /// Every status, zero included.
    pub by_status: BTreeMap<String, u64>,
    /// Every priority, zero included.
    pub by_priority: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectStats {
    pub name: String,
    pub status: ProjectStatus,
    pub agents: AgentCounts,
    pub messages: u64,
    pub activations: ActivationCounts,
    pub tool_calls: u64,
    pub history_compactions: u64,
    pub events: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCounts {
    pub total: u64,
    /// Only statuses some agent has.
    pub by_status: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivationCounts {
    pub total: u64,
    pub running: u64,
    /// Parked until a person decides one of their calls (`waiting_approval`): not running.
    pub waiting_approval: u64,
    /// Parked until the user answers a question of theirs (`waiting_user`): not running.
    pub waiting_user: u64,
    pub failed: u64,
}

/// Per-tool aggregates for tool status views (reference §3.9). Never holds inputs or outputs.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolStat {
    pub tool: String,
    pub toolpack_id: Option<String>,
    pub call_count: u64,
    pub running_count: u64,
    pub completed_count: u64,
    pub failed_count: u64,
    pub last_status: ToolCallStatus,
    pub last_agent_id: String,
    #[serde(with = "crate::clock::iso_serde")]
    pub last_at: DateTime<Utc>,
    /// The latest call's error, capped at [`crate::store::LAST_ERROR_CAP`] characters.
    pub last_error: Option<String>,
}

/// A recent call for activity panels: what was touched (`target`), never contents.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallSummary {
    pub id: String,
    pub tool: String,
    pub agent_id: String,
    pub activation_id: String,
    pub status: ToolCallStatus,
    #[serde(with = "crate::clock::iso_serde")]
    pub started_at: DateTime<Utc>,
    #[serde(with = "crate::clock::iso_serde::option")]
    pub finished_at: Option<DateTime<Utc>>,
    pub error: Option<String>,
    /// What the call touched, from the tool's declared `presentation.target` (a path, a
    /// command, a URL); never contents.
    pub target: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// requests

/// `store.sendMessage` input (reference §4.2). The sender is not validated here: callers decide
/// who may speak (an agent over its socket, `user` from the UI, a virtual `monitor`).
#[derive(Clone, Debug, Default)]
pub struct SendMessage {
    pub sender: String,
    pub recipient: Option<String>,
    pub channel: Option<String>,
    /// `P0`..`P3`; default P3.
    pub priority: Option<String>,
    pub body: String,
    pub source_agent: Option<String>,
    pub source_activation: Option<String>,
}

/// `store.recordSignal` input (reference §3.6).
#[derive(Clone, Debug, Default)]
pub struct SignalRequest {
    pub kind: String,
    pub source_agent: Option<String>,
    pub source_activation: Option<String>,
    /// An agent id; `user` counts as no target.
    pub target_agent: Option<String>,
    pub target_channel: Option<String>,
    /// `P0`..`P3`; default P2.
    pub priority: Option<String>,
    /// An object; anything else is wrapped as `{"value": x}` (`null` becomes `{}`).
    pub payload: Value,
    /// `pending` or `closed`; default by target (see reference §3.6).
    pub status: Option<String>,
    pub useful_effect: Option<bool>,
    pub not_before: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, Default)]
pub struct MessageQuery {
    /// With `participant_b`: direct messages between the two, either direction. Alone: direct
    /// messages the participant sent or received.
    pub participant_a: Option<String>,
    pub participant_b: Option<String>,
    pub channel: Option<String>,
    /// Default 50, capped at 500.
    pub limit: Option<usize>,
    /// Only messages older than this one (paging back).
    pub before_id: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct SignalQuery {
    pub target_agent: Option<String>,
    pub status: Option<SignalStatus>,
    /// Only signals of this kind.
    pub kind: Option<String>,
    /// Default 50, capped at 500.
    pub limit: Option<usize>,
    /// Only signals recorded before this one (paging back; the id must exist).
    pub before_id: Option<String>,
}
