//! The tool-call pipeline: every tool call, whoever makes it — the model loop (`activation`),
//! `suzumio tool call`, the WebUI, MCP clients (`mcp_serve`) — goes through [`execute_tool`],
//! and an approval's resume goes on inside it with the stored call. The steps, in order:
//!
//! ```text
//! resolve ─ allowlist ─ switch ─ record start ─ schema ─ before-hooks ─ decide ─┬─ allow ───────────────┐
//!                                                                             ├─ ask: park (approvals) ┤─ dispatch ─ after-hooks ─┐
//!                                                                             └─ deny: refuse ─────────┼──────────────────────────┴─ record finish
//!                                                                                    audit (decision, hooks, resolution)
//! ```
//!
//! - *resolve*: the tool in the registry (`Unknown tool`), *allowlist*: the agent may call it,
//!   *switch*: no one switched it off for this agent at run time (`catalog::switch`; the
//!   refusal says who did and how to switch it on; checked again after an approval's wait).
//!   All three refuse with `ToolError::Rejected` and record no tool call; a model's call so
//!   refused is counted with its activation (`tool_call.rejected`, [`rejected`]).
//! - *schema*: the input against the tool's `inputSchema` (or the model's arguments were not
//!   JSON); a refusal is recorded with the call.
//! - *before-hooks* (`hooks.rs`): packs' `beforeToolCall`, a verdict joins the rules, a changed
//!   input is checked again.
//! - *decide*: `permissions::decide_in` (rules, remembered approvals, live rules, hook verdicts,
//!   the agent's mode in force — live rules and a switched mode are read from the store at each
//!   call, so a change takes effect from the next one). It only decides; the decision is
//!   audited here.
//! - *review* (`review.rs`): an `ask` of an agent in `auto` mode goes to the reviewer model
//!   first when `permissions.reviewer` is set; its verdict can only make a rule stricter.
//! - *park*: an `ask` is stored by `permissions::approvals::ask`, which waits until it is
//!   decided (durable across restarts) and answers whether to run; this module then runs
//!   exactly the stored call.
//! - *dispatch* (`dispatch.rs`): where the tool runs — a controller handler, or the agent's
//!   runner through [`RunnerTools`].
//! - *after-hooks*: packs' `afterToolCall` on the result; a failing hook withholds it.
//! - *record*: the finish (outcome, error kind) of the call recorded at its start.
//!
//! Layer: below the model loop and the servers, above `permissions`, `support` and the store.

pub mod cli;
mod dispatch;
pub mod hooks;
mod review;

use serde_json::{Value, json};

pub use dispatch::dispatch;

use crate::config::AgentConfig;
use crate::permissions::approvals::{self, Approvals, PendingCall};
use crate::permissions::{self, Behavior, audit};
use crate::project::Project;
use crate::store::ToolCallOutcome;
use crate::support::ToolHost;
use crate::support::builtin_tools::Caller;
pub use crate::support::runner_tools::{NoRunner, RunnerFuture, RunnerTools};
use crate::toolpack::output::ToolOutput;
use crate::toolpack::{INVALID_JSON_KEY, ToolDefinition, ToolError};

/// One tool call of an agent's activation through the whole pipeline (see the module header),
/// from a caller that does not replay it (the CLI, an MCP client, the WebUI).
pub async fn execute_tool(
    host: &ToolHost,
    runner: &dyn RunnerTools,
    agent_id: &str,
    activation_id: &str,
    tool: &str,
    input: Value,
) -> Result<ToolOutput, ToolError> {
    execute(host, runner, (agent_id, activation_id), None, tool, input).await
}

/// A call of a model turn: [`execute_tool`], with the model's id of the call (`call_key`), so
/// that an approval it asks for is this call's own, found again when a restart resumes the
/// activation and makes the call again.
pub async fn execute_model_call(
    host: &ToolHost,
    runner: &dyn RunnerTools,
    agent_id: &str,
    activation_id: &str,
    call_key: &str,
    tool: &str,
    input: Value,
) -> Result<ToolOutput, ToolError> {
    execute(host, runner, (agent_id, activation_id), Some(call_key), tool, input).await
}

async fn execute(
    host: &ToolHost,
    runner: &dyn RunnerTools,
    (agent_id, activation_id): (&str, &str),
    call_key: Option<&str>,
    tool: &str,
    input: Value,
) -> Result<ToolOutput, ToolError> {
    // The project version this call started with serves it to its end, even if an MCP server's
    // list changes meanwhile.
    let project = host.project.snapshot();
    let store = &host.store;
    let agent =
        project.config.agent(agent_id).ok_or_else(|| ToolError::Rejected(format!("Unknown agent: {agent_id}")))?;
    let refused = match project.registry.tool(tool) {
        None => Err(format!("Unknown tool: {tool}")),
        Some(_) if !project.registry.may_call(agent, tool) => Err(format!("Tool not allowed for {agent_id}: {tool}")),
        // Switched off for this agent at run time: refused like a tool outside the allowlist,
        // whoever calls it (a model with an older tool list, the CLI, MCP, the WebUI).
        Some(found) => match switched_off(host, agent_id, tool)? {
            Some(reason) => Err(reason),
            None => Ok(found),
        },
    };
    let (pack, def) = match refused {
        Ok(found) => found,
        Err(reason) => {
            // A model's call is counted with its activation and shown as it happens; other
            // callers get the error back at once.
            if call_key.is_some() {
                rejected(host, agent_id, activation_id, call_key, tool, &reason);
            }
            return Err(ToolError::Rejected(reason));
        }
    };
    let input = if input.is_null() { json!({}) } else { input };
    // Every call of a known, allowed tool is recorded, including the ones refused for their input.
    let call_id = store.start_tool_call_of(
        activation_id,
        agent_id,
        (tool, Some(&pack.id)),
        &input,
        def.target(&input).as_deref(),
        call_key,
    )?;
    let caller = Caller { agent_id: agent_id.to_string(), activation_id: activation_id.to_string() };
    let invalid = match input.as_object().and_then(|m| m.get(INVALID_JSON_KEY)).and_then(Value::as_str) {
        Some(raw) => Some(ToolError::Rejected(format!("The arguments are not valid JSON: {raw}"))),
        None => project.registry.validate_input(tool, &input).err().map(|e| ToolError::invalid_input(tool, &e)),
    };
    let result = match invalid {
        Some(problem) => Err(problem),
        None => {
            let call = CallRef { agent, def, tool, call_id: &call_id, call_key };
            decide_and_run(host, &project, runner, &caller, call, input).await
        }
    };
    let (outcome, output, error) = match &result {
        Ok(out) => (ToolCallOutcome::Completed, serde_json::to_value(out).ok(), None),
        Err(e) => (ToolCallOutcome::Failed, None, Some(e)),
    };
    if let Err(e) = store.finish_tool_call(
        &call_id,
        outcome,
        output.as_ref(),
        error.map(ToolError::message),
        error.map(ToolError::kind),
    ) {
        // The call ran; its result still goes back to the model, but the record stays open.
        tracing::error!(agent = %agent_id, tool, call = %call_id, "recording the end of a tool call: {e}");
    }
    result
}

/// Record that a model's call was refused before it was recorded (`tool` as the model named
/// it), with the reason: the activation counts it and `run`, `show` and the WebUI say so. A
/// failure to record it only loses the count.
pub fn rejected(
    host: &ToolHost,
    agent_id: &str,
    activation_id: &str,
    call_key: Option<&str>,
    tool: &str,
    reason: &str,
) {
    if let Err(e) = host.store.record_rejected_call(activation_id, agent_id, tool, call_key, reason) {
        tracing::warn!(agent = %agent_id, activation = %activation_id, tool, "recording a rejected call: {e}");
    }
}

/// Before the calls of one model turn run: the calls that will be asked get their requests
/// together (`permissions::approvals::announce_turn`), so they can be decided one by one or at once.
/// Each call is `(the model's id of it, tool, input)`.
pub fn announce_turn(host: &ToolHost, agent: &AgentConfig, activation_id: &str, calls: &[(String, String, Value)]) {
    let project = host.project.snapshot();
    approvals::announce_turn(approvals_of(host, &project), agent, activation_id, calls);
}

/// Asks for approval of a call already decided `ask`, and on allow runs exactly that call.
pub async fn ask_and_run(
    host: &ToolHost,
    runner: &dyn RunnerTools,
    pending: PendingCall<'_>,
) -> Result<ToolOutput, ToolError> {
    let project = host.project.snapshot();
    let Some((_, def)) = project.registry.tool(pending.tool) else {
        return Err(ToolError::Rejected(format!("Unknown tool: {}", pending.tool)));
    };
    let caller = Caller { agent_id: pending.agent_id.to_string(), activation_id: pending.activation_id.to_string() };
    run_once_approved(host, &project, runner, &caller, def, &pending).await
}

/// The park step: wait for the stored request's decision, then run exactly the stored call.
async fn run_once_approved(
    host: &ToolHost,
    project: &Project,
    runner: &dyn RunnerTools,
    caller: &Caller,
    def: &ToolDefinition,
    pending: &PendingCall<'_>,
) -> Result<ToolOutput, ToolError> {
    approvals::ask(approvals_of(host, project), pending).await?;
    // Switched off while it waited: the approval does not bring it back.
    if let Some(reason) = switched_off(host, pending.agent_id, pending.tool)? {
        return Err(ToolError::Rejected(reason));
    }
    dispatch(host, runner, caller, def, pending.tool, pending.input.clone()).await
}

/// The *switch* step: why `tool` is switched off for `agent_id` now, if it is (the store's
/// switch row, read by its key; `catalog::switched_off_reason` words it).
fn switched_off(host: &ToolHost, agent_id: &str, tool: &str) -> Result<Option<String>, ToolError> {
    let switch = host
        .store
        .tool_switch(agent_id, tool)
        .map_err(|e| ToolError::Internal(format!("cannot read the tool switches of {agent_id}: {e}")))?;
    Ok(switch.as_ref().and_then(crate::catalog::switched_off_reason))
}

fn approvals_of<'a>(host: &'a ToolHost, project: &'a Project) -> Approvals<'a> {
    Approvals { store: &host.store, audit: &host.audit, project }
}

/// The call `execute_tool` decides, once its input passed the schema.
struct CallRef<'a> {
    agent: &'a AgentConfig,
    def: &'a ToolDefinition,
    tool: &'a str,
    call_id: &'a str,
    call_key: Option<&'a str>,
}

/// From the before-hooks to the after-hooks: the hooks' verdicts and changed input, the
/// decision and its audit entry, then the call (or its denial, or its approval request and
/// then the call), then the `afterToolCall` hooks on the result.
async fn decide_and_run(
    host: &ToolHost,
    project: &Project,
    runner: &dyn RunnerTools,
    caller: &Caller,
    call: CallRef<'_>,
    mut input: Value,
) -> Result<ToolOutput, ToolError> {
    let CallRef { agent, def, tool, call_id, call_key } = call;
    let (agent_id, activation_id) = (caller.agent_id.as_str(), caller.activation_id.as_str());
    let hook_packs = hooks::packs_for(project, tool);
    // Rules beyond `suzumio.yaml` that decide this call: hook verdicts, the approvals store's
    // remembered rules (`--remember`) and the live rules, added here with the same precedence.
    let mut extra = approvals::remembered_rules_for(&host.store, agent_id, activation_id, tool)
        .map_err(|e| ToolError::Internal(format!("cannot read the remembered permission rules: {e}")))?;
    extra.extend(permissions::live::rules_for_call(&host.store, agent_id).map_err(ToolError::Internal)?);
    let mode = permissions::live::effective_mode(&host.store, agent).map_err(ToolError::Internal)?;
    for pack in &hook_packs {
        let hook_call = hooks::HookCall { agent_id, activation_id, call_id, tool, input: &input };
        match hooks::before(host, pack, &hook_call).await {
            hooks::Before::Nothing => {}
            hooks::Before::Verdict(rule) => extra.push(rule),
            hooks::Before::Input(changed) => {
                let changed = if changed.is_null() { json!({}) } else { changed };
                if let Err(e) = project.registry.validate_input(tool, &changed) {
                    let problem = ToolError::invalid_input(tool, &e);
                    let message = format!("the beforeToolCall hook of {pack} changed the input: {}", problem.message());
                    audit_hook(host, mode, caller, call_id, tool, &changed, pack, Behavior::Deny, &message);
                    return Err(ToolError::Rejected(message));
                }
                audit_hook(host, mode, caller, call_id, tool, &changed, pack, Behavior::Allow, "changed the input");
                input = changed;
            }
        }
    }
    let decision =
        permissions::decide_in(project, &permissions::Call { agent, tool, def, input: &input }, &extra, mode);
    let reviewed = review::Reviewed { agent, mode, activation_id, call_key, tool, def, input: &input };
    let decision = review::review(host, project, &reviewed, decision).await;
    host.audit.record_decided(
        audit::AuditEntry {
            time: host.store.now(),
            kind: audit::EntryKind::Decision,
            agent: agent_id.to_string(),
            activation: Some(activation_id.to_string()),
            call_id: Some(call_id.to_string()),
            tool: tool.to_string(),
            mode: mode.as_str().to_string(),
            decision: decision.behavior,
            source: decision.source.clone(),
            reason: decision.reason.clone(),
            risk: Some(decision.risk),
            user_action: None,
            feedback: None,
            arguments: input.clone(),
        },
        &decision,
    );
    let policy = permissions::ask_policy(project, agent);
    let pending =
        PendingCall { agent_id, activation_id, call_id, call_key, tool, input: &input, decision: &decision, policy };
    // An ask is recorded with its request; a reviewer's allow is recorded here, so a UI can
    // show that a model, not a person, let the call run.
    let by_reviewer = decision.code == permissions::ReasonCode::Reviewer && decision.behavior == Behavior::Allow;
    if decision.behavior == Behavior::Deny
        || decision.source.contains(approvals::REMEMBERED_SOURCE)
        || decision.source.starts_with(permissions::live::LIVE_SOURCE)
        || by_reviewer
    {
        approvals::record_decision(&host.store, &pending);
    }
    let result = match decision.behavior {
        Behavior::Allow => dispatch(host, runner, caller, def, tool, input.clone()).await,
        Behavior::Deny => Err(ToolError::Denied(permissions::denial_message(tool, &decision))),
        Behavior::Ask => run_once_approved(host, project, runner, caller, def, &pending).await,
    };
    let mut output = result?;
    for pack in &hook_packs {
        let hook_call = hooks::HookCall { agent_id, activation_id, call_id, tool, input: &input };
        output = match hooks::after(host, pack, &hook_call, output).await {
            Ok(changed) => changed,
            Err(why) => {
                let message =
                    format!("the afterToolCall hook of {pack} failed, so the result of {tool} is withheld: {why}");
                audit_hook(host, mode, caller, call_id, tool, &input, pack, Behavior::Deny, &message);
                return Err(ToolError::Denied(message));
            }
        };
    }
    Ok(output)
}

#[allow(clippy::too_many_arguments)]
fn audit_hook(
    host: &ToolHost,
    mode: crate::config::PermissionMode,
    caller: &Caller,
    call_id: &str,
    tool: &str,
    input: &Value,
    pack: &str,
    decision: Behavior,
    reason: &str,
) {
    host.audit.record(audit::AuditEntry {
        time: host.store.now(),
        kind: audit::EntryKind::Hook,
        agent: caller.agent_id.clone(),
        activation: Some(caller.activation_id.clone()),
        call_id: Some(call_id.to_string()),
        tool: tool.to_string(),
        mode: mode.as_str().to_string(),
        decision,
        source: format!("hook {pack}"),
        reason: reason.to_string(),
        risk: None,
        user_action: None,
        feedback: None,
        arguments: input.clone(),
    });
}
