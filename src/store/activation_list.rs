//! Activations read back from the store as lists: each one's counts and usage
//! ([`ActivationSummary`]), filtered by agent and status, and the lookup of an activation by a
//! unique prefix of its id. `suzumio activations` and `show` render these; one activation's
//! steps are [`Store::activation_timeline`] (`timeline.rs`). Reads only.

use rusqlite::{OptionalExtension, params};
use serde::Serialize;

use chrono::{DateTime, Utc};

use crate::clock::millis_from;
use crate::store::{ActivationStatus, Store, StoreError, TokenUsage, clamp_limit};

/// One activation in a list: what it did, in numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivationSummary {
    pub id: String,
    pub agent_id: String,
    pub status: ActivationStatus,
    #[serde(with = "crate::clock::iso_serde")]
    pub started_at: DateTime<Utc>,
    #[serde(with = "crate::clock::iso_serde::option")]
    pub ended_at: Option<DateTime<Utc>>,
    /// From start to end (to now while it runs: absent then).
    pub duration_ms: Option<u64>,
    /// The signals it was started with.
    pub signal_ids: Vec<String>,
    /// Every call its model made: the ones recorded, and the ones refused before that.
    pub tool_calls: u64,
    /// Calls that ran (or were decided) and failed; rejected ones are not among them.
    pub failed_tool_calls: u64,
    /// Calls refused: an unknown tool, one the agent may not use or not loaded yet, an input
    /// against the schema, the communication policy.
    pub rejected_tool_calls: u64,
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
    (SELECT COUNT(*) FROM tool_calls t WHERE t.activation_id = a.id) + a.rejected_tool_calls,
    (SELECT COUNT(*) FROM tool_calls t WHERE t.activation_id = a.id AND t.status = 'failed'
        AND COALESCE(t.error_kind, '') <> 'rejected'),
    (SELECT COUNT(*) FROM model_calls m WHERE m.activation_id = a.id),
    (SELECT COALESCE(SUM(input_tokens), 0) FROM model_calls m WHERE m.activation_id = a.id),
    (SELECT COALESCE(SUM(cached_input_tokens), 0) FROM model_calls m WHERE m.activation_id = a.id),
    (SELECT COALESCE(SUM(output_tokens), 0) FROM model_calls m WHERE m.activation_id = a.id),
    (SELECT COALESCE(SUM(cost), 0.0) FROM model_calls m WHERE m.activation_id = a.id),
    (SELECT COUNT(*) FROM tool_calls t WHERE t.activation_id = a.id AND t.status = 'failed'
        AND t.error_kind = 'rejected') + a.rejected_tool_calls";

fn summary_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ActivationSummary> {
    let started_at = crate::store::time_column(r, 3)?;
    let ended_at = crate::store::opt_time_column(r, 4)?;
    let signal_ids = crate::store::json_column(r, 5)?;
    let count = |i: usize| r.get::<_, i64>(i).map(|n| n.max(0) as u64);
    Ok(ActivationSummary {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        status: r.get(2)?,
        duration_ms: ended_at.and_then(|end| millis_from(started_at, end)),
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
        rejected_tool_calls: count(15)?,
        usage: TokenUsage {
            model_calls: count(10)?,
            input_tokens: count(11)?,
            cached_input_tokens: count(12)?,
            output_tokens: count(13)?,
            cost: r.get(14)?,
        },
    })
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
        let matches = self.read(|conn| Ok(super::ids_starting(conn, super::Shortened::Activations, id_or_prefix)?))?;
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
}
