//! Queries and changes the scheduler needs beyond the basic records: tool-boundary delivery of
//! P1 signals, what an activation was given, the latest activation or signal of a kind, the
//! next time a delayed signal becomes ready, and event lookups for monitor dedupe.

use rusqlite::{OptionalExtension, params};

use crate::clock::iso;
use crate::store::signals::{SIGNAL_COLUMNS, signal_from_row};
use crate::store::{
    ActivationEnded, ActivationRecord, ActivationStatus, Event, EventRecord, SignalRecord, Store, StoreError, WriteTx,
    event_from_row,
};

/// The calls an ending activation leaves open, and closing one (each activation's end).
pub(super) const OPEN_TOOL_CALLS: &str =
    "SELECT id, tool FROM tool_calls WHERE activation_id = ?1 AND status = 'running'";
pub(super) const CLOSE_TOOL_CALL: &str =
    "UPDATE tool_calls SET status = 'failed', error = ?2, error_kind = ?4, finished_at = ?3 WHERE id = ?1";

/// The scheduler's statements, named for the query-plan test (`query_plans.rs`): each runs at
/// every tick, activation or tool boundary. Those that read whole signal rows take the column
/// list, so they are built once from it.
pub(super) const RUNNING_ACTIVATION_OF: &str =
    "SELECT a.id FROM activations a JOIN agents g ON g.active_activation_id = a.id
                     WHERE a.id = ?1 AND a.agent_id = ?2 AND a.status = 'running'";
pub(super) fn boundary_signals() -> String {
    format!(
        "SELECT {SIGNAL_COLUMNS} FROM signals
                 WHERE target_agent = ?1 AND status = 'pending' AND priority = 'P1'
                   AND (not_before IS NULL OR not_before <= ?2)
                 ORDER BY created_at, rowid LIMIT ?3"
    )
}
pub(super) const DELIVER_SIGNAL: &str =
    "UPDATE signals SET status = 'delivered', delivered_at = ?2, delivered_activation_id = ?3,
                            deliveries = deliveries + 1
                     WHERE id = ?1";
pub(super) fn signals_delivered_to() -> String {
    format!("SELECT {SIGNAL_COLUMNS} FROM signals WHERE delivered_activation_id = ?1 ORDER BY rowid")
}
/// Two statements, not `?2 IS NULL OR status = ?2`: the newest failed activation of an agent
/// that never failed would be looked for through all its activations.
pub(super) const LATEST_ACTIVATION: &str =
    "SELECT id FROM activations WHERE agent_id = ?1 ORDER BY started_at DESC, rowid DESC LIMIT 1";
pub(super) const LATEST_ACTIVATION_WITH_STATUS: &str = "SELECT id FROM activations WHERE agent_id = ?1 AND status = ?2
                     ORDER BY started_at DESC, rowid DESC LIMIT 1";
pub(super) fn latest_signal_of_kind() -> String {
    format!(
        "SELECT {SIGNAL_COLUMNS} FROM signals WHERE kind = ?1 AND (?2 IS NULL OR target_agent = ?2)
                         ORDER BY created_at DESC, rowid DESC LIMIT 1"
    )
}
pub(super) const NEXT_SIGNAL_READY: &str =
    "SELECT MIN(not_before) FROM signals WHERE status = 'pending' AND not_before > ?1";
pub(super) const EVENTS_OF_KIND: &str =
    "SELECT id, type, data_json, created_at FROM events WHERE type = ?1 ORDER BY id DESC LIMIT ?2";
/// An activation stopped on purpose (a pause, a shutdown) or orphaned: its agent if it runs,
/// its end, and its delivered signals back to pending.
pub(super) const RUNNING_AGENT_OF: &str = "SELECT agent_id FROM activations WHERE id = ?1 AND status = 'running'";
pub(super) const END_INTERRUPTED: &str = "UPDATE activations SET status = ?2, ended_at = ?3, error = ?4 WHERE id = ?1";
/// `+` keeps the planner off the indexes on `status` and `target_agent`, which would go
/// through every delivered signal of the project (it keeps no statistics to know better).
pub(super) const RETURN_DELIVERED: &str =
    "UPDATE signals SET status = 'pending', delivered_at = NULL, delivered_activation_id = NULL
             WHERE delivered_activation_id = ?1 AND +status = 'delivered' AND +target_agent IS NOT NULL";
pub(super) const AGENTS_WITH_READY_SIGNALS: &str = "SELECT target_agent, MIN(priority) FROM signals
                 WHERE status = 'pending' AND target_agent IS NOT NULL AND (not_before IS NULL OR not_before <= ?1)
                 GROUP BY target_agent";

impl Store {
    /// P1 signals ready for `agent_id`, handed to its running activation at a tool boundary
    /// (reference §1.3): marked `delivered` to `activation_id` in one transaction and returned,
    /// oldest first, at most `limit`. Nothing is delivered unless the activation is the agent's
    /// running one.
    pub fn deliver_at_tool_boundary(
        &self,
        agent_id: &str,
        activation_id: &str,
        limit: usize,
    ) -> Result<Vec<SignalRecord>, StoreError> {
        self.write(|w| {
            let running: Option<String> =
                w.tx.query_row(RUNNING_ACTIVATION_OF, params![activation_id, agent_id], |r| r.get(0)).optional()?;
            if running.is_none() {
                return Ok(Vec::new());
            }
            let mut stmt = w.tx.prepare_cached(&boundary_signals())?;
            let signals: Vec<SignalRecord> = stmt
                .query_map(params![agent_id, w.now, limit.max(1) as i64], signal_from_row)?
                .collect::<Result<_, _>>()?;
            drop(stmt);
            for s in &signals {
                w.tx.execute(DELIVER_SIGNAL, params![s.id, w.now, activation_id])?;
            }
            if !signals.is_empty() {
                let ids: Vec<&str> = signals.iter().map(|s| s.id.as_str()).collect();
                w.event(Event::SignalsDelivered {
                    agent_id: agent_id.to_string(),
                    activation_id: activation_id.to_string(),
                    signal_ids: ids.iter().map(|s| s.to_string()).collect(),
                    at: "tool_boundary".into(),
                })?;
            }
            Ok(signals
                .into_iter()
                .map(|mut s| {
                    s.status = crate::store::SignalStatus::Delivered;
                    s.delivered_at = Some(w.at);
                    s.delivered_activation_id = Some(activation_id.to_string());
                    s.deliveries += 1;
                    s
                })
                .collect())
        })
    }

    /// The signals delivered to one activation (at its start or at tool boundaries).
    pub fn signals_delivered_to(&self, activation_id: &str) -> Result<Vec<SignalRecord>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&signals_delivered_to())?;
            let rows = stmt.query_map([activation_id], signal_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The agent's most recent activation, optionally only one with `status`.
    pub fn latest_activation(
        &self,
        agent_id: &str,
        status: Option<ActivationStatus>,
    ) -> Result<Option<ActivationRecord>, StoreError> {
        let id: Option<String> = self.read(|conn| {
            Ok(conn
                .query_row(
                    if status.is_some() { LATEST_ACTIVATION_WITH_STATUS } else { LATEST_ACTIVATION },
                    rusqlite::params_from_iter(
                        [Some(agent_id), status.map(ActivationStatus::as_str)].into_iter().flatten(),
                    ),
                    |r| r.get(0),
                )
                .optional()?)
        })?;
        match id {
            Some(id) => self.activation(&id),
            None => Ok(None),
        }
    }

    /// The newest signal of a kind (optionally for one target).
    pub fn latest_signal_of_kind(
        &self,
        kind: &str,
        target_agent: Option<&str>,
    ) -> Result<Option<SignalRecord>, StoreError> {
        self.read(|conn| {
            Ok(conn.query_row(&latest_signal_of_kind(), params![kind, target_agent], signal_from_row).optional()?)
        })
    }

    /// When the earliest delayed pending signal becomes ready (its `not_before`), if any is
    /// still in the future: the scheduler sleeps until then.
    pub fn next_signal_ready_at(&self) -> Result<Option<String>, StoreError> {
        let now = iso(self.now());
        self.read(|conn| Ok(conn.query_row(NEXT_SIGNAL_READY, [now], |r| r.get(0))?))
    }

    /// Events of one type, newest first, at most `limit` (capped at 1000).
    pub fn events_of_kind(&self, kind: &str, limit: usize) -> Result<Vec<EventRecord>, StoreError> {
        let limit = limit.clamp(1, 1000) as i64;
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(EVENTS_OF_KIND)?;
            let rows = stmt.query_map(params![kind, limit], event_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Agents (of the current config) with at least one ready pending signal, and the priority
    /// of the most urgent one: one query instead of one per agent on every tick.
    pub fn agents_with_ready_signals(&self) -> Result<Vec<(String, String)>, StoreError> {
        let now = iso(self.now());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(AGENTS_WITH_READY_SIGNALS)?;
            let rows = stmt.query_map([now], |r| Ok((r.get(0)?, r.get(1)?)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

impl Store {
    /// After a crash: every activation still `running` was interrupted by a dead controller.
    /// Each is marked failed with `reason`, its delivered signals go back to pending (so they
    /// are delivered again: work is at least once), its tool calls still `running` are closed
    /// as failed with the same reason, its pending approval requests (announced with the turn
    /// it was in) are `expired` with the time of this restart, and its agent is quiet again.
    /// Pending requests of activations that already ended are expired too. Returns the ids of
    /// the interrupted activations.
    pub fn recover_interrupted(&self, reason: &str) -> Result<Vec<String>, StoreError> {
        self.write(|w| {
            let ids: Vec<(String, String)> = {
                let mut stmt = w.tx.prepare("SELECT id, agent_id FROM activations WHERE status = 'running'")?;
                let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
                rows.collect::<Result<_, _>>()?
            };
            for (id, agent) in &ids {
                w.expire_pending_approvals(id)?;
                w.expire_pending_questions(id)?;
                w.end_interrupted(id, agent, ActivationStatus::Failed, reason)?;
            }
            // A request whose activation already ended while it waited — a `tool call` framed
            // by the CLI, whose serving controller died under it and which then recorded its
            // end — has no call left to run either.
            let ended: Vec<String> = {
                let mut stmt = w.tx.prepare(
                    "SELECT DISTINCT r.activation_id FROM approval_requests r JOIN activations a ON a.id = r.activation_id
                     WHERE r.status = 'pending' AND a.status NOT IN ('running', 'waiting_approval', 'waiting_user')",
                )?;
                let rows = stmt.query_map([], |r| r.get(0))?;
                rows.collect::<Result<_, _>>()?
            };
            for id in &ended {
                w.expire_pending_approvals(id)?;
            }
            Ok(ids.into_iter().map(|(id, _)| id).collect())
        })
    }

    /// A running activation the controller stops on purpose (shutdown): marked cancelled with
    /// `reason`, its delivered signals back to pending, its open tool calls closed, its agent
    /// quiet. Returns how many signals went back. An activation that already ended is left as
    /// it is (0).
    pub fn interrupt_activation(&self, id: &str, reason: &str) -> Result<u64, StoreError> {
        self.write(|w| {
            let agent: Option<String> = w.tx.query_row(RUNNING_AGENT_OF, [id], |r| r.get(0)).optional()?;
            match agent {
                Some(agent) => w.end_interrupted(id, &agent, ActivationStatus::Cancelled, reason),
                None => Ok(0),
            }
        })
    }

    /// A parked activation of a previous controller that nothing can continue (its caller had
    /// no model loop: `suzumio tool call`, an MCP client), reopened by `reopen_parked`: ended
    /// as cancelled with `reason`, and the requests its call waited on are `expired` with the
    /// time of this restart, in one transaction. 0 when it is no longer running.
    pub fn end_orphaned_parked(&self, id: &str, reason: &str) -> Result<u64, StoreError> {
        self.write(|w| {
            let agent: Option<String> = w.tx.query_row(RUNNING_AGENT_OF, [id], |r| r.get(0)).optional()?;
            let Some(agent) = agent else { return Ok(0) };
            w.expire_pending_approvals(id)?;
            w.expire_pending_questions(id)?;
            w.end_interrupted(id, &agent, ActivationStatus::Cancelled, reason)
        })
    }
}

impl WriteTx<'_> {
    /// Tool calls of an activation still `running` are closed as failed with `reason` and
    /// `error_kind` (`cancelled` when the activation was, `internal` otherwise): nothing runs
    /// them any more, and `tool-status` must not say otherwise.
    pub(crate) fn close_open_tool_calls(
        &mut self,
        id: &str,
        agent: &str,
        reason: &str,
        error_kind: &str,
    ) -> Result<(), StoreError> {
        let open_calls: Vec<(String, String)> = {
            let mut stmt = self.tx.prepare(OPEN_TOOL_CALLS)?;
            let rows = stmt.query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect::<Result<_, _>>()?
        };
        for (call, tool) in open_calls {
            self.tx.execute(CLOSE_TOOL_CALL, params![call, reason, self.now, error_kind])?;
            self.event(Event::ToolCallFinished {
                tool_call_id: call,
                activation_id: id.to_string(),
                agent_id: agent.to_string(),
                tool,
                status: "failed".into(),
                error: Some(reason.to_string()),
                error_kind: Some(error_kind.into()),
            })?;
        }
        Ok(())
    }

    fn end_interrupted(
        &mut self,
        id: &str,
        agent: &str,
        status: ActivationStatus,
        reason: &str,
    ) -> Result<u64, StoreError> {
        self.tx.execute(END_INTERRUPTED, params![id, status, self.now, reason])?;
        let returned = self.tx.execute(RETURN_DELIVERED, [id])? as u64;
        let kind = if status == ActivationStatus::Cancelled { "cancelled" } else { "internal" };
        self.close_open_tool_calls(id, agent, reason, kind)?;
        self.cancel_pending_approvals(id, &format!("the activation ended before a decision: {reason}"))?;
        self.tx.execute(
            "UPDATE agents SET active_activation_id = NULL, status = 'quiet', updated_at = ?3
             WHERE id = ?1 AND (active_activation_id IS NULL OR active_activation_id = ?2)",
            params![agent, id, self.now],
        )?;
        let ended = ActivationEnded {
            activation_id: id.to_string(),
            agent_id: agent.to_string(),
            status: status.as_str().into(),
            error: Some(reason.to_string()),
            signals_returned: Some(returned),
        };
        self.event(match status {
            ActivationStatus::Cancelled => Event::ActivationCancelled(ended),
            _ => Event::ActivationFailed(ended),
        })?;
        Ok(returned)
    }
}

impl Store {
    /// Ids of activations that failed and started at or after `since` (an ISO timestamp).
    /// How many activations started at or after `since` (an ISO time of this store's clock).
    pub fn activations_started_since(&self, since: &str) -> Result<usize, StoreError> {
        self.read(|conn| {
            let n: i64 =
                conn.query_row("SELECT COUNT(*) FROM activations WHERE started_at >= ?1", [since], |r| r.get(0))?;
            Ok(usize::try_from(n).unwrap_or(0))
        })
    }

    pub fn activations_failed_since(&self, since: &str) -> Result<Vec<String>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id FROM activations WHERE status = 'failed' AND started_at >= ?1 ORDER BY started_at",
            )?;
            let rows = stmt.query_map([since], |r| r.get(0))?;
            Ok(rows.collect::<Result<Vec<String>, _>>()?)
        })
    }
}

impl Store {
    /// The activations started at or after `since` (ISO) that had model calls refused before they
    /// ran (`rejected_tool_calls`), with how many, oldest first.
    pub fn activations_with_rejected_calls_since(&self, since: &str) -> Result<Vec<(String, u64)>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, rejected_tool_calls FROM activations
                 WHERE started_at >= ?1 AND rejected_tool_calls > 0 ORDER BY started_at",
            )?;
            let rows = stmt.query_map([since], |r| Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as u64)))?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The id of the newest event (0 when there is none).
    pub fn last_event_id(&self) -> Result<i64, StoreError> {
        self.read(|conn| Ok(conn.query_row("SELECT COALESCE(MAX(id), 0) FROM events", [], |r| r.get(0))?))
    }
}
