//! The agents' background commands as the controller last knew them, and the end of each,
//! signalled once.
//!
//! - `background_commands` holds each command from its `shell.start` on (running), then how it
//!   ended: as its runner reported it (`commandFinished`), as the agent or the user read it
//!   (`shell.check`, `shell.stop`, the API's stop), or `lost` with the cause when the runner
//!   that ran it went away. Only a `running` row changes, so the first end recorded stays.
//! - The end's `shell.command_finished` signal (P2, for the agent whose runner ran it) is keyed
//!   by the command id in `command_signals`, in one transaction with the status change, so a
//!   runner that sends the same end again (its answer was lost, or it reconnected to a new
//!   controller), or a second look at a runner that died (the watcher, the next start, a
//!   restart), gets the signal already recorded and nothing new. When the agent reads the end
//!   itself (`shell.check`) before the signal was delivered, the signal is withdrawn (closed).

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Row, params};
use serde_json::{Value, json};

use crate::clock::{iso, parse_iso};
use crate::config::Priority;
use crate::store::signals::{PlannedSignal, plan_signals};
use crate::store::{Event, SignalRecord, Store, StoreError, WriteTx, opt_time_column, time_column};

/// The kind of the signal a finished background command sends its agent.
pub const COMMAND_FINISHED_KIND: &str = "shell.command_finished";

/// Why a background command was lost: how the runner that ran it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossCause {
    /// Its container or process was killed (SIGKILL, SIGTERM: `docker kill`, `kill -9`).
    Killed,
    /// The kernel's OOM killer ended its container (the memory limit was reached).
    Oom,
    /// Its container was removed (`docker rm -f`, or replaced by the controller).
    Removed,
    /// Its runner exited by itself, or is gone without a trace of how.
    Exited,
    /// The controller stopped, and its runners with it.
    Stopped,
}

impl LossCause {
    /// The wire name (`cause` in the signal and the API).
    pub fn as_str(self) -> &'static str {
        match self {
            LossCause::Killed => "killed",
            LossCause::Oom => "oom",
            LossCause::Removed => "removed",
            LossCause::Exited => "exited",
            LossCause::Stopped => "stopped",
        }
    }
}

/// A command `shell.start` started, as its answer described it.
#[derive(Clone, Debug)]
pub struct StartedCommand {
    pub id: String,
    pub name: Option<String>,
    pub command: String,
    pub cwd: String,
}

/// How a command's end was read (`shell.check`, `shell.stop`, the API's stop).
#[derive(Clone, Debug)]
pub struct ReadEnd {
    pub status: String,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
}

/// One row of `background_commands`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandRecord {
    pub id: String,
    pub agent_id: String,
    pub name: Option<String>,
    pub command: String,
    pub cwd: String,
    /// `running`, `exited`, `failed`, `stopped` or `lost`.
    pub status: String,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    /// For a lost command: [`LossCause::as_str`].
    pub cause: Option<String>,
    /// For a lost command: how its runner ended, in words.
    pub reason: Option<String>,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
}

/// The ids of an agent's running commands, oldest first: read at every runner start and end
/// (in `query_plans`).
pub(crate) const RUNNING_COMMANDS: &str =
    "SELECT command_id FROM background_commands WHERE agent_id = ?1 AND status = 'running' ORDER BY command_id";

// What a background command's start, check, stop, end and loss run, each by its id
// (`query_plans`).
pub(super) const RECORD_COMMAND_READ: &str =
    "UPDATE background_commands SET status = ?3, exit_code = ?4, signal = ?5, ended_at = ?6
                 WHERE command_id = ?1 AND agent_id = ?2 AND status = 'running'";
pub(super) fn running_command() -> String {
    format!(
        "SELECT {COMMAND_COLUMNS} FROM background_commands
                             WHERE command_id = ?1 AND agent_id = ?2 AND status = 'running'"
    )
}
pub(super) const LOSE_COMMAND: &str =
    "UPDATE background_commands SET status = 'lost', cause = ?2, reason = ?3, ended_at = ?4
                     WHERE command_id = ?1";
pub(super) const COMMAND_SIGNAL: &str = "SELECT signal_id FROM command_signals WHERE command_id = ?1";
pub(super) const PENDING_COMMAND_SIGNAL: &str =
    "SELECT s.id FROM command_signals c JOIN signals s ON s.id = c.signal_id
                     WHERE c.command_id = ?1 AND c.agent_id = ?2 AND s.status = 'pending'";
pub(super) const CLOSE_SIGNAL: &str = "UPDATE signals SET status = 'closed' WHERE id = ?1";

const COMMAND_COLUMNS: &str =
    "command_id, agent_id, name, command, cwd, status, exit_code, signal, cause, reason, started_at, ended_at";

fn command_from_row(r: &Row<'_>) -> rusqlite::Result<CommandRecord> {
    Ok(CommandRecord {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        name: r.get(2)?,
        command: r.get(3)?,
        cwd: r.get(4)?,
        status: r.get(5)?,
        exit_code: r.get(6)?,
        signal: r.get(7)?,
        cause: r.get(8)?,
        reason: r.get(9)?,
        started_at: time_column(r, 10)?,
        ended_at: opt_time_column(r, 11)?,
    })
}

impl Store {
    /// Record a command `shell.start` started for `agent_id` as running (nothing changes when
    /// its end was recorded already: a quick command may report its end before the answer to
    /// its start is handled).
    pub fn record_command_started(&self, agent_id: &str, started: &StartedCommand) -> Result<(), StoreError> {
        if !self.is_roster_agent(agent_id) {
            return Err(StoreError::UnknownAgent(agent_id.to_string()));
        }
        self.write(|w| {
            w.tx.execute(
                "INSERT INTO background_commands (command_id, agent_id, name, command, cwd, status, started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'running', ?6) ON CONFLICT (command_id) DO NOTHING",
                params![started.id, agent_id, started.name, started.command, started.cwd, w.now],
            )?;
            Ok(())
        })
    }

    /// Record how a running command of `agent_id` ended, as `shell.check`, `shell.stop` or the
    /// API's stop read it (no signal: its reader knows).
    pub fn record_command_read(&self, agent_id: &str, command_id: &str, end: &ReadEnd) -> Result<(), StoreError> {
        self.write(|w| {
            w.tx.execute(
                RECORD_COMMAND_READ,
                params![command_id, agent_id, end.status, end.exit_code, end.signal, w.now],
            )?;
            Ok(())
        })
    }

    /// The ids of the commands of `agent_id` the store shows running, oldest first.
    pub fn running_commands(&self, agent_id: &str) -> Result<Vec<String>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(RUNNING_COMMANDS)?;
            let rows = stmt.query_map([agent_id], |r| r.get(0))?;
            Ok(rows.collect::<Result<Vec<String>, _>>()?)
        })
    }

    /// The last `limit` lost commands of `agent_id`, newest first.
    pub fn lost_commands(&self, agent_id: &str, limit: usize) -> Result<Vec<CommandRecord>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COMMAND_COLUMNS} FROM background_commands WHERE agent_id = ?1 AND status = 'lost'
                 ORDER BY command_id DESC LIMIT ?2"
            ))?;
            let rows = stmt.query_map(params![agent_id, limit as i64], command_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// One command of `agent_id`, as the store knows it.
    pub fn background_command(&self, agent_id: &str, command_id: &str) -> Result<Option<CommandRecord>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COMMAND_COLUMNS} FROM background_commands WHERE command_id = ?1 AND agent_id = ?2"
            ))?;
            Ok(stmt.query_row([command_id, agent_id], command_from_row).optional()?)
        })
    }

    /// Mark those of `command_ids` that are still running for `agent_id` as `lost` with `cause`
    /// and `reason`, and give `agent_id` one `shell.command_finished` signal (status `lost`)
    /// for each that has none yet — all in one transaction, so however often a dead runner is
    /// looked at (by the watcher, at a restart, at the next start), each command is lost and
    /// signalled once. Returns the signals recorded now.
    pub fn record_commands_lost(
        &self,
        agent_id: &str,
        command_ids: &[String],
        cause: LossCause,
        reason: &str,
    ) -> Result<Vec<SignalRecord>, StoreError> {
        if !self.is_roster_agent(agent_id) {
            return Err(StoreError::UnknownAgent(agent_id.to_string()));
        }
        if command_ids.is_empty() {
            return Ok(Vec::new());
        }
        let plans = plan_signals(&self.inner.roster, Some(agent_id), None, None, COMMAND_FINISHED_KIND, Some(true));
        self.write(|w| {
            let mut recorded = Vec::new();
            for command_id in command_ids {
                let row = w.tx.query_row(&running_command(), [command_id, agent_id], command_from_row).optional()?;
                let Some(row) = row else { continue };
                w.tx.execute(LOSE_COMMAND, params![command_id, cause.as_str(), reason, w.now])?;
                let signalled: bool = w.tx.prepare_cached(COMMAND_SIGNAL)?.exists([command_id])?;
                if signalled {
                    continue;
                }
                let payload = json!({
                    "commandId": row.id,
                    "name": row.name,
                    "command": row.command,
                    "status": "lost",
                    "cause": cause.as_str(),
                    "reason": reason,
                    "exitCode": null,
                    "signal": null,
                    "output": "",
                    "truncated": false,
                    "startedAt": iso(row.started_at),
                    "endedAt": w.now,
                });
                recorded.push(w.command_finished_signal(&plans, agent_id, command_id, &payload)?);
            }
            Ok(recorded)
        })
    }

    /// Record `payload` as the `shell.command_finished` signal of `command_id` for `agent_id`,
    /// unless it was recorded before. Returns the signal and whether it is new.
    pub fn record_command_finished(
        &self,
        agent_id: &str,
        command_id: &str,
        payload: Value,
    ) -> Result<(SignalRecord, bool), StoreError> {
        if !self.is_roster_agent(agent_id) {
            return Err(StoreError::UnknownAgent(agent_id.to_string()));
        }
        let plans = plan_signals(&self.inner.roster, Some(agent_id), None, None, COMMAND_FINISHED_KIND, Some(true));
        let recorded = self.write(|w| {
            let earlier: Option<String> = w.tx.query_row(COMMAND_SIGNAL, [command_id], |r| r.get(0)).optional()?;
            // The row, known from the start or not (a quick command may report first), takes
            // the end unless an end is recorded already. The runner's times are kept in the
            // store's own form (ours when it sent none that reads as a time).
            let time = |key: &str| payload.get(key).and_then(Value::as_str).and_then(parse_iso).map(iso);
            let (started_at, ended_at) =
                (time("startedAt").unwrap_or_else(|| w.now.clone()), time("endedAt").unwrap_or_else(|| w.now.clone()));
            w.tx.execute(
                "INSERT INTO background_commands
                   (command_id, agent_id, name, command, cwd, status, exit_code, signal, started_at, ended_at)
                 VALUES (?1, ?2, ?3, ?4, '', ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (command_id) DO UPDATE
                   SET status = excluded.status, exit_code = excluded.exit_code, signal = excluded.signal,
                       ended_at = excluded.ended_at
                   WHERE background_commands.status = 'running'",
                params![
                    command_id,
                    agent_id,
                    payload.get("name").and_then(Value::as_str),
                    payload.get("command").and_then(Value::as_str).unwrap_or_default(),
                    payload.get("status").and_then(Value::as_str).unwrap_or("exited"),
                    payload.get("exitCode").and_then(Value::as_i64),
                    payload.get("signal").and_then(Value::as_str),
                    started_at,
                    ended_at,
                ],
            )?;
            if let Some(signal_id) = earlier {
                return Ok(Err(signal_id));
            }
            Ok(Ok(w.command_finished_signal(&plans, agent_id, command_id, &payload)?))
        })?;
        match recorded {
            Ok(signal) => Ok((signal, true)),
            Err(signal_id) => {
                let signal = self.signal(&signal_id)?.ok_or_else(|| StoreError::UnknownAgent(agent_id.to_string()))?;
                Ok((signal, false))
            }
        }
    }

    /// Close the still pending `shell.command_finished` signal of `command_id` (its agent read
    /// the end); returns the signal's id when one was pending.
    pub fn withdraw_command_signal(&self, agent_id: &str, command_id: &str) -> Result<Option<String>, StoreError> {
        self.write(|w| {
            let pending: Option<String> =
                w.tx.query_row(PENDING_COMMAND_SIGNAL, [command_id, agent_id], |r| r.get(0)).optional()?;
            let Some(signal_id) = pending else { return Ok(None) };
            w.tx.execute(CLOSE_SIGNAL, [&signal_id])?;
            w.event(Event::SignalWithdrawn {
                signal_id: signal_id.clone(),
                kind: COMMAND_FINISHED_KIND.to_string(),
                agent_id: agent_id.to_string(),
                reason: format!("shell.check read the end of {command_id}"),
            })?;
            Ok(Some(signal_id))
        })
    }
}

impl WriteTx<'_> {
    /// The one `shell.command_finished` signal of a command (an end reported, or found lost),
    /// keyed by the command id in `command_signals` so that it is never recorded twice.
    fn command_finished_signal(
        &mut self,
        plans: &[PlannedSignal],
        agent_id: &str,
        command_id: &str,
        payload: &Value,
    ) -> Result<SignalRecord, StoreError> {
        let mut signal = None;
        for plan in plans {
            signal = Some(self.insert_signal(plan, COMMAND_FINISHED_KIND, None, None, Priority::P2, payload, None)?);
        }
        let signal = signal.ok_or_else(|| StoreError::UnknownAgent(agent_id.to_string()))?;
        self.tx.execute(
            "INSERT INTO command_signals (command_id, agent_id, signal_id, recorded_at) VALUES (?1, ?2, ?3, ?4)",
            params![command_id, agent_id, signal.id, self.now],
        )?;
        Ok(signal)
    }
}
