//! What happened, put together for people to read: one activation as a timeline (its prompt and
//! signals, each model turn with its text, tokens and cost, each tool call with its input, output
//! or error and duration, the signals handed over at tool boundaries, approvals, compactions,
//! fallbacks to the next model with their cause, its end), and
//! who sent how many messages to whom over a window. The WebUI (`GET activations/{id}/timeline`,
//! `GET message-graph`) and `suzumio show` read these same structs; they serialize as the API's
//! wire format (camelCase, items tagged by `kind`).
//!
//! It only reads: history rows, tool call rows, model calls, signals, messages and events already
//! recorded. It decides nothing and never fails on a row it cannot pair up: such a row is shown
//! on its own.

use std::collections::HashMap;

use rusqlite::params;
use serde::Serialize;
use serde_json::Value;

use chrono::{DateTime, Utc};

use crate::clock::{iso, millis_from};
use crate::store::{
    ActivationStatus, HistoryEntry, RecordedCall, SignalRecord, Store, StoreError, TokenUsage, ToolCallRecord,
    ToolCallStatus,
};
use crate::toolpack::sanitize_tool_name;

/// `Store::activation_timeline`: one activation, everything in the order it happened.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivationTimeline {
    pub activation: TimelineHead,
    /// All of its model calls (compaction summaries included).
    pub usage: TokenUsage,
    /// Its tool calls in numbers, as the items show them.
    pub tool_calls: ToolCallCounts,
    pub items: Vec<TimelineItem>,
}

/// How many tool calls a timeline shows: all, the ones that failed, and the ones refused
/// (unknown, not allowed or not loaded, an input against the schema, the policy) — failed and
/// rejected never overlap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallCounts {
    pub total: u64,
    pub failed: u64,
    pub rejected: u64,
}

impl ToolCallCounts {
    fn of(items: &[TimelineItem]) -> ToolCallCounts {
        let mut counts = ToolCallCounts::default();
        for item in items {
            let TimelineItem::ToolCall(call) = item else { continue };
            counts.total += 1;
            if call.error_kind.as_deref() == Some("rejected") {
                counts.rejected += 1;
            } else if call.status == ToolCallStatus::Failed {
                counts.failed += 1;
            }
        }
        counts
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineHead {
    pub id: String,
    pub agent_id: String,
    pub status: ActivationStatus,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub duration_ms: Option<u64>,
    pub error: Option<String>,
}

/// One step of an activation. `at` is when it was recorded (a tool call: when it started).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", rename_all_fields = "camelCase")]
pub enum TimelineItem {
    /// The prompt the activation started with and the signals it delivered.
    Prompt { at: String, delivery: String, text: String, signals: Vec<TimelineSignal> },
    /// One model call's answer: its text and what it used. `duration_ms` is the time since the
    /// step before it was recorded (the model's latency, near enough).
    ModelTurn {
        at: String,
        model: String,
        text: String,
        tool_calls: usize,
        usage: TokenUsage,
        duration_ms: Option<u64>,
    },
    /// A tool call the model made (boxed: it is the largest step by far).
    ToolCall(Box<TimelineToolCall>),
    /// Signals (P1 and above) handed to the running activation after a tool call.
    Signals { at: String, delivery: String, signals: Vec<TimelineSignal> },
    /// The older conversation replaced by a summary.
    Compaction { at: String, reason: String, summary: String, archived_messages: u64, kept_messages: u64 },
    /// A person's decision a tool call waited for (`approval.requested`, `approval.resolved`):
    /// `status` is `pending` until it is resolved.
    Approval {
        at: String,
        approval_id: String,
        tool: String,
        status: String,
        reason: Option<String>,
        risk: Option<String>,
        resolved_at: Option<String>,
        resolved_by: Option<String>,
        feedback: Option<String>,
    },
    /// A model of the list failed and the next one took over (`model.fallback`): why, in
    /// `cause` (and `status`, for an HTTP error) and the provider's whole `error`.
    ModelFallback { at: String, from: String, to: String, cause: String, status: Option<u16>, error: String },
    /// How the activation ended.
    Ended { at: String, status: ActivationStatus, error: Option<String> },
}

/// A tool call of the timeline. `id` is the recorded call (none when it was refused before it
/// was recorded: an unknown or disallowed tool); `tool` is the real name.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineToolCall {
    pub at: String,
    pub id: Option<String>,
    /// The provider's id of the call.
    pub call_id: Option<String>,
    pub tool: String,
    pub toolpack_id: Option<String>,
    pub status: ToolCallStatus,
    pub input: Value,
    /// The tool's `{output, title?, metadata?}` when it completed.
    pub output: Option<Value>,
    pub error: Option<String>,
    pub error_kind: Option<String>,
    pub finished_at: Option<String>,
    pub duration_ms: Option<u64>,
}

/// A signal as the timeline shows it; `body` is a message's text.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineSignal {
    pub id: String,
    pub kind: String,
    pub priority: String,
    pub source_agent: Option<String>,
    pub sender: Option<String>,
    pub body: Option<String>,
    pub created_at: String,
}

impl From<&SignalRecord> for TimelineSignal {
    fn from(s: &SignalRecord) -> Self {
        let text = |key: &str| s.payload.get(key).and_then(Value::as_str).map(str::to_string);
        TimelineSignal {
            id: s.id.clone(),
            kind: s.kind.clone(),
            priority: s.priority.as_str().to_string(),
            source_agent: s.source_agent.clone(),
            sender: text("sender"),
            body: text("body"),
            created_at: iso(s.created_at),
        }
    }
}

/// Messages from one participant to another (or to a channel, `#name`) in a window.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageEdge {
    pub from: String,
    pub to: String,
    pub count: u64,
    pub last_at: String,
}

/// One model call's row, for pairing with the turn it answered.
struct ModelCall {
    usage: TokenUsage,
    used: bool,
}

impl Store {
    /// One activation as a timeline, or `None` when there is no such activation.
    pub fn activation_timeline(&self, id: &str) -> Result<Option<ActivationTimeline>, StoreError> {
        let Some(activation) = self.activation(id)? else { return Ok(None) };
        let history = self.activation_history(id)?;
        let signals: HashMap<String, SignalRecord> =
            self.signals_delivered_to(id)?.into_iter().map(|s| (s.id.clone(), s)).collect();
        let mut calls = self.activation_tool_call_rows(id)?.into_iter().map(Some).collect::<Vec<_>>();
        // Rows of an earlier try of a call (the controller stopped while it waited) are shown
        // where they happened, before the try whose result the model got.
        let mut model_calls = self.activation_model_calls(id)?;
        let usage = self.activation_usage(id)?;
        let pick = |ids: &[String]| -> Vec<TimelineSignal> {
            ids.iter().filter_map(|id| signals.get(id)).map(TimelineSignal::from).collect()
        };

        let mut items = Vec::new();
        // Calls of the latest turn still waiting for their result, in the order the model made them.
        let mut pending: Vec<RecordedCall> = Vec::new();
        let mut previous_at = activation.started_at;
        // Signals handed over at a tool boundary are recorded just before that call's result:
        // they are shown after the call.
        let mut boundary: Vec<TimelineItem> = Vec::new();
        for row in &history {
            let at = row.created_at;
            if !matches!(row.entry, HistoryEntry::Signals { .. } | HistoryEntry::ToolResult { .. }) {
                items.append(&mut boundary);
            }
            match &row.entry {
                HistoryEntry::ActivationPrompt { text, delivery, signal_ids, .. } => items.push(TimelineItem::Prompt {
                    at: iso(at),
                    delivery: delivery.clone(),
                    text: text.clone(),
                    signals: pick(signal_ids),
                }),
                HistoryEntry::AssistantOutput { text, tool_calls, model, usage } => {
                    let mut turn = TokenUsage {
                        model_calls: 1,
                        input_tokens: usage.input_tokens,
                        cached_input_tokens: usage.cached_input_tokens,
                        output_tokens: usage.output_tokens,
                        cost: 0.0,
                    };
                    // The model call with the same tokens, first unused one: its cost.
                    if let Some(call) = model_calls.iter_mut().find(|c| {
                        !c.used
                            && c.usage.input_tokens == usage.input_tokens
                            && c.usage.output_tokens == usage.output_tokens
                    }) {
                        call.used = true;
                        turn.cost = call.usage.cost;
                    }
                    items.push(TimelineItem::ModelTurn {
                        at: iso(at),
                        model: model.clone(),
                        text: text.clone(),
                        tool_calls: tool_calls.len(),
                        usage: turn,
                        duration_ms: millis_from(previous_at, at),
                    });
                    pending.extend(tool_calls.iter().cloned());
                }
                HistoryEntry::ToolResult { name, content, is_error, call_id, .. } => {
                    let position = pending
                        .iter()
                        .position(|c| call_id.is_some() && c.id == *call_id)
                        .or_else(|| pending.iter().position(|c| c.name == *name));
                    let recorded = position.map(|p| pending.remove(p));
                    let arguments = recorded.as_ref().map(|c| c.arguments.clone());
                    let (earlier, row) = take_rows(&mut calls, call_id.as_deref(), name, Some(at));
                    items
                        .extend(earlier.into_iter().map(|r| tool_item(Some(r), name, call_id.clone(), None, None, at)));
                    items.push(tool_item(row, name, call_id.clone(), arguments, Some((content, *is_error)), at));
                    items.append(&mut boundary);
                }
                HistoryEntry::Signals { delivery, signal_ids } => boundary.push(TimelineItem::Signals {
                    at: iso(at),
                    delivery: delivery.clone(),
                    signals: pick(signal_ids),
                }),
                HistoryEntry::HistoryCompaction { summary, archived_messages, kept_messages, reason, .. } => items
                    .push(TimelineItem::Compaction {
                        at: iso(at),
                        reason: reason.clone(),
                        summary: summary.clone(),
                        archived_messages: *archived_messages,
                        kept_messages: *kept_messages,
                    }),
                HistoryEntry::Unrecognized { .. } => {}
            }
            previous_at = at;
        }
        // Calls made but not answered yet: the one running now (the signals after it already
        // handed over), and the ones after it.
        for call in pending {
            let (earlier, row) = take_rows(&mut calls, call.id.as_deref(), &call.name, None);
            let id = call.id.clone();
            items.extend(
                earlier.into_iter().map(|r| tool_item(Some(r), &call.name, id.clone(), None, None, previous_at)),
            );
            items.push(tool_item(row, &call.name, call.id.clone(), Some(call.arguments), None, previous_at));
            items.append(&mut boundary);
        }
        items.append(&mut boundary);
        // Rows no history entry accounts for (the end of a call not recorded in history), at
        // the time they started.
        for (row, _) in calls.into_iter().flatten() {
            let name = row.tool.clone();
            let at = row.started_at;
            place_in_time(&mut items, tool_item(Some(row), &name, None, None, None, at));
        }
        let gated = self.approval_calls(id)?;
        for approval in self.activation_approvals(id)? {
            place_approval(&mut items, approval, &gated);
        }
        for fallback in self.activation_fallbacks(id)? {
            place_in_time(&mut items, fallback);
        }
        if let Some(ended) = activation.ended_at {
            items.push(TimelineItem::Ended {
                at: iso(ended),
                status: activation.status,
                error: activation.error.clone(),
            });
        }
        Ok(Some(ActivationTimeline {
            tool_calls: ToolCallCounts::of(&items),
            activation: TimelineHead {
                duration_ms: activation.ended_at.and_then(|end| millis_from(activation.started_at, end)),
                id: activation.id,
                agent_id: activation.agent_id,
                status: activation.status,
                started_at: iso(activation.started_at),
                ended_at: activation.ended_at.map(iso),
                error: activation.error,
            },
            usage,
            items,
        }))
    }

    /// Messages per sender and recipient (or channel, as `#name`) created at or after `since`
    /// (ISO), sorted by sender, then recipient.
    pub fn message_graph(&self, since: &str) -> Result<Vec<MessageEdge>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT sender,
                        COALESCE(recipient, CASE WHEN channel LIKE '#%' THEN channel ELSE '#' || channel END) AS target,
                        COUNT(*), MAX(created_at)
                 FROM messages WHERE created_at >= ?1 AND (recipient IS NOT NULL OR channel IS NOT NULL)
                 GROUP BY sender, target ORDER BY sender, target",
            )?;
            let rows = stmt.query_map([since], |r| {
                Ok(MessageEdge {
                    from: r.get(0)?,
                    to: r.get(1)?,
                    count: r.get::<_, i64>(2)? as u64,
                    last_at: r.get(3)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The approvals of one activation, from their events (read as JSON, so the timeline needs
    /// nothing of the approvals' own tables), in the order they were requested.
    fn activation_approvals(&self, activation_id: &str) -> Result<Vec<TimelineItem>, StoreError> {
        let rows: Vec<(String, Value, String)> = self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT type, data_json, created_at FROM events
                 WHERE type IN ('approval.requested', 'approval.resolved')
                   AND json_extract(data_json, '$.activationId') = ?1
                 ORDER BY id",
            )?;
            let rows = stmt.query_map([activation_id], |r| {
                let data: String = r.get(1)?;
                Ok((r.get(0)?, serde_json::from_str(&data).unwrap_or(Value::Null), r.get(2)?))
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })?;
        let text = |data: &Value, key: &str| data.get(key).and_then(Value::as_str).map(str::to_string);
        let mut approvals: Vec<TimelineItem> = Vec::new();
        for (kind, data, at) in rows {
            let Some(approval_id) = text(&data, "approvalId") else { continue };
            let existing = approvals.iter_mut().find(
                |item| matches!(item, TimelineItem::Approval { approval_id: known, .. } if *known == approval_id),
            );
            match (kind.as_str(), existing) {
                ("approval.requested", None) => approvals.push(TimelineItem::Approval {
                    at,
                    approval_id,
                    tool: text(&data, "tool").unwrap_or_default(),
                    status: "pending".into(),
                    reason: text(&data, "reason"),
                    risk: text(&data, "risk"),
                    resolved_at: None,
                    resolved_by: None,
                    feedback: None,
                }),
                (
                    "approval.resolved",
                    Some(TimelineItem::Approval { status, resolved_at, resolved_by, feedback, .. }),
                ) => {
                    *status = text(&data, "status").unwrap_or_else(|| "resolved".into());
                    *resolved_at = Some(at);
                    *resolved_by = text(&data, "resolvedBy");
                    *feedback = text(&data, "feedback");
                }
                _ => {}
            }
        }
        Ok(approvals)
    }

    /// The tool call each approval request of the activation gated (by request id): the call
    /// that waited on it, the latest one after a restart. A request announced with its turn
    /// whose call never ran has none.
    fn approval_calls(&self, activation_id: &str) -> Result<HashMap<String, String>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, tool_call_id FROM approval_requests WHERE activation_id = ?1 AND tool_call_id IS NOT NULL",
            )?;
            let rows = stmt.query_map([activation_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok(rows.collect::<Result<HashMap<_, _>, _>>()?)
        })
    }

    /// The model fallbacks of one activation, from their events, oldest first.
    fn activation_fallbacks(&self, activation_id: &str) -> Result<Vec<TimelineItem>, StoreError> {
        let rows: Vec<(Value, String)> = self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT data_json, created_at FROM events
                 WHERE type = 'model.fallback' AND json_extract(data_json, '$.activationId') = ?1
                 ORDER BY id",
            )?;
            let rows = stmt.query_map([activation_id], |r| {
                let data: String = r.get(0)?;
                Ok((serde_json::from_str(&data).unwrap_or(Value::Null), r.get(1)?))
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })?;
        let text = |data: &Value, key: &str| data.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        Ok(rows
            .into_iter()
            .map(|(data, at)| TimelineItem::ModelFallback {
                at,
                from: text(&data, "from"),
                to: text(&data, "to"),
                cause: text(&data, "cause"),
                status: data.get("status").and_then(Value::as_u64).and_then(|s| u16::try_from(s).ok()),
                error: text(&data, "error"),
            })
            .collect())
    }

    /// An activation's tool-call rows in the order they started, each with the model's id of
    /// its call (none for rows of other callers, and of builds before it was recorded).
    fn activation_tool_call_rows(
        &self,
        activation_id: &str,
    ) -> Result<Vec<(ToolCallRecord, Option<String>)>, StoreError> {
        let ids: Vec<(String, Option<String>)> = self.read(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT id, call_key FROM tool_calls WHERE activation_id = ?1 ORDER BY rowid")?;
            let rows = stmt.query_map([activation_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })?;
        let mut rows = Vec::with_capacity(ids.len());
        for (id, key) in ids {
            if let Some(row) = self.tool_call(&id)? {
                rows.push((row, key));
            }
        }
        Ok(rows)
    }

    fn activation_model_calls(&self, activation_id: &str) -> Result<Vec<ModelCall>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT input_tokens, cached_input_tokens, output_tokens, cost FROM model_calls
                 WHERE activation_id = ?1 ORDER BY id",
            )?;
            let rows = stmt.query_map(params![activation_id], |r| {
                Ok(ModelCall {
                    usage: TokenUsage {
                        model_calls: 1,
                        input_tokens: r.get::<_, i64>(0)? as u64,
                        cached_input_tokens: r.get::<_, i64>(1)? as u64,
                        output_tokens: r.get::<_, i64>(2)? as u64,
                        cost: r.get(3)?,
                    },
                    used: false,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

type KeyedRow = (ToolCallRecord, Option<String>);

/// The rows of the model's call `call_id` (named `name` by the model): the last one is the
/// call whose result the model got, the ones before it earlier tries a restart ended. A call
/// refused before it was recorded has none. Rows recorded without the model's id (older
/// builds) are matched as before: the next unclaimed row of the same tool, calls running one at
/// a time in the order the model made them. `until`: when the result was recorded (a later
/// turn may reuse the id: a scripted model numbers its calls afresh after a restart).
fn take_rows(
    rows: &mut [Option<KeyedRow>],
    call_id: Option<&str>,
    name: &str,
    until: Option<DateTime<Utc>>,
) -> (Vec<ToolCallRecord>, Option<ToolCallRecord>) {
    let mut mine: Vec<ToolCallRecord> = Vec::new();
    if let Some(id) = call_id {
        for slot in rows.iter_mut() {
            if slot.as_ref().is_some_and(|(row, key)| {
                key.as_deref() == Some(id) && until.is_none_or(|until| row.started_at <= until)
            }) && let Some((row, _)) = slot.take()
            {
                mine.push(row);
            }
        }
    }
    if mine.is_empty() {
        let legacy = rows
            .iter_mut()
            .find(|r| r.as_ref().is_some_and(|(row, key)| key.is_none() && sanitize_tool_name(&row.tool) == name))
            .and_then(Option::take)
            .map(|(row, _)| row);
        return (Vec::new(), legacy);
    }
    let last = mine.pop();
    (mine, last)
}

/// A tool call item from its row (when it was recorded) and what the model got back (when it
/// has); without a row it is a call refused before it ran, named as the model named it.
fn tool_item(
    row: Option<ToolCallRecord>,
    name: &str,
    call_id: Option<String>,
    arguments: Option<Value>,
    result: Option<(&String, bool)>,
    at: DateTime<Utc>,
) -> TimelineItem {
    match row {
        Some(row) => TimelineItem::ToolCall(Box::new(TimelineToolCall {
            duration_ms: row.finished_at.and_then(|end| millis_from(row.started_at, end)),
            at: iso(row.started_at),
            id: Some(row.id),
            call_id,
            tool: row.tool,
            toolpack_id: row.toolpack_id,
            status: row.status,
            input: row.input,
            output: row.output,
            error: row.error,
            error_kind: row.error_kind,
            finished_at: row.finished_at.map(iso),
        })),
        None => {
            let (status, error) = match result {
                Some((content, _)) => (ToolCallStatus::Failed, Some(content.clone())),
                None => (ToolCallStatus::Running, None),
            };
            TimelineItem::ToolCall(Box::new(TimelineToolCall {
                at: iso(at),
                id: None,
                call_id,
                tool: name.to_string(),
                toolpack_id: None,
                status,
                input: arguments.unwrap_or(Value::Null),
                output: None,
                error,
                error_kind: result.map(|_| "rejected".to_string()),
                finished_at: result.map(|_| iso(at)),
                duration_ms: None,
            }))
        }
    }
}

/// Put an approval just before the call it gated, so that it reads as "asked, decided, then
/// the call ran (or was refused)": the call that waited on it (`gated`: request id → tool call
/// id), else the latest call of its tool that started before it was requested (a call asks
/// once it has started), else the first call of its tool after it (a request announced with
/// its turn, whose call had not started), else at the end.
fn place_approval(items: &mut Vec<TimelineItem>, approval: TimelineItem, gated: &HashMap<String, String>) {
    let TimelineItem::Approval { at, tool, approval_id, .. } = &approval else { return };
    fn call_of<'a>(item: &'a TimelineItem, tool: &str) -> Option<&'a TimelineToolCall> {
        match item {
            TimelineItem::ToolCall(call) if call.tool == tool => Some(call),
            _ => None,
        }
    }
    let waited = gated.get(approval_id).and_then(|call_id| {
        items.iter().position(|item| call_of(item, tool).is_some_and(|c| c.id.as_deref() == Some(call_id.as_str())))
    });
    let index = waited
        .or_else(|| items.iter().rposition(|item| call_of(item, tool).is_some_and(|c| c.at.as_str() <= at.as_str())))
        .or_else(|| items.iter().position(|item| call_of(item, tool).is_some()));
    match index {
        Some(index) => items.insert(index, approval),
        None => items.push(approval),
    }
}

/// When a step was recorded (a tool call: when it started).
fn item_at(item: &TimelineItem) -> &str {
    match item {
        TimelineItem::Prompt { at, .. }
        | TimelineItem::ModelTurn { at, .. }
        | TimelineItem::Signals { at, .. }
        | TimelineItem::Compaction { at, .. }
        | TimelineItem::Approval { at, .. }
        | TimelineItem::ModelFallback { at, .. }
        | TimelineItem::Ended { at, .. } => at,
        TimelineItem::ToolCall(call) => &call.at,
    }
}

/// Put a step recorded apart from the history (a fallback) after the last step recorded at or
/// before it: a failed model call leaves no history row, so the steps around it say where.
fn place_in_time(items: &mut Vec<TimelineItem>, item: TimelineItem) {
    let at = item_at(&item).to_string();
    let after = items.iter().rposition(|i| item_at(i) <= at.as_str() && !matches!(i, TimelineItem::Ended { .. }));
    let index = after.map_or(0, |i| i + 1);
    items.insert(index, item);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{Duration, TimeZone, Utc};
    use serde_json::json;

    use super::*;
    use crate::clock::ManualClock;
    use crate::store::{Event, RecordedUsage, SendMessage, ToolCallOutcome};

    fn store() -> (tempfile::TempDir, Store, Arc<ManualClock>) {
        let dir = tempfile::Builder::new().prefix("suzumio-timeline-").tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("suzumio.yaml"),
            "name: t\ntask: T.\nagents:\n  pm: {}\n  worker: {}\nchannels: ['#project']\nbackend:\n  runner:\n    \
             model: main\n    models:\n      providers: {local: {type: scripted}}\n      presets: {main: {provider: local}}\n",
        )
        .expect("config written");
        let loaded = crate::config::load_config(dir.path(), &crate::config::load::ProcessEnv).expect("config");
        let config = loaded.config.expect("a valid config");
        let clock = Arc::new(ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).single().expect("a time")));
        let store = Store::open(&config, clock.clone()).expect("store");
        (dir, store, clock)
    }

    fn send(store: &Store, sender: &str, to: Option<&str>, channel: Option<&str>, priority: &str, body: &str) {
        store
            .send_message(SendMessage {
                sender: sender.into(),
                recipient: to.map(str::to_string),
                channel: channel.map(str::to_string),
                priority: Some(priority.into()),
                body: body.into(),
                ..Default::default()
            })
            .expect("sent");
    }

    fn call(id: &str, name: &str) -> RecordedCall {
        RecordedCall { id: Some(id.into()), name: name.into(), arguments: json!({"n": id}) }
    }

    /// One turn with three calls: one that ran (a P1 arrived after it), one of a tool that does
    /// not exist (refused before it was recorded), and one still running.
    #[test]
    fn a_running_activation_pairs_calls_with_rows_results_and_boundary_signals() {
        let (_dir, store, clock) = store();
        send(&store, "user", Some("pm"), None, "P2", "Start.");
        let start = store.pending_signals("pm", 10).expect("pending");
        let ids: Vec<String> = start.iter().map(|s| s.id.clone()).collect();
        let a = store.start_activation("pm", "the prompt", &ids).expect("started").id;
        let prompt = HistoryEntry::ActivationPrompt {
            text: "the prompt".into(),
            delivery: "activation_start".into(),
            signal_ids: ids,
            priorities: vec!["P2".into()],
        };
        store.append_history("pm", Some(&a), &prompt).expect("recorded");
        clock.advance(Duration::milliseconds(900));
        let usage =
            TokenUsage { model_calls: 1, input_tokens: 50, cached_input_tokens: 0, output_tokens: 5, cost: 0.25 };
        store.record_model_usage(&a, "pm", "m", &usage, true).expect("usage");
        let turn = HistoryEntry::AssistantOutput {
            text: "Three things.".into(),
            tool_calls: vec![call("c1", "messages_send"), call("c2", "no_such_tool"), call("c3", "file_write")],
            model: "m".into(),
            usage: RecordedUsage { input_tokens: 50, output_tokens: 5, cached_input_tokens: 0 },
        };
        store.append_history("pm", Some(&a), &turn).expect("recorded");
        let first =
            store.start_tool_call(&a, "pm", "messages.send", Some("core"), &json!({"n": "c1"}), None).expect("c1");
        clock.advance(Duration::milliseconds(250));
        store
            .finish_tool_call(&first, ToolCallOutcome::Completed, Some(&json!({"output": "sent"})), None, None)
            .expect("c1");
        send(&store, "worker", Some("pm"), None, "P1", "Urgent.");
        let arrived = store.deliver_at_tool_boundary("pm", &a, 10).expect("delivered");
        let signals = HistoryEntry::Signals {
            delivery: "tool_boundary".into(),
            signal_ids: arrived.iter().map(|s| s.id.clone()).collect(),
        };
        store.append_history("pm", Some(&a), &signals).expect("recorded");
        let result = |name: &str, id: &str, content: &str, is_error| HistoryEntry::ToolResult {
            name: name.into(),
            content: content.into(),
            is_error,
            call_id: Some(id.into()),
            images: Vec::new(),
        };
        store.append_history("pm", Some(&a), &result("messages_send", "c1", "sent\n\nsignals", false)).expect("ok");
        store
            .append_history("pm", Some(&a), &result("no_such_tool", "c2", "Unknown tool: no_such_tool", true))
            .expect("ok");
        store.start_tool_call(&a, "pm", "file.write", Some("core"), &json!({"n": "c3"}), None).expect("c3");
        // What the approvals record while the call waits (their events, as [J] writes them).
        let approval = |kind: &str, data: Value| Event::Unrecognized { kind: kind.into(), data };
        store
            .append_event(approval(
                "approval.requested",
                json!({"approvalId": "apr_1", "agentId": "pm", "activationId": a, "tool": "file.write",
                       "reason": "writes a file", "risk": "medium", "expiresAt": "2026-03-01T13:00:00.000Z"}),
            ))
            .expect("recorded");

        let timeline = store.activation_timeline(&a).expect("read").expect("found");
        let kinds: Vec<&str> = timeline
            .items
            .iter()
            .map(|i| match i {
                TimelineItem::Prompt { .. } => "prompt",
                TimelineItem::ModelTurn { .. } => "turn",
                TimelineItem::ToolCall(c) => c.tool.as_str(),
                TimelineItem::Signals { .. } => "signals",
                TimelineItem::Compaction { .. } => "compaction",
                TimelineItem::Approval { .. } => "approval",
                TimelineItem::ModelFallback { .. } => "fallback",
                TimelineItem::Ended { .. } => "ended",
            })
            .collect();
        assert_eq!(kinds, ["prompt", "turn", "messages.send", "signals", "no_such_tool", "approval", "file.write"]);
        let TimelineItem::Approval { status, reason, .. } = &timeline.items[5] else { panic!("an approval") };
        assert_eq!((status.as_str(), reason.as_deref()), ("pending", Some("writes a file")));
        let TimelineItem::ModelTurn { usage, duration_ms, .. } = &timeline.items[1] else { panic!("a turn") };
        assert_eq!((usage.cost, *duration_ms), (0.25, Some(900)));
        let calls: Vec<&TimelineToolCall> = timeline
            .items
            .iter()
            .filter_map(|i| if let TimelineItem::ToolCall(c) = i { Some(&**c) } else { None })
            .collect();
        assert_eq!(
            (calls[0].status, calls[0].duration_ms, calls[0].output.clone()),
            (ToolCallStatus::Completed, Some(250), Some(json!({"output": "sent"})))
        );
        assert_eq!((calls[1].id.as_deref(), calls[1].status), (None, ToolCallStatus::Failed));
        assert_eq!(calls[1].error.as_deref(), Some("Unknown tool: no_such_tool"));
        assert_eq!((calls[1].error_kind.as_deref(), calls[1].input.clone()), (Some("rejected"), json!({"n": "c2"})));
        assert_eq!((calls[2].status, calls[2].call_id.as_deref()), (ToolCallStatus::Running, Some("c3")));
        let TimelineItem::Signals { signals, .. } = &timeline.items[3] else { panic!("signals") };
        assert_eq!((signals[0].priority.as_str(), signals[0].body.as_deref()), ("P1", Some("Urgent.")));
        let TimelineItem::Prompt { signals, .. } = &timeline.items[0] else { panic!("the prompt") };
        assert_eq!(signals[0].sender.as_deref(), Some("user"));
        assert_eq!(timeline.activation.status, ActivationStatus::Running);
        assert_eq!(store.activation_timeline("act_missing").expect("read"), None);
    }

    /// Regression: an approval was put after the call it gated, and the requests of a turn's
    /// calls (made with the turn, before the calls started) at the end. Each stands just before
    /// the call that waited on it.
    #[test]
    fn each_approval_stands_before_the_call_it_gated() {
        let (_dir, store, clock) = store();
        let a = store.start_activation("pm", "the prompt", &[]).expect("started").id;
        let turn = HistoryEntry::AssistantOutput {
            text: "Two writes.".into(),
            tool_calls: vec![call("c1", "file_write"), call("c2", "file_write")],
            model: "m".into(),
            usage: RecordedUsage { input_tokens: 5, output_tokens: 1, cached_input_tokens: 0 },
        };
        store.append_history("pm", Some(&a), &turn).expect("recorded");
        // Both asked with the turn, as `announce_turn` does.
        let ask = |key: &str| {
            let input = json!({"n": key});
            store
                .request_approval(crate::store::NewApproval {
                    agent_id: "pm",
                    activation_id: &a,
                    tool_call_id: None,
                    call_key: Some(key),
                    tool: "file.write",
                    input: &input,
                    decision: json!({"behavior": "ask", "source": "rule", "reason": "writes", "risk": "medium"}),
                    expires_at: "2026-03-01T13:00:00.000Z".into(),
                })
                .expect("asked")
                .id
        };
        let requests = [ask("c1"), ask("c2")];
        let allow = crate::store::Resolution {
            allow: true,
            by: "cli (alice)",
            feedback: None,
            remember: None,
            whole_activation: false,
        };
        for (key, request) in ["c1", "c2"].iter().zip(&requests) {
            clock.advance(Duration::milliseconds(100));
            let row =
                store.start_tool_call(&a, "pm", "file.write", Some("core"), &json!({"n": key}), None).expect("started");
            store.attach_approval(request, &row).expect("attached");
            store.resolve_approval(request, &allow).expect("allowed");
            store
                .finish_tool_call(&row, ToolCallOutcome::Completed, Some(&json!({"output": "ok"})), None, None)
                .expect("done");
            let result = HistoryEntry::ToolResult {
                name: "file_write".into(),
                content: "ok".into(),
                is_error: false,
                call_id: Some((*key).into()),
                images: Vec::new(),
            };
            store.append_history("pm", Some(&a), &result).expect("recorded");
        }
        let timeline = store.activation_timeline(&a).expect("read").expect("found");
        let steps: Vec<String> = timeline
            .items
            .iter()
            .filter_map(|i| match i {
                TimelineItem::ToolCall(c) => Some(format!("call {}", c.call_id.as_deref().unwrap_or("?"))),
                TimelineItem::Approval { approval_id, resolved_by, .. } => {
                    let which = if *approval_id == requests[0] { "c1" } else { "c2" };
                    Some(format!("approval {which} by {}", resolved_by.as_deref().unwrap_or("?")))
                }
                _ => None,
            })
            .collect();
        assert_eq!(steps, ["approval c1 by cli (alice)", "call c1", "approval c2 by cli (alice)", "call c2"]);
    }

    /// A failed model call leaves no history row: its fallback is placed by when it was
    /// recorded, between the steps before and after it.
    #[test]
    fn a_fallback_is_placed_between_the_steps_around_it() {
        let (_dir, store, clock) = store();
        let a = store.start_activation("pm", "the prompt", &[]).expect("started").id;
        let prompt = HistoryEntry::ActivationPrompt {
            text: "the prompt".into(),
            delivery: "activation_start".into(),
            signal_ids: Vec::new(),
            priorities: Vec::new(),
        };
        store.append_history("pm", Some(&a), &prompt).expect("recorded");
        clock.advance(Duration::milliseconds(100));
        store
            .append_event(Event::ModelFallback {
                activation_id: a.clone(),
                agent_id: "pm".into(),
                from: "fast (m1)".into(),
                to: "slow (m2)".into(),
                cause: "http_error".into(),
                status: Some(503),
                error: "HTTP 503: busy".into(),
            })
            .expect("recorded");
        clock.advance(Duration::milliseconds(100));
        let turn = HistoryEntry::AssistantOutput {
            text: "Done.".into(),
            tool_calls: Vec::new(),
            model: "m2".into(),
            usage: RecordedUsage { input_tokens: 5, output_tokens: 1, cached_input_tokens: 0 },
        };
        store.append_history("pm", Some(&a), &turn).expect("recorded");
        let timeline = store.activation_timeline(&a).expect("read").expect("found");
        assert!(matches!(timeline.items[0], TimelineItem::Prompt { .. }), "{:?}", timeline.items);
        assert_eq!(
            timeline.items[1],
            TimelineItem::ModelFallback {
                at: "2026-03-01T12:00:00.100Z".into(),
                from: "fast (m1)".into(),
                to: "slow (m2)".into(),
                cause: "http_error".into(),
                status: Some(503),
                error: "HTTP 503: busy".into(),
            }
        );
        assert!(matches!(timeline.items[2], TimelineItem::ModelTurn { .. }), "{:?}", timeline.items);
    }

    #[test]
    fn the_message_graph_counts_each_direction_and_channel_in_the_window() {
        let (_dir, store, clock) = store();
        send(&store, "pm", Some("worker"), None, "P3", "old");
        clock.advance(Duration::hours(2));
        let since = crate::clock::iso(store.now() - Duration::hours(1));
        send(&store, "pm", Some("worker"), None, "P3", "a");
        send(&store, "pm", Some("worker"), None, "P3", "b");
        send(&store, "worker", Some("pm"), None, "P3", "c");
        send(&store, "user", None, Some("#project"), "P3", "d");
        let edges: Vec<(String, String, u64)> =
            store.message_graph(&since).expect("read").into_iter().map(|e| (e.from, e.to, e.count)).collect();
        let owned = |f: &str, t: &str, n| (f.to_string(), t.to_string(), n);
        assert_eq!(edges, [owned("pm", "worker", 2), owned("user", "#project", 1), owned("worker", "pm", 1)]);
    }
}
