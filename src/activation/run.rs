//! The model loop of one activation, run in the controller (DESIGN: API keys never enter a
//! container; P0 and P1 are handled locally): `Activations` starts each activation as a task,
//! builds its prompt, tools and conversation (or rebuilds them from the recorded history of an
//! activation a previous controller left parked), and tries the models of the preset's
//! `model-list` in order (`attempt.rs`: requests, compaction, the model's tool calls through the
//! call pipeline, P1 signals at tool boundaries, usage). The model gets the agent's allowed tools
//! (names made model-safe; `presentation` never sent); a call of a tool that ends the activation
//! (`coordination.wait_for_signal`, `completion.submit`) ends it.
//!
//! When a model of the list fails, the next one continues the same conversation (the calls made
//! so far and their results included), so no tool runs twice; why it failed is recorded as a
//! `model.fallback` event. The activation then completes
//! (no-effect nudge if it had no useful effect) or fails (every model failed, `maxToolCalls`
//! exceeded). A P0 cancels it through its watch channel.
//!
//! A call decided `ask` parks the activation until it is decided (`permissions::approvals`, run by
//! `calls`); the calls of one turn that ask are announced together first. An activation a
//! previous controller left parked is resumed from its recorded history
//! ([`Activations::resume_parked`]): the turn's calls without a result run (the parked one adopts
//! its stored request), then the loop goes on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::attempt::{Attempt, AttemptEnd, Progress};
use super::budget::{ActivationBudget, Stop};
use super::context::{self, Conversation, TokenRates};
use super::prompt::{self, SystemInput};
use super::providers::{
    ChatMessage, ProviderError, ProviderPool, ResolvedModel, RetryPolicy, ToolCall, resolve_presets, safe_tool_names,
};
use super::tool_list::ToolList;
use crate::calls::RunnerTools;
use crate::config::AgentConfig;
use crate::scheduler::{ActivationLauncher, nudges};
use crate::store::{ActivationOutcome, ActivationRecord, Event, HistoryEntry, SignalRecord};
use crate::support::ToolHost;

/// Starts activations as tasks of the controller; implements the scheduler's launcher.
pub struct Activations {
    /// Itself, so `ActivationLauncher::start(&self)` can spawn an owned task.
    pub(super) me: Weak<Activations>,
    pub(super) tools: Arc<ToolHost>,
    pub(super) runner: Arc<dyn RunnerTools>,
    pub(super) providers: ProviderPool,
    pub(super) running: Mutex<HashMap<String, watch::Sender<bool>>>,
    /// Every activation task; `shutdown` waits for them.
    pub(super) tasks: TaskTracker,
    /// Cancelled at shutdown: every running activation stops and records why.
    pub(super) stopping: CancellationToken,
    /// Tokens per character of each preset's requests, as its provider counted them.
    pub(super) token_rates: TokenRates,
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
        let activations = Arc::new_cyclic(|me| Activations {
            me: me.clone(),
            tools,
            runner,
            providers,
            running: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
            stopping: CancellationToken::new(),
            token_rates: TokenRates::default(),
        });
        // The calls of this process that a reviewer sees are reviewed with these providers.
        super::review::install(&activations);
        activations
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
            // Parked by a caller without a model loop (`suzumio tool call`, an MCP client): the
            // call ended with its process, nothing can continue it, so it ends and its requests
            // expire (deciding one now would run nothing). A model loop's parked call is
            // continued below instead, and adopts its request: one request per call.
            let turns = self
                .tools
                .store
                .activation_history(&activation.id)
                .map(|h| h.iter().any(|r| matches!(r.entry, HistoryEntry::AssistantOutput { .. })));
            if let Ok(false) = turns {
                let reason = "its caller stopped while it waited for approval";
                if let Err(e) = self.tools.store.end_orphaned_parked(&activation.id, reason) {
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
                use crate::store::ActivationStatus::{WaitingApproval, WaitingUser};
                if matches!(parked, Some(WaitingApproval | WaitingUser)) {
                    tracing::info!(
                        agent = %activation.agent_id, activation = %activation.id,
                        "left waiting for approval or an answer; the next run resumes it"
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
                let prompt_row = match store.append_activation_prompt(&agent.id, &activation.id, &prompt) {
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
        for (n, model) in models.iter().enumerate() {
            let next = models.get(n + 1);
            let provider = match self.providers.get(model) {
                Ok(p) => p,
                Err(e) => {
                    self.fell_back(activation, model, next, &e);
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
                AttemptEnd::ModelFailed(e) => {
                    self.fell_back(activation, model, next, &e);
                    failures.push(format!("{}: {e}", model.preset_id()));
                }
            }
        }
        Ending::Failed(format!("All model attempts failed:\n{}", failures.join("\n")))
    }

    /// Record why the loop leaves `model` for `next` (`model.fallback`): the run's live lines,
    /// `show` and the timeline read it. The last model of the list has no next: its failure is
    /// the activation's error instead.
    fn fell_back(
        &self,
        activation: &ActivationRecord,
        model: &ResolvedModel,
        next: Option<&ResolvedModel>,
        error: &ProviderError,
    ) {
        let Some(next) = next else { return };
        let label = |m: &ResolvedModel| format!("{} ({})", m.preset_id(), m.api_model());
        tracing::warn!(
            agent = %activation.agent_id, activation = %activation.id,
            "model {} failed, trying {}: {error}", label(model), label(next)
        );
        let event = Event::ModelFallback {
            activation_id: activation.id.clone(),
            agent_id: activation.agent_id.clone(),
            from: label(model),
            to: label(next),
            cause: error.cause().to_string(),
            status: error.status(),
            error: error.to_string(),
        };
        // The fallback goes on either way; only its record is missing then.
        if let Err(e) = self.tools.store.append_event(event) {
            tracing::error!(activation = %activation.id, "recording a model fallback: {e}");
        }
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

pub(super) enum Ending {
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
            self.runner.prewarm(&activation.agent_id);
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
