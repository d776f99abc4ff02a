//! The runner seam: what the call pipeline (`crate::calls`) needs of an agent's runner to run a
//! runner-side tool — built-in `file.*`/`shell.*`/`git.*` and local packs' `runner.mjs` tools —
//! and to stop what it runs for an activation. `AgentRunners` (`runners.rs`) implements it for
//! real runners; [`NoRunner`] stands where no runner is needed. Defined here, below the pipeline
//! and the activation, so the runners implement it without importing anything above them.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use crate::rpc::PathRule;
use crate::toolpack::ToolError;
use crate::toolpack::output::ToolOutput;

/// Runs runner-side tools in an agent's runner.
pub trait RunnerTools: Send + Sync + 'static {
    /// `path_rules`: the agent's `deny`/`ask` path rules for `tool`, which the runner matches
    /// against the paths it resolves.
    fn invoke(
        &self,
        agent_id: &str,
        activation_id: &str,
        tool: &str,
        input: Value,
        path_rules: Vec<PathRule>,
    ) -> RunnerFuture;
    /// Stop whatever the agent's runner is doing for this activation (P0).
    fn cancel(&self, agent_id: &str, activation_id: &str);
    /// An activation of the agent starts: get its runner ready in the background, so that the
    /// first tool call does not wait for a container (`backend.docker.prewarm`).
    fn prewarm(&self, _agent_id: &str) {}
}

pub type RunnerFuture = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send>>;

/// A runner that is not there: every runner-side tool fails with a clear message.
pub struct NoRunner(pub String);

impl RunnerTools for NoRunner {
    fn invoke(
        &self,
        _agent: &str,
        _activation: &str,
        tool: &str,
        _input: Value,
        _rules: Vec<PathRule>,
    ) -> RunnerFuture {
        let why =
            ToolError::RunnerLost(format!("{tool} runs in the agent's runner, which is not available: {}", self.0));
        Box::pin(async move { Err(why) })
    }
    fn cancel(&self, _agent: &str, _activation: &str) {}
}
