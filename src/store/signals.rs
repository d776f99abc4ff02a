//! Signals: `recordSignal` exactly as reference §3.6 (targets, fan-out, status, priority,
//! useful-effect defaults of §1.4), the selection rule of §1.3 (`pendingSignals`), and the
//! signal queries the WebUI and scheduler read.
//!
//! This module decides what a signal *is*; when it is delivered is the scheduler's decision.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::{Map, Value};

use chrono::{DateTime, Utc};

use crate::clock::iso;
use crate::config::Priority;
use crate::store::model::priority_column;
use crate::store::{
    Event, SignalCounts, SignalQuery, SignalRecord, SignalRequest, SignalStatus, Store, StoreError, WriteTx,
    clamp_limit, given, json_column, new_id, parse_priority,
};
use crate::store::{opt_time_column, time_column};

/// The scheduler's own nudges never count as useful work (§1.4 rule 1).
const NEVER_USEFUL: &[&str] = &["scheduler.no_effect_nudge", "scheduler.failed_nudge"];
/// Closed signals that are useful effects without opting in (§1.4 rule 3).
const USEFUL_WHEN_CLOSED: &[&str] = &["message.created", "completion.submitted", "coordination.wait_for_signal"];

/// Where one signal row goes and in what state.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PlannedSignal {
    pub target_agent: Option<String>,
    pub target_channel: Option<String>,
    pub status: SignalStatus,
    pub useful_effect: bool,
}

/// Expand targets into rows (reference §3.6): an agent target is one pending row; a channel fans
/// out to one pending row per roster agent except `exclude`, or one closed row with the channel
/// when nobody remains; no target is one closed row. Inputs are already validated, and an
/// explicit status cannot change the outcome: `pending` is only kept when targeted and `closed`
/// is only accepted when untargeted.
pub(crate) fn plan_signals(
    roster: &[String],
    target_agent: Option<&str>,
    target_channel: Option<&str>,
    exclude: Option<&str>,
    kind: &str,
    useful_effect: Option<bool>,
) -> Vec<PlannedSignal> {
    let row = |agent: Option<&str>, status: SignalStatus| PlannedSignal {
        target_agent: agent.map(str::to_string),
        target_channel: target_channel.map(str::to_string),
        status,
        useful_effect: useful_effect.unwrap_or_else(|| default_useful_effect(kind, status)),
    };
    if let Some(agent) = target_agent {
        return vec![row(Some(agent), SignalStatus::Pending)];
    }
    if target_channel.is_some() {
        let members: Vec<PlannedSignal> = roster
            .iter()
            .filter(|a| Some(a.as_str()) != exclude)
            .map(|a| row(Some(a), SignalStatus::Pending))
            .collect();
        if !members.is_empty() {
            return members;
        }
    }
    vec![row(None, SignalStatus::Closed)]
}

/// §1.4: nudges never; pending always; closed only for the three effect kinds.
pub fn default_useful_effect(kind: &str, status: SignalStatus) -> bool {
    if NEVER_USEFUL.contains(&kind) {
        return false;
    }
    match status {
        SignalStatus::Pending => true,
        SignalStatus::Closed | SignalStatus::Delivered => USEFUL_WHEN_CLOSED.contains(&kind),
    }
}

/// A payload is always an object: `null` → `{}`, any other non-object → `{"value": x}`.
fn payload_object(payload: Value) -> Value {
    match payload {
        Value::Object(_) => payload,
        Value::Null => Value::Object(Map::new()),
        other => {
            let mut map = Map::new();
            map.insert("value".into(), other);
            Value::Object(map)
        }
    }
}

impl Store {
    /// `store.recordSignal` (reference §3.6). Returns the rows written (several for a channel).
    pub fn record_signal(&self, request: SignalRequest) -> Result<Vec<SignalRecord>, StoreError> {
        if request.kind.trim().is_empty() {
            return Err(StoreError::KindRequired);
        }
        let priority = match given(&request.priority) {
            Some(p) => parse_priority(p)?,
            None => Priority::P2,
        };
        let explicit_status = match given(&request.status) {
            Some(s) => Some(s.parse::<SignalStatus>()?),
            None => None,
        };
        if explicit_status == Some(SignalStatus::Delivered) {
            // Only an activation start delivers; a caller cannot record a delivered signal.
            return Err(StoreError::InvalidStatus { what: "signal", value: SignalStatus::Delivered.to_string() });
        }
        // `user` is a person, not a schedulable target.
        let target_agent = given(&request.target_agent).filter(|a| *a != super::messages::USER);
        let target_channel = given(&request.target_channel);
        if target_agent.is_some() && target_channel.is_some() {
            return Err(StoreError::SignalBothTargets);
        }
        if let Some(agent) = target_agent
            && !self.is_roster_agent(agent)
        {
            return Err(StoreError::UnknownAgent(agent.to_string()));
        }
        if let Some(channel) = target_channel
            && !self.inner.channels.iter().any(|c| c == channel)
        {
            return Err(StoreError::UnknownChannel(channel.to_string()));
        }
        let targeted = target_agent.is_some() || target_channel.is_some();
        if targeted && explicit_status == Some(SignalStatus::Closed) {
            return Err(StoreError::TargetedSignalClosed);
        }

        let source_agent = given(&request.source_agent);
        let plans = plan_signals(
            &self.inner.roster,
            target_agent,
            target_channel,
            source_agent,
            &request.kind,
            request.useful_effect,
        );
        let payload = payload_object(request.payload);
        // Milliseconds, as the row keeps it.
        let not_before = request.not_before.map(|t| chrono::SubsecRound::trunc_subsecs(t, 3));
        self.write(|w| {
            plans
                .iter()
                .map(|plan| {
                    w.insert_signal(
                        plan,
                        &request.kind,
                        source_agent,
                        given(&request.source_activation),
                        priority,
                        &payload,
                        not_before,
                    )
                })
                .collect()
        })
    }

    pub fn signal(&self, id: &str) -> Result<Option<SignalRecord>, StoreError> {
        self.read(|conn| {
            Ok(conn
                .query_row(&format!("SELECT {SIGNAL_COLUMNS} FROM signals WHERE id = ?1"), [id], signal_from_row)
                .optional()?)
        })
    }

    /// Signals, newest first, optionally for one target agent and/or one status.
    pub fn list_signals(&self, query: &SignalQuery) -> Result<Vec<SignalRecord>, StoreError> {
        let target = given(&query.target_agent);
        let kind = given(&query.kind);
        let status = query.status.map(SignalStatus::as_str);
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {SIGNAL_COLUMNS} FROM signals
                 WHERE (?1 IS NULL OR target_agent = ?1) AND (?2 IS NULL OR status = ?2) AND (?4 IS NULL OR kind = ?4)
                   AND (?5 IS NULL OR rowid < (SELECT rowid FROM signals WHERE id = ?5))
                 ORDER BY rowid DESC LIMIT ?3"
            ))?;
            let before = given(&query.before_id);
            let rows =
                stmt.query_map(params![target, status, clamp_limit(query.limit), kind, before], signal_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Counts of all signals by status and by priority (every key present, zeros included).
    pub fn signal_counts(&self) -> Result<SignalCounts, StoreError> {
        let mut counts = SignalCounts::default();
        for status in SignalStatus::ALL {
            counts.by_status.insert(status.to_string(), 0);
        }
        for priority in Priority::ALL {
            counts.by_priority.insert(priority.to_string(), 0);
        }
        self.read(|conn| {
            let mut stmt = conn.prepare_cached("SELECT status, priority, COUNT(*) FROM signals GROUP BY 1, 2")?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let status: String = row.get(0)?;
                let priority: String = row.get(1)?;
                let n = row.get::<_, i64>(2)? as u64;
                counts.total += n;
                *counts.by_status.entry(status).or_default() += n;
                *counts.by_priority.entry(priority).or_default() += n;
            }
            Ok(counts)
        })
    }

    /// The signals the next activation of `agent_id` carries (reference §1.3, exact):
    /// only pending signals whose `not_before` has passed; if any P0/P1 is ready, up to `limit`
    /// of them by priority then age; otherwise exactly one P2/P3 — P2 first, oldest first.
    /// A `limit` of 0 is treated as 1, so urgent work is never starved by a misconfiguration.
    pub fn pending_signals(&self, agent_id: &str, limit: usize) -> Result<Vec<SignalRecord>, StoreError> {
        let now = iso(self.now());
        let limit = limit.max(1) as i64;
        self.read(|conn| {
            let urgent = ready_signals(conn, agent_id, &now, &["P0", "P1"], limit)?;
            if !urgent.is_empty() {
                return Ok(urgent);
            }
            Ok(ready_signals(conn, agent_id, &now, &["P2", "P3"], 1)?)
        })
    }

    /// Whether any pending signal exists in the project; `include_not_ready` also counts signals
    /// whose `not_before` is still in the future.
    pub fn has_pending_signals(&self, include_not_ready: bool) -> Result<bool, StoreError> {
        self.any_pending(None, include_not_ready)
    }

    /// [`Store::has_pending_signals`] for one target agent.
    pub fn has_pending_signals_for_agent(&self, agent_id: &str, include_not_ready: bool) -> Result<bool, StoreError> {
        self.any_pending(Some(agent_id), include_not_ready)
    }

    fn any_pending(&self, agent_id: Option<&str>, include_not_ready: bool) -> Result<bool, StoreError> {
        let now = iso(self.now());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(ANY_PENDING)?;
            Ok(stmt.query_row(params![agent_id, include_not_ready, now], |r| r.get(0))?)
        })
    }

    /// How many useful effects an activation produced: signals it sourced with `useful_effect`
    /// set (reference §1.4; the no-effect nudge fires when this is 0).
    pub fn count_activation_useful_effects(&self, activation_id: &str) -> Result<u64, StoreError> {
        self.read(|conn| {
            let n: i64 = conn.prepare_cached(ACTIVATION_USEFUL_EFFECTS)?.query_row([activation_id], |r| r.get(0))?;
            Ok(n as u64)
        })
    }
}

fn ready_signals(
    conn: &Connection,
    agent_id: &str,
    now: &str,
    priorities: &[&str; 2],
    limit: i64,
) -> rusqlite::Result<Vec<SignalRecord>> {
    // Priority text sorts P0 < P1 < P2 < P3; rowid breaks ties between equal timestamps in the
    // order the signals were recorded.
    let mut stmt = conn.prepare_cached(&ready_signals_sql())?;
    let rows = stmt.query_map(params![agent_id, priorities[0], priorities[1], now, limit], signal_from_row)?;
    rows.collect()
}

impl WriteTx<'_> {
    /// Insert one signal row and its `signal.created` event.
    #[allow(clippy::too_many_arguments)] // one call site per writer; a struct would only rename them
    pub(crate) fn insert_signal(
        &mut self,
        plan: &PlannedSignal,
        kind: &str,
        source_agent: Option<&str>,
        source_activation: Option<&str>,
        priority: Priority,
        payload: &Value,
        not_before: Option<DateTime<Utc>>,
    ) -> Result<SignalRecord, StoreError> {
        let record = SignalRecord {
            id: new_id("sig"),
            kind: kind.to_string(),
            source_agent: source_agent.map(str::to_string),
            source_activation: source_activation.map(str::to_string),
            target_agent: plan.target_agent.clone(),
            target_channel: plan.target_channel.clone(),
            priority,
            payload: payload.clone(),
            status: plan.status,
            useful_effect: plan.useful_effect,
            deliveries: 0,
            created_at: self.at,
            not_before,
            delivered_at: None,
            delivered_activation_id: None,
        };
        self.tx.execute(
            "INSERT INTO signals (id, kind, source_agent, source_activation, target_agent, target_channel, priority,
                                  payload_json, status, useful_effect, created_at, not_before)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                record.id,
                record.kind,
                record.source_agent,
                record.source_activation,
                record.target_agent,
                record.target_channel,
                record.priority.as_str(),
                record.payload.to_string(),
                record.status,
                record.useful_effect,
                self.now,
                record.not_before.map(iso),
            ],
        )?;
        self.event(Event::SignalCreated {
            signal_id: record.id.clone(),
            kind: record.kind.clone(),
            target_agent: record.target_agent.clone(),
            target_channel: record.target_channel.clone(),
            priority: record.priority.as_str().into(),
            status: record.status.as_str().into(),
            not_before: record.not_before.map(iso),
        })?;
        Ok(record)
    }
}

// What an activation's start (the signals it takes), its end (nudges: did it do anything
// useful) and the scheduler's idle checks read (`query_plans`).
pub(super) fn ready_signals_sql() -> String {
    format!(
        "SELECT {SIGNAL_COLUMNS} FROM signals
         WHERE target_agent = ?1 AND status = 'pending' AND priority IN (?2, ?3)
           AND (not_before IS NULL OR not_before <= ?4)
         ORDER BY priority, created_at, rowid LIMIT ?5"
    )
}
pub(super) const ANY_PENDING: &str = "SELECT EXISTS (SELECT 1 FROM signals
                 WHERE status = 'pending' AND (?1 IS NULL OR target_agent = ?1)
                   AND (?2 OR not_before IS NULL OR not_before <= ?3))";
pub(super) const ACTIVATION_USEFUL_EFFECTS: &str =
    "SELECT COUNT(*) FROM signals WHERE source_activation = ?1 AND useful_effect != 0";

pub(crate) const SIGNAL_COLUMNS: &str = "id, kind, source_agent, source_activation, target_agent, target_channel, \
     priority, payload_json, status, useful_effect, created_at, not_before, delivered_at, delivered_activation_id, \
     deliveries";

pub(crate) fn signal_from_row(r: &Row<'_>) -> rusqlite::Result<SignalRecord> {
    Ok(SignalRecord {
        id: r.get(0)?,
        kind: r.get(1)?,
        source_agent: r.get(2)?,
        source_activation: r.get(3)?,
        target_agent: r.get(4)?,
        target_channel: r.get(5)?,
        priority: priority_column(r, 6)?,
        payload: json_column(r, 7)?,
        status: r.get(8)?,
        useful_effect: r.get(9)?,
        created_at: time_column(r, 10)?,
        not_before: opt_time_column(r, 11)?,
        delivered_at: opt_time_column(r, 12)?,
        delivered_activation_id: r.get(13)?,
        deliveries: r.get::<_, i64>(14)?.max(0) as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roster() -> Vec<String> {
        ["pm", "worker-1", "worker-2"].map(String::from).to_vec()
    }

    fn targets(plans: &[PlannedSignal]) -> Vec<(Option<&str>, SignalStatus)> {
        plans.iter().map(|p| (p.target_agent.as_deref(), p.status)).collect()
    }

    #[test]
    fn channel_fans_out_except_excluded() {
        let plans = plan_signals(&roster(), None, Some("#project"), Some("pm"), "custom", None);
        assert_eq!(
            targets(&plans),
            [(Some("worker-1"), SignalStatus::Pending), (Some("worker-2"), SignalStatus::Pending)]
        );
        assert!(plans.iter().all(|p| p.target_channel.as_deref() == Some("#project") && p.useful_effect));
    }

    #[test]
    fn channel_with_nobody_left_is_one_closed_row() {
        let roster = vec!["pm".to_string()];
        let plans = plan_signals(&roster, None, Some("#project"), Some("pm"), "custom", None);
        assert_eq!(targets(&plans), [(None, SignalStatus::Closed)]);
        assert_eq!(plans[0].target_channel.as_deref(), Some("#project"));
        assert!(!plans[0].useful_effect);
    }

    #[test]
    fn useful_effect_defaults_follow_reference_order() {
        let cases = [
            ("scheduler.no_effect_nudge", SignalStatus::Pending, false),
            ("scheduler.failed_nudge", SignalStatus::Pending, false),
            ("scheduler.failed_nudge", SignalStatus::Closed, false),
            ("custom.kind", SignalStatus::Pending, true),
            ("message.created", SignalStatus::Closed, true),
            ("completion.submitted", SignalStatus::Closed, true),
            ("coordination.wait_for_signal", SignalStatus::Closed, true),
            ("custom.kind", SignalStatus::Closed, false),
        ];
        for (kind, status, expected) in cases {
            assert_eq!(default_useful_effect(kind, status), expected, "{kind} {status}");
        }
    }

    #[test]
    fn payload_is_always_an_object() {
        let cases = [
            (serde_json::json!({"a": 1}), serde_json::json!({"a": 1})),
            (Value::Null, serde_json::json!({})),
            (serde_json::json!("text"), serde_json::json!({"value": "text"})),
            (serde_json::json!([1, 2]), serde_json::json!({"value": [1, 2]})),
            (serde_json::json!(3), serde_json::json!({"value": 3})),
        ];
        for (input, expected) in cases {
            assert_eq!(payload_object(input), expected);
        }
    }
}
