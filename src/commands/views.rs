//! The `--json` shapes of the CLI: one `Serialize` struct per command that prints data, so the
//! shapes are written down once and change only on purpose (golden files in `tests/golden/`
//! and README's CLI reference show them). Commands whose data is already a store type print
//! that type as it is: `signals` ([`crate::store::SignalRecord`]), `activations`
//! ([`crate::store::ActivationSummary`]), `show` ([`crate::store::Timeline`]), `logs` (one
//! [`crate::store::EventRecord`] per line), `history` ([`crate::store::HistoryRecord`]),
//! `tool call` and `ui` ([`crate::toolpack::ToolOutput`]), `send` and `wake`
//! ([`crate::store::MessageSent`]).

use serde::Serialize;

use crate::store::{ActivationCounts, Pause, ProjectStatus, TokenUsage};

/// `check --json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckView<'a> {
    pub project: &'a str,
    pub task: &'a str,
    pub toolpacks: Vec<ToolpackView<'a>>,
    pub agents: Vec<CheckedAgent<'a>>,
    /// Each warning as `check` prints it (`file:line:col: path: message`).
    pub warnings: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolpackView<'a> {
    pub id: &'a str,
    /// `builtin` or `local`.
    pub kind: &'a str,
    pub tools: usize,
    pub webui_entries: usize,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckedAgent<'a> {
    pub id: &'a str,
    pub display_name: &'a str,
    pub role: &'a str,
    pub model: &'a str,
    pub tools: &'a [String],
    /// The allowed tools its model gets only through `tool_search`.
    pub deferred_tools: &'a [String],
    /// The permission mode in force: default, auto or full-access (suzumio.yaml's
    /// `permissionMode`, unless switched at run time).
    pub permission_mode: &'static str,
    /// Who switched it at run time, when, and what suzumio.yaml says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permission_mode_set: Option<String>,
    /// The live rules that apply to the agent, each with its source.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub live_rules: Vec<String>,
    pub mounted_toolpacks: &'a [String],
}

/// `status --json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    pub project: String,
    pub status: ProjectStatus,
    pub submitted_report: Option<String>,
    pub agents: Vec<AgentStatusView>,
    /// Today's usage (UTC) of the whole project.
    pub usage_today: TokenUsage,
    pub messages: u64,
    pub activations: ActivationCounts,
    pub tool_calls: u64,
    pub pending_signals: u64,
    /// The process that holds the project's runners (`run` serving it, or a `tool call`/`mcp`
    /// with runners of its own); `null` when none does.
    pub served_by: Option<crate::support::serving::Holder>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatusView {
    pub id: String,
    pub status: crate::store::AgentStatus,
    pub active_activation_id: Option<String>,
    pub paused: Option<Pause>,
    /// Today's usage (UTC; since a resume when there was one).
    pub usage_today: TokenUsage,
    pub activations_this_hour: u64,
}

/// `cancel --json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelView {
    pub agent_id: String,
    /// The activation cancelled; absent when none was running.
    pub activation_id: Option<String>,
    pub cancelled: bool,
}

/// `tick --json`: what one scheduler tick did.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TickView {
    /// False when the project is not running (nothing was scheduled).
    pub ran: bool,
    /// `{activationId, agentId, signalIds}` of each activation started.
    pub started: Vec<TickActivation>,
    /// `{activationId, agentId, error}` of each activation a P0 cancelled.
    pub cancelled: Vec<TickActivation>,
    pub hooks: Vec<TickHook>,
    /// Ids of the nudge signals created.
    pub nudges: Vec<String>,
    /// Ids of the monitor messages sent.
    pub monitor_messages: Vec<String>,
    pub errors: Vec<String>,
    pub next_due: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TickActivation {
    pub activation_id: String,
    pub agent_id: String,
    pub signal_ids: Vec<String>,
    pub error: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TickHook {
    pub toolpack: String,
    /// Ids of the signals recorded from what the hook returned.
    pub signals: Vec<String>,
    pub wake_at: Option<String>,
    pub errors: Vec<String>,
}

/// What a command given `--json` prints on stdout when it fails (and exits 1 or 2).
#[derive(Serialize)]
pub struct JsonError {
    pub error: ErrorBody,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// What `error:` on stderr says.
    pub message: String,
    /// `invalid_config`, `invalid_input`, `failed`, or a tool error's kind (`rejected`,
    /// `denied`, `failed`, `runner_lost`, `internal`).
    pub kind: &'static str,
    pub exit_code: u8,
}
