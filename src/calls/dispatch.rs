//! Dispatch: a call decided `allow` (or allowed after its approval) runs where its tool runs —
//! a controller-side handler (`support::builtin_tools`) or the agent's runner ([`RunnerTools`]).
//! The tool's `runsIn` decides; nothing here looks at a tool's name. A runner call carries the
//! agent's `deny`/`ask` path rules for the tool (the config's and the live ones, read now), which
//! the runner applies to what it resolves.

use serde_json::Value;

use super::RunnerTools;
use crate::support::ToolHost;
use crate::support::builtin_tools::{self, Caller};
use crate::toolpack::output::ToolOutput;
use crate::toolpack::{RunsIn, ToolDefinition, ToolError};

/// Runs an allowed call where its tool runs: the controller or the agent's runner.
pub async fn dispatch(
    host: &ToolHost,
    runner: &dyn RunnerTools,
    caller: &Caller,
    def: &ToolDefinition,
    tool: &str,
    input: Value,
) -> Result<ToolOutput, ToolError> {
    match def.runs_in {
        RunsIn::Controller => builtin_tools::call(host, caller, tool, &input).await,
        RunsIn::Runner => {
            let project = host.project.snapshot();
            let rules = match project.config.agent(&caller.agent_id) {
                Some(agent) => {
                    let live = crate::permissions::live::rules_for_call(&host.store, &agent.id)
                        .map_err(ToolError::Internal)?;
                    crate::permissions::runner_path_rules(&project, agent, (tool, def, &input), &live)
                }
                None => Vec::new(),
            };
            runner.invoke(&caller.agent_id, &caller.activation_id, tool, input, rules).await
        }
    }
}
