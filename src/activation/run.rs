//! The model loop of one activation, run in the controller (DESIGN: API keys never enter a
//! container; P0 and P1 are handled locally). For each model of the agent's preset (model-list
//! fallback): replay the agent's history, call the model with the agent's allowed tools (names
//! made model-safe; `presentation` never sent), and run every tool call it makes:
//!
//! 1. map the safe name back, refuse unknown tools, check the input against the tool's schema
//!    and answer schema failures to the model with the failing paths — nothing runs then;
//! 2. record the call (start), run it — core tools and `web.fetch` in the controller, `file.*`,
//!    `shell.exec` and local packs' tools in the agent's runner — and record the result (finish);
//! 3. hand over P1 signals at this tool boundary, appended to the result;
//! 4. stop after `coordination.wait_for_signal` or `completion.submit`.
//!
//! The activation then completes (no-effect nudge if it had no useful effect) or fails
//! (every model failed, `maxToolCalls` exceeded). A P0 cancels it through [`ActivationHandle`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::budget::{ActivationBudget, Stop};
use super::prompt::{self, PromptInput};
use super::providers::{
    ChatMessage, ModelProvider, ModelTool, ProviderPool, ResolvedModel, RetryPolicy, resolve_presets, safe_tool_names,
};
use crate::config::AgentConfig;
use crate::scheduler::{ActivationLauncher, nudges};
use crate::store::{
    ActivationOutcome, ActivationRecord, HistoryEntry, RecordedCall, RecordedUsage, SignalRecord, ToolCallOutcome,
};
use crate::support::builtin_tools::{self, Caller};
use crate::support::{ToolHost, ToolOutput};
use crate::toolpack::{RunsIn, ToolError};

/// Runs runner-side tools (built-in `file.*`/`shell.exec` and local packs' `runner.mjs` tools)
/// in an agent's runner. Implemented by the agent supervisor (issue [D]).
pub trait RunnerTools: Send + Sync + 'static {
    fn invoke(&self, agent_id: &str, activation_id: &str, tool: &str, input: Value) -> RunnerFuture;
    /// Stop whatever the agent's runner is doing for this activation (P0).
    fn cancel(&self, agent_id: &str, activation_id: &str);
}

pub type RunnerFuture = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send>>;

/// A runner that is not there: every runner-side tool fails with a clear message.
pub struct NoRunner(pub String);

impl RunnerTools for NoRunner {
    fn invoke(&self, _agent: &str, _activation: &str, tool: &str, _input: Value) -> RunnerFuture {
        let why =
            ToolError::RunnerLost(format!("{tool} runs in the agent's runner, which is not available: {}", self.0));
        Box::pin(async move { Err(why) })
    }
    fn cancel(&self, _agent: &str, _activation: &str) {}
}

/// Starts activations as tasks of the controller; implements the scheduler's launcher.
pub struct Activations {
    /// Itself, so `ActivationLauncher::start(&self)` can spawn an owned task.
    me: Weak<Activations>,
    tools: Arc<ToolHost>,
    runner: Arc<dyn RunnerTools>,
    providers: ProviderPool,
    running: Mutex<HashMap<String, watch::Sender<bool>>>,
    /// Every activation task; `shutdown` waits for them.
    tasks: TaskTracker,
    /// Cancelled at shutdown: every running activation stops and records why.
    stopping: CancellationToken,
}

impl Activations {
    pub fn new(tools: Arc<ToolHost>, runner: Arc<dyn RunnerTools>) -> Arc<Activations> {
        let providers = ProviderPool::new(|name| std::env::var(name).ok(), RetryPolicy::default());
        Activations::with_providers(tools, runner, providers)
    }

    pub fn with_providers(
        tools: Arc<ToolHost>,
        runner: Arc<dyn RunnerTools>,
        providers: ProviderPool,
    ) -> Arc<Activations> {
        Arc::new_cyclic(|me| Activations {
            me: me.clone(),
            tools,
            runner,
            providers,
            running: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
            stopping: CancellationToken::new(),
        })
    }

    fn me(&self) -> Option<Arc<Activations>> {
        self.me.upgrade()
    }

    /// How many activations are running now.
    pub fn running(&self) -> usize {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Stop every running activation and wait (at most `grace`) until each has recorded its
    /// end: cancelled by shutdown, its delivered signals back to pending, its open tool calls
    /// closed. No activation starts afterwards. Returns how many were still running.
    pub async fn shutdown(&self, grace: std::time::Duration) -> usize {
        self.stopping.cancel();
        self.tasks.close();
        let running = self.running();
        if tokio::time::timeout(grace, self.tasks.wait()).await.is_err() {
            tracing::warn!("{} activation(s) did not stop within {} s", self.running(), grace.as_secs());
        }
        running
    }

    /// Run one activation to its end (also what `start` spawns).
    pub async fn run(self: Arc<Self>, activation: ActivationRecord, signals: Vec<SignalRecord>) {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        self.running.lock().unwrap_or_else(|e| e.into_inner()).insert(activation.id.clone(), cancel_tx);
        let outcome = tokio::select! {
            outcome = self.drive(&activation, &signals, cancel_rx) => outcome,
            // Dropping the loop drops its model call or tool call; the runner is told to stop
            // what it runs for this activation.
            _ = self.stopping.cancelled() => {
                self.runner.cancel(&activation.agent_id, &activation.id);
                Ending::Shutdown
            }
        };
        self.running.lock().unwrap_or_else(|e| e.into_inner()).remove(&activation.id);
        let store = &self.tools.store;
        let finished = match outcome {
            Ending::Cancelled => return,
            Ending::Shutdown => {
                match store.interrupt_activation(&activation.id, SHUTDOWN_REASON) {
                    Ok(returned) => tracing::info!(
                        agent = %activation.agent_id, activation = %activation.id,
                        "{SHUTDOWN_REASON}; {returned} signal(s) back to pending"
                    ),
                    Err(e) => tracing::error!(activation = %activation.id, "recording the shutdown: {e}"),
                }
                return;
            }
            Ending::Paused(stop) => return self.paused(&activation, stop),
            Ending::Completed(text) => {
                store.finish_activation(&activation.id, ActivationOutcome::Completed, Some(&text), None)
            }
            Ending::Failed(error) => {
                tracing::warn!(agent = %activation.agent_id, activation = %activation.id, "activation failed: {error}");
                store.finish_activation(&activation.id, ActivationOutcome::Failed, None, Some(&error))
            }
        };
        match finished {
            Ok(record) => {
                if let Err(e) = nudges::no_effect_nudge(&self.tools, &record) {
                    tracing::warn!("no-effect nudge for {}: {e}", record.id);
                }
            }
            // Cancelled or ended elsewhere in the meantime: nothing more to record.
            Err(e) => tracing::debug!("activation {} already ended: {e}", activation.id),
        }
    }

    /// The end of an activation its budget stopped (see `budget`): before any model call it
    /// is cancelled with its signals back to pending; after, it completes with a note and no
    /// no-effect nudge (the agent is paused; resuming tells it to continue).
    fn paused(&self, activation: &ActivationRecord, stop: Stop) {
        let store = &self.tools.store;
        let agent = &activation.agent_id;
        tracing::warn!(agent = %agent, activation = %activation.id, "paused: {}", stop.reason);
        let recorded = if stop.before_work {
            store.interrupt_activation(&activation.id, &format!("paused: {}", stop.reason)).map(drop)
        } else {
            let note = format!("Paused: {}", stop.reason);
            store.finish_activation(&activation.id, ActivationOutcome::Completed, Some(&note), None).map(drop)
        };
        if let Err(e) = recorded {
            tracing::debug!("activation {} already ended: {e}", activation.id);
        }
    }

    async fn drive(
        &self,
        activation: &ActivationRecord,
        signals: &[SignalRecord],
        cancel: watch::Receiver<bool>,
    ) -> Ending {
        let config = &self.tools.project.config;
        let Some(agent) = config.agent(&activation.agent_id) else {
            return Ending::Failed(format!("Unknown agent: {}", activation.agent_id));
        };
        let store = &self.tools.store;
        let budget = ActivationBudget::new(&self.tools, agent, &activation.id);
        // Checked before anything is recorded, so an agent paused at the start replays nothing
        // of this activation later.
        match budget.check() {
            Ok(None) => {}
            Ok(Some(stop)) => return Ending::Paused(stop),
            Err(e) => return Ending::Failed(e),
        }
        // An agent that cannot read its history must not run as if it had none.
        let history = match store.history(&agent.id, 2000) {
            Ok(h) => h,
            Err(e) => return Ending::Failed(format!("cannot read the agent's history: {e}")),
        };
        let prompt = HistoryEntry::ActivationPrompt {
            text: activation.prompt.clone(),
            delivery: "activation_start".into(),
            signal_ids: signals.iter().map(|s| s.id.clone()).collect(),
            priorities: signals.iter().map(|s| s.priority.as_str().to_string()).collect(),
        };
        if let Err(e) = store.append_history(&agent.id, Some(&activation.id), &prompt) {
            return Ending::Failed(format!("cannot record the activation's prompt in the history: {e}"));
        }
        let toolset = self.tools.project.registry.resolve_agent(agent);
        let names = match safe_tool_names(&toolset.tools) {
            Ok(n) => n,
            Err(e) => return Ending::Failed(e),
        };
        let model_tools: Vec<ModelTool> = names
            .iter()
            .filter_map(|(real, safe)| {
                let (_, def) = self.tools.project.registry.tool(real)?;
                Some(ModelTool {
                    name: safe.clone(),
                    description: def.description.clone(),
                    parameters: def.input_schema.clone(),
                })
            })
            .collect();
        let mut messages = replay(&history);
        messages.push(ChatMessage::User(activation.prompt.clone()));
        let models = match resolve_presets(&config.models, &agent.model) {
            Ok(m) => m,
            Err(e) => return Ending::Failed(e),
        };
        let mut failures = Vec::new();
        for model in &models {
            let provider = match self.providers.get(model) {
                Ok(p) => p,
                Err(e) => {
                    failures.push(format!("{}: {e}", model.preset_id()));
                    continue;
                }
            };
            let attempt = Attempt {
                owner: self,
                agent,
                activation,
                model,
                provider,
                tools: &model_tools,
                names: &names,
                cancel: cancel.clone(),
                budget: &budget,
            };
            match attempt.run(messages.clone()).await {
                AttemptEnd::Done(ending) => return ending,
                AttemptEnd::ModelFailed(e) => failures.push(format!("{}: {e}", model.preset_id())),
            }
        }
        Ending::Failed(format!("All model attempts failed:\n{}", failures.join("\n")))
    }
}

enum Ending {
    Completed(String),
    Failed(String),
    /// Cancelled by a P0 signal (the scheduler records it).
    Cancelled,
    /// Stopped because the controller is shutting down.
    Shutdown,
    /// Stopped by its budget or the wake-loop guard: the agent is paused.
    Paused(Stop),
}

/// The error recorded on activations a shutdown stopped.
pub const SHUTDOWN_REASON: &str = "cancelled by shutdown";

enum AttemptEnd {
    Done(Ending),
    /// The model call failed: try the next model of the list.
    ModelFailed(String),
}

struct Attempt<'a> {
    owner: &'a Activations,
    agent: &'a AgentConfig,
    activation: &'a ActivationRecord,
    model: &'a ResolvedModel,
    provider: Arc<dyn ModelProvider>,
    tools: &'a [ModelTool],
    names: &'a [(String, String)],
    cancel: watch::Receiver<bool>,
    /// Checked before every model call; records what each call used.
    budget: &'a ActivationBudget<'a>,
}

impl Attempt<'_> {
    async fn run(self, mut messages: Vec<ChatMessage>) -> AttemptEnd {
        let mut cancel = self.cancel.clone();
        let config = &self.owner.tools.project.config;
        let max_iterations = config.activation.max_iterations.unwrap_or(1_000_000);
        let max_tool_calls = config.activation.max_tool_calls;
        let mut tool_calls = 0u64;
        let mut last_text = String::new();
        let mut compacted = false;
        for _ in 0..max_iterations {
            match self.budget.check() {
                Ok(None) => {}
                Ok(Some(stop)) => return AttemptEnd::Done(Ending::Paused(stop)),
                Err(e) => return AttemptEnd::Done(Ending::Failed(e)),
            }
            let request =
                self.model.request(&self.agent.id, &self.activation.id, messages.clone(), self.tools.to_vec());
            let response = tokio::select! {
                r = self.provider.complete(request) => r,
                _ = cancel.changed() => return AttemptEnd::Done(Ending::Cancelled),
            };
            let response = match response {
                Ok(r) => r,
                // Once per model: summarize the older part of the conversation, keep the tail,
                // and try again (reference §6.6).
                Err(e) if e.is_context_overflow() && !compacted => {
                    compacted = true;
                    messages = self.compact(messages).await;
                    continue;
                }
                Err(e) => return AttemptEnd::ModelFailed(e.to_string()),
            };
            // Cached input tokens: 0 until the providers report them.
            let usage = &response.usage;
            if let Err(e) = self.budget.record(self.model, usage.input_tokens, 0, usage.output_tokens) {
                return AttemptEnd::Done(Ending::Failed(e));
            }
            let output = HistoryEntry::AssistantOutput {
                text: response.text.clone(),
                tool_calls: response
                    .tool_calls
                    .iter()
                    .map(|c| RecordedCall { name: c.name.clone(), arguments: c.arguments.clone() })
                    .collect(),
                model: self.model.api_model().to_string(),
                usage: RecordedUsage {
                    input_tokens: response.usage.input_tokens,
                    output_tokens: response.usage.output_tokens,
                },
            };
            if let Err(e) = self.record(&output) {
                return AttemptEnd::Done(Ending::Failed(e));
            }
            if !response.text.trim().is_empty() {
                last_text = response.text.clone();
            }
            if response.tool_calls.is_empty() {
                let text = if last_text.is_empty() { "(model returned no text)".to_string() } else { last_text };
                return AttemptEnd::Done(Ending::Completed(text));
            }
            messages
                .push(ChatMessage::Assistant { text: response.text.clone(), tool_calls: response.tool_calls.clone() });
            let mut ended: Option<String> = None;
            for call in &response.tool_calls {
                if let Some(max) = max_tool_calls
                    && tool_calls >= max
                {
                    return AttemptEnd::Done(Ending::Failed(format!("Exceeded maxToolCalls: {max}")));
                }
                tool_calls += 1;
                let real = self.names.iter().find(|(_, safe)| *safe == call.name).map(|(real, _)| real.clone());
                let (content, is_error, ends) = match real {
                    None => (format!("Unknown tool: {}", call.name), true, false),
                    Some(real) => {
                        let outcome = tokio::select! {
                            r = self.tool_call(&real, call.arguments.clone()) => r,
                            _ = cancel.changed() => {
                                self.owner.runner.cancel(&self.agent.id, &self.activation.id);
                                return AttemptEnd::Done(Ending::Cancelled);
                            }
                        };
                        let ends =
                            self.owner.tools.project.registry.tool(&real).is_some_and(|(_, def)| def.ends_activation);
                        match outcome {
                            Ok(out) => (out.output, false, ends),
                            Err(e) => (e.to_string(), true, false),
                        }
                    }
                };
                let content = match self.boundary_signals() {
                    Some(text) => format!("{content}\n\n{text}"),
                    None => content,
                };
                let result = HistoryEntry::ToolResult { name: call.name.clone(), content: content.clone(), is_error };
                if let Err(e) = self.record(&result) {
                    return AttemptEnd::Done(Ending::Failed(e));
                }
                if ends && ended.is_none() {
                    ended = Some(content.clone());
                }
                messages.push(ChatMessage::ToolResult {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    content,
                    is_error,
                });
            }
            if let Some(output) = ended {
                let text = if last_text.is_empty() { output } else { last_text };
                return AttemptEnd::Done(Ending::Completed(text));
            }
        }
        AttemptEnd::Done(Ending::Completed(format!("Stopped after maxIterations ({max_iterations}) model steps.")))
    }

    /// Replace the older part of the conversation by a summary (written by the same model, or a
    /// deterministic one if that fails), keep a tail, and record the compaction in history so
    /// later activations replay from the summary.
    async fn compact(&self, messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
        let (older, tail) = compaction::split(messages);
        if older.is_empty() {
            // Nothing old enough to summarize: the retry gets the same conversation.
            return tail;
        }
        let input = compaction::summary_input(&older);
        let request = self.model.request(
            &self.agent.id,
            &self.activation.id,
            vec![ChatMessage::System(compaction::INSTRUCTIONS.to_string()), ChatMessage::User(input.clone())],
            Vec::new(),
        );
        let (summary, fallback) = match self.provider.complete(request).await {
            Ok(r) if !r.text.trim().is_empty() => (compaction::cap(&r.text), None),
            Ok(_) => (compaction::fallback(&older), Some("the model returned an empty summary".to_string())),
            Err(e) => (compaction::fallback(&older), Some(e.to_string())),
        };
        let compaction = HistoryEntry::HistoryCompaction {
            summary: summary.clone(),
            archived_messages: older.len() as u64,
            kept_messages: tail.len() as u64,
            reason: "provider_context_overflow".into(),
            model: self.model.api_model().to_string(),
            fallback,
        };
        // Without the record, later activations replay the long history again: say so, go on.
        if let Err(e) = self.record(&compaction) {
            tracing::error!(agent = %self.agent.id, "{e}");
        }
        let mut out = vec![ChatMessage::User(format!("# Compacted Agent History\n\n{summary}"))];
        out.extend(tail);
        out
    }

    async fn tool_call(&self, tool: &str, input: Value) -> Result<ToolOutput, ToolError> {
        execute_tool(&self.owner.tools, self.owner.runner.as_ref(), &self.agent.id, &self.activation.id, tool, input)
            .await
    }

    /// Append to the agent's history; the error says what could not be recorded.
    fn record(&self, entry: &HistoryEntry) -> Result<(), String> {
        self.owner
            .tools
            .store
            .append_history(&self.agent.id, Some(&self.activation.id), entry)
            .map(drop)
            .map_err(|e| format!("cannot record the activation's history: {e}"))
    }

    /// P1 signals handed over at this tool boundary, rendered as the prompt renders signals.
    /// A store failure here leaves the signals pending for the next activation.
    fn boundary_signals(&self) -> Option<String> {
        let host = &self.owner.tools;
        let limit = host.project.config.scheduler.max_signals_per_activation as usize;
        let signals = match host.store.deliver_at_tool_boundary(&self.agent.id, &self.activation.id, limit) {
            Ok(signals) => signals,
            Err(e) => {
                tracing::error!(agent = %self.agent.id, "delivering signals at a tool boundary: {e}");
                return None;
            }
        };
        if signals.is_empty() {
            return None;
        }
        let delivered = HistoryEntry::Signals {
            delivery: "tool_boundary".into(),
            signal_ids: signals.iter().map(|s| s.id.clone()).collect(),
        };
        if let Err(e) = self.record(&delivered) {
            tracing::error!(agent = %self.agent.id, "{e}");
        }
        Some(prompt::render_signals(&signals))
    }
}

/// One tool call of an agent's activation through the real path: allowlist, schema check,
/// recorded start, the handler (controller side or the agent's runner), recorded finish.
pub async fn execute_tool(
    host: &ToolHost,
    runner: &dyn RunnerTools,
    agent_id: &str,
    activation_id: &str,
    tool: &str,
    input: Value,
) -> Result<ToolOutput, ToolError> {
    let store = &host.store;
    let agent =
        host.project.config.agent(agent_id).ok_or_else(|| ToolError::Rejected(format!("Unknown agent: {agent_id}")))?;
    let Some((pack, def)) = host.project.registry.tool(tool) else {
        return Err(ToolError::Rejected(format!("Unknown tool: {tool}")));
    };
    if !agent.tools.allows(tool) {
        return Err(ToolError::Rejected(format!("Tool not allowed for {agent_id}: {tool}")));
    }
    let input = if input.is_null() { json!({}) } else { input };
    // Every call of a known, allowed tool is recorded, including the ones refused for their input.
    let call_id =
        store.start_tool_call(activation_id, agent_id, tool, Some(&pack.id), &input, def.target(&input).as_deref())?;
    let caller = Caller { agent_id: agent_id.to_string(), activation_id: activation_id.to_string() };
    let invalid =
        match input.as_object().and_then(|m| m.get(super::providers::INVALID_JSON_KEY)).and_then(Value::as_str) {
            Some(raw) => Some(ToolError::Rejected(format!("The arguments are not valid JSON: {raw}"))),
            None => {
                host.project.registry.validate_input(tool, &input).err().map(|e| ToolError::invalid_input(tool, &e))
            }
        };
    let result = match (invalid, def.runs_in) {
        (Some(problem), _) => Err(problem),
        (None, RunsIn::Controller) => builtin_tools::call(host, &caller, tool, &input).await,
        (None, RunsIn::Runner) => runner.invoke(agent_id, activation_id, tool, input).await,
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

/// Context-overflow compaction (reference §6.6): what is kept, what is summarized, and how.
mod compaction {
    use super::ChatMessage;

    /// At most this many recent messages are kept verbatim, within `TAIL_BUDGET` characters.
    const TAIL_MESSAGES: usize = 12;
    const TAIL_BUDGET: usize = 80_000;
    /// The summary request's input and the summary itself are capped.
    const INPUT_CAP: usize = 80_000;
    const SUMMARY_CAP: usize = 20_000;

    pub const INSTRUCTIONS: &str = "Summarize the conversation below for an agent that will continue the work \
        without it. Use exactly these Markdown sections: ## Goal, ## Constraints & Preferences, ## Progress \
        (### Done, ### In Progress, ### Blocked), ## Key Decisions, ## Next Steps, ## Critical Context, \
        ## Relevant Files. Be specific: names, paths, ids, numbers. Do not call tools.";

    fn text(m: &ChatMessage) -> String {
        match m {
            ChatMessage::System(t) | ChatMessage::User(t) => t.clone(),
            ChatMessage::Assistant { text, tool_calls } => {
                let calls: Vec<String> = tool_calls.iter().map(|c| format!("{} {}", c.name, c.arguments)).collect();
                format!("{text}{}{}", if calls.is_empty() { "" } else { "\n" }, calls.join("\n"))
            }
            ChatMessage::ToolResult { name, content, .. } => format!("{name}: {content}"),
        }
    }

    fn role(m: &ChatMessage) -> &'static str {
        match m {
            ChatMessage::System(_) => "system",
            ChatMessage::User(_) => "user",
            ChatMessage::Assistant { .. } => "assistant",
            ChatMessage::ToolResult { .. } => "tool",
        }
    }

    /// Split into (older, tail). The tail never starts with a tool result (its call would be
    /// in the summary), and always keeps the last message.
    pub fn split(messages: Vec<ChatMessage>) -> (Vec<ChatMessage>, Vec<ChatMessage>) {
        let mut start = messages.len();
        let mut used = 0;
        while start > 0 && messages.len() - start < TAIL_MESSAGES {
            let size = text(&messages[start - 1]).chars().count();
            if used + size > TAIL_BUDGET && start < messages.len() {
                break;
            }
            used += size;
            start -= 1;
        }
        while start < messages.len() - 1 && matches!(messages[start], ChatMessage::ToolResult { .. }) {
            start += 1;
        }
        let mut older = messages;
        let tail = older.split_off(start);
        (older, tail)
    }

    pub fn summary_input(older: &[ChatMessage]) -> String {
        let mut out = String::new();
        for m in older {
            out.push_str(&format!("[{}] {}\n\n", role(m), text(m)));
        }
        // Keep the end (the most recent part) when it is too long.
        let chars: Vec<char> = out.chars().collect();
        if chars.len() > INPUT_CAP { chars[chars.len() - INPUT_CAP..].iter().collect() } else { out }
    }

    pub fn cap(summary: &str) -> String {
        let trimmed = summary.trim();
        if trimmed.chars().count() <= SUMMARY_CAP {
            trimmed.to_string()
        } else {
            let kept: String = trimmed.chars().take(SUMMARY_CAP).collect();
            format!("{kept}\n[truncated]")
        }
    }

    /// Without a model summary: the first line of each older message, newest last, capped.
    pub fn fallback(older: &[ChatMessage]) -> String {
        let mut out = String::from(
            "(Automatic summary: the model could not summarize; first lines of the earlier conversation.)\n",
        );
        for m in older {
            let first =
                text(m).lines().find(|l| !l.trim().is_empty()).unwrap_or("").chars().take(200).collect::<String>();
            if !first.is_empty() {
                out.push_str(&format!("- [{}] {first}\n", role(m)));
            }
        }
        cap(&out)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_tail_keeps_recent_messages_and_never_starts_with_a_tool_result() {
            let mut messages: Vec<ChatMessage> = (0..20).map(|i| ChatMessage::User(format!("m{i}"))).collect();
            messages.insert(
                8,
                ChatMessage::ToolResult { call_id: "c".into(), name: "t".into(), content: "r".into(), is_error: false },
            );
            let (older, tail) = split(messages);
            assert_eq!(older.len() + tail.len(), 21);
            assert!(tail.len() <= 12 && !matches!(tail[0], ChatMessage::ToolResult { .. }));
            assert_eq!(tail.last(), Some(&ChatMessage::User("m19".into())));
        }

        #[test]
        fn the_fallback_summary_is_capped() {
            let older: Vec<ChatMessage> =
                (0..500).map(|i| ChatMessage::User(format!("{i} {}", "x".repeat(300)))).collect();
            assert!(fallback(&older).chars().count() <= SUMMARY_CAP + 20);
            assert!(summary_input(&older).chars().count() <= INPUT_CAP);
        }
    }
}

/// Earlier history as plain text messages (reference §6.5): assistant output and tool calls as
/// the assistant, everything else as the user; long entries cut.
fn replay(history: &[crate::store::HistoryRecord]) -> Vec<ChatMessage> {
    const MESSAGE_CAP: usize = 40_000;
    const TOOL_RESULT_CAP: usize = 12_000;
    let cut = |text: &str, cap: usize| -> String {
        if text.chars().count() <= cap {
            return text.to_string();
        }
        let kept: String = text.chars().take(cap).collect();
        format!("{kept}\n[truncated]")
    };
    let mut out = Vec::new();
    for h in history {
        match &h.entry {
            // Everything before a compaction is replaced by its summary.
            HistoryEntry::HistoryCompaction { summary, .. } => {
                out.clear();
                out.push(ChatMessage::User(format!("# Compacted Agent History\n\n{summary}")));
            }
            HistoryEntry::ActivationPrompt { text, .. } => out.push(ChatMessage::User(cut(text, MESSAGE_CAP))),
            HistoryEntry::AssistantOutput { text, tool_calls, .. } => {
                let mut text = text.clone();
                for call in tool_calls {
                    text.push_str(&format!("\n\n# Tool Call Record\n{} {}", call.name, call.arguments));
                }
                if !text.trim().is_empty() {
                    out.push(ChatMessage::Assistant { text: cut(&text, MESSAGE_CAP), tool_calls: Vec::new() });
                }
            }
            HistoryEntry::ToolResult { name, content, .. } => {
                out.push(ChatMessage::User(cut(&format!("# Tool Result Record\n{name}: {content}"), TOOL_RESULT_CAP)))
            }
            HistoryEntry::Signals { .. } | HistoryEntry::Unrecognized { .. } => {}
        }
    }
    out
}

impl ActivationLauncher for Activations {
    fn prompt(&self, agent: &AgentConfig, signals: &[SignalRecord]) -> String {
        let host = &self.tools;
        // The prompt says "first activation" only when the store says so; on a read error the
        // agent gets the continuing prompt, which assumes less.
        let first = match host.store.latest_activation(&agent.id, None) {
            Ok(latest) => latest.is_none(),
            Err(e) => {
                tracing::error!(agent = %agent.id, "reading the agent's activations for its prompt: {e}");
                false
            }
        };
        let tools = host.project.registry.resolve_agent(agent).tools;
        prompt::build(&PromptInput { config: &host.project.config, agent, tools: &tools, first, signals })
    }

    fn start(&self, activation: ActivationRecord, signals: Vec<SignalRecord>) {
        // `start` has `&self`; the loop needs an owned handle, kept by the controller.
        if let Some(me) = self.me() {
            if self.stopping.is_cancelled() {
                // Too late: the store gets the activation back as interrupted, signals pending.
                if let Err(e) = self.tools.store.interrupt_activation(&activation.id, SHUTDOWN_REASON) {
                    tracing::error!(activation = %activation.id, "recording the shutdown: {e}");
                }
                return;
            }
            self.tasks.spawn(me.run(activation, signals));
        }
    }

    fn cancel(&self, activation: &ActivationRecord, reason: &str) {
        tracing::info!(agent = %activation.agent_id, activation = %activation.id, "cancelling: {reason}");
        if let Some(tx) = self.running.lock().unwrap_or_else(|e| e.into_inner()).get(&activation.id) {
            let _ = tx.send(true);
        }
        self.runner.cancel(&activation.agent_id, &activation.id);
    }
}
