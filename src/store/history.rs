//! Per-agent history: the append-only, model-visible record of an agent's work (activation
//! prompts, assistant output, tool calls and results, tool-boundary signals). Replayed into every
//! activation so continuity lives in the controller, not in a container. Entries carry what a
//! native replay needs (call ids with calls and results); rows written before they did have no
//! ids, and replay falls back to their text form.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, params};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::store::{Durability, Event, Store, StoreError, json_column, new_id};

/// An image of a tool result: its type and base64 data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolImage {
    pub mime_type: String,
    pub data: String,
}

/// One entry of an agent's history, as replay reads it. Stored (and shown by the API) as a
/// `kind` and a `content` object with camelCase keys.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "content", rename_all = "snake_case", rename_all_fields = "camelCase")]
pub enum HistoryEntry {
    /// The prompt an activation started with, and the signals it delivered.
    ActivationPrompt { text: String, delivery: String, signal_ids: Vec<String>, priorities: Vec<String> },
    /// What the model said, and the tools it called, in one step.
    AssistantOutput { text: String, tool_calls: Vec<RecordedCall>, model: String, usage: RecordedUsage },
    /// What a tool call gave back to the model (signals that arrived at its boundary included).
    ToolResult {
        name: String,
        content: String,
        is_error: bool,
        /// The provider's id of the call this answers (absent in rows of older builds).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// The images of a rich result, as they were sent, so replay sends them the same way.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<ToolImage>,
    },
    /// Signals handed over at a tool boundary.
    Signals { delivery: String, signal_ids: Vec<String> },
    /// A summary that replaces everything before it on replay, except the kept tail: the rows
    /// from `tail_from` on, replayed after the summary (and after `kept_prompt`, the signals of
    /// the activation that compacted, when they were older than the tail).
    HistoryCompaction {
        summary: String,
        archived_messages: u64,
        kept_messages: u64,
        reason: String,
        model: String,
        fallback: Option<String>,
        /// The id of the first history row of the kept tail.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tail_from: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kept_prompt: Option<String>,
    },
    /// A kind this build does not know (written by a newer build); replay skips it.
    #[serde(skip)]
    Unrecognized { kind: String, content: Value },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedCall {
    /// The provider's id of the call (absent in rows of older builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub name: String,
    pub arguments: Value,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The part of `input_tokens` the provider read from its prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
}

impl HistoryEntry {
    /// The stored kind and content.
    pub fn to_parts(&self) -> (String, Value) {
        if let HistoryEntry::Unrecognized { kind, content } = self {
            return (kind.clone(), content.clone());
        }
        match serde_json::to_value(self) {
            Ok(Value::Object(mut map)) => {
                let kind = map.remove("kind").and_then(|k| k.as_str().map(str::to_string)).unwrap_or_default();
                (kind, map.remove("content").unwrap_or(Value::Null))
            }
            _ => (String::new(), Value::Null),
        }
    }

    pub fn from_parts(kind: &str, content: Value) -> HistoryEntry {
        serde_json::from_value(json!({ "kind": kind, "content": content.clone() }))
            .unwrap_or_else(|_| HistoryEntry::Unrecognized { kind: kind.to_string(), content })
    }

    pub fn is_compaction(&self) -> bool {
        matches!(self, HistoryEntry::HistoryCompaction { .. })
    }
}

/// One stored history row. Serialized as `{id, agentId, activationId, kind, content, createdAt}`.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryRecord {
    pub id: String,
    pub agent_id: String,
    pub activation_id: Option<String>,
    pub entry: HistoryEntry,
    pub created_at: DateTime<Utc>,
}

impl HistoryRecord {
    /// The stored kind, as the API shows it.
    pub fn kind(&self) -> String {
        self.entry.to_parts().0
    }

    /// The stored content, as the API shows it.
    pub fn content(&self) -> Value {
        self.entry.to_parts().1
    }
}

impl Serialize for HistoryRecord {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let (kind, content) = self.entry.to_parts();
        let mut s = serializer.serialize_struct("HistoryRecord", 6)?;
        s.serialize_field("id", &self.id)?;
        s.serialize_field("agentId", &self.agent_id)?;
        s.serialize_field("activationId", &self.activation_id)?;
        s.serialize_field("kind", &kind)?;
        s.serialize_field("content", &content)?;
        s.serialize_field("createdAt", &crate::clock::iso(self.created_at))?;
        s.end()
    }
}

/// What an `activation.turn` event carries of the model's text: its first non-blank line, at
/// most [`TURN_TEXT_CAP`] characters (events stay small; the history has it all).
fn turn_line(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    if line.chars().count() <= TURN_TEXT_CAP {
        return line.to_string();
    }
    let cut: String = line.chars().take(TURN_TEXT_CAP - 1).collect();
    format!("{}…", cut.trim_end())
}

pub const TURN_TEXT_CAP: usize = 200;

// What replay reads at every activation's start (`query_plans` holds each to a plan that does
// not grow with the history): the agent's last compaction, the first row of its kept tail, and
// the rows from there, each found through the agent.
pub(super) const LAST_COMPACTION: &str =
    "SELECT rowid, content_json FROM history WHERE agent_id = ?1 AND kind = 'history_compaction'
                     ORDER BY rowid DESC LIMIT 1";
pub(super) const HISTORY_ROW_OF: &str = "SELECT rowid FROM history WHERE id = ?1 AND agent_id = ?2";
pub(super) const REPLAYED_HISTORY: &str =
    "SELECT id, agent_id, activation_id, kind, content_json, created_at, rowid FROM history
                 WHERE agent_id = ?1 AND rowid >= ?2 ORDER BY rowid";

/// An agent's replayed history as last read: the rows from `from` on, the last at `last`.
/// History is append-only and a reader sees only committed rows, so the rows of the next
/// replay are these plus the ones after `last` — unless a compaction moved `from`.
/// Shared with the activation that replays them: the next replay appends in place once that
/// activation has let go of them (as it has when the agent's next one starts), copying nothing.
pub(super) struct ReplayCache {
    from: i64,
    last: i64,
    records: std::sync::Arc<Vec<HistoryRecord>>,
}

impl Store {
    pub fn append_history(
        &self,
        agent_id: &str,
        activation_id: Option<&str>,
        entry: &HistoryEntry,
    ) -> Result<String, StoreError> {
        self.append_history_with(Durability::Now, agent_id, activation_id, entry)
    }

    /// [`Store::append_history`] for a new activation's prompt row, committed without waiting
    /// for the disk (it reaches it with the activation's next durable write): if a power failure
    /// takes it back, the restart finds the activation interrupted and delivers its signals
    /// again, with a prompt of their own.
    pub fn append_activation_prompt(
        &self,
        agent_id: &str,
        activation_id: &str,
        entry: &HistoryEntry,
    ) -> Result<String, StoreError> {
        self.append_history_with(Durability::WithNextCommit, agent_id, Some(activation_id), entry)
    }

    fn append_history_with(
        &self,
        durability: Durability,
        agent_id: &str,
        activation_id: Option<&str>,
        entry: &HistoryEntry,
    ) -> Result<String, StoreError> {
        let (kind, content) = entry.to_parts();
        let kind = kind.as_str();
        self.write_with(durability, |w| {
            let id = new_id("his");
            w.tx.execute(
                "INSERT INTO history (id, agent_id, activation_id, kind, content_json, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![id, agent_id, activation_id, kind, content.to_string(), w.now],
            )?;
            w.event(Event::HistoryAppended {
                agent_id: agent_id.to_string(),
                activation_id: activation_id.map(str::to_string),
                kind: kind.to_string(),
                id: id.clone(),
            })?;
            if let (HistoryEntry::AssistantOutput { text, tool_calls, model, .. }, Some(activation)) =
                (entry, activation_id)
            {
                w.event(Event::ActivationTurn {
                    activation_id: activation.to_string(),
                    agent_id: agent_id.to_string(),
                    model: model.clone(),
                    text: turn_line(text),
                    tool_calls: tool_calls.iter().map(|c| c.name.clone()).collect(),
                })?;
            }
            Ok(id)
        })
    }

    /// What replay reads of an agent's history, oldest first: every row from the last
    /// compaction on, and from the first row of its kept tail; every row when there is none.
    /// Kept in memory per agent between replays (what a warm agent's context costs anyway),
    /// so each replay reads only the rows added since the previous one.
    pub fn replay_history(&self, agent_id: &str) -> Result<std::sync::Arc<Vec<HistoryRecord>>, StoreError> {
        self.read(|conn| {
            let last: Option<(i64, String)> = conn
                .prepare_cached(LAST_COMPACTION)?
                .query_row([agent_id], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let from = match last {
                None => 0,
                Some((rowid, content)) => {
                    // A compaction row that does not parse keeps no tail: replay starts at it.
                    let entry = serde_json::from_str::<Value>(&content)
                        .ok()
                        .map(|c| HistoryEntry::from_parts("history_compaction", c));
                    let tail: Option<i64> = match entry {
                        Some(HistoryEntry::HistoryCompaction { tail_from: Some(id), .. }) => conn
                            .prepare_cached(HISTORY_ROW_OF)?
                            .query_row(params![id, agent_id], |r| r.get(0))
                            .optional()?,
                        _ => None,
                    };
                    tail.map_or(rowid, |t| t.min(rowid))
                }
            };
            // Only the rows written since the last replay are read and parsed: an activation's
            // cost does not grow with the length of the conversation it continues.
            let mut replays = self.inner.replays.lock().unwrap_or_else(|e| e.into_inner());
            let cached = replays.remove(agent_id).filter(|c| c.from == from);
            let (start, mut cache) = match cached {
                Some(c) => (c.last + 1, c),
                None => (from, ReplayCache { from, last: from - 1, records: Default::default() }),
            };
            let mut stmt = conn.prepare_cached(REPLAYED_HISTORY)?;
            let rows = stmt.query_map(params![agent_id, start], |r| Ok((history_from_row(r)?, r.get::<_, i64>(6)?)))?;
            for row in rows {
                let (record, rowid) = row?;
                std::sync::Arc::make_mut(&mut cache.records).push(record);
                cache.last = rowid;
            }
            let records = cache.records.clone();
            replays.insert(agent_id.to_string(), cache);
            Ok(records)
        })
    }

    /// The agent's newest `n` history rows (capped at 100), oldest first: what a reviewer sees
    /// of its last turns. Read newest first through the agent's index, so its cost is `n`'s.
    pub fn last_history(&self, agent_id: &str, n: usize) -> Result<Vec<HistoryRecord>, StoreError> {
        let n = n.clamp(1, 100) as i64;
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(LAST_ROWS_OF_AGENT)?;
            let rows = stmt.query_map(params![agent_id, n], history_from_row)?;
            let mut rows = rows.collect::<Result<Vec<_>, _>>()?;
            rows.reverse();
            Ok(rows)
        })
    }

    /// An agent's history, oldest first: the newest `limit` rows (capped at 5000).
    pub fn history(&self, agent_id: &str, limit: usize) -> Result<Vec<HistoryRecord>, StoreError> {
        let limit = limit.clamp(1, 5000) as i64;
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, agent_id, activation_id, kind, content_json, created_at FROM
                   (SELECT rowid AS r, * FROM history WHERE agent_id = ?1 ORDER BY rowid DESC LIMIT ?2)
                 ORDER BY r",
            )?;
            let rows = stmt.query_map(params![agent_id, limit], history_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

impl Store {
    /// A page of an agent's history: the `limit` rows before `before` (an id), oldest first.
    pub fn history_page(
        &self,
        agent_id: &str,
        before: Option<&str>,
        limit: usize,
    ) -> Result<Vec<HistoryRecord>, StoreError> {
        let limit = limit.clamp(1, 500) as i64;
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, agent_id, activation_id, kind, content_json, created_at FROM
                   (SELECT rowid AS r, * FROM history WHERE agent_id = ?1 AND (?2 IS NULL OR id < ?2)
                    ORDER BY rowid DESC LIMIT ?3)
                 ORDER BY r",
            )?;
            let rows = stmt.query_map(params![agent_id, before, limit], history_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

/// An agent's newest history rows, newest first ([`Store::last_history`]).
pub(super) const LAST_ROWS_OF_AGENT: &str = "SELECT id, agent_id, activation_id, kind, content_json, created_at
     FROM history WHERE agent_id = ?1 ORDER BY rowid DESC LIMIT ?2";

fn history_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<HistoryRecord> {
    Ok(HistoryRecord {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        activation_id: r.get(2)?,
        entry: HistoryEntry::from_parts(&r.get::<_, String>(3)?, json_column(r, 4)?),
        created_at: crate::store::time_column(r, 5)?,
    })
}

impl Store {
    /// The history rows recorded during one activation, oldest first.
    pub fn activation_history(&self, activation_id: &str) -> Result<Vec<HistoryRecord>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, agent_id, activation_id, kind, content_json, created_at FROM history
                 WHERE activation_id = ?1 ORDER BY rowid",
            )?;
            let rows = stmt.query_map([activation_id], history_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}
