//! The agents' background commands as the controller sees them: listed and stopped for the
//! API on the live session, each unread end recorded once as a `shell.command_finished`
//! signal, and that signal withdrawn when the agent reads the end itself.

use std::time::Duration;

use serde_json::{Value, json};

use super::{AgentRunners, live};
use crate::rpc::{
    self, CommandFinishedParams, CommandFinishedResult, CommandInfo, ListCommandsParams, ListCommandsResult,
    StopCommandParams,
};
use crate::support::ToolHost;
use crate::toolpack::ToolError;

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
        match self.tools.store.withdraw_command_signal(agent, id) {
            Ok(Some(signal)) => {
                tracing::info!(%agent, command = %id, %signal, "withdrew the finish signal of a command whose end was read")
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(%agent, command = %id, "cannot withdraw the finish signal of a read command: {e}"),
        }
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
        stopped.map_err(|e| {
            if e.is_connection_closed() {
                ToolError::RunnerLost(format!("the runner of {agent} went away"))
            } else {
                ToolError::from_rpc(e)
            }
        })
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
    });
    let (signal, recorded) = tools.store.record_command_finished(agent, &p.command_id, payload)?;
    if recorded {
        tracing::info!(%agent, command = %p.command_id, signal = %signal.id, "a background command finished");
    }
    Ok(CommandFinishedResult { signal_id: signal.id, recorded })
}

/// Characters of output a `shell.command_finished` signal carries at most.
const COMMAND_TAIL_CHARS: usize = 8_000;
