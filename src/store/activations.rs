//! Activations and tool calls: their rows, the agent status changes they imply, and the
//! delivery marks on the signals an activation carries — each change one transaction.
//!
//! It records; it does not start containers or decide which signals to deliver.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::{Value, json};

use crate::store::{
    ActivationEnded, ActivationOutcome, ActivationRecord, ActivationStatus, AgentStatus, Event, Store, StoreError,
    ToolCallOutcome, ToolCallRecord, ToolCallStatus, agent_row, json_column, new_id, opt_json_column,
};
use crate::store::{Durability, WriteTx, opt_time_column, time_column};

/// One activation to start, for [`Store::start_activations`].
pub struct ActivationStart<'a> {
    pub agent_id: &'a str,
    pub prompt: &'a str,
    pub signal_ids: &'a [String],
}

// The statements of an activation's start and end and of each tool call's start and end
// (`query_plans` holds each to a plan that does not grow with the history): all by id.
pub(super) fn activation_by_id() -> String {
    format!("SELECT {ACTIVATION_COLUMNS} FROM activations WHERE id = ?1")
}
pub(super) const DELIVER_AT_START: &str =
    "UPDATE signals SET status = 'delivered', delivered_at = ?3, delivered_activation_id = ?4,
                            deliveries = deliveries + 1
                     WHERE id = ?1 AND target_agent = ?2 AND status = 'pending'";
pub(super) const END_ACTIVATION: &str =
    "UPDATE activations SET status = ?2, ended_at = ?3, text = ?4, error = ?5 WHERE id = ?1";
pub(super) const TOOL_CALL_BY_ID: &str =
    "SELECT id, activation_id, agent_id, tool, toolpack_id, status, input_json, output_json, error, started_at,
                finished_at, error_kind
         FROM tool_calls WHERE id = ?1";
pub(super) const FINISH_TOOL_CALL: &str =
    "UPDATE tool_calls SET status = ?2, output_json = ?3, error = ?4, finished_at = ?5, error_kind = ?6
                 WHERE id = ?1";

impl Store {
    /// Start an activation of `agent_id` carrying `signal_ids`: the activation row, the agent
    /// `running` with this activation active, and each signal `delivered` to it — all or nothing.
    pub fn start_activation(
        &self,
        agent_id: &str,
        prompt: &str,
        signal_ids: &[String],
    ) -> Result<ActivationRecord, StoreError> {
        // A start a power failure takes back loses nothing: its signals are pending again.
        self.write_with(Durability::WithNextCommit, |w| start_in(w, agent_id, prompt, signal_ids))
    }

    /// Start several activations in one transaction (one fsync for a tick that wakes many
    /// agents), each all or nothing as [`Store::start_activation`]: one that cannot start
    /// (its agent busy, a signal no longer pending) is rolled back alone and answered with its
    /// error, in the order given.
    pub fn start_activations(
        &self,
        starts: &[ActivationStart<'_>],
    ) -> Result<Vec<Result<ActivationRecord, StoreError>>, StoreError> {
        // A start a power failure takes back loses nothing: its signals are pending again.
        self.write_with(Durability::WithNextCommit, |w| {
            let mut out = Vec::with_capacity(starts.len());
            for start in starts {
                w.tx.execute_batch("SAVEPOINT start_activation")?;
                let events = w.events.len();
                match start_in(w, start.agent_id, start.prompt, start.signal_ids) {
                    Ok(activation) => {
                        w.tx.execute_batch("RELEASE start_activation")?;
                        out.push(Ok(activation));
                    }
                    Err(e @ (StoreError::AgentBusy { .. } | StoreError::SignalNotPending { .. })) => {
                        w.tx.execute_batch("ROLLBACK TO start_activation; RELEASE start_activation")?;
                        w.events.truncate(events);
                        out.push(Err(e));
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(out)
        })
    }

    /// End a running activation. The agent goes `quiet` (completed, cancelled) or `failed`, and
    /// its active activation is cleared — only if it is still this one, so a late finish of an
    /// old activation cannot clobber a newer one.
    pub fn finish_activation(
        &self,
        id: &str,
        outcome: ActivationOutcome,
        text: Option<&str>,
        error: Option<&str>,
    ) -> Result<ActivationRecord, StoreError> {
        self.write(|w| {
            let activation = activation_row(w.tx, id)?.ok_or_else(|| StoreError::UnknownActivation(id.to_string()))?;
            // A parked activation ends like a running one (a P0 pre-empts it); its pending
            // approval requests end with it.
            if !matches!(
                activation.status,
                ActivationStatus::Running | ActivationStatus::WaitingApproval | ActivationStatus::WaitingUser
            ) {
                return Err(StoreError::ActivationNotRunning {
                    id: id.to_string(),
                    status: activation.status.to_string(),
                });
            }
            let reason = error.unwrap_or("its activation ended");
            w.cancel_pending_approvals(id, &format!("the activation ended before a decision: {reason}"))?;
            w.cancel_pending_questions(id, &format!("the activation ended before an answer: {reason}"))?;
            let status = outcome.status();
            w.tx.execute(END_ACTIVATION, params![id, status, w.now, text, error])?;
            let agent_id = activation.agent_id.as_str();
            // A call whose end could not be recorded (a full disk) must not outlive its activation.
            // A call cut short by a cancellation (P0, `suzumio cancel`) says so.
            let why = match (outcome, error) {
                (ActivationOutcome::Cancelled, Some(reason)) => format!("its activation was cancelled: {reason}"),
                _ => "its activation ended before the call's end was recorded".to_string(),
            };
            let kind = if outcome == ActivationOutcome::Cancelled { "cancelled" } else { "internal" };
            w.close_open_tool_calls(id, agent_id, &why, kind)?;
            let is_active = agent_row(w.tx, agent_id)?.is_some_and(|a| a.active_activation_id.as_deref() == Some(id));
            if is_active {
                w.tx.execute(
                    "UPDATE agents SET active_activation_id = NULL, updated_at = ?2 WHERE id = ?1",
                    params![agent_id, w.now],
                )?;
                let agent_status = match outcome {
                    ActivationOutcome::Failed => AgentStatus::Failed,
                    ActivationOutcome::Completed | ActivationOutcome::Cancelled => AgentStatus::Quiet,
                };
                w.set_agent_status(agent_id, agent_status)?;
            }
            let ended = ActivationEnded {
                activation_id: id.to_string(),
                agent_id: agent_id.to_string(),
                status: status.as_str().into(),
                error: error.map(str::to_string),
                signals_returned: None,
            };
            w.event(match outcome {
                ActivationOutcome::Completed => Event::ActivationCompleted(ended),
                ActivationOutcome::Failed => Event::ActivationFailed(ended),
                ActivationOutcome::Cancelled => Event::ActivationCancelled(ended),
            })?;
            activation_row(w.tx, id)?.ok_or_else(|| StoreError::UnknownActivation(id.to_string()))
        })
    }

    pub fn activation(&self, id: &str) -> Result<Option<ActivationRecord>, StoreError> {
        self.read(|conn| Ok(activation_row(conn, id)?))
    }

    /// Record the start of a tool call in a running activation of `agent_id`; returns its id.
    pub fn start_tool_call(
        &self,
        activation_id: &str,
        agent_id: &str,
        tool: &str,
        toolpack_id: Option<&str>,
        input: &Value,
        target: Option<&str>,
    ) -> Result<String, StoreError> {
        self.start_tool_call_of(activation_id, agent_id, (tool, toolpack_id), input, target, None)
    }

    /// [`start_tool_call`](Self::start_tool_call) of a model's call, with the model's id of it
    /// (`call_key`): the timeline pairs the row with that call, also when a restart made the
    /// call again.
    pub fn start_tool_call_of(
        &self,
        activation_id: &str,
        agent_id: &str,
        (tool, toolpack_id): (&str, Option<&str>),
        input: &Value,
        target: Option<&str>,
        call_key: Option<&str>,
    ) -> Result<String, StoreError> {
        self.write(|w| {
            let activation = activation_row(w.tx, activation_id)?
                .ok_or_else(|| StoreError::UnknownActivation(activation_id.to_string()))?;
            if activation.agent_id != agent_id {
                return Err(StoreError::ActivationOfOtherAgent {
                    activation: activation_id.to_string(),
                    owner: activation.agent_id,
                    agent: agent_id.to_string(),
                });
            }
            if activation.status != ActivationStatus::Running {
                return Err(StoreError::ActivationNotRunning {
                    id: activation_id.to_string(),
                    status: activation.status.to_string(),
                });
            }
            let id = new_id("tc");
            w.tx.execute(
                "INSERT INTO tool_calls (id, activation_id, agent_id, tool, toolpack_id, status, input_json, started_at, target, call_key)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6, ?7, ?8, ?9)",
                params![id, activation_id, agent_id, tool, toolpack_id, input.to_string(), w.now, target, call_key],
            )?;
            // Inputs stay out of events: they can be large and hold file contents.
            w.event(Event::ToolCallStarted {
                tool_call_id: id.clone(),
                activation_id: activation_id.to_string(),
                agent_id: agent_id.to_string(),
                tool: tool.to_string(),
                toolpack_id: toolpack_id.map(str::to_string),
            })?;
            Ok(id)
        })
    }

    /// A call of `agent_id`'s model in its activation refused before it was recorded (`tool` as
    /// the model named it: unknown, not allowed, not loaded yet): counted with the activation and
    /// told as a `tool_call.rejected` event with the reason.
    pub fn record_rejected_call(
        &self,
        activation_id: &str,
        agent_id: &str,
        tool: &str,
        call_key: Option<&str>,
        reason: &str,
    ) -> Result<(), StoreError> {
        self.write(|w| {
            let counted = w.tx.execute(
                "UPDATE activations SET rejected_tool_calls = rejected_tool_calls + 1 WHERE id = ?1 AND agent_id = ?2",
                params![activation_id, agent_id],
            )?;
            if counted == 0 {
                return Err(StoreError::UnknownActivation(activation_id.to_string()));
            }
            w.event(Event::ToolCallRejected {
                activation_id: activation_id.to_string(),
                agent_id: agent_id.to_string(),
                tool: tool.to_string(),
                call_id: call_key.map(str::to_string),
                reason: reason.to_string(),
            })?;
            Ok(())
        })
    }

    /// Record the end of a running tool call.
    pub fn finish_tool_call(
        &self,
        id: &str,
        outcome: ToolCallOutcome,
        output: Option<&Value>,
        error: Option<&str>,
        error_kind: Option<&str>,
    ) -> Result<ToolCallRecord, StoreError> {
        self.write(|w| {
            let call = tool_call_row(w.tx, id)?.ok_or_else(|| StoreError::UnknownToolCall(id.to_string()))?;
            if call.status != ToolCallStatus::Running {
                return Err(StoreError::ToolCallFinished { id: id.to_string(), status: call.status.to_string() });
            }
            let status = outcome.status();
            w.tx.execute(
                FINISH_TOOL_CALL,
                params![id, status, output.map(Value::to_string), error, w.now, error_kind],
            )?;
            w.event(Event::ToolCallFinished {
                tool_call_id: id.to_string(),
                activation_id: call.activation_id,
                agent_id: call.agent_id,
                tool: call.tool,
                status: status.as_str().into(),
                error: error.map(str::to_string),
                error_kind: error_kind.map(str::to_string),
            })?;
            tool_call_row(w.tx, id)?.ok_or_else(|| StoreError::UnknownToolCall(id.to_string()))
        })
    }

    pub fn tool_call(&self, id: &str) -> Result<Option<ToolCallRecord>, StoreError> {
        self.read(|conn| Ok(tool_call_row(conn, id)?))
    }
}

const ACTIVATION_COLUMNS: &str =
    "id, agent_id, status, prompt, signal_ids_json, started_at, ended_at, error, text, usage_json";

fn activation_from_row(r: &Row<'_>) -> rusqlite::Result<ActivationRecord> {
    let signal_ids = json_column(r, 4)?;
    Ok(ActivationRecord {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        status: r.get(2)?,
        prompt: r.get(3)?,
        signal_ids: signal_ids
            .as_array()
            .map(|ids| ids.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
            .unwrap_or_default(),
        started_at: time_column(r, 5)?,
        ended_at: opt_time_column(r, 6)?,
        error: r.get(7)?,
        text: r.get(8)?,
        usage: opt_json_column(r, 9)?
            .map(|v| {
                serde_json::from_value(v)
                    .map_err(|e| rusqlite::Error::FromSqlConversionFailure(9, rusqlite::types::Type::Text, Box::new(e)))
            })
            .transpose()?,
    })
}

fn activation_row(conn: &Connection, id: &str) -> rusqlite::Result<Option<ActivationRecord>> {
    conn.query_row(&activation_by_id(), [id], activation_from_row).optional()
}

fn tool_call_from_row(r: &Row<'_>) -> rusqlite::Result<ToolCallRecord> {
    Ok(ToolCallRecord {
        id: r.get(0)?,
        activation_id: r.get(1)?,
        agent_id: r.get(2)?,
        tool: r.get(3)?,
        toolpack_id: r.get(4)?,
        status: r.get(5)?,
        input: json_column(r, 6)?,
        output: opt_json_column(r, 7)?,
        error: r.get(8)?,
        started_at: time_column(r, 9)?,
        finished_at: opt_time_column(r, 10)?,
        error_kind: r.get(11)?,
    })
}

fn tool_call_row(conn: &Connection, id: &str) -> rusqlite::Result<Option<ToolCallRecord>> {
    conn.query_row(TOOL_CALL_BY_ID, [id], tool_call_from_row).optional()
}

impl Store {
    /// Activations, newest first, optionally of one agent, older than `before` (an id; ids sort
    /// by time), at most `limit` (capped). Prompts are left out: they are large; see `activation`.
    pub fn list_activations(
        &self,
        agent_id: Option<&str>,
        before: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<ActivationRecord>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, agent_id, status, '' AS prompt, signal_ids_json, started_at, ended_at, error, text, usage_json
                 FROM activations WHERE (?1 IS NULL OR agent_id = ?1) AND (?2 IS NULL OR id < ?2)
                 ORDER BY id DESC LIMIT ?3",
            )?;
            let rows = stmt.query_map(params![agent_id, before, crate::store::clamp_limit(limit)], activation_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

/// One activation's start inside a write (see [`Store::start_activation`]).
fn start_in(
    w: &mut WriteTx<'_>,
    agent_id: &str,
    prompt: &str,
    signal_ids: &[String],
) -> Result<ActivationRecord, StoreError> {
    let agent = agent_row(w.tx, agent_id)?.ok_or_else(|| StoreError::UnknownAgent(agent_id.to_string()))?;
    if let Some(active) = agent.active_activation_id {
        return Err(StoreError::AgentBusy { agent: agent_id.to_string(), activation: active });
    }
    let id = new_id("act");
    w.tx.execute(
        "INSERT INTO activations (id, agent_id, status, prompt, signal_ids_json, started_at)
         VALUES (?1, ?2, 'running', ?3, ?4, ?5)",
        params![id, agent_id, prompt, json!(signal_ids).to_string(), w.now],
    )?;
    for signal in signal_ids {
        let changed = w.tx.execute(DELIVER_AT_START, params![signal, agent_id, w.now, id])?;
        if changed == 0 {
            return Err(StoreError::SignalNotPending { signal: signal.clone(), agent: agent_id.to_string() });
        }
    }
    w.tx.execute(super::usage::COUNT_ACTIVATION, params![agent_id, w.now])?;
    w.tx.execute(
        "UPDATE agents SET active_activation_id = ?2, updated_at = ?3 WHERE id = ?1",
        params![agent_id, id, w.now],
    )?;
    w.set_agent_status(agent_id, AgentStatus::Running)?;
    w.event(Event::ActivationStarted {
        activation_id: id.clone(),
        agent_id: agent_id.to_string(),
        signal_ids: signal_ids.iter().map(|s| s.to_string()).collect(),
    })?;
    activation_row(w.tx, &id)?.ok_or(StoreError::UnknownActivation(id))
}
