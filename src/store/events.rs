//! The timeline: every event the store records, as one closed, serde-tagged [`Event`] enum. The
//! store writes them (in the same transaction as the change they describe); the scheduler's
//! wake-up filter, `suzumio run`'s progress lines, the API and the SSE stream read the same
//! type. On the wire and in the database an event is `{"type": "<name>", "data": {...}}`; the
//! names and data keys are the API's (reference §7), so they never change shape silently.
//!
//! Rows whose type this build does not know (written by a newer build) are kept as
//! [`Event::Unrecognized`] rather than dropped.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// One thing that happened in a project.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
pub enum Event {
    #[serde(rename = "project.initialized")]
    ProjectInitialized { name: String },
    #[serde(rename = "project.status")]
    ProjectStatus { status: String, previous: String },
    #[serde(rename = "project.submitted", rename_all = "camelCase")]
    ProjectSubmitted { report_path: String, agent_id: Option<String> },
    #[serde(rename = "agent.added", rename_all = "camelCase")]
    AgentAdded { agent_id: String },
    #[serde(rename = "agent.status", rename_all = "camelCase")]
    AgentStatus { agent_id: String, status: String, previous: String },
    /// A budget or the wake-loop guard paused the agent: nothing is scheduled for it until it
    /// resumes.
    #[serde(rename = "agent.paused", rename_all = "camelCase")]
    AgentPaused { agent_id: String, reason: String, limit: String, until: Option<String> },
    /// By the user, a raised budget or the end of the limit's period.
    #[serde(rename = "agent.resumed", rename_all = "camelCase")]
    AgentResumed { agent_id: String, reason: String },
    #[serde(rename = "activation.started", rename_all = "camelCase")]
    ActivationStarted { activation_id: String, agent_id: String, signal_ids: Vec<String> },
    #[serde(rename = "activation.completed")]
    ActivationCompleted(ActivationEnded),
    #[serde(rename = "activation.failed")]
    ActivationFailed(ActivationEnded),
    #[serde(rename = "activation.cancelled")]
    ActivationCancelled(ActivationEnded),
    #[serde(rename = "tool_call.started", rename_all = "camelCase")]
    ToolCallStarted {
        tool_call_id: String,
        activation_id: String,
        agent_id: String,
        tool: String,
        toolpack_id: Option<String>,
    },
    #[serde(rename = "tool_call.finished", rename_all = "camelCase")]
    ToolCallFinished {
        tool_call_id: String,
        activation_id: String,
        agent_id: String,
        tool: String,
        status: String,
        error: Option<String>,
        error_kind: Option<String>,
    },
    /// Deferred tools `tool_search` loaded for the agent (from its next request on); `tools`
    /// as the registry names them, `modelNames` as the model sees them.
    #[serde(rename = "tool.activated", rename_all = "camelCase")]
    ToolActivated { agent_id: String, activation_id: Option<String>, tools: Vec<String>, model_names: Vec<String> },
    /// A model's call refused before it ran or was recorded as a tool call: an unknown tool, one
    /// the agent may not use, a deferred one not loaded yet. `tool` is as the model named it,
    /// `call_id` the model's id of the call.
    #[serde(rename = "tool_call.rejected", rename_all = "camelCase")]
    ToolCallRejected { activation_id: String, agent_id: String, tool: String, call_id: Option<String>, reason: String },
    #[serde(rename = "message.created", rename_all = "camelCase")]
    MessageCreated {
        message_id: String,
        sender: String,
        recipient: Option<String>,
        channel: Option<String>,
        priority: String,
    },
    #[serde(rename = "signal.created", rename_all = "camelCase")]
    SignalCreated {
        signal_id: String,
        kind: String,
        target_agent: Option<String>,
        target_channel: Option<String>,
        priority: String,
        status: String,
        not_before: Option<String>,
    },
    /// A pending signal taken back before it was delivered: what it said was read otherwise
    /// (a `shell.command_finished` whose end `shell.check` returned).
    #[serde(rename = "signal.withdrawn", rename_all = "camelCase")]
    SignalWithdrawn { signal_id: String, kind: String, agent_id: String, reason: String },
    /// P1 signals handed to a running activation at a tool boundary.
    #[serde(rename = "signals.delivered", rename_all = "camelCase")]
    SignalsDelivered { agent_id: String, activation_id: String, signal_ids: Vec<String>, at: String },
    /// One model call of an activation's loop answered: which model, the first line of what it
    /// said (the whole text is in the history) and the tools it called. Recorded with its
    /// `assistant_output` history row.
    #[serde(rename = "activation.turn", rename_all = "camelCase")]
    ActivationTurn { activation_id: String, agent_id: String, model: String, text: String, tool_calls: Vec<String> },
    /// A model of the agent's model list failed and the loop goes on with the next one:
    /// `cause` is the kind of failure (`http_error` with `status`, `rate_limited`, `timeout`,
    /// `stream_stalled`, `malformed_stream`, `bad_response`, `context_overflow`, `network`,
    /// `missing_key`, `config`, `scripted`), `error` the provider's whole message. `from` and
    /// `to` are `preset (model)`.
    #[serde(rename = "model.fallback", rename_all = "camelCase")]
    ModelFallback {
        activation_id: String,
        agent_id: String,
        from: String,
        to: String,
        cause: String,
        status: Option<u16>,
        error: String,
    },
    #[serde(rename = "history.appended", rename_all = "camelCase")]
    HistoryAppended { agent_id: String, activation_id: Option<String>, kind: String, id: String },
    /// A quiet-agent monitor sent its message; `key` identifies the rule and agent (dedupe).
    #[serde(rename = "scheduler.quiet_agent_monitor.message_sent")]
    QuietAgentMonitorSent(MonitorSent),
    /// A failed-agent monitor sent its message.
    #[serde(rename = "scheduler.failed_agent_monitor.message_sent")]
    FailedAgentMonitorSent(MonitorSent),
    /// A measurement found the agent's `/workspace` and own `/artifacts` over its disk quota:
    /// its runner-side tool calls fail until space is freed.
    #[serde(rename = "agent.quota_exceeded", rename_all = "camelCase")]
    AgentQuotaExceeded { agent_id: String, used_bytes: u64, limit_bytes: u64 },
    /// A later measurement found the agent under its quota again.
    #[serde(rename = "agent.quota_ok", rename_all = "camelCase")]
    AgentQuotaOk { agent_id: String, used_bytes: u64, limit_bytes: u64 },
    /// A connection to an agent's control socket, or its hello, was refused: wrong peer uid, too
    /// many connections waiting for a hello, a second runner while one is connected, a token not
    /// (or no longer) valid. `suppressed` counts refusals not recorded since the previous one.
    #[serde(rename = "security.session_refused", rename_all = "camelCase")]
    SecuritySessionRefused {
        agent_id: String,
        reason: String,
        peer_uid: Option<u32>,
        peer_pid: Option<i32>,
        suppressed: u64,
    },
    /// A call was decided (`allow`, `ask` or `deny`) at the approvals step: its provenance, apart
    /// from the call's result, so a UI can show how it was authorized. Never its input.
    #[serde(rename = "permission.decided", rename_all = "camelCase")]
    PermissionDecided {
        agent_id: String,
        activation_id: String,
        tool_call_id: Option<String>,
        tool: String,
        behavior: String,
        source: String,
        reason: String,
        risk: String,
        /// What kind of thing decided (`rule`, `mode_default`, `reviewer`, …; empty in events
        /// of older builds).
        #[serde(default)]
        code: String,
        /// The risk categories the decision saw (`writes_outside_workspace`, `network`, …).
        #[serde(default)]
        categories: Vec<String>,
        /// What a person asked may do (`allow_once`, `allow_remember`, `deny`, …).
        #[serde(default)]
        actions: Vec<String>,
    },
    /// An `ask` became a durable request; the activation waits for it (`waiting_approval`).
    #[serde(rename = "approval.requested", rename_all = "camelCase")]
    ApprovalRequested {
        approval_id: String,
        agent_id: String,
        activation_id: String,
        tool: String,
        reason: String,
        risk: String,
        expires_at: String,
    },
    /// A request was allowed or denied (by a person, a remembered rule or the timeout), or
    /// cancelled with its activation.
    #[serde(rename = "approval.resolved", rename_all = "camelCase")]
    ApprovalResolved {
        approval_id: String,
        agent_id: String,
        activation_id: String,
        tool: String,
        status: String,
        resolved_by: String,
        feedback: Option<String>,
        remember: Option<String>,
    },
    /// A person switched tools off (or back on) for one agent while the project runs: `tools`
    /// are the ones whose state changed, `group` the group named (when one was), `by` who
    /// (`cli (<user>)`, `webui`, `api`). The agent's next request and call see it.
    #[serde(rename = "tools.switched", rename_all = "camelCase")]
    ToolsSwitched { agent_id: String, enabled: bool, group: Option<String>, tools: Vec<String>, by: String },
    /// A live permission rule was added (`suzumio permissions add`, the API, the WebUI); it
    /// decides from the agent's next tool call. `agentId` None: every agent.
    #[serde(rename = "permission.rule_added", rename_all = "camelCase")]
    PermissionRuleAdded { rule_id: i64, agent_id: Option<String>, tool: String, decision: String, by: String },
    /// A live permission rule was removed.
    #[serde(rename = "permission.rule_removed", rename_all = "camelCase")]
    PermissionRuleRemoved { rule_id: i64, agent_id: Option<String>, tool: String, decision: String, by: String },
    /// An agent's permission mode was switched at run time (`live`), or back to its config's.
    #[serde(rename = "permission.mode_changed", rename_all = "camelCase")]
    PermissionModeChanged { agent_id: String, mode: String, previous: String, live: bool, by: String },
    /// An agent asked the user a question (`ask_user`); its activation waits for the answer
    /// (`waiting_user`).
    #[serde(rename = "question.asked", rename_all = "camelCase")]
    QuestionAsked {
        question_id: String,
        agent_id: String,
        activation_id: String,
        question: String,
        choices: Vec<String>,
        default: Option<String>,
        expires_at: String,
    },
    /// A question was answered (by a person, or with its default when nobody did), left
    /// unanswered at its deadline, or ended with its activation (`status` says which).
    #[serde(rename = "question.answered", rename_all = "camelCase")]
    QuestionAnswered {
        question_id: String,
        agent_id: String,
        activation_id: String,
        status: String,
        answered_by: String,
        answer: Option<String>,
        choice: Option<u32>,
    },
    /// A piece of the text a model is streaming in an activation. Ephemeral: published with
    /// [`crate::store::Store::publish_ephemeral`], never stored. `offset` is where `text` starts
    /// in the current model call's text (0 starts a new call's text).
    #[serde(rename = "activation.delta", rename_all = "camelCase")]
    ActivationDelta { activation_id: String, agent_id: String, offset: u64, text: String },
    /// A type this build does not know (read back from a database a newer build wrote).
    #[serde(skip)]
    Unrecognized { kind: String, data: Value },
}

/// A `model.fallback`'s cause in a few words, as `run`'s lines and `show` print it.
pub fn fallback_cause(cause: &str, status: Option<u16>) -> String {
    match (cause, status) {
        ("http_error", Some(status)) => format!("HTTP {status}"),
        ("rate_limited", _) => "rate limited (HTTP 429)".into(),
        ("stream_stalled", _) => "stream stalled past chunkTimeoutMs".into(),
        ("malformed_stream", _) => "malformed stream".into(),
        ("bad_response", _) => "malformed answer".into(),
        ("context_overflow", _) => "context overflow".into(),
        ("timeout", _) => "timeout (timeoutMs)".into(),
        ("missing_key", _) => "missing API key".into(),
        (other, _) => other.replace('_', " "),
    }
}

/// The end of an activation, whatever the outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivationEnded {
    pub activation_id: String,
    pub agent_id: String,
    pub status: String,
    pub error: Option<String>,
    /// Set when recovery failed an activation a dead controller left running: how many of its
    /// delivered signals went back to pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signals_returned: Option<u64>,
}

/// What a monitor recorded when it sent a message: its dedupe key fields, the attempt, the
/// message and when.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MonitorSent {
    #[serde(flatten)]
    pub key: Map<String, Value>,
    pub attempt: u64,
    pub message_id: String,
    #[serde(with = "crate::clock::iso_serde")]
    pub sent_at: DateTime<Utc>,
}

impl Event {
    /// The event's type name and its data, as stored and sent.
    pub fn to_parts(&self) -> (String, Value) {
        if let Event::Unrecognized { kind, data } = self {
            return (kind.clone(), data.clone());
        }
        match serde_json::to_value(self) {
            Ok(Value::Object(mut map)) => {
                let kind = map.remove("type").and_then(|t| t.as_str().map(str::to_string)).unwrap_or_default();
                (kind, map.remove("data").unwrap_or(Value::Null))
            }
            // Every known variant serializes to an object with a type.
            _ => (String::new(), Value::Null),
        }
    }

    /// Rebuild an event from a stored type and data.
    pub fn from_parts(kind: &str, data: Value) -> Event {
        serde_json::from_value(json!({ "type": kind, "data": data.clone() }))
            .unwrap_or_else(|_| Event::Unrecognized { kind: kind.to_string(), data })
    }

    /// The agent the event is about, when there is one.
    pub fn agent_id(&self) -> Option<&str> {
        match self {
            Event::AgentAdded { agent_id }
            | Event::AgentStatus { agent_id, .. }
            | Event::AgentPaused { agent_id, .. }
            | Event::AgentResumed { agent_id, .. }
            | Event::ActivationStarted { agent_id, .. }
            | Event::ToolCallStarted { agent_id, .. }
            | Event::ToolCallFinished { agent_id, .. }
            | Event::ToolCallRejected { agent_id, .. }
            | Event::ToolActivated { agent_id, .. }
            | Event::SignalsDelivered { agent_id, .. }
            | Event::SignalWithdrawn { agent_id, .. }
            | Event::HistoryAppended { agent_id, .. }
            | Event::ActivationTurn { agent_id, .. }
            | Event::ModelFallback { agent_id, .. }
            | Event::AgentQuotaExceeded { agent_id, .. }
            | Event::AgentQuotaOk { agent_id, .. }
            | Event::SecuritySessionRefused { agent_id, .. }
            | Event::PermissionDecided { agent_id, .. }
            | Event::ApprovalRequested { agent_id, .. }
            | Event::ApprovalResolved { agent_id, .. }
            | Event::ToolsSwitched { agent_id, .. }
            | Event::PermissionModeChanged { agent_id, .. }
            | Event::QuestionAsked { agent_id, .. }
            | Event::QuestionAnswered { agent_id, .. }
            | Event::ActivationDelta { agent_id, .. } => Some(agent_id),
            Event::ActivationCompleted(e) | Event::ActivationFailed(e) | Event::ActivationCancelled(e) => {
                Some(&e.agent_id)
            }
            Event::ProjectSubmitted { agent_id, .. }
            | Event::PermissionRuleAdded { agent_id, .. }
            | Event::PermissionRuleRemoved { agent_id, .. } => agent_id.as_deref(),
            _ => None,
        }
    }

    /// Whether the scheduler should look again after this event: new work, a status change,
    /// or an activation that started or ended.
    pub fn wakes_scheduler(&self) -> bool {
        matches!(
            self,
            Event::SignalCreated { .. }
                | Event::MessageCreated { .. }
                | Event::ProjectStatus { .. }
                | Event::AgentStatus { .. }
                | Event::AgentResumed { .. }
                | Event::ActivationStarted { .. }
                | Event::ActivationCompleted(_)
                | Event::ActivationFailed(_)
                | Event::ActivationCancelled(_)
        )
    }
}

/// How the timeline's readers treat one event type: whether it says something of its own in
/// an activity feed (`false`: it only echoes another event, e.g. a history row beside its
/// turn), and whether the project's summary and roster are worth reading again after it.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventType {
    pub name: &'static str,
    pub in_feed: bool,
    pub refreshes_summary: bool,
}

const fn kind(name: &'static str, in_feed: bool, refreshes_summary: bool) -> EventType {
    EventType { name, in_feed, refreshes_summary }
}

/// Every type of [`Event`], by its wire name: the one list the WebUI takes (`GET
/// /api/event-types`) instead of keeping its own. A test checks it names every variant.
pub const EVENT_TYPES: &[EventType] = &[
    kind("project.initialized", true, true),
    kind("project.status", true, true),
    kind("project.submitted", true, true),
    kind("agent.added", true, true),
    kind("agent.status", false, true),
    kind("agent.paused", true, true),
    kind("agent.resumed", true, true),
    kind("activation.started", true, true),
    kind("activation.completed", true, true),
    kind("activation.failed", true, true),
    kind("activation.cancelled", true, true),
    kind("activation.turn", true, true),
    kind("model.fallback", true, false),
    kind("tool_call.started", false, false),
    kind("tool_call.finished", true, true),
    kind("tool_call.rejected", true, true),
    kind("tool.activated", true, false),
    kind("message.created", true, true),
    kind("signal.created", false, false),
    kind("signal.withdrawn", true, false),
    kind("signals.delivered", true, false),
    kind("history.appended", false, false),
    kind("scheduler.quiet_agent_monitor.message_sent", true, false),
    kind("scheduler.failed_agent_monitor.message_sent", true, false),
    kind("agent.quota_exceeded", true, true),
    kind("agent.quota_ok", true, true),
    kind("security.session_refused", true, false),
    kind("permission.decided", true, false),
    kind("approval.requested", true, true),
    kind("approval.resolved", true, true),
    kind("tools.switched", true, false),
    kind("permission.rule_added", true, false),
    kind("permission.rule_removed", true, false),
    kind("permission.mode_changed", true, true),
    kind("question.asked", true, true),
    kind("question.answered", true, true),
    // Ephemeral (live model text): streamed beside the timeline, never one of its rows.
    kind("activation.delta", false, false),
];

/// One timeline row. `id` grows strictly, so it is the resume point for SSE streams. Serialized
/// as `{"id", "type", "data", "createdAt"}`.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRecord {
    pub id: i64,
    pub event: Event,
    pub created_at: DateTime<Utc>,
}

impl EventRecord {
    /// The type name, as the API shows it.
    pub fn kind(&self) -> String {
        self.event.to_parts().0
    }

    /// The data, as the API shows it.
    pub fn data(&self) -> Value {
        self.event.to_parts().1
    }
}

impl Serialize for EventRecord {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let (kind, data) = self.event.to_parts();
        let mut s = serializer.serialize_struct("EventRecord", 4)?;
        s.serialize_field("id", &self.id)?;
        s.serialize_field("type", &kind)?;
        s.serialize_field("data", &data)?;
        s.serialize_field("createdAt", &crate::clock::iso(self.created_at))?;
        s.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_keep_their_wire_names_and_data_keys() {
        let e = Event::ToolCallFinished {
            tool_call_id: "tc_1".into(),
            activation_id: "act_1".into(),
            agent_id: "pm".into(),
            tool: "file.read".into(),
            status: "failed".into(),
            error: Some("No such file".into()),
            error_kind: Some("failed".into()),
        };
        let (kind, data) = e.to_parts();
        assert_eq!(kind, "tool_call.finished");
        assert_eq!(
            data,
            json!({"toolCallId": "tc_1", "activationId": "act_1", "agentId": "pm", "tool": "file.read",
                   "status": "failed", "error": "No such file", "errorKind": "failed"})
        );
        assert_eq!(Event::from_parts(&kind, data), e);
    }

    #[test]
    fn a_refused_session_names_its_agent_and_peer() {
        let e = Event::SecuritySessionRefused {
            agent_id: "a".into(),
            reason: "a runner for a is already connected".into(),
            peer_uid: Some(65534),
            peer_pid: Some(4242),
            suppressed: 0,
        };
        let (kind, data) = e.to_parts();
        assert_eq!(kind, "security.session_refused");
        assert_eq!(
            data,
            json!({"agentId": "a", "reason": "a runner for a is already connected", "peerUid": 65534,
                   "peerPid": 4242, "suppressed": 0})
        );
        assert_eq!((e.agent_id(), e.wakes_scheduler()), (Some("a"), false));
        assert_eq!(Event::from_parts(&kind, data), e);
    }

    #[test]
    fn monitor_events_flatten_their_key() {
        let mut key = Map::new();
        key.insert("agentId".into(), json!("w"));
        key.insert("ruleId".into(), json!("quiet"));
        let e = Event::QuietAgentMonitorSent(MonitorSent {
            key,
            attempt: 2,
            message_id: "msg_1".into(),
            sent_at: crate::clock::parse_iso("2026-01-01T00:00:00.000Z").unwrap(),
        });
        let (kind, data) = e.to_parts();
        assert_eq!(kind, "scheduler.quiet_agent_monitor.message_sent");
        assert_eq!(data["agentId"], "w");
        assert_eq!(data["attempt"], 2);
        assert_eq!(data["sentAt"], "2026-01-01T00:00:00.000Z");
        assert_eq!(Event::from_parts(&kind, data), e);
    }

    #[test]
    fn the_event_table_names_every_variant_once() {
        // serde's error for an unknown type lists every variant's wire name.
        let Err(e) = serde_json::from_value::<Event>(json!({"type": "no.such.type", "data": {}})) else {
            panic!("an unknown type parsed");
        };
        let message = e.to_string();
        let expected = message.split_once("expected one of ").map(|(_, list)| list).unwrap_or_default();
        let mut variants: Vec<&str> = expected.split(", ").map(|v| v.trim_matches('`')).collect();
        let mut table: Vec<&str> = EVENT_TYPES.iter().map(|t| t.name).collect();
        variants.sort_unstable();
        table.sort_unstable();
        assert_eq!(table, variants, "{message}");
    }

    #[test]
    fn unknown_types_survive_a_round_trip() {
        let e = Event::from_parts("future.thing", json!({"x": 1}));
        assert_eq!(e, Event::Unrecognized { kind: "future.thing".into(), data: json!({"x": 1}) });
        assert_eq!(e.to_parts(), ("future.thing".to_string(), json!({"x": 1})));
        assert!(!e.wakes_scheduler());
    }
}
