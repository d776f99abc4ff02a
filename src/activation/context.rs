//! The conversation an activation sends after its system prompt: the agent's history replayed
//! into native messages ([`replay`]), the request's token estimate ([`TokenRate`]), and what a
//! compaction keeps and summarizes ([`compaction`]). No I/O here: the loop in `run.rs` reads and
//! records the history and calls the models.
//!
//! Architecture invariant: replaying the rows an activation recorded gives back exactly the
//! messages it sent (tool calls and results in native form, nothing cut), so each request starts
//! with the previous request's messages — the prefix provider prompt caches reuse. Only a
//! compaction changes the prefix, and it is recorded so that replay changes it the same way.

use std::collections::HashMap;
use std::sync::Mutex;

use super::providers::{ChatMessage, ModelTool, ToolCall};
use crate::store::{HistoryEntry, HistoryRecord};

/// The text a compaction summary is replayed as.
pub fn summary_message(summary: &str) -> ChatMessage {
    ChatMessage::User(format!("# Compacted Agent History\n\n{summary}"))
}

/// What a call whose result was never recorded (its activation was cancelled or failed while it
/// ran) answers on replay: every native call needs a result, or the provider refuses the request.
pub const NO_RESULT: &str = "(no result: the activation ended before this tool call finished)";

/// An activation's conversation after the system prompt, with the history row each message
/// replays from (`rows[i]` for `messages[i]`; a row may give several messages).
#[derive(Debug, Default)]
pub struct Conversation {
    pub messages: Vec<ChatMessage>,
    pub rows: Vec<String>,
    /// Where this activation's prompt (its newest signals) is, once added.
    pub prompt_at: Option<usize>,
}

impl Conversation {
    pub fn push(&mut self, message: ChatMessage, row: &str) {
        self.messages.push(message);
        self.rows.push(row.to_string());
    }

    pub fn push_prompt(&mut self, text: &str, row: &str) {
        self.prompt_at = Some(self.messages.len());
        self.push(ChatMessage::User(text.to_string()), row);
    }

    /// Messages before this activation's prompt: the history the next activation starts with.
    pub fn history_len(&self) -> usize {
        self.prompt_at.unwrap_or(self.messages.len())
    }

    /// This activation's prompt, when it is among the first `before` messages.
    pub fn prompt_before(&self, before: usize) -> Option<String> {
        match self.prompt_at.filter(|p| *p < before).map(|p| &self.messages[p]) {
            Some(ChatMessage::User(text)) => Some(text.clone()),
            _ => None,
        }
    }

    /// A kept tail may start at message `i` only where replaying from its row gives the same
    /// messages: at the first message of a row, and not at a tool result (its call would be in
    /// the summary).
    fn tail_may_start(&self, i: usize) -> bool {
        (i == 0 || self.rows[i] != self.rows[i - 1]) && !matches!(self.messages[i], ChatMessage::ToolResult { .. })
    }

    /// Replace the messages before `start` by the summary (and this activation's prompt when it
    /// was among them), as the compaction row `row` records it.
    pub fn compacted(&mut self, start: usize, summary: &str, kept_prompt: Option<&str>, row: &str) {
        let tail = self.messages.split_off(start);
        let tail_rows = self.rows.split_off(start);
        let prompt_in_tail = self.prompt_at.and_then(|p| p.checked_sub(start));
        self.messages.clear();
        self.rows.clear();
        self.push(summary_message(summary), row);
        self.prompt_at = None;
        if let Some(prompt) = kept_prompt {
            self.push_prompt(prompt, row);
        }
        let offset = self.messages.len();
        if kept_prompt.is_none() {
            self.prompt_at = prompt_in_tail.map(|p| p + offset);
        }
        self.messages.extend(tail);
        self.rows.extend(tail_rows);
    }
}

/// Earlier history as the conversation it was: the activation prompts as user messages, tool
/// calls and results natively (assistant `tool_calls` answered by their results), compaction
/// summaries followed by the tail they kept. Rows of older builds carry no call ids and are
/// replayed in the reference's text form (§6.5), long ones cut.
pub fn replay(history: &[HistoryRecord]) -> Conversation {
    let mut c = Conversation::default();
    // Native calls of the last assistant message that have no result yet, and its row.
    let mut pending: Vec<(String, String)> = Vec::new();
    let mut pending_row = String::new();
    for h in history {
        match &h.entry {
            HistoryEntry::ToolResult { call_id: Some(id), name, content, is_error, images }
                if pending.iter().any(|(p, _)| p == id) =>
            {
                pending.retain(|(p, _)| p != id);
                let message = ChatMessage::ToolResult {
                    call_id: id.clone(),
                    name: name.clone(),
                    content: content.clone(),
                    is_error: *is_error,
                    images: images.clone(),
                };
                c.push(message, &h.id);
            }
            HistoryEntry::Signals { .. } | HistoryEntry::Unrecognized { .. } => {}
            entry => {
                answer_pending(&mut c, &mut pending, &pending_row);
                match entry {
                    HistoryEntry::HistoryCompaction { summary, tail_from, kept_prompt, .. } => {
                        let start = tail_from
                            .as_ref()
                            .and_then(|t| c.rows.iter().position(|r| r == t))
                            .unwrap_or(c.messages.len());
                        c.prompt_at = None;
                        c.compacted(start, summary, kept_prompt.as_deref(), &h.id);
                        c.prompt_at = None;
                    }
                    HistoryEntry::ActivationPrompt { text, .. } => c.push(ChatMessage::User(text.clone()), &h.id),
                    HistoryEntry::AssistantOutput { text, tool_calls, .. } => {
                        let ids: Option<Vec<String>> = tool_calls.iter().map(|call| call.id.clone()).collect();
                        match ids {
                            Some(ids) if !tool_calls.is_empty() => {
                                let calls: Vec<ToolCall> = tool_calls
                                    .iter()
                                    .zip(&ids)
                                    .map(|(call, id)| ToolCall {
                                        id: id.clone(),
                                        name: call.name.clone(),
                                        arguments: call.arguments.clone(),
                                    })
                                    .collect();
                                pending = calls.iter().map(|call| (call.id.clone(), call.name.clone())).collect();
                                pending_row = h.id.clone();
                                c.push(ChatMessage::Assistant { text: text.clone(), tool_calls: calls }, &h.id);
                            }
                            _ => {
                                let mut text = text.clone();
                                for call in tool_calls {
                                    text.push_str(&format!("\n\n# Tool Call Record\n{} {}", call.name, call.arguments));
                                }
                                if !text.trim().is_empty() {
                                    let text = legacy_cut(&text, MESSAGE_CAP);
                                    c.push(ChatMessage::Assistant { text, tool_calls: Vec::new() }, &h.id);
                                }
                            }
                        }
                    }
                    HistoryEntry::ToolResult { name, content, .. } => {
                        let text = legacy_cut(&format!("# Tool Result Record\n{name}: {content}"), TOOL_RESULT_CAP);
                        c.push(ChatMessage::User(text), &h.id);
                    }
                    HistoryEntry::Signals { .. } | HistoryEntry::Unrecognized { .. } => {}
                }
            }
        }
    }
    answer_pending(&mut c, &mut pending, &pending_row);
    c
}

fn answer_pending(c: &mut Conversation, pending: &mut Vec<(String, String)>, row: &str) {
    for (call_id, name) in pending.drain(..) {
        c.push(
            ChatMessage::ToolResult {
                call_id,
                name,
                content: NO_RESULT.to_string(),
                is_error: true,
                images: Vec::new(),
            },
            row,
        );
    }
}

/// Caps of the text form (reference §6.5); native replay cuts nothing, so it matches what was sent.
const MESSAGE_CAP: usize = 40_000;
const TOOL_RESULT_CAP: usize = 12_000;

fn legacy_cut(text: &str, cap: usize) -> String {
    if text.chars().count() <= cap {
        return text.to_string();
    }
    let kept: String = text.chars().take(cap).collect();
    format!("{kept}\n[truncated]")
}

// ---------------------------------------------------------------------------------------------
// Token estimate

/// Characters a request sends: its messages (a small overhead each for roles and framing), the
/// tool calls' arguments and the tools' schemas.
pub fn request_chars(messages: &[ChatMessage], tools: &[ModelTool]) -> usize {
    const PER_MESSAGE: usize = 16;
    // An image costs the model about as much as this many characters of text, whatever its bytes.
    const PER_IMAGE: usize = 6_000;
    let images = |m: &ChatMessage| match m {
        ChatMessage::ToolResult { images, .. } => images.len() * PER_IMAGE,
        _ => 0,
    };
    let messages: usize = messages.iter().map(|m| compaction::text(m).len() + PER_MESSAGE + images(m)).sum();
    let tools: usize = tools.iter().map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len()).sum();
    messages + tools
}

/// Tokens per character of a model's requests: 1/4 until the provider has reported the input
/// tokens of a request, then what it reported (within bounds, so one odd answer cannot make the
/// estimate absurd).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenRate(f64);

impl Default for TokenRate {
    fn default() -> Self {
        TokenRate(0.25)
    }
}

impl TokenRate {
    pub fn tokens(self, chars: usize) -> u64 {
        (chars as f64 * self.0).ceil() as u64
    }

    pub fn chars(self, tokens: u64) -> usize {
        (tokens as f64 / self.0) as usize
    }

    /// Calibrate from a request of `chars` characters the provider counted as `reported` tokens.
    pub fn learned(self, chars: usize, reported: u64) -> TokenRate {
        if reported == 0 || chars == 0 {
            return self;
        }
        TokenRate((reported as f64 / chars as f64).clamp(0.05, 1.0))
    }
}

/// The calibrated rate per model preset, shared by every activation of a run.
#[derive(Default)]
pub struct TokenRates(Mutex<HashMap<String, TokenRate>>);

impl TokenRates {
    pub fn get(&self, preset: &str) -> TokenRate {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(preset).copied().unwrap_or_default()
    }

    pub fn learn(&self, preset: &str, chars: usize, reported: u64) {
        let mut rates = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let rate = rates.get(preset).copied().unwrap_or_default().learned(chars, reported);
        rates.insert(preset.to_string(), rate);
    }
}

/// Compaction (reference §6.6, run before an overflow too): what is kept, what is summarized, and how.
pub mod compaction {
    use super::{ChatMessage, Conversation};

    /// At most this many recent messages are kept verbatim, within the tail budget (at most
    /// `TAIL_BUDGET` characters).
    pub const TAIL_MESSAGES: usize = 12;
    pub const TAIL_BUDGET: usize = 80_000;
    /// The summary request's input and the summary itself are capped.
    pub const INPUT_CAP: usize = 80_000;
    const SUMMARY_CAP: usize = 20_000;

    pub const INSTRUCTIONS: &str = "Summarize the conversation below for an agent that will continue the work \
        without it. Use exactly these Markdown sections: ## Goal, ## Constraints & Preferences, ## Progress \
        (### Done, ### In Progress, ### Blocked), ## Key Decisions, ## Next Steps, ## Critical Context, \
        ## Relevant Files. Be specific: names, paths, ids, numbers. Do not call tools.";

    pub(super) fn text(m: &ChatMessage) -> String {
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

    /// Where the kept tail starts: up to `TAIL_MESSAGES` recent messages within `budget`
    /// characters, always the last one, moved forward to where a tail may start (see
    /// `Conversation::tail_may_start`). 0 means there is nothing older to summarize.
    pub fn tail_start(c: &Conversation, budget: usize) -> usize {
        let messages = &c.messages;
        let mut start = messages.len();
        let mut used = 0;
        while start > 0 && messages.len() - start < TAIL_MESSAGES {
            let size = text(&messages[start - 1]).chars().count();
            if used + size > budget && start < messages.len() {
                break;
            }
            used += size;
            start -= 1;
        }
        while start > 0 && start < messages.len() - 1 && !c.tail_may_start(start) {
            start += 1;
        }
        // The last message is kept even where a tail may not start (a lone tool result): then
        // nothing can be summarized without breaking its call apart.
        if start > 0 && !c.tail_may_start(start) { 0 } else { start }
    }

    /// The older messages as one text, the most recent part kept when longer than `cap`.
    pub fn summary_input(older: &[ChatMessage], cap: usize) -> String {
        let mut out = String::new();
        for m in older {
            out.push_str(&format!("[{}] {}\n\n", role(m), text(m)));
        }
        let chars: Vec<char> = out.chars().collect();
        if chars.len() > cap { chars[chars.len() - cap..].iter().collect() } else { out }
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
}

#[cfg(test)]
mod tests {
    use super::compaction::*;
    use super::*;
    use crate::store::{RecordedCall, RecordedUsage};
    use serde_json::json;

    fn row(id: &str, entry: HistoryEntry) -> HistoryRecord {
        HistoryRecord {
            id: id.into(),
            agent_id: "pm".into(),
            activation_id: None,
            entry,
            created_at: chrono::DateTime::UNIX_EPOCH,
        }
    }

    fn prompt(text: &str) -> HistoryEntry {
        HistoryEntry::ActivationPrompt {
            text: text.into(),
            delivery: "activation_start".into(),
            signal_ids: vec![],
            priorities: vec![],
        }
    }

    fn assistant(calls: &[(Option<&str>, &str)]) -> HistoryEntry {
        HistoryEntry::AssistantOutput {
            text: String::new(),
            tool_calls: calls
                .iter()
                .map(|(id, name)| RecordedCall {
                    id: id.map(str::to_string),
                    name: name.to_string(),
                    arguments: json!({}),
                })
                .collect(),
            model: "m".into(),
            usage: RecordedUsage::default(),
        }
    }

    fn result(id: Option<&str>, content: &str) -> HistoryEntry {
        HistoryEntry::ToolResult {
            name: "t".into(),
            content: content.into(),
            is_error: false,
            call_id: id.map(str::to_string),
            images: Vec::new(),
        }
    }

    fn user(i: usize) -> ChatMessage {
        ChatMessage::User(format!("m{i}"))
    }

    #[test]
    fn calls_with_ids_replay_natively_and_unanswered_ones_get_a_result() {
        let history = [
            row("h1", prompt("go")),
            row("h2", assistant(&[(Some("c1"), "a"), (Some("c2"), "b")])),
            row("h3", result(Some("c1"), "ok")),
            row("h4", prompt("again")),
        ];
        let c = replay(&history);
        assert_eq!(c.messages.len(), 5);
        assert!(matches!(&c.messages[1], ChatMessage::Assistant { tool_calls, .. } if tool_calls.len() == 2));
        assert!(
            matches!(&c.messages[2], ChatMessage::ToolResult { call_id, content, .. } if call_id == "c1" && content == "ok")
        );
        assert!(
            matches!(&c.messages[3], ChatMessage::ToolResult { call_id, content, is_error: true, .. } if call_id == "c2" && content == NO_RESULT)
        );
        assert_eq!(c.rows, ["h1", "h2", "h3", "h2", "h4"]);
    }

    /// A result with images replays with the same images, so the next request sends them again
    /// exactly as the first did.
    #[test]
    fn a_result_with_images_replays_its_images() {
        let image = crate::store::ToolImage { mime_type: "image/png".into(), data: "iVBORw0KGgo=".into() };
        let mut with_image = result(Some("c1"), "a picture");
        if let HistoryEntry::ToolResult { images, .. } = &mut with_image {
            images.push(image.clone());
        }
        let c =
            replay(&[row("h1", prompt("go")), row("h2", assistant(&[(Some("c1"), "snap")])), row("h3", with_image)]);
        assert!(
            matches!(&c.messages[2], ChatMessage::ToolResult { images, content, .. } if *images == [image.clone()] && content == "a picture"),
            "{:?}",
            c.messages[2]
        );
    }

    #[test]
    fn rows_without_ids_replay_as_text_records() {
        let c = replay(&[row("h1", assistant(&[(None, "a")])), row("h2", result(None, "ok"))]);
        assert_eq!(
            c.messages,
            [
                ChatMessage::Assistant { text: "\n\n# Tool Call Record\na {}".into(), tool_calls: vec![] },
                ChatMessage::User("# Tool Result Record\nt: ok".into()),
            ]
        );
    }

    #[test]
    fn a_compaction_replays_as_its_summary_then_its_kept_prompt_and_tail() {
        let compaction = HistoryEntry::HistoryCompaction {
            summary: "S".into(),
            archived_messages: 2,
            kept_messages: 1,
            reason: "r".into(),
            model: "m".into(),
            fallback: None,
            tail_from: Some("h3".into()),
            kept_prompt: Some("signals".into()),
        };
        let history =
            [row("h1", prompt("old")), row("h2", prompt("signals")), row("h3", prompt("kept")), row("h4", compaction)];
        let c = replay(&history);
        assert_eq!(
            c.messages,
            [summary_message("S"), ChatMessage::User("signals".into()), ChatMessage::User("kept".into())]
        );
        assert_eq!(c.rows, ["h4", "h4", "h3"]);
    }

    #[test]
    fn compacting_in_memory_gives_what_replay_gives() {
        let history = [
            row("h1", prompt("one")),
            row("h2", assistant(&[(Some("c1"), "a")])),
            row("h3", result(Some("c1"), "ok")),
            row("h4", prompt("two")),
        ];
        let mut live = replay(&history);
        live.prompt_at = Some(3);
        let start = tail_start(&live, 9);
        assert_eq!(start, 3, "the tail may not start at the tool result");
        live.compacted(start, "S", None, "h5");
        let compaction = HistoryEntry::HistoryCompaction {
            summary: "S".into(),
            archived_messages: 3,
            kept_messages: 1,
            reason: "r".into(),
            model: "m".into(),
            fallback: None,
            tail_from: Some("h4".into()),
            kept_prompt: None,
        };
        let mut rows = history.to_vec();
        rows.push(row("h5", compaction));
        assert_eq!(replay(&rows).messages, live.messages);
        assert_eq!(live.prompt_at, Some(1));
    }

    #[test]
    fn the_tail_keeps_recent_messages_and_never_starts_with_a_tool_result() {
        let mut c = Conversation::default();
        for i in 0..20 {
            c.push(user(i), &format!("r{i}"));
        }
        c.messages.insert(
            8,
            ChatMessage::ToolResult {
                call_id: "c".into(),
                name: "t".into(),
                content: "r".into(),
                is_error: false,
                images: Vec::new(),
            },
        );
        c.rows.insert(8, "rt".into());
        let start = tail_start(&c, TAIL_BUDGET);
        assert!(c.messages.len() - start <= 12 && !matches!(c.messages[start], ChatMessage::ToolResult { .. }));
        assert_eq!(c.messages.last(), Some(&user(19)));
        assert_eq!(tail_start(&c, 1), 20, "a tight budget keeps only the last message");
    }

    #[test]
    fn the_fallback_summary_and_the_summary_input_are_capped() {
        let older: Vec<ChatMessage> = (0..500).map(|i| ChatMessage::User(format!("{i} {}", "x".repeat(300)))).collect();
        assert!(fallback(&older).chars().count() <= 20_020);
        assert!(summary_input(&older, INPUT_CAP).chars().count() <= INPUT_CAP);
        assert_eq!(summary_input(&older, 10).chars().count(), 10);
    }

    #[test]
    fn the_token_rate_learns_from_reported_usage_within_bounds() {
        let rate = TokenRate::default();
        assert_eq!(rate.tokens(400), 100);
        assert_eq!(rate.learned(400, 200).tokens(400), 200);
        assert_eq!(rate.learned(400, 0), rate, "no report, no change");
        assert_eq!(rate.learned(10, 1_000_000).tokens(10), 10, "capped at a token per character");
    }
}
