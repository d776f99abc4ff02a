//! The support broker: what a runner may ask of the controller (`callSupport`, `recordSignal`),
//! checked in the order of DESIGN.md, each step with its own error (reference §3.5 texts):
//! the agent is the one whose socket the request came over (the connection carries its identity
//! and its token was checked at `hello`), the activation exists, belongs to the agent and is
//! still running, the toolpack is registered, the tool is in it and allowed for the agent, and
//! the input matches the tool's schema. Only then does a handler run.

use serde_json::Value;

use super::builtin_tools::{self, Caller};
use super::{InvokeError, ToolHost, ToolOutput, describe_input_errors};
use crate::rpc::{CallSupportParams, RecordSignalParams};
use crate::store::{ActivationRecord, ActivationStatus, SignalRecord, SignalRequest};

/// Steps 3–5: the activation exists, is the agent's, and (when asked) is still running.
pub fn check_activation(
    host: &ToolHost,
    agent_id: &str,
    activation_id: &str,
    require_running: bool,
) -> Result<ActivationRecord, String> {
    if host.project.config.agent(agent_id).is_none() {
        return Err(format!("Unknown agent: {agent_id}"));
    }
    let activation = host
        .store
        .activation(activation_id)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("Unknown activation: {activation_id}"))?;
    if activation.agent_id != agent_id {
        return Err(format!("Activation {activation_id} does not belong to {agent_id}"));
    }
    if require_running && activation.status != ActivationStatus::Running {
        return Err(format!(
            "Activation {activation_id} is {}; no more tool calls are accepted",
            activation.status.as_str()
        ));
    }
    Ok(activation)
}

/// A `callSupport` from `agent_id`'s runner.
pub async fn call_support(host: &ToolHost, agent_id: &str, params: CallSupportParams) -> Result<ToolOutput, String> {
    check_activation(host, agent_id, &params.activation_id, true)?;
    let registry = &host.project.registry;
    let pack = registry.pack(&params.toolpack_id).ok_or_else(|| format!("Unknown toolpack: {}", params.toolpack_id))?;
    if !pack.tools.iter().any(|t| t.name == params.tool) {
        return Err(format!("Tool {} is not in toolpack {}", params.tool, params.toolpack_id));
    }
    let agent = host.project.config.agent(agent_id).ok_or_else(|| format!("Unknown agent: {agent_id}"))?;
    if !agent.tools.allows(&params.tool) {
        return Err(format!("Tool not allowed for {agent_id}: {}", params.tool));
    }
    let input = if params.input.is_null() { Value::Object(Default::default()) } else { params.input };
    // Step 9, the schema: checked here for built-in tools, and by `ToolHost::support` (the one
    // path into a pack's controller module) for local ones — once either way.
    if builtin_tools::is_controller_tool(&params.tool) {
        registry
            .validate_input(&params.tool, &input)
            .map_err(|errors| format!("Invalid input for {}: {}", params.tool, describe_input_errors(&errors)))?;
        let caller = Caller { agent_id: agent_id.to_string(), activation_id: params.activation_id.clone() };
        return builtin_tools::call(host, &caller, &params.tool, &input).map_err(|e| e.to_string());
    }
    if !pack.is_local() {
        return Err(format!("{} has no controller-side handler; it runs in the runner", params.tool));
    }
    host.support(agent_id, &params.activation_id, &params.toolpack_id, &params.tool, input).await.map_err(|e| match e {
        InvokeError::InvalidInput(errors) => {
            format!("Invalid input for {}: {}", params.tool, describe_input_errors(&errors))
        }
        other => other.to_string(),
    })
}

/// A `recordSignal` from `agent_id`'s runner: only for its running activation, attributed to it.
/// No `status` and no `notBefore` on this path (reference §3.6).
pub fn record_signal(host: &ToolHost, agent_id: &str, params: RecordSignalParams) -> Result<Vec<SignalRecord>, String> {
    check_activation(host, agent_id, &params.activation_id, true)?;
    let s = params.signal;
    host.store
        .record_signal(SignalRequest {
            kind: s.kind,
            source_agent: Some(agent_id.to_string()),
            source_activation: Some(params.activation_id),
            target_agent: s.target_agent,
            target_channel: s.target_channel,
            priority: s.priority,
            payload: s.payload.unwrap_or(Value::Null),
            status: None,
            useful_effect: s.useful_effect,
            not_before: None,
        })
        .map_err(|e| e.to_string())
}
