//! The model loop of one activation, run in the controller (DESIGN: API keys never enter a
//! container; P0 and P1 are handled locally). Each request is the agent's system prompt, its
//! replayed history (`context.rs`) and what this activation added, after a compaction when the
//! estimate passes the preset's `compactAt` share of its `contextWindow`. The loop calls the
//! model with the agent's allowed tools (names made model-safe; `presentation` never sent) and
//! runs every tool call it makes:
//!
//! 1. map the safe name back, refuse unknown tools, check the input against the tool's schema
//!    and answer schema failures to the model with the failing paths — nothing runs then;
//! 2. record the call (start), run it — core tools and `web.fetch` in the controller, `file.*`,
//!    `shell.exec` and local packs' tools in the agent's runner — and record the result (finish);
//! 3. hand over P1 signals at this tool boundary, appended to the result;
//! 4. stop after `coordination.wait_for_signal` or `completion.submit`.
//!
//! When a model of the preset's `model-list` fails, the next one continues the same
//! conversation (the calls made so far and their results included), so no tool runs twice.
//! The activation then completes (no-effect nudge if it had no useful effect) or fails
//! (every model failed, `maxToolCalls` exceeded). A P0 cancels it through [`ActivationHandle`].
//!
//! A call decided `ask` parks the activation until it is decided (`permissions::approvals`); the
//! calls of one turn that ask are announced together first. An activation a previous controller
//! left parked is resumed from its recorded history ([`Activations::resume_parked`]): the turn's
//! calls without a result run (the parked one adopts its stored request), then the loop goes on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::budget::{ActivationBudget, Stop};
use super::context::{self, Conversation, TokenRate, TokenRates, compaction};
use super::live;
use super::prompt::{self, SystemInput};
use super::providers::{
    ChatMessage, ModelProvider, ModelRequest, ProviderPool, ResolvedModel, RetryPolicy, ToolCall, Usage,
    resolve_presets, safe_tool_names,
};
use super::tool_list::ToolList;
use crate::calls::{RunnerTools, execute_tool};
use crate::config::AgentConfig;
use crate::scheduler::{ActivationLauncher, nudges};
use crate::store::{
    ActivationOutcome, ActivationRecord, Event, HistoryEntry, RecordedCall, RecordedUsage, SignalRecord, ToolImage,
};
use crate::support::{ToolHost, ToolOutput};
use crate::toolpack::{TOOL_SEARCH, ToolError};

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
    /// Tokens per character of each preset's requests, as its provider counted them.
    token_rates: TokenRates,
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
            token_rates: TokenRates::default(),
        })
    }

    fn me(&self) -> Option<Arc<Activations>> {
        self.me.upgrade()
    }

    /// How many activations are running now.
    pub fn running(&self) -> usize {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// How many running activations are not among `except` (e.g. the parked ones).
    pub fn running_except(&self, except: &[String]) -> usize {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).keys().filter(|id| !except.contains(id)).count()
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

    /// Stop the loop of every activation whose end was recorded by someone else — `suzumio
    /// cancel` in another process, seen through [`crate::store::Store::follow_other_writers`]
    /// — until `stop` is cancelled. The store has the end already; the loop stops as after a
    /// P0 (its model call dropped, the runner told to stop the call) and records nothing more.
    pub async fn stop_ended_elsewhere(self: Arc<Self>, stop: CancellationToken) {
        use tokio::sync::broadcast::error::RecvError;
        let mut events = self.tools.store.subscribe();
        loop {
            let event = tokio::select! {
                _ = stop.cancelled() => return,
                event = events.recv() => event,
            };
            let ended: Vec<String> = match event {
                Ok(record) => match record.event {
                    Event::ActivationCompleted(e) | Event::ActivationFailed(e) | Event::ActivationCancelled(e) => {
                        vec![e.activation_id]
                    }
                    _ => continue,
                },
                // Fell behind: ask the store about each activation still running here.
                Err(RecvError::Lagged(_)) => {
                    let ids: Vec<String> =
                        self.running.lock().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect();
                    ids.into_iter()
                        .filter(|id| {
                            self.tools
                                .store
                                .activation(id)
                                .ok()
                                .flatten()
                                .is_some_and(|a| a.status != crate::store::ActivationStatus::Running)
                        })
                        .collect()
                }
                Err(RecvError::Closed) => return,
            };
            for id in ended {
                // An activation this process ended itself is no longer in the map by then.
                if let Some(tx) = self.running.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
                    tracing::info!(activation = %id, "its end was recorded elsewhere (suzumio cancel): stopping it");
                    let _ = tx.send(true);
                }
            }
        }
    }

    /// Run one activation to its end (also what `start` spawns).
    pub async fn run(self: Arc<Self>, activation: ActivationRecord, signals: Vec<SignalRecord>) {
        self.run_from(activation, signals, Start::New).await
    }

    /// Resume every activation a previous controller left parked on an approval request (after
    /// a crash or a shutdown while it waited): each continues from its recorded history — the
    /// calls of its last turn without a result run (the parked one adopts its request and waits
    /// for it), then the model loop goes on. Call before the scheduler starts.
    pub fn resume_parked(&self) {
        let Some(me) = self.me() else { return };
        let parked = match self.tools.store.parked_activations() {
            Ok(parked) => parked,
            Err(e) => return tracing::error!("reading the activations parked on approvals: {e}"),
        };
        for activation in parked {
            if let Err(e) = self.tools.store.reopen_parked(&activation.id) {
                tracing::error!(activation = %activation.id, "resuming a parked activation: {e}");
                continue;
            }
            // Parked by a caller without a model loop (`suzumio tool call` that was stopped):
            // nothing to continue, so it ends, its requests with it.
            let turns = self
                .tools
                .store
                .activation_history(&activation.id)
                .map(|h| h.iter().any(|r| matches!(r.entry, HistoryEntry::AssistantOutput { .. })));
            if let Ok(false) = turns {
                let reason = "its caller stopped while it waited for approval";
                if let Err(e) = self.tools.store.interrupt_activation(&activation.id, reason) {
                    tracing::error!(activation = %activation.id, "ending a parked activation: {e}");
                }
                continue;
            }
            tracing::info!(agent = %activation.agent_id, activation = %activation.id, "resuming an activation parked on an approval");
            self.tasks.spawn(me.clone().run_from(activation, Vec::new(), Start::Resume));
        }
    }

    async fn run_from(self: Arc<Self>, activation: ActivationRecord, signals: Vec<SignalRecord>, start: Start) {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        self.running.lock().unwrap_or_else(|e| e.into_inner()).insert(activation.id.clone(), cancel_tx);
        let outcome = tokio::select! {
            outcome = self.drive(&activation, &signals, cancel_rx, start) => outcome,
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
                // A parked activation stays parked (`interrupt_activation` leaves it alone):
                // its request survives the stop and the next run resumes it.
                let parked = store.activation(&activation.id).ok().flatten().map(|a| a.status);
                if parked == Some(crate::store::ActivationStatus::WaitingApproval) {
                    tracing::info!(
                        agent = %activation.agent_id, activation = %activation.id,
                        "left waiting for approval; the next run resumes it"
                    );
                    return;
                }
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
        start: Start,
    ) -> Ending {
        let project = self.tools.project.snapshot();
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
        let history = match store.replay_history(&agent.id) {
            Ok(h) => h,
            Err(e) => return Ending::Failed(format!("cannot read the agent's history: {e}")),
        };
        // A resumed activation's prompt and turns are in its history already.
        let (mut conversation, mut unanswered) = match start {
            Start::Resume => resumed(&history, &activation.id),
            Start::New => {
                let prompt = HistoryEntry::ActivationPrompt {
                    text: activation.prompt.clone(),
                    delivery: "activation_start".into(),
                    signal_ids: signals.iter().map(|s| s.id.clone()).collect(),
                    priorities: signals.iter().map(|s| s.priority.as_str().to_string()).collect(),
                };
                let prompt_row = match store.append_history(&agent.id, Some(&activation.id), &prompt) {
                    Ok(id) => id,
                    Err(e) => {
                        return Ending::Failed(format!("cannot record the activation's prompt in the history: {e}"));
                    }
                };
                let mut conversation = context::replay(&history);
                conversation.push_prompt(&activation.prompt, &prompt_row);
                (conversation, Vec::new())
            }
        };
        let toolset = project.registry.resolve_agent(agent);
        let names = match safe_tool_names(&toolset.tools) {
            Ok(n) => n,
            Err(e) => return Ending::Failed(e),
        };
        let registry = &project.registry;
        let model_tools = match ToolList::new(registry, &toolset, &names, store) {
            Ok(list) => list,
            Err(e) => return Ending::Failed(format!("cannot read the agent's activated tools: {e}")),
        };
        let ending: Vec<String> = toolset
            .tools
            .iter()
            .filter(|t| registry.tool(t).is_some_and(|(_, def)| def.ends_activation))
            .cloned()
            .collect();
        // Deferred tools are named by tool_search, not by the prompt.
        let prompt_tools: Vec<String> =
            toolset.tools.iter().filter(|t| !toolset.deferred.contains(t)).cloned().collect();
        let system = prompt::system(&SystemInput { config, agent, tools: &prompt_tools, ending: &ending });
        let models = match resolve_presets(&config.models, &agent.model) {
            Ok(m) => m,
            Err(e) => return Ending::Failed(e),
        };
        // One conversation and one count for the whole activation: a model of the list that
        // fails hands over what was done so far, so no tool call runs twice.
        let mut progress = Progress::default();
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
                system: &system,
                tools: &model_tools,
                names: &names,
                cancel: cancel.clone(),
                budget: &budget,
            };
            let first = std::mem::take(&mut unanswered);
            match attempt.run(&mut conversation, &mut progress, first).await {
                AttemptEnd::Done(ending) => return ending,
                AttemptEnd::ModelFailed(e) => failures.push(format!("{}: {e}", model.preset_id())),
            }
        }
        Ending::Failed(format!("All model attempts failed:\n{}", failures.join("\n")))
    }
}

/// How an activation's loop begins.
#[derive(Clone, Copy)]
enum Start {
    /// Record the prompt and call the model.
    New,
    /// Continue a parked activation from its history (after a restart).
    Resume,
}

/// A parked activation's conversation from its agent's history, and the calls of its last turn
/// that have no result yet (replay answers those with a placeholder, which is taken off again:
/// the resume runs them).
fn resumed(history: &[crate::store::HistoryRecord], activation: &str) -> (Conversation, Vec<ToolCall>) {
    let mine: Vec<&crate::store::HistoryRecord> =
        history.iter().filter(|h| h.activation_id.as_deref() == Some(activation)).collect();
    let last_turn = mine.iter().rposition(|h| matches!(h.entry, HistoryEntry::AssistantOutput { .. }));
    let mut unanswered: Vec<ToolCall> = Vec::new();
    if let Some(at) = last_turn
        && let HistoryEntry::AssistantOutput { tool_calls, .. } = &mine[at].entry
    {
        let answered: Vec<&str> = mine[at + 1..]
            .iter()
            .filter_map(|h| match &h.entry {
                HistoryEntry::ToolResult { call_id: Some(id), .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        unanswered = tool_calls
            .iter()
            .filter_map(|c| {
                let id = c.id.clone()?;
                (!answered.contains(&id.as_str())).then(|| ToolCall {
                    id,
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
            })
            .collect();
    }
    let mut conversation = context::replay(history);
    while let Some(ChatMessage::ToolResult { call_id, content, .. }) = conversation.messages.last()
        && content == context::NO_RESULT
        && unanswered.iter().any(|c| &c.id == call_id)
    {
        conversation.messages.pop();
        conversation.rows.pop();
    }
    let prompt_row =
        mine.iter().find(|h| matches!(h.entry, HistoryEntry::ActivationPrompt { .. })).map(|h| h.id.as_str());
    conversation.prompt_at = prompt_row.and_then(|row| conversation.rows.iter().position(|r| r == row));
    (conversation, unanswered)
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
    /// The system prompt, first in every request.
    system: &'a str,
    tools: &'a ToolList,
    names: &'a [(String, String)],
    cancel: watch::Receiver<bool>,
    /// Checked before every model call; records what each call used.
    budget: &'a ActivationBudget<'a>,
}

/// What an activation has done so far, over every model tried.
#[derive(Default)]
struct Progress {
    model_steps: u64,
    tool_calls: u64,
    last_text: String,
}

impl Attempt<'_> {
    /// The request for the conversation as it is: the system prompt, then the history, then
    /// what this activation added.
    fn request(&self, conversation: &Conversation) -> ModelRequest {
        let mut messages = Vec::with_capacity(conversation.messages.len() + 1);
        messages.push(ChatMessage::System(self.system.to_string()));
        messages.extend(conversation.messages.iter().cloned());
        let mut request = self.model.request(&self.agent.id, &self.activation.id, messages, self.tools.current());
        request.cache_prefix = 1 + conversation.history_len();
        request
    }

    /// Compact before sending when the request's estimated tokens pass `compactAt` of the
    /// preset's context window. Returns the request to send.
    /// `retry_at`: when a compaction could not bring the request under the threshold, the
    /// conversation length from which trying again can help (a tail's worth of new messages).
    async fn fit(&self, conversation: &mut Conversation, retry_at: &mut usize) -> (ModelRequest, usize) {
        let request = self.request(conversation);
        let chars = context::request_chars(&request.messages, &request.tools);
        let rate = self.owner.token_rates.get(self.model.preset_id());
        let threshold = self.threshold();
        if conversation.messages.len() < *retry_at || rate.tokens(chars) <= threshold {
            return (request, chars);
        }
        let compacted = self.compact(conversation, "context_window_threshold", threshold, rate).await;
        let request = if compacted { self.request(conversation) } else { request };
        let chars = context::request_chars(&request.messages, &request.tools);
        if rate.tokens(chars) > threshold {
            // A large system prompt, summary or last message: compacting at once again would
            // only summarize the summary.
            *retry_at = conversation.messages.len() + compaction::TAIL_MESSAGES;
        }
        (request, chars)
    }

    /// The estimated request size at which history is compacted: `compactAt` of `contextWindow`.
    fn threshold(&self) -> u64 {
        let preset = &self.model.preset;
        (preset.context_window as f64 * preset.compact_at) as u64
    }

    /// Count a model call (the loop's own, or a compaction's summary) against the budget and
    /// into the activation's usage.
    fn add_usage(&self, usage: &Usage) -> Result<(), String> {
        self.budget.record(self.model, usage.input_tokens, usage.cached_input_tokens, usage.output_tokens)
    }

    async fn run(
        self,
        conversation: &mut Conversation,
        progress: &mut Progress,
        unanswered: Vec<ToolCall>,
    ) -> AttemptEnd {
        let mut cancel = self.cancel.clone();
        let config = &self.owner.tools.project.config;
        let max_iterations = config.activation.max_iterations.unwrap_or(1_000_000);
        if !unanswered.is_empty() {
            match self.run_calls(&unanswered, conversation, progress, &mut cancel).await {
                Ok(Some(output)) => {
                    let text = if progress.last_text.is_empty() { output } else { progress.last_text.clone() };
                    return AttemptEnd::Done(Ending::Completed(text));
                }
                Ok(None) => {}
                Err(end) => return end,
            }
        }
        let mut compacted = false;
        let mut retry_compaction_at = 0;
        while progress.model_steps < max_iterations {
            match self.budget.check() {
                Ok(None) => {}
                Ok(Some(stop)) => return AttemptEnd::Done(Ending::Paused(stop)),
                Err(e) => return AttemptEnd::Done(Ending::Failed(e)),
            }
            let (request, chars) = self.fit(conversation, &mut retry_compaction_at).await;
            let response = tokio::select! {
                r = live::call_model(
                    &self.owner.tools.store, &self.agent.id, &self.activation.id, self.model, &*self.provider, request,
                ) => r,
                _ = cancel.changed() => return AttemptEnd::Done(Ending::Cancelled),
            };
            let response = match response {
                Ok(r) => r,
                // Once per model: summarize the older part of the conversation, keep the tail,
                // and try again (reference §6.6).
                Err(e) if e.is_context_overflow() && !compacted => {
                    compacted = true;
                    // The window is smaller than this request, whatever the preset says.
                    let rate = self.owner.token_rates.get(self.model.preset_id());
                    let fits = self.threshold().min(rate.tokens(chars));
                    self.compact(conversation, "provider_context_overflow", fits, rate).await;
                    continue;
                }
                Err(e) => return AttemptEnd::ModelFailed(e.to_string()),
            };
            progress.model_steps += 1;
            self.owner.token_rates.learn(self.model.preset_id(), chars, response.usage.input_tokens);
            if let Err(e) = self.add_usage(&response.usage) {
                return AttemptEnd::Done(Ending::Failed(e));
            }
            let output = HistoryEntry::AssistantOutput {
                text: response.text.clone(),
                tool_calls: response
                    .tool_calls
                    .iter()
                    .map(|c| RecordedCall {
                        id: Some(c.id.clone()),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    })
                    .collect(),
                model: self.model.api_model().to_string(),
                usage: RecordedUsage {
                    input_tokens: response.usage.input_tokens,
                    output_tokens: response.usage.output_tokens,
                    cached_input_tokens: response.usage.cached_input_tokens,
                },
            };
            let output_row = match self.record(&output) {
                Ok(id) => id,
                Err(e) => return AttemptEnd::Done(Ending::Failed(e)),
            };
            if !response.text.trim().is_empty() {
                progress.last_text = response.text.clone();
            }
            if response.tool_calls.is_empty() {
                let text = if progress.last_text.is_empty() {
                    "(model returned no text)".to_string()
                } else {
                    progress.last_text.clone()
                };
                return AttemptEnd::Done(Ending::Completed(text));
            }
            conversation.push(
                ChatMessage::Assistant { text: response.text.clone(), tool_calls: response.tool_calls.clone() },
                &output_row,
            );
            let ended = match self.run_calls(&response.tool_calls, conversation, progress, &mut cancel).await {
                Ok(ended) => ended,
                Err(end) => return end,
            };
            if let Some(output) = ended {
                let text = if progress.last_text.is_empty() { output } else { progress.last_text.clone() };
                return AttemptEnd::Done(Ending::Completed(text));
            }
        }
        AttemptEnd::Done(Ending::Completed(format!("Stopped after maxIterations ({max_iterations}) model steps.")))
    }

    /// Runs the calls of one model turn in order, recording each result; returns the output of
    /// a call that ends the activation, if one did.
    async fn run_calls(
        &self,
        calls: &[ToolCall],
        conversation: &mut Conversation,
        progress: &mut Progress,
        cancel: &mut watch::Receiver<bool>,
    ) -> Result<Option<String>, AttemptEnd> {
        let max_tool_calls = self.owner.tools.project.config.activation.max_tool_calls;
        let real_names: Vec<Option<String>> = calls
            .iter()
            .map(|call| self.names.iter().find(|(_, safe)| *safe == call.name).map(|(real, _)| real.clone()))
            .collect();
        let announced: Vec<(String, Value)> = calls
            .iter()
            .zip(&real_names)
            .filter_map(|(call, real)| Some((real.clone()?, call.arguments.clone())))
            .collect();
        crate::calls::announce_turn(&self.owner.tools, self.agent, &self.activation.id, &announced);
        let mut ended: Option<String> = None;
        for (call, real) in calls.iter().zip(real_names) {
            if let Some(max) = max_tool_calls
                && progress.tool_calls >= max
            {
                return Err(AttemptEnd::Done(Ending::Failed(format!("Exceeded maxToolCalls: {max}"))));
            }
            progress.tool_calls += 1;
            // A deferred tool the agent has not activated is answered, not run.
            let not_loaded = real.as_deref().and_then(|r| self.tools.not_loaded(r));
            let (content, is_error, ends, images) = match (real, not_loaded) {
                (None, _) => (format!("Unknown tool: {}", call.name), true, false, Vec::new()),
                (Some(_), Some(why)) => (why, true, false, Vec::new()),
                (Some(real), None) => {
                    let outcome = tokio::select! {
                        r = self.tool_call(&real, call.arguments.clone()) => r,
                        _ = cancel.changed() => {
                            self.owner.runner.cancel(&self.agent.id, &self.activation.id);
                            return Err(AttemptEnd::Done(Ending::Cancelled));
                        }
                    };
                    let ends = self
                        .owner
                        .tools
                        .project
                        .snapshot()
                        .registry
                        .tool(&real)
                        .is_some_and(|(_, def)| def.ends_activation);
                    if real == TOOL_SEARCH
                        && outcome.is_ok()
                        && let Err(e) = self.tools.refresh(&self.owner.tools.store)
                    {
                        return Err(AttemptEnd::Done(Ending::Failed(format!(
                            "cannot read the agent's activated tools: {e}"
                        ))));
                    }
                    match outcome {
                        Ok(out) => {
                            let images = out
                                .images()
                                .map(|(mime, data)| ToolImage { mime_type: mime.to_string(), data: data.to_string() })
                                .collect();
                            (out.output, false, ends, images)
                        }
                        Err(e) => (e.to_string(), true, false, Vec::new()),
                    }
                }
            };
            let content = match self.boundary_signals() {
                Some(text) => format!("{content}\n\n{text}"),
                None => content,
            };
            let result = HistoryEntry::ToolResult {
                name: call.name.clone(),
                content: content.clone(),
                is_error,
                call_id: Some(call.id.clone()),
                images: images.clone(),
            };
            let result_row = match self.record(&result) {
                Ok(id) => id,
                Err(e) => return Err(AttemptEnd::Done(Ending::Failed(e))),
            };
            if ends && ended.is_none() {
                ended = Some(content.clone());
            }
            conversation.push(
                ChatMessage::ToolResult {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    content,
                    is_error,
                    images,
                },
                &result_row,
            );
        }
        Ok(ended)
    }

    /// Replace the older part of the conversation by a summary (written by the same model, or a
    /// deterministic one if that fails), keep a tail and this activation's signals, and record
    /// the compaction in history so later activations replay the same. The tail and the summary
    /// request fit in half of `threshold` tokens (what is left after the system prompt and the
    /// tools). Returns false when there was nothing old enough to summarize.
    async fn compact(&self, conversation: &mut Conversation, reason: &str, threshold: u64, rate: TokenRate) -> bool {
        let tools = self.tools.current();
        let fixed = rate.tokens(context::request_chars(&[ChatMessage::System(self.system.to_string())], &tools));
        let room = rate.chars(threshold.saturating_sub(fixed) / 2).max(1);
        let start = compaction::tail_start(conversation, room.min(compaction::TAIL_BUDGET));
        if start == 0 {
            return false;
        }
        let older = &conversation.messages[..start];
        let input = compaction::summary_input(older, room.min(compaction::INPUT_CAP));
        let request = self.model.request(
            &self.agent.id,
            &self.activation.id,
            vec![ChatMessage::System(compaction::INSTRUCTIONS.to_string()), ChatMessage::User(input)],
            Vec::new(),
        );
        let answer = self.provider.complete(request).await;
        if let Ok(r) = &answer
            && let Err(e) = self.add_usage(&r.usage)
        {
            tracing::error!(agent = %self.agent.id, "recording a compaction's model call: {e}");
        }
        let (summary, fallback) = match answer {
            Ok(r) if !r.text.trim().is_empty() => (compaction::cap(&r.text), None),
            Ok(_) => (compaction::fallback(older), Some("the model returned an empty summary".to_string())),
            Err(e) => (compaction::fallback(older), Some(e.to_string())),
        };
        let kept_prompt = conversation.prompt_before(start);
        let compaction = HistoryEntry::HistoryCompaction {
            summary: summary.clone(),
            archived_messages: start as u64,
            kept_messages: (conversation.messages.len() - start) as u64,
            reason: reason.into(),
            model: self.model.api_model().to_string(),
            fallback,
            tail_from: conversation.rows.get(start).cloned(),
            kept_prompt: kept_prompt.clone(),
        };
        // Without the record, later activations replay the long history again: say so, go on.
        let row = self.record(&compaction).unwrap_or_else(|e| {
            tracing::error!(agent = %self.agent.id, "{e}");
            String::new()
        });
        conversation.compacted(start, &summary, kept_prompt.as_deref(), &row);
        true
    }
    async fn tool_call(&self, tool: &str, input: Value) -> Result<ToolOutput, ToolError> {
        execute_tool(&self.owner.tools, self.owner.runner.as_ref(), &self.agent.id, &self.activation.id, tool, input)
            .await
    }

    /// Append to the agent's history and return the row's id; the error says what could not be
    /// recorded.
    fn record(&self, entry: &HistoryEntry) -> Result<String, String> {
        self.owner
            .tools
            .store
            .append_history(&self.agent.id, Some(&self.activation.id), entry)
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
        prompt::build(first, signals)
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
