//! Per-agent history: the append-only, model-visible record of an agent's work (activation
//! prompts, assistant output, tool calls and results, tool-boundary signals). Replayed into every
//! activation so continuity lives in the controller, not in a container.

use rusqlite::params;
use serde::Serialize;
use serde_json::Value;

use crate::store::{Event, Store, StoreError, json_column, new_id};

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRecord {
    pub id: String,
    pub agent_id: String,
    pub activation_id: Option<String>,
    /// `activation_prompt`, `assistant_output`, `tool_call`, `tool_result`, `signals`, ...
    pub kind: String,
    pub content: Value,
    pub created_at: String,
}

impl Store {
    pub fn append_history(
        &self,
        agent_id: &str,
        activation_id: Option<&str>,
        kind: &str,
        content: &Value,
    ) -> Result<String, StoreError> {
        self.write(|w| {
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
            Ok(id)
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

fn history_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<HistoryRecord> {
    Ok(HistoryRecord {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        activation_id: r.get(2)?,
        kind: r.get(3)?,
        content: json_column(r, 4)?,
        created_at: r.get(5)?,
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
