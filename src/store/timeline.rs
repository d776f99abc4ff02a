//! What happened in an activation, read back from the store: the activation list with each
//! one's counts and usage ([`ActivationSummary`]), and one activation's turn-by-turn
//! [`Timeline`] — each model turn with its text and tokens, each tool call with its input,
//! output or error and duration, and the signals that arrived at tool boundaries, in the order
//! they happened. `suzumio activations`/`show` render these, and the API can serve them as
//! they are (they are `Serialize` with camelCase keys: the shapes README's CLI reference
//! documents). Reads only.

use rusqlite::{OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

use crate::clock::parse_iso;
use crate::store::{
    ActivationRecord, ActivationStatus, HistoryEntry, SignalRecord, Store, StoreError, TokenUsage, ToolCallRecord,
    clamp_limit,
};

/// One activation in a list: what it did, in numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivationSummary {
    pub id: String,
    pub agent_id: String,
    pub status: ActivationStatus,
    pub started_at: String,
    pub ended_at: Option<String>,
    /// From start to end (to now while it runs: absent then).
    pub duration_ms: Option<u64>,
    /// The signals it was started with.
    pub signal_ids: Vec<String>,
    pub tool_calls: u64,
    pub failed_tool_calls: u64,
    /// Its model calls (compactions included).
    pub usage: TokenUsage,
    pub error: Option<String>,
    /// Its final text (the model's last words, or why it stopped).
    pub text: Option<String>,
}

/// Which activations [`Store::find_activations`] lists.
#[derive(Clone, Debug, Default)]
pub struct ActivationQuery {
    pub agent_id: Option<String>,
    pub status: Option<ActivationStatus>,
    /// Default 50, capped at 500.
    pub limit: Option<usize>,
}

/// One activation, turn by turn.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    pub activation: ActivationSummary,
    pub prompt: PromptSummary,
    pub items: Vec<TimelineItem>,
}

/// What the activation was started with.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptSummary {
    /// Its first line, at most 200 characters.
    pub summary: String,
    pub chars: u64,
    pub signals: Vec<SignalBrief>,
}

/// A signal as a timeline shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalBrief {
    pub id: String,
    pub kind: String,
    pub priority: String,
    /// Who sent it (a message's sender, or the agent that recorded it).
    pub from: Option<String>,
    /// A message's body, or the payload as JSON; its first line, at most 200 characters.
    pub summary: String,
}

/// One step of an activation, in the order it happened.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum TimelineItem {
    /// One model call of the loop: what the model said, which tools it asked for, what it used.
    ModelTurn {
        at: String,
        model: String,
        text: String,
        /// The tools it called, by their model-facing names, in order.
        tool_calls: Vec<String>,
        input_tokens: u64,
        cached_input_tokens: u64,
        output_tokens: u64,
        /// From the preset's prices; absent when the call's cost is not known.
        cost: Option<f64>,
    },
    /// One tool call. `id` is absent for a call refused before it was recorded (an unknown
    /// tool, or one the agent may not use): its `error` says why.
    ToolCall {
        id: Option<String>,
        tool: String,
        status: String,
        input: Option<Value>,
        output: Option<Value>,
        error: Option<String>,
        error_kind: Option<String>,
        started_at: Option<String>,
        finished_at: Option<String>,
        duration_ms: Option<u64>,
    },
    /// Signals handed to the activation at a tool boundary (P1, after the call before it).
    Signals { at: String, delivery: String, signals: Vec<SignalBrief> },
    /// The older history was summarized to fit the model's context.
    Compaction { at: String, reason: String, archived_messages: u64, kept_messages: u64 },
}

/// Why looking up an activation by a prefix of its id failed.
#[derive(Debug, thiserror::Error)]
pub enum ActivationLookup {
    #[error("Unknown activation: {0} (suzumio activations lists them)")]
    Unknown(String),
    #[error("Activation id {prefix} is ambiguous: it starts {}", .matches.join(", "))]
    Ambiguous { prefix: String, matches: Vec<String> },
    #[error("{0}")]
    Store(#[from] StoreError),
}

const SUMMARY_COLUMNS: &str =
    "a.id, a.agent_id, a.status, a.started_at, a.ended_at, a.signal_ids_json, a.error, a.text,
    (SELECT COUNT(*) FROM tool_calls t WHERE t.activation_id = a.id),
    (SELECT COUNT(*) FROM tool_calls t WHERE t.activation_id = a.id AND t.status = 'failed'),
    (SELECT COUNT(*) FROM model_calls m WHERE m.activation_id = a.id),
    (SELECT COALESCE(SUM(input_tokens), 0) FROM model_calls m WHERE m.activation_id = a.id),
    (SELECT COALESCE(SUM(cached_input_tokens), 0) FROM model_calls m WHERE m.activation_id = a.id),
    (SELECT COALESCE(SUM(output_tokens), 0) FROM model_calls m WHERE m.activation_id = a.id),
    (SELECT COALESCE(SUM(cost), 0.0) FROM model_calls m WHERE m.activation_id = a.id)";

fn summary_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ActivationSummary> {
    let started_at: String = r.get(3)?;
    let ended_at: Option<String> = r.get(4)?;
    let signal_ids = crate::store::json_column(r, 5)?;
    let count = |i: usize| r.get::<_, i64>(i).map(|n| n.max(0) as u64);
    Ok(ActivationSummary {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        status: r.get(2)?,
        duration_ms: duration_ms(Some(&started_at), ended_at.as_deref()),
        started_at,
        ended_at,
        signal_ids: signal_ids
            .as_array()
            .map(|ids| ids.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default(),
        error: r.get(6)?,
        text: r.get(7)?,
        tool_calls: count(8)?,
        failed_tool_calls: count(9)?,
        usage: TokenUsage {
            model_calls: count(10)?,
            input_tokens: count(11)?,
            cached_input_tokens: count(12)?,
            output_tokens: count(13)?,
            cost: r.get(14)?,
        },
    })
}

/// Milliseconds between two store timestamps.
fn duration_ms(start: Option<&str>, end: Option<&str>) -> Option<u64> {
    let (start, end) = (parse_iso(start?)?, parse_iso(end?)?);
    (end - start).num_milliseconds().try_into().ok()
}

/// The first line of a text, at most `max` characters.
fn first_line(text: &str, max: usize) -> String {
    let line = text.trim().lines().next().unwrap_or("").trim();
    if line.chars().count() <= max {
        line.to_string()
    } else {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{}…", cut.trim_end())
    }
}

fn brief(signal: &SignalRecord) -> SignalBrief {
    let p = &signal.payload;
    let is_message = signal.kind == "message.created";
    let from = if is_message { p.get("sender").and_then(Value::as_str).map(str::to_string) } else { None };
    let summary = match p.get("body").and_then(Value::as_str) {
        Some(body) if is_message => first_line(body, 200),
        _ => first_line(&p.to_string(), 200),
    };
    SignalBrief {
        id: signal.id.clone(),
        kind: signal.kind.clone(),
        priority: signal.priority.as_str().to_string(),
        from: from.or_else(|| signal.source_agent.clone()),
        summary,
    }
}

/// How the model loop answers a call it refuses before anything is recorded: there is no
/// tool call row for these.
fn refused_unrecorded(content: &str) -> bool {
    content.starts_with("Unknown tool: ") || content.starts_with("Tool not allowed for ")
}

impl Store {
    /// Activations, newest first, with their counts and usage.
    pub fn find_activations(&self, query: &ActivationQuery) -> Result<Vec<ActivationSummary>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {SUMMARY_COLUMNS} FROM activations a
                 WHERE (?1 IS NULL OR a.agent_id = ?1) AND (?2 IS NULL OR a.status = ?2)
                 ORDER BY a.started_at DESC, a.id DESC LIMIT ?3"
            ))?;
            let status = query.status.map(|s| s.as_str());
            let rows = stmt.query_map(params![query.agent_id, status, clamp_limit(query.limit)], summary_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The activation whose id is `id_or_prefix`, or the only one whose id starts with it
    /// (with or without the `act_`).
    pub fn resolve_activation_id(&self, id_or_prefix: &str) -> Result<String, ActivationLookup> {
        let wanted = id_or_prefix.trim();
        if wanted.is_empty() {
            return Err(ActivationLookup::Unknown(id_or_prefix.to_string()));
        }
        let prefix = if wanted.starts_with("act_") { wanted.to_string() } else { format!("act_{wanted}") };
        let matches: Vec<String> = self.read(|conn| {
            let exact: Option<String> = conn
                .prepare_cached("SELECT id FROM activations WHERE id = ?1")?
                .query_row([wanted], |r| r.get(0))
                .optional()?;
            if let Some(id) = exact {
                return Ok(vec![id]);
            }
            // `glob` with a pattern free of glob characters: ids are `act_` and hex digits.
            if !prefix.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Ok(Vec::new());
            }
            let mut stmt = conn.prepare_cached("SELECT id FROM activations WHERE id GLOB ?1 ORDER BY id LIMIT 6")?;
            let rows = stmt.query_map([format!("{prefix}*")], |r| r.get::<_, String>(0))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })?;
        match matches.as_slice() {
            [] => Err(ActivationLookup::Unknown(id_or_prefix.to_string())),
            [one] => Ok(one.clone()),
            _ => Err(ActivationLookup::Ambiguous { prefix: id_or_prefix.to_string(), matches }),
        }
    }

    /// One activation's summary.
    pub fn activation_summary(&self, id: &str) -> Result<Option<ActivationSummary>, StoreError> {
        self.read(|conn| {
            Ok(conn
                .prepare_cached(&format!("SELECT {SUMMARY_COLUMNS} FROM activations a WHERE a.id = ?1"))?
                .query_row([id], summary_from_row)
                .optional()?)
        })
    }

    /// The timeline of one activation (see [`Timeline`]); `None` when there is no such
    /// activation. Works while it runs: what is recorded so far, a running tool call last.
    pub fn activation_timeline(&self, id: &str) -> Result<Option<Timeline>, StoreError> {
        let Some(activation) = self.activation(id)? else { return Ok(None) };
        let Some(summary) = self.activation_summary(id)? else { return Ok(None) };
        let history = self.activation_history(id)?;
        let calls = self.activation_tool_call_records(id)?;
        let costs = self.activation_model_call_costs(id)?;
        let signals = |ids: &[String]| -> Result<Vec<SignalBrief>, StoreError> {
            Ok(ids.iter().map(|s| self.signal(s)).collect::<Result<Vec<_>, _>>()?.iter().flatten().map(brief).collect())
        };
        let mut items = Vec::new();
        let mut calls = calls.into_iter();
        let mut costs = costs.into_iter().peekable();
        // Boundary signals are recorded just before the result of the call they followed.
        let mut arrived: Vec<TimelineItem> = Vec::new();
        for row in &history {
            match &row.entry {
                HistoryEntry::AssistantOutput { text, tool_calls, model, usage } => {
                    // The turn's model call: the next recorded one with its token counts
                    // (compactions record calls of their own in between).
                    let cost = loop {
                        match costs.next() {
                            Some((input, output, cost))
                                if input == usage.input_tokens && output == usage.output_tokens =>
                            {
                                break cost;
                            }
                            Some(_) => continue,
                            None => break None,
                        }
                    };
                    items.push(TimelineItem::ModelTurn {
                        at: row.created_at.clone(),
                        model: model.clone(),
                        text: text.clone(),
                        tool_calls: tool_calls.iter().map(|c| c.name.clone()).collect(),
                        input_tokens: usage.input_tokens,
                        cached_input_tokens: usage.cached_input_tokens,
                        output_tokens: usage.output_tokens,
                        cost,
                    });
                }
                HistoryEntry::Signals { delivery, signal_ids } => arrived.push(TimelineItem::Signals {
                    at: row.created_at.clone(),
                    delivery: delivery.clone(),
                    signals: signals(signal_ids)?,
                }),
                HistoryEntry::ToolResult { name, content, is_error, .. } => {
                    if *is_error && refused_unrecorded(content) {
                        items.push(TimelineItem::ToolCall {
                            id: None,
                            tool: name.clone(),
                            status: "rejected".into(),
                            input: None,
                            output: None,
                            error: Some(first_line(content, 500)),
                            error_kind: Some("rejected".into()),
                            started_at: None,
                            finished_at: None,
                            duration_ms: None,
                        });
                    } else if let Some(call) = calls.next() {
                        items.push(call_item(call));
                    }
                    items.append(&mut arrived);
                }
                HistoryEntry::HistoryCompaction { reason, archived_messages, kept_messages, .. } => {
                    items.push(TimelineItem::Compaction {
                        at: row.created_at.clone(),
                        reason: reason.clone(),
                        archived_messages: *archived_messages,
                        kept_messages: *kept_messages,
                    })
                }
                HistoryEntry::ActivationPrompt { .. } | HistoryEntry::Unrecognized { .. } => {}
            }
        }
        // A call still running, or calls made without the model loop (`suzumio tool call`).
        items.extend(calls.map(call_item));
        items.append(&mut arrived);
        Ok(Some(Timeline {
            prompt: PromptSummary {
                summary: first_line(&activation.prompt, 200),
                chars: activation.prompt.chars().count() as u64,
                signals: signals(&activation.signal_ids)?,
            },
            activation: summary,
            items,
        }))
    }

    /// Every tool call of an activation, inputs and outputs included, in the order they started.
    fn activation_tool_call_records(&self, activation_id: &str) -> Result<Vec<ToolCallRecord>, StoreError> {
        let ids: Vec<String> = self.read(|conn| {
            let mut stmt = conn.prepare_cached("SELECT id FROM tool_calls WHERE activation_id = ?1 ORDER BY rowid")?;
            let rows = stmt.query_map([activation_id], |r| r.get::<_, String>(0))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })?;
        Ok(ids.iter().map(|id| self.tool_call(id)).collect::<Result<Vec<_>, _>>()?.into_iter().flatten().collect())
    }

    /// `(input tokens, output tokens, cost)` of an activation's model calls, in order; the
    /// cost is absent when the model had no prices.
    fn activation_model_call_costs(&self, activation_id: &str) -> Result<Vec<(u64, u64, Option<f64>)>, StoreError> {
        let priced = self
            .activation(activation_id)?
            .and_then(|a: ActivationRecord| a.usage)
            .is_some_and(|u| u.get("cost").is_some());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT input_tokens, output_tokens, cost FROM model_calls WHERE activation_id = ?1 ORDER BY rowid",
            )?;
            let rows = stmt.query_map([activation_id], |r| {
                Ok((r.get::<_, i64>(0)?.max(0) as u64, r.get::<_, i64>(1)?.max(0) as u64, r.get::<_, f64>(2)?))
            })?;
            let rows = rows.collect::<Result<Vec<_>, _>>()?;
            Ok(rows.into_iter().map(|(i, o, c)| (i, o, priced.then_some(c))).collect())
        })
    }
}

fn call_item(call: ToolCallRecord) -> TimelineItem {
    TimelineItem::ToolCall {
        duration_ms: duration_ms(Some(&call.started_at), call.finished_at.as_deref()),
        id: Some(call.id),
        tool: call.tool,
        status: call.status.as_str().to_string(),
        input: Some(call.input),
        output: call.output,
        error: call.error,
        error_kind: call.error_kind,
        started_at: Some(call.started_at),
        finished_at: call.finished_at,
    }
}
