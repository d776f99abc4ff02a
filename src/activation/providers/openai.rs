//! The `openai` and `openai-compatible` providers: OpenAI Chat Completions with tools
//! (`POST {base}/chat/completions`). Owns the mapping between the neutral types and that wire
//! format, and nothing else (HTTP, retries and redaction are in `http.rs`).
//!
//! The two kinds differ only in details: `openai` sends `max_completion_tokens` (what current
//! OpenAI models take) and reads `providerOptions.openai`; `openai-compatible` sends `max_tokens`
//! and `top_k` (servers such as vLLM accept it), reads `providerOptions.openaiCompatible`, and
//! needs no API key. Both read `providerOptions.<provider id>` and send the preset's
//! `reasoningEffort` as `reasoning_effort` (where reference §6.4 puts it through the AI SDK).
//!
//! Streamed (`stream: true`, with `stream_options.include_usage` for the usage chunk): the
//! `choices[0].delta` pieces are put back together — text in order, tool calls by their `index`
//! with their `arguments` concatenated — into the JSON a non-streamed call returns, and the same
//! parser reads it, so both paths give the same [`ModelResponse`].

use reqwest::header::HeaderMap;
use serde_json::{Map, Value, json};

use super::http::{BadAnswer, Flow, HttpClient, JsonWire, Streamed, complete, credential_values, error_message};
use super::{
    ChatMessage, DeltaSink, HttpSettings, ModelProvider, ModelRequest, ModelResponse, ProviderError, ProviderFuture,
    StopReason, ToolCall, ToolChoice, Usage, invalid_arguments, merge_provider_options,
};
use crate::config::{ProviderConfig, ProviderKind};

pub(crate) struct OpenAiProvider {
    id: String,
    official: bool,
    base_url: String,
    api_key: Option<String>,
    headers: Vec<(String, String)>,
    http: HttpClient,
}

impl OpenAiProvider {
    pub fn new(config: &ProviderConfig, settings: HttpSettings) -> Result<Self, ProviderError> {
        let label = format!("provider `{}` ({})", config.id, config.kind.as_str());
        let http = HttpClient::new(label, config, &settings)?;
        Ok(OpenAiProvider {
            id: config.id.clone(),
            official: config.kind == ProviderKind::OpenAi,
            base_url: settings.base_url,
            api_key: settings.api_key,
            headers: config.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            http,
        })
    }
}

impl JsonWire for OpenAiProvider {
    fn http(&self) -> &HttpClient {
        &self.http
    }

    fn body(&self, request: &ModelRequest) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(request.model));
        body.insert("messages".into(), Value::Array(wire_messages(&request.messages)));
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                    })
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
            body.insert("tool_choice".into(), json!(request.tool_choice.as_str()));
        } else if request.tool_choice != ToolChoice::None {
            tracing::debug!(provider = %self.id, "tool_choice ignored: the request offers no tools");
        }
        if let Some(t) = request.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(p) = request.top_p {
            body.insert("top_p".into(), json!(p));
        }
        if let Some(k) = request.top_k {
            if self.official {
                tracing::debug!(provider = %self.id, "topK ignored: OpenAI Chat Completions has no top_k");
            } else {
                body.insert("top_k".into(), json!(k));
            }
        }
        if let Some(max) = request.max_output_tokens {
            let key = if self.official { "max_completion_tokens" } else { "max_tokens" };
            body.insert(key.into(), json!(max));
        }
        if let Some(effort) = &request.reasoning_effort {
            body.insert("reasoning_effort".into(), json!(effort));
        }
        let mut body = Value::Object(body);
        let namespace = if self.official { "openai" } else { "openaiCompatible" };
        merge_provider_options(&mut body, &request.provider_options, &[namespace, &self.id]);
        body
    }

    fn url(&self) -> String {
        format!("{}/chat/completions", self.base_url)
    }

    fn headers(&self, request: &ModelRequest) -> Result<HeaderMap, ProviderError> {
        let auth = self.api_key.iter().map(|key| ("authorization".to_string(), format!("Bearer {key}"))).collect();
        self.http.request_headers(auth, &self.headers, request)
    }

    fn parse(&self, answer: &Value) -> Result<ModelResponse, ProviderError> {
        self.http.parse(answer, parse_response)
    }
}

impl ModelProvider for OpenAiProvider {
    fn complete(&self, request: ModelRequest) -> ProviderFuture<'_> {
        Box::pin(async move { complete(self, &request).await })
    }

    fn stream<'a>(&'a self, request: ModelRequest, sink: &'a dyn DeltaSink) -> ProviderFuture<'a> {
        Box::pin(async move {
            let mut body = self.body(&request);
            if let Some(map) = body.as_object_mut() {
                map.insert("stream".into(), json!(true));
                // Usage comes in a last chunk only when asked for; providerOptions may say otherwise.
                map.entry("stream_options").or_insert_with(|| json!({"include_usage": true}));
            }
            let headers = self.headers(&request)?;
            let mut answer = StreamedAnswer::default();
            let streamed = self
                .http
                .post_stream(&self.url(), headers, &body, credential_values(&request.headers), |_, data| {
                    answer.feed(data, sink)
                })
                .await?;
            let answer = match streamed {
                Streamed::Json(json) => json,
                Streamed::Events => answer
                    .finish(sink)
                    .map_err(|e| ProviderError::Stream { provider: self.http.label().to_string(), message: e.0 })?,
            };
            self.parse(&answer)
        })
    }

    fn describe(&self) -> String {
        format!("{} at {}", self.http.label(), self.http.redact(&self.base_url))
    }
}

/// A streamed answer (`chat.completion.chunk`s), put back together into the JSON a
/// non-streamed call gets, so that one parser reads both.
#[derive(Default)]
struct StreamedAnswer {
    text: String,
    refusal: String,
    /// Tool calls by their `index`, in index order; the arguments arrive in pieces.
    calls: Vec<PartialCall>,
    finish_reason: Option<Value>,
    usage: Option<Value>,
    done: bool,
}

struct PartialCall {
    index: u64,
    id: Option<String>,
    name: String,
    arguments: String,
}

impl StreamedAnswer {
    fn feed(&mut self, data: &str, sink: &dyn DeltaSink) -> Result<Flow, BadAnswer> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::More);
        }
        let chunk: Value =
            serde_json::from_str(data).map_err(|e| format!("a chunk is not JSON ({e}): {}", shorten(data)))?;
        if chunk.get("error").is_some() {
            return Err(BadAnswer(format!("the server sent an error: {}", error_message(data))));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage.clone());
        }
        // Like the non-streamed answer, only the first choice counts.
        let first = chunk
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0);
        for choice in first {
            if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
                self.finish_reason = Some(reason.clone());
            }
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            let content = content_text(delta.get("content"));
            if !content.is_empty() {
                sink.text(&content);
                self.text.push_str(&content);
            }
            if let Some(refusal) = delta.get("refusal").and_then(Value::as_str) {
                self.refusal.push_str(refusal);
            }
            for call in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                self.call_delta(call);
            }
        }
        Ok(Flow::More)
    }

    fn call_delta(&mut self, call: &Value) {
        let id = call.get("id").and_then(Value::as_str).filter(|s| !s.is_empty());
        let index = match call.get("index").and_then(Value::as_u64) {
            Some(index) => index,
            // Servers that send no index: a new id starts a call, anything else continues the last.
            None => match id.and_then(|id| self.calls.iter().find(|c| c.id.as_deref() == Some(id))) {
                Some(known) => known.index,
                None if id.is_some() || self.calls.is_empty() => self.calls.last().map_or(0, |c| c.index + 1),
                None => self.calls.last().map_or(0, |c| c.index),
            },
        };
        let at = match self.calls.iter().position(|c| c.index == index) {
            Some(at) => at,
            None => {
                let at = self.calls.partition_point(|c| c.index < index);
                self.calls.insert(at, PartialCall { index, id: None, name: String::new(), arguments: String::new() });
                at
            }
        };
        let partial = &mut self.calls[at];
        if let Some(id) = id {
            partial.id = Some(id.to_string());
        }
        let function = call.get("function");
        if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str)
            && partial.name.is_empty()
        {
            partial.name = name.to_string();
        }
        match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(piece)) => partial.arguments.push_str(piece),
            // Some compatible servers send the arguments whole, as an object.
            Some(whole) if whole.is_object() => partial.arguments = whole.to_string(),
            _ => {}
        }
    }

    /// The answer as a non-streamed call would have got it. A stream that ended before it said
    /// it was done (`[DONE]` or a finish reason) is an error: the answer may be cut short.
    fn finish(self, sink: &dyn DeltaSink) -> Result<Value, BadAnswer> {
        if !self.done && self.finish_reason.is_none() {
            return Err(BadAnswer("the stream ended before the answer was complete".into()));
        }
        // A refusal stands in for the text (as in `parse_response`), so it is the text shown.
        if self.text.is_empty() && !self.refusal.is_empty() {
            sink.text(&self.refusal);
        }
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert("content".into(), json!(self.text));
        if !self.refusal.is_empty() {
            message.insert("refusal".into(), json!(self.refusal));
        }
        if !self.calls.is_empty() {
            let calls: Vec<Value> = self
                .calls
                .into_iter()
                .map(|c| {
                    let mut call = json!({"type": "function", "function": {"name": c.name, "arguments": c.arguments}});
                    if let Some(id) = c.id {
                        call["id"] = json!(id);
                    }
                    call
                })
                .collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        let mut answer = json!({"choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}]});
        if let Some(usage) = self.usage {
            answer["usage"] = usage;
        }
        Ok(answer)
    }
}

/// The messages on the wire. Chat Completions takes no images in a `tool` message: the images
/// of a turn's tool results follow its last result as one user message of `image_url` parts
/// (data URLs), each introduced by the call it came from.
fn wire_messages(messages: &[ChatMessage]) -> Vec<Value> {
    let mut wire = Vec::with_capacity(messages.len());
    let mut images: Vec<Value> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        wire.push(wire_message(message));
        if let ChatMessage::ToolResult { call_id, name, images: own, .. } = message
            && !own.is_empty()
        {
            images.push(json!({"type": "text", "text": format!("Images from the result of {name} (call {call_id}):")}));
            for image in own {
                let url = format!("data:{};base64,{}", image.mime_type, image.data);
                images.push(json!({"type": "image_url", "image_url": {"url": url}}));
            }
        }
        let turn_ends = !matches!(messages.get(i + 1), Some(ChatMessage::ToolResult { .. }));
        if turn_ends && !images.is_empty() {
            wire.push(json!({"role": "user", "content": std::mem::take(&mut images)}));
        }
    }
    wire
}

fn wire_message(message: &ChatMessage) -> Value {
    match message {
        ChatMessage::System(text) => json!({"role": "system", "content": text}),
        ChatMessage::User(text) => json!({"role": "user", "content": text}),
        ChatMessage::Assistant { text, tool_calls } => {
            let mut m = Map::new();
            m.insert("role".into(), json!("assistant"));
            // OpenAI wants `null`, not "", for an assistant turn that only called tools.
            m.insert("content".into(), if text.is_empty() { Value::Null } else { json!(text) });
            if !tool_calls.is_empty() {
                let calls: Vec<Value> = tool_calls
                    .iter()
                    .map(|c| {
                        // Invalid arguments go back as the model wrote them, so it sees its mistake.
                        let arguments =
                            invalid_arguments(&c.arguments).map_or_else(|| c.arguments.to_string(), str::to_string);
                        json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments}})
                    })
                    .collect();
                m.insert("tool_calls".into(), Value::Array(calls));
            }
            Value::Object(m)
        }
        // Chat Completions has no error flag on tool results; the content says what failed.
        ChatMessage::ToolResult { call_id, content, .. } => {
            json!({"role": "tool", "tool_call_id": call_id, "content": content})
        }
    }
}

fn parse_response(answer: &Value) -> Result<ModelResponse, BadAnswer> {
    let Some(choice) = answer.get("choices").and_then(Value::as_array).and_then(|c| c.first()) else {
        return Err(BadAnswer(match answer.get("error") {
            Some(error) => format!("the server answered with an error: {error}"),
            None => format!("no choices in the answer: {}", shorten(&answer.to_string())),
        }));
    };
    let message = choice.get("message").ok_or("choices[0] has no message")?;
    let mut text = content_text(message.get("content"));
    if text.is_empty()
        && let Some(refusal) = message.get("refusal").and_then(Value::as_str)
    {
        text = refusal.to_string();
    }
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for (i, call) in calls.iter().enumerate() {
            let function = call.get("function").ok_or_else(|| format!("tool_calls[{i}] has no function"))?;
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("tool_calls[{i}] has no function name"))?;
            let id = call.get("id").and_then(Value::as_str).map_or_else(|| format!("call_{i}"), str::to_string);
            tool_calls.push(ToolCall {
                id,
                name: name.to_string(),
                arguments: parse_arguments(function.get("arguments")),
            });
        }
    }
    let usage = answer.get("usage");
    let count = |key: &str| usage.and_then(|u| u.get(key)).and_then(Value::as_u64).unwrap_or(0);
    let stop = match choice.get("finish_reason").and_then(Value::as_str) {
        Some("stop") | None => StopReason::EndTurn,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("length") => StopReason::MaxTokens,
        Some(other) => StopReason::Other(other.to_string()),
    };
    // Some servers report "stop" even when the message carries tool calls.
    let stop = if stop == StopReason::EndTurn && !tool_calls.is_empty() { StopReason::ToolUse } else { stop };
    Ok(ModelResponse {
        text,
        tool_calls,
        usage: Usage {
            input_tokens: count("prompt_tokens"),
            output_tokens: count("completion_tokens"),
            cached_input_tokens: cached_tokens(usage),
        },
        stop,
    })
}

/// `usage.prompt_tokens_details.cached_tokens`: the part of `prompt_tokens` served from the
/// provider's prompt cache (OpenAI caches long prefixes by itself, without markers).
fn cached_tokens(usage: Option<&Value>) -> u64 {
    usage
        .and_then(|u| u.get("prompt_tokens_details"))
        .and_then(|d| d.get("cached_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// `content` is a string, `null`, or (some compatible servers) a list of `{type: text, text}`.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("")
        }
        _ => String::new(),
    }
}

/// Arguments arrive as a JSON string; an empty string means no arguments, and some compatible
/// servers send an object directly.
fn parse_arguments(raw: Option<&Value>) -> Value {
    match raw {
        None | Some(Value::Null) => json!({}),
        Some(Value::String(s)) if s.trim().is_empty() => json!({}),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(value) => value,
            Err(_) => super::invalid_json(s),
        },
        Some(other) => other.clone(),
    }
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_that_are_not_json_are_kept_as_text() {
        assert_eq!(parse_arguments(Some(&json!("{\"a\":1}"))), json!({"a": 1}));
        assert_eq!(parse_arguments(Some(&json!(""))), json!({}));
        assert_eq!(parse_arguments(Some(&json!("{oops"))), json!({"__invalid_json": "{oops"}));
        assert_eq!(parse_arguments(Some(&json!({"b": 2}))), json!({"b": 2}));
    }

    #[test]
    fn content_parts_are_joined() {
        assert_eq!(content_text(Some(&json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]))), "ab");
        assert_eq!(content_text(Some(&Value::Null)), "");
    }
}
