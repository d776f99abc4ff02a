//! Tool-call hooks: `beforeToolCall(context, call)` and `afterToolCall(context, call, result)`
//! exported by a local pack's `controller.mjs`, run for the tools `permissions.hooks` lists
//! (by the tool's own pack, or by the pack an entry names).
//!
//! A `beforeToolCall` verdict (`{decision, reason}`) becomes a rule of the decision point, with
//! the same precedence as every other rule; a changed input (`{input}`) replaces the call's input
//! and is checked against the tool's schema again. An `afterToolCall` result replaces what the
//! caller (the model) receives. Hooks run with [`HOOK_DEADLINE`] and fail closed: a hook that
//! throws, times out or returns something else denies the call (or withholds its result).

use std::time::Duration;

use serde_json::{Value, json};

use crate::config::{AllowPattern, RuleDecision};
use crate::js::CallScope;
use crate::permissions::Rule;
use crate::project::Project;
use crate::support::{ToolHost, ToolOutput, parse_output};
use crate::toolpack::{PackSource, ToolError};

/// How long one hook may take.
pub const HOOK_DEADLINE: Duration = Duration::from_secs(5);

/// The local packs whose hooks apply to calls of `tool`, in the order `permissions.hooks`
/// lists them, each once.
pub fn packs_for(project: &Project, tool: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for target in &project.config.permissions.hooks {
        if !target.tools.matches(tool) {
            continue;
        }
        let pack = match &target.pack {
            Some(p) => Some(p.clone()),
            None => project.registry.tool(tool).map(|(pack, _)| pack.id.clone()),
        };
        let local = pack
            .as_deref()
            .and_then(|id| project.registry.pack(id))
            .is_some_and(|p| matches!(p.source, PackSource::Local { .. }));
        if let Some(pack) = pack.filter(|_| local)
            && !out.contains(&pack)
        {
            out.push(pack);
        }
    }
    out
}

/// What a `beforeToolCall` said.
#[derive(Debug, Clone, PartialEq)]
pub enum Before {
    /// Nothing (the pack has no such export, or it returned nothing).
    Nothing,
    /// A verdict, as a rule for this call.
    Verdict(Rule),
    /// A changed input (not yet checked against the schema).
    Input(Value),
}

/// The caller's side of a hook call.
pub struct HookCall<'a> {
    pub agent_id: &'a str,
    pub activation_id: &'a str,
    pub call_id: &'a str,
    pub tool: &'a str,
    pub input: &'a Value,
}

impl HookCall<'_> {
    fn base(&self, host: &ToolHost, pack: &str) -> String {
        json!({ "project": host.name(), "agent": { "id": self.agent_id }, "activationId": self.activation_id, "toolpackId": pack })
            .to_string()
    }

    fn call_json(&self) -> String {
        json!({ "tool": self.tool, "input": self.input, "callId": self.call_id }).to_string()
    }

    fn scope(&self) -> CallScope {
        CallScope { agent_id: Some(self.agent_id.to_string()), activation_id: Some(self.activation_id.to_string()) }
    }
}

/// Runs `pack`'s `beforeToolCall`; a failure is a deny verdict (fail closed).
pub async fn before(host: &ToolHost, pack: &str, call: &HookCall<'_>) -> Before {
    let source = format!("hook {pack}.beforeToolCall");
    let deny = |why: String| {
        Before::Verdict(Rule::for_tool(
            AllowPattern::Exact(call.tool.to_string()),
            RuleDecision::Deny,
            Some(format!("the beforeToolCall hook of {pack} failed, so the call is refused: {why}")),
            source.clone(),
        ))
    };
    let args = vec![call.base(host, pack), call.call_json()];
    let value = match run(host, pack, "beforeToolCall", args, call.scope()).await {
        Ok(v) => v,
        Err(why) => return deny(why.message().to_string()),
    };
    match value {
        Value::Null => Before::Nothing,
        Value::Object(mut map) => {
            if let Some(input) = map.remove("input") {
                if map.contains_key("decision") {
                    return deny("it returned both a decision and an input; return one".into());
                }
                return Before::Input(input);
            }
            let reason = map.get("reason").and_then(Value::as_str).map(str::to_string);
            match map.get("decision").and_then(Value::as_str).map(str::parse::<RuleDecision>) {
                Some(Ok(decision)) => Before::Verdict(Rule::for_tool(
                    AllowPattern::Exact(call.tool.to_string()),
                    decision,
                    Some(reason.unwrap_or_else(|| format!("{pack} decided {decision}"))),
                    source,
                )),
                None if map.is_empty() => Before::Nothing,
                _ => deny(format!(
                    "it returned {}, expected {{decision: \"allow\"|\"ask\"|\"deny\", reason}}, {{input}} or nothing",
                    Value::Object(map)
                )),
            }
        }
        other => deny(format!("it returned {other}, expected an object or nothing")),
    }
}

/// Runs `pack`'s `afterToolCall` on a result: the changed result, the same one when the hook
/// returned nothing, or why the result must be withheld.
pub async fn after(
    host: &ToolHost,
    pack: &str,
    call: &HookCall<'_>,
    result: ToolOutput,
) -> Result<ToolOutput, ToolError> {
    let result_json = serde_json::to_string(&result).map_err(|e| ToolError::Internal(e.to_string()))?;
    let args = vec![call.base(host, pack), call.call_json(), result_json];
    match run(host, pack, "afterToolCall", args, call.scope()).await? {
        Value::Null => Ok(result),
        value => parse_output(&format!("the afterToolCall hook of {pack}"), value).map_err(ToolError::Failed),
    }
}

async fn run(
    host: &ToolHost,
    pack: &str,
    export: &'static str,
    args: Vec<String>,
    scope: CallScope,
) -> Result<Value, ToolError> {
    match tokio::time::timeout(HOOK_DEADLINE, host.call_controller(pack, export, args, scope)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(ToolError::Failed(e.to_string())),
        Err(_) => Err(ToolError::TimedOut(format!("{export} did not return within {} s", HOOK_DEADLINE.as_secs()))),
    }
}
