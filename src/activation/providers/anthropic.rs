//! The `anthropic` provider: the Messages API with `tool_use` (`POST {base}/v1/messages`). Owns
//! the mapping between the neutral types and that wire format, and nothing else (HTTP, retries
//! and redaction are in `http.rs`).
//!
//! Wire rules it takes care of: the system prompt is a top-level field; tool results travel as
//! `tool_result` blocks in a user turn (first in that turn, as the API requires); consecutive
//! turns of the same role are merged; empty text blocks (which the API refuses) are dropped;
//! `max_tokens` is required (the preset's `maxOutputTokens`, else 4096). A base URL that already
//! ends in `/v1` (the reference's AI SDK form) is accepted as well.
//!
//! Prompt caching needs explicit breakpoints here: `cache_control` on the system block, on the
//! last block of the replayed history and on the last block of the request. Usage reports
//! uncached, cache-read and cache-written input separately; `input_tokens` is their sum.
//!
//! The preset's `reasoningEffort` is not sent: the Messages API has no such field, and enabling
//! extended thinking instead would require replaying signed thinking blocks, which the neutral
//! history does not keep. `providerOptions.anthropic` and `providerOptions.<provider id>` fields
//! are added to the body (e.g. `metadata`).
//!
//! Streamed (`stream: true`): the `message_start` message gets its content blocks from
//! `content_block_start` and the `text_delta` / `input_json_delta` pieces, its stop reason and
//! usage from `message_delta`, and the same parser reads it, so both paths give the same
//! [`ModelResponse`]. An `error` event fails the call like an HTTP error.

use reqwest::header::HeaderMap;
use serde_json::{Map, Value, json};

use super::http::{BadAnswer, Flow, HttpClient, JsonWire, Streamed, complete, credential_values, error_message};
use super::{
    ChatMessage, DeltaSink, HttpSettings, ModelProvider, ModelRequest, ModelResponse, ProviderError, ProviderFuture,
    StopReason, ToolCall, ToolChoice, Usage, invalid_json, merge_provider_options,
};
use crate::config::ProviderConfig;

pub const ANTHROPIC_VERSION: &str = "2023-06-01";
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

pub(crate) struct AnthropicProvider {
    id: String,
    base_url: String,
    api_key: Option<String>,
    headers: Vec<(String, String)>,
    http: HttpClient,
}

impl AnthropicProvider {
    pub fn new(config: &ProviderConfig, settings: HttpSettings) -> Result<Self, ProviderError> {
        let label = format!("provider `{}` ({})", config.id, config.kind.as_str());
        let http = HttpClient::new(label, config, &settings)?;
        Ok(AnthropicProvider {
            id: config.id.clone(),
            base_url: settings.base_url,
            api_key: settings.api_key,
            headers: config.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            http,
        })
    }
}

impl JsonWire for AnthropicProvider {
    fn http(&self) -> &HttpClient {
        &self.http
    }

    fn url(&self) -> String {
        if self.base_url.ends_with("/v1") {
            format!("{}/messages", self.base_url)
        } else {
            format!("{}/v1/messages", self.base_url)
        }
    }

    fn body(&self, request: &ModelRequest) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(request.model));
        body.insert("max_tokens".into(), json!(request.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS)));
        let system: Vec<&str> = request
            .messages
            .iter()
            .filter_map(|m| match m {
                ChatMessage::System(text) if !text.trim().is_empty() => Some(text.as_str()),
                _ => None,
            })
            .collect();
        if !system.is_empty() {
            // As a block, so it can carry the first cache breakpoint (tools and system).
            let block = json!({"type": "text", "text": system.join("\n\n"), "cache_control": ephemeral()});
            body.insert("system".into(), json!([block]));
        }
        body.insert("messages".into(), Value::Array(wire_messages(&request.messages, &cache_marks(request))));
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    let mut tool = Map::new();
                    tool.insert("name".into(), json!(t.name));
                    if !t.description.is_empty() {
                        tool.insert("description".into(), json!(t.description));
                    }
                    tool.insert("input_schema".into(), t.parameters.clone());
                    Value::Object(tool)
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
            let choice = match request.tool_choice {
                ToolChoice::Auto => "auto",
                ToolChoice::Required => "any",
                ToolChoice::None => "none",
            };
            body.insert("tool_choice".into(), json!({"type": choice}));
        }
        if let Some(t) = request.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(p) = request.top_p {
            body.insert("top_p".into(), json!(p));
        }
        if let Some(k) = request.top_k {
            body.insert("top_k".into(), json!(k));
        }
        if request.reasoning_effort.is_some() {
            tracing::debug!(provider = %self.id, "reasoningEffort ignored: the Messages API has no such field");
        }
        let mut body = Value::Object(body);
        merge_provider_options(&mut body, &request.provider_options, &["anthropic", &self.id]);
        body
    }

    fn headers(&self, request: &ModelRequest) -> Result<HeaderMap, ProviderError> {
        let mut auth: Vec<(String, String)> =
            self.api_key.iter().map(|key| ("x-api-key".to_string(), key.clone())).collect();
        auth.push(("anthropic-version".into(), ANTHROPIC_VERSION.into()));
        self.http.request_headers(auth, &self.headers, request)
    }

    fn parse(&self, answer: &Value) -> Result<ModelResponse, ProviderError> {
        self.http.parse(answer, parse_response)
    }
}

impl ModelProvider for AnthropicProvider {
    fn complete(&self, request: ModelRequest) -> ProviderFuture<'_> {
        Box::pin(async move { complete(self, &request).await })
    }

    fn stream<'a>(&'a self, request: ModelRequest, sink: &'a dyn DeltaSink) -> ProviderFuture<'a> {
        Box::pin(async move {
            let mut body = self.body(&request);
            body["stream"] = json!(true);
            let headers = self.headers(&request)?;
            let mut message = StreamedMessage::default();
            let streamed = self
                .http
                .post_stream(&self.url(), headers, &body, credential_values(&request.headers), |event, data| {
                    message.feed(event, data, sink)
                })
                .await?;
            let answer = match streamed {
                Streamed::Json(json) => json,
                Streamed::Events => message
                    .finish()
                    .map_err(|e| ProviderError::Stream { provider: self.http.label().to_string(), message: e.0 })?,
            };
            self.parse(&answer)
        })
    }

    fn describe(&self) -> String {
        format!("{} at {}", self.http.label(), self.http.redact(&self.base_url))
    }
}

/// A streamed message (`message_start`, `content_block_*`, `message_delta`, `message_stop`),
/// put back together into the message a non-streamed call gets, so that one parser reads both.
#[derive(Default)]
struct StreamedMessage {
    /// From `message_start`, with `message_delta`'s stop reason and usage merged in.
    message: Option<Value>,
    /// Content blocks by their `index`, each with the `input_json_delta` pieces of a tool use.
    blocks: Vec<(u64, Value, String)>,
    done: bool,
}

impl StreamedMessage {
    fn feed(&mut self, event: &str, data: &str, sink: &dyn DeltaSink) -> Result<Flow, BadAnswer> {
        let parsed: Value = match serde_json::from_str(data) {
            Ok(value) => value,
            Err(e) if event == "ping" => {
                tracing::debug!("an unreadable ping ({e}) is ignored");
                return Ok(Flow::More);
            }
            Err(e) => return Err(BadAnswer(format!("a `{event}` event is not JSON ({e})"))),
        };
        let kind = parsed.get("type").and_then(Value::as_str).unwrap_or(event);
        match kind {
            "message_start" => {
                let message = parsed.get("message").ok_or("message_start has no message")?;
                self.message = Some(message.clone());
            }
            "content_block_start" => {
                let index = parsed.get("index").and_then(Value::as_u64).unwrap_or(self.blocks.len() as u64);
                let block = parsed.get("content_block").cloned().ok_or("content_block_start has no content_block")?;
                if block.get("type").and_then(Value::as_str) == Some("text") {
                    // The non-streamed parser joins text blocks with a line break.
                    if self.blocks.iter().any(|(_, b, _)| b.get("type").and_then(Value::as_str) == Some("text")) {
                        sink.text("\n");
                    }
                    if let Some(text) = block.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                        sink.text(text);
                    }
                }
                self.blocks.push((index, block, String::new()));
            }
            "content_block_delta" => {
                let index = parsed.get("index").and_then(Value::as_u64);
                let delta = parsed.get("delta").ok_or("content_block_delta has no delta")?;
                let Some((_, block, partial_json)) = self.blocks.iter_mut().rev().find(|(i, _, _)| Some(*i) == index)
                else {
                    return Err(BadAnswer(format!("a delta for content block {index:?}, which never started")));
                };
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let piece = delta.get("text").and_then(Value::as_str).unwrap_or_default();
                        sink.text(piece);
                        let text = block.get("text").and_then(Value::as_str).unwrap_or_default();
                        block["text"] = json!(format!("{text}{piece}"));
                    }
                    Some("input_json_delta") => {
                        partial_json.push_str(delta.get("partial_json").and_then(Value::as_str).unwrap_or_default());
                    }
                    // thinking, signatures, citations: nothing the loop acts on.
                    _ => {}
                }
            }
            "message_delta" => {
                let message = self.message.as_mut().ok_or("message_delta before message_start")?;
                if let Some(delta) = parsed.get("delta").and_then(Value::as_object) {
                    for (key, value) in delta {
                        message[key.as_str()] = value.clone();
                    }
                }
                // Counts in message_delta are totals so far: they replace those of message_start.
                if let Some(usage) = parsed.get("usage").and_then(Value::as_object) {
                    if !message.get("usage").is_some_and(Value::is_object) {
                        message["usage"] = json!({});
                    }
                    for (key, value) in usage.iter().filter(|(_, v)| !v.is_null()) {
                        message["usage"][key.as_str()] = value.clone();
                    }
                }
            }
            "message_stop" => {
                self.done = true;
                return Ok(Flow::Done);
            }
            "error" => return Err(BadAnswer(format!("the server sent an error: {}", error_message(data)))),
            // ping, content_block_stop, and event types added later (the API says to ignore them).
            _ => {}
        }
        Ok(Flow::More)
    }

    /// The message as a non-streamed call would have got it. A stream that ended before
    /// `message_stop` is an error: the answer may be cut short.
    fn finish(self) -> Result<Value, BadAnswer> {
        let Some(mut message) = self.message else {
            return Err(BadAnswer("the stream ended before message_start".into()));
        };
        if !self.done {
            return Err(BadAnswer("the stream ended before message_stop".into()));
        }
        let mut blocks = self.blocks;
        blocks.sort_by_key(|(index, _, _)| *index);
        let content: Vec<Value> = blocks
            .into_iter()
            .map(|(_, mut block, partial_json)| {
                if block.get("type").and_then(Value::as_str) == Some("tool_use") && !partial_json.trim().is_empty() {
                    // Unparsable input is kept as text, for the loop to report to the model.
                    block["input"] =
                        serde_json::from_str(&partial_json).unwrap_or_else(|_| invalid_json(&partial_json));
                }
                block
            })
            .collect();
        message["content"] = Value::Array(content);
        Ok(message)
    }
}

/// The cache breakpoint every marker sets (the default five-minute cache).
fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// The messages after which a cache breakpoint goes: the end of the replayed history (the
/// prefix the next activation shares) and the end of the request (the prefix the next step of
/// this activation shares). With the system prompt's, that is three of the four the API allows.
fn cache_marks(request: &ModelRequest) -> Vec<usize> {
    let mut marks = Vec::new();
    if request.cache_prefix > 0 {
        marks.push(request.cache_prefix - 1);
    }
    if let Some(last) = request.messages.len().checked_sub(1)
        && !marks.contains(&last)
    {
        marks.push(last);
    }
    marks
}

/// The conversation as Messages API turns (system messages excluded: they are top-level). The
/// last block produced up to each message index in `marks` gets a cache breakpoint.
fn wire_messages(messages: &[ChatMessage], marks: &[usize]) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        if index > 0 && marks.contains(&(index - 1)) {
            mark_last_block(&mut turns);
        }
        let (role, blocks) = match message {
            ChatMessage::System(_) => continue,
            ChatMessage::User(text) => ("user", text_block(text).into_iter().collect()),
            ChatMessage::Assistant { text, tool_calls } => {
                let mut blocks: Vec<Value> = text_block(text).into_iter().collect();
                for call in tool_calls {
                    // The API requires an object; anything else is passed on as unparsable text.
                    let input = if call.arguments.is_object() {
                        call.arguments.clone()
                    } else {
                        invalid_json(&call.arguments.to_string())
                    };
                    blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                }
                ("assistant", blocks)
            }
            ChatMessage::ToolResult { call_id, content, is_error, images, .. } => {
                let text = if content.is_empty() { "(no output)" } else { content.as_str() };
                // With images the content is a list of blocks: the text, then each image.
                let content = if images.is_empty() {
                    json!(text)
                } else {
                    let mut blocks = vec![json!({"type": "text", "text": text})];
                    blocks.extend(images.iter().map(|image| {
                        json!({"type": "image", "source": {"type": "base64", "media_type": image.mime_type, "data": image.data}})
                    }));
                    Value::Array(blocks)
                };
                let mut block = json!({"type": "tool_result", "tool_use_id": call_id, "content": content});
                if *is_error {
                    block["is_error"] = json!(true);
                }
                ("user", vec![block])
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    if messages.len().checked_sub(1).is_some_and(|last| marks.contains(&last)) {
        mark_last_block(&mut turns);
    }
    turns
        .into_iter()
        .map(|(role, mut blocks)| {
            if role == "user" {
                // Stable: results keep their order, and so does the text after them.
                blocks.sort_by_key(|b| b.get("type").and_then(Value::as_str) != Some("tool_result"));
            }
            json!({"role": role, "content": blocks})
        })
        .collect()
}

fn mark_last_block(turns: &mut [(&'static str, Vec<Value>)]) {
    if let Some(block) = turns.last_mut().and_then(|(_, blocks)| blocks.last_mut()) {
        block["cache_control"] = ephemeral();
    }
}

fn text_block(text: &str) -> Option<Value> {
    (!text.trim().is_empty()).then(|| json!({"type": "text", "text": text}))
}

fn parse_response(answer: &Value) -> Result<ModelResponse, BadAnswer> {
    if answer.get("type").and_then(Value::as_str) == Some("error") {
        return Err(BadAnswer(format!("the server answered with an error: {}", answer.get("error").unwrap_or(answer))));
    }
    let blocks = answer.get("content").and_then(Value::as_array).ok_or("the answer has no content list")?;
    let mut texts: Vec<&str> = Vec::new();
    let mut tool_calls = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => texts.extend(block.get("text").and_then(Value::as_str)),
            Some("tool_use") => {
                let field = |key: &str| {
                    block
                        .get(key)
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .ok_or_else(|| format!("content[{i}] (tool_use) has no {key}"))
                };
                let arguments = block.get("input").cloned().unwrap_or_else(|| json!({}));
                tool_calls.push(ToolCall { id: field("id")?, name: field("name")?, arguments });
            }
            // thinking, redacted_thinking, server tool blocks: nothing the loop acts on.
            _ => {}
        }
    }
    let usage = answer.get("usage");
    let count = |key: &str| usage.and_then(|u| u.get(key)).and_then(Value::as_u64).unwrap_or(0);
    // `input_tokens` counts only what was neither read from nor written to the cache.
    let cached_input_tokens = count("cache_read_input_tokens");
    let input_tokens = count("input_tokens") + cached_input_tokens + count("cache_creation_input_tokens");
    let stop = match answer.get("stop_reason").and_then(Value::as_str) {
        Some("end_turn" | "stop_sequence") | None => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        Some(other) => StopReason::Other(other.to_string()),
    };
    Ok(ModelResponse {
        text: texts.join("\n"),
        tool_calls,
        usage: Usage { input_tokens, output_tokens: count("output_tokens"), cached_input_tokens },
        stop,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_results_come_first_in_a_merged_user_turn() {
        let messages = vec![
            ChatMessage::User("go".into()),
            ChatMessage::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall { id: "t1".into(), name: "a".into(), arguments: json!({}) }],
            },
            ChatMessage::User("a signal arrived".into()),
            ChatMessage::ToolResult {
                call_id: "t1".into(),
                name: "a".into(),
                content: "ok".into(),
                is_error: false,
                images: Vec::new(),
            },
        ];
        let wire = wire_messages(&messages, &[]);
        assert_eq!(wire.len(), 3);
        assert_eq!(wire[2]["content"][0]["type"], "tool_result");
        assert_eq!(wire[2]["content"][1]["text"], "a signal arrived");
    }
}
