//! The calls of a command other than `run` (`tool call`, `mcp` over stdio): while a `run`
//! serves the project, each whole call is handed to it through its control socket
//! (`support::control`), so it runs in the agent's one container, with the serving controller's
//! packs, records, approvals and audit; otherwise it runs here through [`super::execute_tool`],
//! with runners of its own started at the first call that needs one and kept under the
//! project's lock (`support::serving`) for as long as they live — so no `run` or other command
//! starts runners next to them.

use std::sync::Arc;

use serde_json::Value;

use super::{NoRunner, RunnerTools, execute_tool};
use crate::config::BackendKind;
use crate::support::ToolHost;
use crate::support::control::Delegated;
use crate::support::runners::AgentRunners;
use crate::support::serving::{self, LockError, ServeLock};
use crate::toolpack::output::ToolOutput;
use crate::toolpack::{RunsIn, ToolError};

pub enum CliCalls {
    Served {
        delegated: Arc<Delegated>,
        host: Arc<ToolHost>,
    },
    Own {
        host: Arc<ToolHost>,
        kind: BackendKind,
        command: &'static str,
        runners: Box<tokio::sync::OnceCell<OwnRunners>>,
    },
}

/// Runners this process started, and the lock that makes them the project's only ones.
pub struct OwnRunners {
    runners: Arc<AgentRunners>,
    _lock: ServeLock,
}

impl CliCalls {
    /// The serving controller's, when a `run` serves the project now; else this process's.
    pub fn new(host: &Arc<ToolHost>, kind: BackendKind, command: &'static str) -> Result<CliCalls, LockError> {
        Ok(match serving::serving(&host.project.config.root)? {
            Some((holder, socket)) => {
                tracing::info!("the project is served by {}: it runs the calls", holder.describe());
                CliCalls::Served { delegated: Delegated::new(holder, socket), host: host.clone() }
            }
            None => CliCalls::Own { host: host.clone(), kind, command, runners: Box::default() },
        })
    }

    pub fn is_served(&self) -> bool {
        matches!(self, CliCalls::Served { .. })
    }

    /// One tool call in `activation_id` (started and ended by the caller).
    pub async fn execute(
        &self,
        agent_id: &str,
        activation_id: &str,
        tool: &str,
        input: Value,
    ) -> Result<ToolOutput, ToolError> {
        match self {
            CliCalls::Served { delegated, host } => {
                let result = delegated.execute(agent_id, activation_id, tool, input).await;
                // The serving controller went away with the call: what it asked for can no
                // longer run, whoever decides it (the caller then ends the activation).
                if matches!(result, Err(ToolError::RunnerLost(_)))
                    && let Err(e) = host.store.expire_approvals_of(activation_id)
                {
                    tracing::warn!("expiring the requests of {activation_id}: {e}");
                }
                result
            }
            CliCalls::Own { host, .. } => {
                let runs_in = host.project.snapshot().registry.tool(tool).map(|(_, def)| def.runs_in);
                let no_runner = NoRunner("not needed".into());
                let runner: &dyn RunnerTools = match runs_in {
                    Some(RunsIn::Runner) => self.own_runners().await?.runners.as_ref(),
                    _ => &no_runner,
                };
                execute_tool(host, runner, agent_id, activation_id, tool, input).await
            }
        }
    }

    async fn own_runners(&self) -> Result<&OwnRunners, ToolError> {
        let CliCalls::Own { host, kind, command, runners } = self else {
            return Err(ToolError::Internal("a served project's calls start no runners".into()));
        };
        runners
            .get_or_try_init(|| async {
                let now = crate::clock::iso(host.store.now());
                let lock = match ServeLock::acquire_or_serving(&host.project.config.root, command, &now).await {
                    Ok(Ok(lock)) => lock,
                    Ok(Err((holder, _))) => {
                        return Err(ToolError::RunnerLost(format!(
                            "{} started serving the project during this command; run the command again to use its runners",
                            holder.describe()
                        )));
                    }
                    Err(e) => return Err(ToolError::RunnerLost(e.to_string())),
                };
                let runners = crate::support::start::runners(host, *kind)
                    .await
                    .map_err(|e| ToolError::RunnerLost(format!("the runners could not be started: {e}")))?;
                Ok(OwnRunners { runners, _lock: lock })
            })
            .await
    }

    /// Stop runners of its own (the serving controller keeps its own), then free the lock.
    pub async fn shutdown(&self) {
        if let CliCalls::Own { runners, .. } = self
            && let Some(own) = runners.get()
        {
            own.runners.shutdown().await;
        }
    }
}
