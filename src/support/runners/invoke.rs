//! A runner-side tool call: sent at most once over the agent's session (retried only when it
//! provably never reached a runner), its error read by kind from the answer, a runner lost
//! during it reported with how it ended; and a P0's cancel of an activation's calls.

use std::time::Duration;

use serde_json::{Value, json};

use super::{AgentRunners, clear, live};
use crate::backend::{RunnerEnd, RunnerLoss};
use crate::rpc::{self, InvokeParams};
use crate::support::ToolOutput;
use crate::toolpack::ToolError;

/// Upper bound of one tool call over the socket (shell.exec may run 5 minutes).
const INVOKE_TIMEOUT: Duration = Duration::from_secs(330);
/// How long the backend may take to report how a lost runner ended (it is usually stopped
/// already when its socket closes).
const LOSS_WAIT: Duration = Duration::from_secs(1);
/// How long a call the runner cancelled by itself waits for the runner's socket to close.
const STOPPING_GRACE: Duration = Duration::from_secs(1);

impl AgentRunners {
    /// Run a runner-side tool for an activation.
    pub async fn invoke(
        &self,
        agent: &str,
        activation_id: &str,
        tool: &str,
        input: Value,
    ) -> Result<ToolOutput, ToolError> {
        self.invoke_guarded(agent, activation_id, tool, input, Vec::new()).await
    }

    /// [`AgentRunners::invoke`] with the agent's path rules for the tool, which the runner
    /// applies to the paths it resolves.
    pub async fn invoke_guarded(
        &self,
        agent: &str,
        activation_id: &str,
        tool: &str,
        input: Value,
        path_rules: Vec<rpc::PathRule>,
    ) -> Result<ToolOutput, ToolError> {
        if let Some(quotas) = self.quotas.get() {
            quotas.admit(agent, tool, &input)?;
        }
        let slot = self.slot(agent)?;
        // Retried (once) only when the call provably never reached a runner: the session was
        // found closed before the request was handed to it (`Connection::request` refuses a
        // closed connection before writing), or the runner had stopped before the request was
        // written (the engine recorded its end earlier). Otherwise a call is never sent again,
        // whatever happens to the runner.
        let mut retried = false;
        loop {
            let mut conn = self.session(agent).await?;
            if conn.is_closed() {
                clear(slot, &conn);
                conn = self.session(agent).await?;
            }
            let call_id = format!("call_{}", uuid::Uuid::now_v7().simple());
            slot.in_flight.lock().unwrap_or_else(|e| e.into_inner()).insert(call_id.clone(), activation_id.to_string());
            let params = InvokeParams {
                activation_id: activation_id.to_string(),
                tool: tool.to_string(),
                input: Some(input.clone()),
                call_id: call_id.clone(),
                path_rules: path_rules.clone(),
            };
            let sent_at = std::time::SystemTime::now();
            let result =
                tokio::time::timeout(INVOKE_TIMEOUT, conn.call::<_, rpc::ToolOutput>(rpc::method::INVOKE, &params))
                    .await;
            slot.in_flight.lock().unwrap_or_else(|e| e.into_inner()).remove(&call_id);
            let cancelled_by_us = slot.cancelling.lock().unwrap_or_else(|e| e.into_inner()).remove(&call_id);
            // Past this match the runner went away during the call.
            match result {
                Ok(Ok(out)) => {
                    self.record_started_command(agent, tool, &input, out.metadata.as_ref());
                    self.withdraw_read_command(agent, tool, out.metadata.as_ref());
                    return crate::support::tool_results::adapt(&self.tools, agent, tool, out);
                }
                Ok(Err(e)) if e.is_connection_closed() => {}
                Ok(Err(e)) => match ToolError::from_rpc(e) {
                    // A runner stopping on SIGTERM (`docker stop`) cancels its calls before it
                    // closes the socket: a cancel the controller did not ask for is the runner
                    // going.
                    ToolError::Cancelled(_)
                        if !cancelled_by_us && tokio::time::timeout(STOPPING_GRACE, conn.closed()).await.is_ok() => {}
                    error => {
                        return Err(error.map_message(|message| {
                            crate::support::tool_results::relocate(&self.tools, self.backend.as_ref(), tool, message)
                        }));
                    }
                },
                Err(_) => {
                    return Err(ToolError::TimedOut(format!(
                        "{tool} did not answer within {} s",
                        INVOKE_TIMEOUT.as_secs()
                    )));
                }
            }
            clear(slot, &conn);
            let loss = match self.spec(agent) {
                Ok(spec) => self.backend.runner_loss(&spec, LOSS_WAIT).await,
                Err(e) => RunnerLoss { end: RunnerEnd::Unknown(e.to_string()), last_logs: Vec::new() },
            };
            if !retried && loss.stopped_before(sent_at) {
                tracing::info!(%agent, %tool, "the runner had stopped before the call was sent: sending it to a new one");
                retried = true;
                continue;
            }
            tracing::warn!(%agent, %tool, "runner lost: {loss}");
            return Err(ToolError::RunnerLost(format!("runner lost during {tool}: {loss}")));
        }
    }

    /// Stop the calls an activation has in flight (P0).
    pub async fn cancel_calls(&self, agent: &str, activation_id: &str) {
        let Ok(slot) = self.slot(agent) else { return };
        let calls: Vec<String> = {
            let in_flight = slot.in_flight.lock().unwrap_or_else(|e| e.into_inner());
            let calls: Vec<String> =
                in_flight.iter().filter(|(_, a)| *a == activation_id).map(|(c, _)| c.clone()).collect();
            // Under the `in_flight` lock: `invoke` forgets a call there first, then here, so no
            // id is left behind.
            slot.cancelling.lock().unwrap_or_else(|e| e.into_inner()).extend(calls.iter().cloned());
            calls
        };
        if let Some(conn) = live(slot) {
            for call_id in calls {
                let _ = conn.request(rpc::method::CANCEL, json!({ "callId": call_id })).await;
            }
        }
    }
}
