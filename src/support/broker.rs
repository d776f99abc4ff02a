//! The support broker: what a runner may ask of the controller (`callSupport`, `recordSignal`),
//! checked in the order of DESIGN.md, each step with its own error (reference §3.5 texts):
//! the agent is the one whose socket the request came over (the connection carries its identity
//! and its token was checked at `hello`), the activation exists, belongs to the agent and is
//! still running, the toolpack is registered, the tool is in it and allowed for the agent, and
//! the input matches the tool's schema. Only then does a handler run. A `recordSignal` passes
//! the same activation checks, then the communication policy for that agent (`policy`).

use serde_json::Value;

use super::builtin_tools::{self, Caller};
use super::{InvokeError, ToolHost, ToolOutput, policy};
use crate::config::Priority;
use crate::rpc::{CallSupportParams, RecordSignalParams};
use crate::store::{ActivationRecord, ActivationStatus, SignalRecord, SignalRequest};
use crate::toolpack::{RunsIn, ToolError};

/// Steps 3–5: the activation exists, is the agent's, and (when asked) is still running.
pub fn check_activation(
    host: &ToolHost,
    agent_id: &str,
    activation_id: &str,
    require_running: bool,
) -> Result<ActivationRecord, ToolError> {
    if host.project.config.agent(agent_id).is_none() {
        return Err(ToolError::Rejected(format!("Unknown agent: {agent_id}")));
    }
    let activation = host
        .store
        .activation(activation_id)?
        .ok_or_else(|| ToolError::Rejected(format!("Unknown activation: {activation_id}")))?;
    if activation.agent_id != agent_id {
        return Err(ToolError::Rejected(format!("Activation {activation_id} does not belong to {agent_id}")));
    }
    if require_running && activation.status != ActivationStatus::Running {
        return Err(ToolError::Rejected(format!(
            "Activation {activation_id} is {}; no more tool calls are accepted",
            activation.status.as_str()
        )));
    }
    Ok(activation)
}

/// A `callSupport` from `agent_id`'s runner.
pub async fn call_support(host: &ToolHost, agent_id: &str, params: CallSupportParams) -> Result<ToolOutput, ToolError> {
    check_activation(host, agent_id, &params.activation_id, true)?;
    let project = host.project.snapshot();
    let registry = &project.registry;
    let pack = registry
        .pack(&params.toolpack_id)
        .ok_or_else(|| ToolError::Rejected(format!("Unknown toolpack: {}", params.toolpack_id)))?;
    let Some(def) = pack.tools.iter().find(|t| t.name == params.tool) else {
        return Err(ToolError::Rejected(format!("Tool {} is not in toolpack {}", params.tool, params.toolpack_id)));
    };
    let agent =
        host.project.config.agent(agent_id).ok_or_else(|| ToolError::Rejected(format!("Unknown agent: {agent_id}")))?;
    if !agent.tools.allows(&params.tool) {
        return Err(ToolError::Rejected(format!("Tool not allowed for {agent_id}: {}", params.tool)));
    }
    let input = if params.input.is_null() { Value::Object(Default::default()) } else { params.input };
    // Step 9, the schema: checked here for built-in tools, and by `ToolHost::support` (the one
    // path into a pack's controller module) for local ones — once either way.
    if !pack.is_local() {
        if def.runs_in != RunsIn::Controller {
            return Err(ToolError::Rejected(format!(
                "{} has no controller-side handler; it runs in the runner",
                params.tool
            )));
        }
        registry
            .validate_input(&params.tool, &input)
            .map_err(|errors| ToolError::invalid_input(&params.tool, &errors))?;
        let caller = Caller { agent_id: agent_id.to_string(), activation_id: params.activation_id.clone() };
        return builtin_tools::call(host, &caller, &params.tool, &input).await;
    }
    host.support(agent_id, &params.activation_id, &params.toolpack_id, &params.tool, input).await.map_err(|e| match e {
        InvokeError::InvalidInput(errors) => ToolError::invalid_input(&params.tool, &errors),
        other => ToolError::from(other),
    })
}

/// A `recordSignal` from `agent_id`'s runner: only for its running activation, attributed to it,
/// and only what [`policy::check_signal`] lets an agent record. No `status` and no `notBefore`
/// on this path (reference §3.6).
pub fn record_signal(
    host: &ToolHost,
    agent_id: &str,
    params: RecordSignalParams,
) -> Result<Vec<SignalRecord>, ToolError> {
    check_activation(host, agent_id, &params.activation_id, true)?;
    let s = params.signal;
    let payload = s.payload.unwrap_or(Value::Null);
    let route = policy::Route {
        recipient: s.target_agent.as_deref(),
        channel: s.target_channel.as_deref(),
        priority: policy::priority(s.priority.as_deref(), Priority::P2)?,
    };
    policy::check_signal(&host.project.config.communication, agent_id, &s.kind, route, &payload)?;
    Ok(host.store.record_signal(SignalRequest {
        kind: s.kind,
        source_agent: Some(agent_id.to_string()),
        source_activation: Some(params.activation_id),
        target_agent: s.target_agent,
        target_channel: s.target_channel,
        priority: s.priority,
        payload,
        status: None,
        useful_effect: s.useful_effect,
        not_before: None,
    })?)
}
