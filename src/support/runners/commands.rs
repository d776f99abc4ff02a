//! The agents' background commands as the controller sees them: listed and stopped for the
//! API on the live session; recorded in the store from `shell.start` on; each unread end
//! recorded once as a `shell.command_finished` signal, and that signal withdrawn when the agent
//! reads the end itself; and the commands of a runner that went away marked `lost`, with how it
//! ended, and signalled once ([`record_lost`]) — when its session closes, before a new runner
//! is started for the agent, when a runner connects without them, and at a controller's start.

use std::time::Duration;

use serde_json::{Value, json};

use super::{AgentRunners, Slot, live};
use crate::backend::{ContainerSpec, RunnerBackend, RunnerEnd, RunnerLoss};
use crate::rpc::{
    self, CommandFinishedParams, CommandFinishedResult, CommandInfo, CommandStatus, Connection, ListCommandsParams,
    ListCommandsResult, StopCommandParams,
};
use crate::store::{LossCause, ReadEnd, StartedCommand};
use crate::support::ToolHost;
use crate::toolpack::ToolError;

/// The built-in tool whose answer names a command it started.
const START_TOOL: &str = "shell.start";

/// How long a `listCommands` or `stopCommand` for the API may take.
const COMMANDS_TIMEOUT: Duration = Duration::from_secs(10);

impl AgentRunners {
    /// A call of a tool that declares `effects.withdrawsRead` (`shell.check`, `shell.stop`) that
    /// returned a background command's end: its `shell.command_finished` signal, if it was
    /// recorded and is still pending, is withdrawn (the agent has read what it says).
    pub(super) fn withdraw_read_command(
        &self,
        agent: &str,
        tool: &str,
        metadata: Option<&serde_json::Map<String, Value>>,
    ) {
        let withdraws =
            self.tools.project.snapshot().registry.tool(tool).is_some_and(|(_, def)| def.effects.withdraws_read);
        if !withdraws {
            return;
        }
        let Some(metadata) = metadata else { return };
        let (Some(Value::Bool(true)), Some(Value::String(id))) = (metadata.get("endRead"), metadata.get("id")) else {
            return;
        };
        let end = ReadEnd {
            status: metadata.get("status").and_then(Value::as_str).unwrap_or("exited").to_string(),
            exit_code: metadata.get("exitCode").and_then(Value::as_i64).map(|c| c as i32),
            signal: metadata.get("signal").and_then(Value::as_str).map(str::to_string),
        };
        if let Err(e) = self.tools.store.record_command_read(agent, id, &end) {
            tracing::warn!(%agent, command = %id, "cannot record the end of a read command: {e}");
        }
        match self.tools.store.withdraw_command_signal(agent, id) {
            Ok(Some(signal)) => {
                tracing::info!(%agent, command = %id, %signal, "withdrew the finish signal of a command whose end was read")
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(%agent, command = %id, "cannot withdraw the finish signal of a read command: {e}"),
        }
    }

    /// A `shell.start` that succeeded: its command is recorded as running, so that it is
    /// found (and lost, and signalled) if its runner goes away before it ends.
    pub(super) fn record_started_command(
        &self,
        agent: &str,
        tool: &str,
        input: &Value,
        metadata: Option<&serde_json::Map<String, Value>>,
    ) {
        if tool != START_TOOL {
            return;
        }
        let Some(Value::String(id)) = metadata.and_then(|m| m.get("id")) else { return };
        let field = |key: &str| metadata.and_then(|m| m.get(key)).and_then(Value::as_str).map(str::to_string);
        let started = StartedCommand {
            id: id.clone(),
            name: field("name"),
            command: input.get("command").and_then(Value::as_str).unwrap_or_default().to_string(),
            cwd: field("cwd").unwrap_or_default(),
        };
        if let Err(e) = self.tools.store.record_command_started(agent, &started) {
            tracing::warn!(%agent, command = %id, "cannot record a started background command: {e}");
        }
    }

    /// A runner just connected and loaded: the commands the store shows running for the agent
    /// that this runner does not know ran in a runner that is gone (replaced, or ended while no
    /// controller watched it), and are lost.
    pub(super) async fn reconcile_listed(&self, slot: &Slot, conn: &Connection) {
        let agent = &slot.agent;
        let running = running_commands(&self.tools, agent);
        if running.is_empty() {
            return;
        }
        let params = ListCommandsParams { tail_chars: 0 };
        let listed = tokio::time::timeout(
            COMMANDS_TIMEOUT,
            conn.call::<_, ListCommandsResult>(rpc::method::LIST_COMMANDS, &params),
        )
        .await;
        let Ok(Ok(listed)) = listed else {
            tracing::warn!(%agent, "the new runner did not list its background commands: its older ones are looked at later");
            return;
        };
        let mut unknown = Vec::new();
        for id in running {
            match listed.commands.iter().find(|c| c.id == id) {
                None => unknown.push(id),
                // Ended and read while no controller recorded it (a report still due records
                // its signal all the same).
                Some(c) if c.status != CommandStatus::Running => {
                    let end = ReadEnd {
                        status: c.status.as_str().to_string(),
                        exit_code: c.exit_code,
                        signal: c.signal.clone(),
                    };
                    if let Err(e) = self.tools.store.record_command_read(agent, &id, &end) {
                        tracing::warn!(%agent, command = %id, "cannot record the end of a command: {e}");
                    }
                }
                Some(_) => {}
            }
        }
        let reason = "the runner that ran it is gone: the agent's runner now connected does not know it";
        record_lost(&self.tools, agent, &unknown, LossCause::Exited, reason);
    }

    /// The agent's background commands, with up to `tail_chars` of recent output each; `None`
    /// when its runner is not connected (nothing is started for this).
    pub async fn list_commands(&self, agent: &str, tail_chars: usize) -> Result<Option<Vec<CommandInfo>>, ToolError> {
        let slot = self.slot(agent)?;
        let Some(conn) = live(slot) else { return Ok(None) };
        let params = ListCommandsParams { tail_chars };
        let listed = tokio::time::timeout(
            COMMANDS_TIMEOUT,
            conn.call::<_, ListCommandsResult>(rpc::method::LIST_COMMANDS, &params),
        )
        .await
        .map_err(|_| ToolError::RunnerLost(format!("the runner of {agent} did not answer listCommands")))?;
        match listed {
            Ok(listed) => Ok(Some(listed.commands)),
            Err(e) if e.is_connection_closed() => Ok(None),
            Err(e) => Err(ToolError::from_rpc(e)),
        }
    }

    /// Whether any connected runner has a background command running (`--until-idle` waits
    /// for them: their ends are work to come).
    pub async fn background_commands_running(&self) -> bool {
        for agent in self.slots.keys() {
            if let Ok(Some(commands)) = self.list_commands(agent, 0).await
                && commands.iter().any(|c| c.status == rpc::CommandStatus::Running)
            {
                return true;
            }
        }
        false
    }

    /// Stop one of the agent's background commands (for the user; no signal follows).
    pub async fn stop_command(&self, agent: &str, command_id: &str) -> Result<CommandInfo, ToolError> {
        let slot = self.slot(agent)?;
        let conn = live(slot).ok_or_else(|| ToolError::RunnerLost(format!("the runner of {agent} is not running")))?;
        let params = StopCommandParams { command_id: command_id.to_string() };
        let stopped =
            tokio::time::timeout(COMMANDS_TIMEOUT, conn.call::<_, CommandInfo>(rpc::method::STOP_COMMAND, &params))
                .await
                .map_err(|_| ToolError::RunnerLost(format!("the runner of {agent} did not answer stopCommand")))?;
        let stopped = stopped.map_err(|e| {
            if e.is_connection_closed() {
                ToolError::RunnerLost(format!("the runner of {agent} went away"))
            } else {
                ToolError::from_rpc(e)
            }
        })?;
        if stopped.status != CommandStatus::Running {
            let end = ReadEnd {
                status: stopped.status.as_str().to_string(),
                exit_code: stopped.exit_code,
                signal: stopped.signal.clone(),
            };
            if let Err(e) = self.tools.store.record_command_read(agent, &stopped.id, &end) {
                tracing::warn!(%agent, command = %stopped.id, "cannot record a stopped background command: {e}");
            }
        }
        Ok(stopped)
    }
}

/// Before a runner is started for the agent of `spec` (or at a controller's start): when the
/// store shows commands of that agent running and the backend knows its runner no longer runs,
/// they are lost, with how it ended.
pub(crate) async fn reconcile_ended(tools: &ToolHost, backend: &dyn RunnerBackend, spec: &ContainerSpec) {
    let agent = &spec.agent;
    let running = running_commands(tools, agent);
    if running.is_empty() {
        return;
    }
    if let Some(loss) = backend.runner_ended(spec).await {
        record_runner_loss(tools, agent, &running, &loss);
    }
}

/// The runner that ran `command_ids` of `agent` ended as `loss` says: those still running are
/// lost, when it says how it ended (true then). A runner still running, or whose end the
/// backend cannot tell, loses nothing (it may resume; it is looked at again later).
pub(crate) fn record_runner_loss(tools: &ToolHost, agent: &str, command_ids: &[String], loss: &RunnerLoss) -> bool {
    let Some(cause) = loss_cause(&loss.end) else { return false };
    record_lost(tools, agent, command_ids, cause, &format!("the runner that ran it was lost: {}", loss.end));
    true
}

/// Why a runner that ended as `end` lost its commands; `None` when it may not have ended.
fn loss_cause(end: &RunnerEnd) -> Option<LossCause> {
    Some(match end {
        RunnerEnd::Exited { exit, .. } if exit.oom_killed => LossCause::Oom,
        // SIGKILL and SIGTERM, as the engine (and the process backend) report them.
        RunnerEnd::Exited { exit, .. } if matches!(exit.code, 137 | 143) => LossCause::Killed,
        RunnerEnd::Exited { .. } => LossCause::Exited,
        RunnerEnd::Removed => LossCause::Removed,
        RunnerEnd::StillRunning | RunnerEnd::Unknown(_) => return None,
    })
}

/// The ids of the commands the store shows running for `agent` (none when it cannot be read:
/// they are looked at again at the next occasion).
pub(crate) fn running_commands(tools: &ToolHost, agent: &str) -> Vec<String> {
    tools.store.running_commands(agent).unwrap_or_else(|e| {
        tracing::warn!(%agent, "cannot read the agent's running background commands: {e}");
        Vec::new()
    })
}

/// Mark those of `command_ids` still running as lost, each signalled once to `agent`.
pub(crate) fn record_lost(tools: &ToolHost, agent: &str, command_ids: &[String], cause: LossCause, reason: &str) {
    match tools.store.record_commands_lost(agent, command_ids, cause, reason) {
        Ok(signals) => {
            for signal in signals {
                let command = signal.payload["commandId"].as_str().unwrap_or_default();
                tracing::warn!(%agent, %command, signal = %signal.id, cause = cause.as_str(), "a background command was lost: {reason}");
            }
        }
        Err(e) => tracing::warn!(%agent, "cannot record lost background commands: {e}"),
    }
}

/// Record the end of one of `agent`'s background commands as its `shell.command_finished`
/// signal, once per command id.
pub(super) fn command_finished(
    tools: &ToolHost,
    agent: &str,
    p: CommandFinishedParams,
) -> Result<CommandFinishedResult, ToolError> {
    let tail: String = {
        let count = p.output_tail.chars().count();
        p.output_tail.chars().skip(count.saturating_sub(COMMAND_TAIL_CHARS)).collect()
    };
    let payload = json!({
        "commandId": p.command_id,
        "name": p.name,
        "command": p.command,
        "status": p.status,
        "exitCode": p.exit_code,
        "signal": p.signal,
        "output": tail,
        "truncated": p.truncated || p.output_tail.chars().count() > COMMAND_TAIL_CHARS,
        "startedAt": p.started_at,
        "endedAt": p.ended_at,
        "stoppedBy": p.stopped_by,
    });
    let (signal, recorded) = tools.store.record_command_finished(agent, &p.command_id, payload)?;
    if recorded {
        tracing::info!(%agent, command = %p.command_id, signal = %signal.id, "a background command finished");
    }
    Ok(CommandFinishedResult { signal_id: signal.id, recorded })
}

/// Characters of output a `shell.command_finished` signal carries at most.
const COMMAND_TAIL_CHARS: usize = 8_000;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ExitInfo;

    fn exited(code: i64, oom_killed: bool) -> RunnerEnd {
        RunnerEnd::Exited { exit: ExitInfo { code, oom_killed, error: None, finished_at: None }, memory_bytes: 1 << 20 }
    }

    #[test]
    fn a_runner_end_names_the_cause_of_its_lost_commands_and_one_that_may_still_run_loses_none() {
        let check = |end: RunnerEnd, cause: Option<LossCause>| assert_eq!(loss_cause(&end), cause, "{end}");
        check(exited(137, true), Some(LossCause::Oom));
        check(exited(137, false), Some(LossCause::Killed));
        check(exited(143, false), Some(LossCause::Killed));
        check(exited(1, false), Some(LossCause::Exited));
        check(exited(0, false), Some(LossCause::Exited));
        check(RunnerEnd::Removed, Some(LossCause::Removed));
        check(RunnerEnd::StillRunning, None);
        check(RunnerEnd::Unknown("the engine did not answer".into()), None);
    }
}
