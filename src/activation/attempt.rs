//! One attempt of an activation with one model of its preset's list: the requests (system
//! prompt, replayed history, this activation's turns), compaction when the estimate passes the
//! preset's `compactAt` share of its `contextWindow` (and on overflow), the model's tool calls
//! run one by one through the call pipeline (`calls::execute_tool`) with P1 signals handed over
//! at each tool boundary, and the usage of every model call counted against the budgets. The
//! activation's own life (start, resume, fallback to the next model, end) is `run.rs`'s.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::watch;

use super::budget::{ActivationBudget, RecordError};
use super::context::{self, Conversation, TokenRate, compaction};
use super::live;
use super::prompt;
use super::providers::{ChatMessage, ModelProvider, ModelRequest, ProviderError, ResolvedModel, ToolCall, Usage};
use super::run::{Activations, Ending};
use super::tool_list::ToolList;
use crate::calls::execute_model_call;
use crate::config::AgentConfig;
use crate::store::{ActivationRecord, HistoryEntry, RecordedCall, RecordedUsage, ToolImage};
use crate::support::ToolOutput;
use crate::toolpack::{TOOL_SEARCH, ToolError};

pub(super) enum AttemptEnd {
    Done(Ending),
    /// The model call failed: try the next model of the list.
    ModelFailed(ProviderError),
}

pub(super) struct Attempt<'a> {
    pub(super) owner: &'a Activations,
    pub(super) agent: &'a AgentConfig,
    pub(super) activation: &'a ActivationRecord,
    pub(super) model: &'a ResolvedModel,
    pub(super) provider: Arc<dyn ModelProvider>,
    /// The system prompt, first in every request.
    pub(super) system: &'a str,
    pub(super) tools: &'a ToolList,
    pub(super) names: &'a [(String, String)],
    pub(super) cancel: watch::Receiver<bool>,
    /// Checked before every model call; records what each call used.
    pub(super) budget: &'a ActivationBudget<'a>,
}

/// What an activation has done so far, over every model tried.
#[derive(Default)]
pub(super) struct Progress {
    pub(super) model_steps: u64,
    pub(super) tool_calls: u64,
    pub(super) last_text: String,
}

impl Attempt<'_> {
    /// The request for the conversation as it is: the system prompt, then the history, then
    /// what this activation added.
    fn request(&self, conversation: &Conversation) -> ModelRequest {
        let mut messages = Vec::with_capacity(conversation.messages.len() + 1);
        messages.push(ChatMessage::System(self.system.to_string()));
        messages.extend(conversation.messages.iter().cloned());
        let tools = self.tools.next(&self.owner.tools.store);
        let mut request = self.model.request(&self.agent.id, &self.activation.id, messages, tools);
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
    fn add_usage(&self, usage: &Usage) -> Result<(), RecordError> {
        self.budget.record(self.model, usage.input_tokens, usage.cached_input_tokens, usage.output_tokens)
    }

    pub(super) async fn run(
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
                Err(e) => return AttemptEnd::ModelFailed(e),
            };
            progress.model_steps += 1;
            self.owner.token_rates.learn(self.model.preset_id(), chars, response.usage.input_tokens);
            if let Err(e) = self.add_usage(&response.usage) {
                return AttemptEnd::Done(Ending::Failed(e.to_string()));
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
                Err(e) => return AttemptEnd::Done(Ending::Failed(e.to_string())),
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
        // A registered tool the agent may not use: the pipeline refuses it by its real name,
        // with the reason (not as an unknown tool).
        let project = self.owner.tools.project.snapshot();
        let registered = |name: &str| {
            project
                .registry
                .tools()
                .find(|(_, t)| crate::toolpack::sanitize_tool_name(&t.name) == name)
                .map(|(_, t)| t.name.clone())
        };
        let announced: Vec<(String, String, Value)> = calls
            .iter()
            .zip(&real_names)
            .filter_map(|(call, real)| Some((call.id.clone(), real.clone()?, call.arguments.clone())))
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
            if let (Some(real), Some(why)) = (&real, &not_loaded) {
                crate::calls::rejected(
                    &self.owner.tools,
                    &self.agent.id,
                    &self.activation.id,
                    Some(&call.id),
                    real,
                    why,
                );
            }
            // Unknown or not allowed: the pipeline refuses it, and counts it.
            let real = real.or_else(|| registered(&call.name)).unwrap_or_else(|| call.name.clone());
            let (content, is_error, ends, images) = match not_loaded {
                Some(why) => (why, true, false, Vec::new()),
                None => {
                    let outcome = tokio::select! {
                        r = self.tool_call(&call.id, &real, call.arguments.clone()) => r,
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
                Err(e) => return Err(AttemptEnd::Done(Ending::Failed(e.to_string()))),
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
    /// One call of the turn, named by the model's id of it (`key`): the name its approval
    /// request is found by again when a restart resumes the activation.
    async fn tool_call(&self, key: &str, tool: &str, input: Value) -> Result<ToolOutput, ToolError> {
        let (host, runner) = (&self.owner.tools, self.owner.runner.as_ref());
        execute_model_call(host, runner, &self.agent.id, &self.activation.id, key, tool, input).await
    }

    /// Append to the agent's history and return the row's id; the error says what could not be
    /// recorded.
    fn record(&self, entry: &HistoryEntry) -> Result<String, RecordError> {
        self.owner
            .tools
            .store
            .append_history(&self.agent.id, Some(&self.activation.id), entry)
            .map_err(RecordError::History)
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
