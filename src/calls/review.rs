//! The review step of the pipeline: between *decide* and *park*, a call the engine would ask
//! about (an agent in `auto` mode, `permissions.reviewer` set) is shown to the reviewer model,
//! and its verdict folded into the decision (`permissions::reviewer` says how, and that it can
//! only make a rule's decision stricter). Here because it is a model call made for a tool call:
//! `calls` owns the call, `permissions` decide, the model loop's layer provides the model
//! (installed in the tool host as a [`ReviewModel`](crate::permissions::reviewer::ReviewModel)).
//!
//! Calls that are allowed or denied anyway never get here, and a review is the call's own
//! task: it holds no lock while the model answers, so no other agent waits for it. A verdict is
//! reused for an identical call within the cache's time to live; an error, a time-out or an
//! answer that is not the format leaves the call asking, and its reason says why.

use std::time::Instant;

use serde_json::{Value, json};

use crate::config::AgentConfig;
use crate::permissions::Decision;
use crate::permissions::reviewer::{self, PromptInput, ReviewRequest};
use crate::project::Project;
use crate::store::HistoryEntry;
use crate::support::ToolHost;
use crate::toolpack::ToolDefinition;

/// The call being reviewed.
pub(super) struct Reviewed<'a> {
    pub agent: &'a AgentConfig,
    /// The agent's mode in force.
    pub mode: crate::config::PermissionMode,
    pub activation_id: &'a str,
    pub call_key: Option<&'a str>,
    pub tool: &'a str,
    pub def: &'a ToolDefinition,
    pub input: &'a Value,
}

/// The decision after the review (the engine's own when no review applies).
pub(super) async fn review(host: &ToolHost, project: &Project, call: &Reviewed<'_>, decision: Decision) -> Decision {
    let config = project.config.permissions.reviewer.as_ref();
    let Some(config) = config.filter(|_| reviewer::applies(config, call.mode, &decision)) else {
        return decision;
    };
    // A request this call already holds (announced with its turn, or made before a restart)
    // was made on a review: it stays the call's one request.
    match host.store.adoptable_approval(call.activation_id, call.call_key, call.tool, call.input) {
        Ok(Some(_)) => return decision,
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(agent = %call.agent.id, tool = call.tool, "looking for the call's approval request: {e}")
        }
    }
    let preset = config.model.as_str();
    let key = reviewer::cache_key(preset, &call.agent.id, call.tool, call.input);
    if let Some(verdict) = host.reviewer.cached(&key, Instant::now()) {
        return reviewer::combine(&decision, &verdict, preset, true);
    }
    let Some(model) = host.reviewer.model() else {
        return reviewer::fallback(&decision, preset, "no model loop runs in this process to ask it");
    };
    let arguments = host.audit.redacted(call.input);
    let turns = last_turns(host, &call.agent.id, config.turns());
    let (system, user) = reviewer::prompt(&PromptInput {
        project_task: &project.config.task,
        agent: call.agent,
        tool: call.tool,
        tool_description: &call.def.description,
        arguments: &arguments,
        decision: &decision,
        turns: &turns,
    });
    let request = ReviewRequest {
        preset: preset.to_string(),
        agent_id: call.agent.id.clone(),
        activation_id: call.activation_id.to_string(),
        system,
        user,
    };
    let timeout = config.timeout();
    match tokio::time::timeout(timeout, model.review(request)).await {
        Err(_) => {
            let waited = humantime::format_duration(timeout);
            reviewer::fallback(
                &decision,
                preset,
                &format!("it did not answer within {waited}, permissions.reviewer.timeout"),
            )
        }
        Ok(Err(e)) => reviewer::fallback(&decision, preset, &format!("its model call failed: {e}")),
        Ok(Ok(text)) => match reviewer::parse(&text) {
            Ok(verdict) => {
                let decided = reviewer::combine(&decision, &verdict, preset, false);
                host.reviewer.remember(key, verdict, config.cache_ttl(), config.cache_size(), Instant::now());
                decided
            }
            Err(why) => reviewer::fallback(&decision, preset, &why),
        },
    }
}

/// The agent's last `n` history entries as one line each, secrets masked as the audit masks
/// them (arguments by their keys too) and long texts cut.
fn last_turns(host: &ToolHost, agent_id: &str, n: usize) -> Vec<String> {
    let records = match host.store.last_history(agent_id, n) {
        Ok(records) => records,
        Err(e) => {
            tracing::warn!(agent = %agent_id, "reading the history the reviewer sees: {e}");
            return Vec::new();
        }
    };
    // Masked first, then cut: a cut could split a secret from what shows it is one.
    let masked = |text: &str| {
        let masked = host.audit.redacted(&json!(text));
        masked.as_str().unwrap_or_default().chars().take(400).collect::<String>()
    };
    records
        .iter()
        .filter_map(|r| match &r.entry {
            HistoryEntry::ActivationPrompt { text, .. } => Some(format!("prompt: {}", masked(text))),
            HistoryEntry::AssistantOutput { text, tool_calls, .. } => {
                let calls: Vec<String> =
                    tool_calls.iter().map(|c| format!("{}({})", c.name, host.audit.redacted(&c.arguments))).collect();
                Some(format!("assistant: {} calls: [{}]", masked(text), calls.join(", ")))
            }
            HistoryEntry::ToolResult { name, content, is_error, .. } => {
                let error = if *is_error { " (error)" } else { "" };
                Some(format!("result of {name}{error}: {}", masked(content)))
            }
            HistoryEntry::HistoryCompaction { summary, .. } => Some(format!("summary: {}", masked(summary))),
            HistoryEntry::Signals { .. } | HistoryEntry::Unrecognized { .. } => None,
        })
        .collect()
}
