//! The end of a background command, recorded once: `shell.command_finished` (P2, for the agent
//! whose runner ran it) keyed by the command id in `command_signals`, in one transaction, so a
//! runner that sends the same end again (its answer was lost, or it reconnected to a new
//! controller) gets the signal already recorded and nothing new. When the agent reads the end
//! itself (`shell.check`) before the signal was delivered, the signal is withdrawn (closed).

use rusqlite::{OptionalExtension, params};
use serde_json::Value;

use crate::config::Priority;
use crate::store::signals::plan_signals;
use crate::store::{Event, SignalRecord, Store, StoreError};

/// The kind of the signal a finished background command sends its agent.
pub const COMMAND_FINISHED_KIND: &str = "shell.command_finished";

impl Store {
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
            let earlier: Option<String> = w
                .tx
                .query_row("SELECT signal_id FROM command_signals WHERE command_id = ?1", [command_id], |r| r.get(0))
                .optional()?;
            if let Some(signal_id) = earlier {
                return Ok(Err(signal_id));
            }
            let mut signal = None;
            for plan in &plans {
                signal =
                    Some(w.insert_signal(plan, COMMAND_FINISHED_KIND, None, None, Priority::P2, &payload, None)?);
            }
            let signal = signal.ok_or_else(|| StoreError::UnknownAgent(agent_id.to_string()))?;
            w.tx.execute(
                "INSERT INTO command_signals (command_id, agent_id, signal_id, recorded_at) VALUES (?1, ?2, ?3, ?4)",
                params![command_id, agent_id, signal.id, w.now],
            )?;
            Ok(Ok(signal))
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
                w.tx.query_row(
                    "SELECT s.id FROM command_signals c JOIN signals s ON s.id = c.signal_id
                     WHERE c.command_id = ?1 AND c.agent_id = ?2 AND s.status = 'pending'",
                    [command_id, agent_id],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(signal_id) = pending else { return Ok(None) };
            w.tx.execute("UPDATE signals SET status = 'closed' WHERE id = ?1", [&signal_id])?;
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
