//! Model providers (issue [E]) against fake OpenAI-compatible and Anthropic servers on 127.0.0.1:
//! request bodies, response parsing, retries, timeouts, error texts that never carry the key,
//! model selection, tool-name sanitizing, and the scripted provider with fixture scripts.
//! Streamed answers (SSE in both wire formats) against the streaming server of
//! `support/model_stream.rs`: the same response as without streaming, the text pieces in order,
//! tool-call arguments assembled, stalls, errors mid-stream.

#[path = "support/model_stream.rs"]
mod model_stream;

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use model_stream::{Reply as Streamed, StreamServer, Turn};
use serde_json::{Value, json};
use suzumio::activation::providers::{
    ChatMessage, DeltaSink, ModelProvider, ModelRequest, ModelTool, ProviderError, ProviderPool, ResolvedModel,
    RetryPolicy, ScriptedProvider, StopReason, ToolCall, ToolChoice, Usage, build_provider_with, resolve_presets,
    safe_tool_names,
};
use suzumio::config::{ModelsConfig, PresetConfig, PresetTarget, ProviderConfig, ProviderKind};

const KEY: &str = "sk-test-SECRET123";
const KEY_ENV: &str = "TEST_PROVIDER_KEY";

// ---------------------------------------------------------------------------------------------
// A fake model server: answers queued replies in order and records every request.

#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
    delay: Duration,
}

fn ok(body: Value) -> Reply {
    Reply { status: 200, headers: Vec::new(), body: body.to_string(), delay: Duration::ZERO }
}

fn status(status: u16, body: &str) -> Reply {
    Reply { status, headers: Vec::new(), body: body.to_string(), delay: Duration::ZERO }
}

impl Reply {
    fn header(mut self, name: &'static str, value: &str) -> Reply {
        self.headers.push((name, value.to_string()));
        self
    }
}

#[derive(Clone, Debug)]
struct Recorded {
    path: String,
    headers: BTreeMap<String, String>,
    body: Value,
}

#[derive(Clone, Default)]
struct Shared {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

struct FakeServer {
    url: String,
    shared: Shared,
}

impl FakeServer {
    async fn start(replies: Vec<Reply>) -> FakeServer {
        let shared = Shared { replies: Arc::new(Mutex::new(replies.into())), ..Shared::default() };
        let app = axum::Router::new().fallback(answer).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("local addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeServer { url, shared }
    }

    fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap().clone()
    }

    fn only_request(&self) -> Recorded {
        let requests = self.requests();
        assert_eq!(requests.len(), 1, "exactly one request: {requests:#?}");
        requests.into_iter().next().unwrap()
    }
}

async fn answer(State(shared): State<Shared>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let headers =
        headers.iter().map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("<binary>").to_string())).collect();
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    shared.requests.lock().unwrap().push(Recorded { path: uri.path().to_string(), headers, body });
    let reply = shared.replies.lock().unwrap().pop_front();
    let Some(reply) = reply else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "no reply queued").into_response();
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut response = (StatusCode::from_u16(reply.status).unwrap(), reply.body).into_response();
    for (name, value) in reply.headers {
        response.headers_mut().insert(name, value.parse().unwrap());
    }
    response
}

// ---------------------------------------------------------------------------------------------
// Config helpers

fn provider(id: &str, kind: ProviderKind, base_url: Option<&str>) -> ProviderConfig {
    ProviderConfig {
        id: id.to_string(),
        kind,
        api_key: None,
        api_key_env: Some(KEY_ENV.to_string()),
        base_url: base_url.map(str::to_string),
        base_url_env: None,
        headers: BTreeMap::new(),
        timeout_ms: Some(120_000),
        chunk_timeout_ms: None,
        options: json!({}),
        script: None,
    }
}

fn preset(id: &str, provider: &str, model: &str) -> PresetConfig {
    PresetConfig {
        id: id.to_string(),
        target: PresetTarget::Model { provider: provider.to_string(), model: model.to_string(), api_model: None },
        reasoning_effort: None,
        temperature: None,
        top_p: None,
        top_k: None,
        max_output_tokens: None,
        context_window: 260_000,
        compact_at: 0.8,
        tool_choice: None,
        provider_options: json!({}),
        headers: BTreeMap::new(),
        script: None,
        stream: true,
        prices: Default::default(),
    }
}

fn list_preset(id: &str, entries: &[&str]) -> PresetConfig {
    PresetConfig { target: PresetTarget::List(entries.iter().map(|e| e.to_string()).collect()), ..preset(id, "", "") }
}

fn resolved(provider: ProviderConfig, preset: PresetConfig) -> ResolvedModel {
    let models = ModelsConfig { providers: vec![provider], presets: vec![preset.clone()], default_preset: None };
    resolve_presets(&models, &preset.id).expect("resolves").remove(0)
}

fn env(name: &str) -> Option<String> {
    (name == KEY_ENV).then(|| KEY.to_string())
}

/// A retry policy that records its waits instead of sleeping.
fn recording_retry() -> (RetryPolicy, Arc<Mutex<Vec<Duration>>>) {
    let slept = Arc::new(Mutex::new(Vec::new()));
    let log = slept.clone();
    let policy = RetryPolicy::default().with_sleep(move |d| {
        log.lock().unwrap().push(d);
        Box::pin(async {})
    });
    (policy, slept)
}

fn build(model: &ResolvedModel) -> Box<dyn ModelProvider> {
    build_provider_with(model, &env, recording_retry().0).unwrap_or_else(|e| panic!("provider builds: {e}"))
}

fn tool(name: &str) -> ModelTool {
    ModelTool {
        name: name.to_string(),
        description: format!("The {name} tool."),
        parameters: json!({"type": "object", "properties": {"body": {"type": "string"}}}),
    }
}

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::System("You are pm.".into()),
        ChatMessage::User("Split the task.".into()),
        ChatMessage::Assistant {
            text: "Sending.".into(),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "messages_send".into(),
                arguments: json!({"body": "hi"}),
            }],
        },
        ChatMessage::ToolResult {
            call_id: "call_1".into(),
            name: "messages_send".into(),
            content: "sent".into(),
            is_error: false,
            images: Vec::new(),
        },
        ChatMessage::Assistant {
            text: String::new(),
            tool_calls: vec![ToolCall {
                id: "call_2".into(),
                name: "file_read".into(),
                arguments: json!({"__invalid_json": "{bad"}),
            }],
        },
        ChatMessage::ToolResult {
            call_id: "call_2".into(),
            name: "file_read".into(),
            content: "arguments are not valid JSON".into(),
            is_error: true,
            images: Vec::new(),
        },
    ]
}

fn request(model: &ResolvedModel, messages: Vec<ChatMessage>, tools: Vec<ModelTool>) -> ModelRequest {
    model.request("pm", "act-1", messages, tools)
}

fn openai_answer(message: Value, usage: Value) -> Value {
    json!({"id": "chatcmpl-1", "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}], "usage": usage})
}

fn text_answer(text: &str) -> Value {
    json!({"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})
}

fn anthropic_text(text: &str) -> Value {
    json!({"type": "message", "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
           "usage": {"input_tokens": 1, "output_tokens": 1}})
}

/// Every error text must be free of the key.
fn assert_no_key(text: &str) {
    assert!(!text.contains(KEY), "the API key leaked into: {text}");
    assert!(!text.contains("SECRET123"), "part of the API key leaked into: {text}");
}

// ---------------------------------------------------------------------------------------------
// OpenAI-compatible and OpenAI

#[tokio::test]
async fn openai_compatible_request_carries_messages_tools_and_parameters() {
    let server = FakeServer::start(vec![ok(text_answer("done"))]).await;
    let mut p = provider("local", ProviderKind::OpenAiCompatible, Some(&format!("{}/v1/", server.url)));
    p.headers.insert("X-Provider".into(), "p".into());
    let mut pre = preset("main", "local", "llama3");
    pre.temperature = Some(0.2);
    pre.top_p = Some(0.9);
    pre.top_k = Some(40);
    pre.max_output_tokens = Some(1000);
    pre.reasoning_effort = Some("high".into());
    pre.provider_options =
        json!({"openaiCompatible": {"parallelToolCalls": false}, "local": {"seed": 7}, "other": {"x": 1}});
    pre.headers.insert("X-Preset".into(), "q".into());
    let model = resolved(p, pre);
    build(&model).complete(request(&model, conversation(), vec![tool("messages_send")])).await.expect("answers");

    let sent = server.only_request();
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.headers["authorization"], format!("Bearer {KEY}"));
    assert_eq!((sent.headers["x-provider"].as_str(), sent.headers["x-preset"].as_str()), ("p", "q"));
    let body = sent.body;
    assert_eq!(body["model"], "llama3");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are pm."},
            {"role": "user", "content": "Split the task."},
            {"role": "assistant", "content": "Sending.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "messages_send", "arguments": "{\"body\":\"hi\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sent"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_2", "type": "function", "function": {"name": "file_read", "arguments": "{bad"}}]},
            {"role": "tool", "tool_call_id": "call_2", "content": "arguments are not valid JSON"},
        ])
    );
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "function": {"name": "messages_send", "description": "The messages_send tool.",
            "parameters": {"type": "object", "properties": {"body": {"type": "string"}}}}}])
    );
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(
        (body["temperature"].clone(), body["top_p"].clone(), body["top_k"].clone()),
        (json!(0.2), json!(0.9), json!(40))
    );
    assert_eq!(body["max_tokens"], 1000);
    assert!(body.get("max_completion_tokens").is_none());
    assert_eq!(
        body["reasoning_effort"], "high",
        "reasoningEffort goes where the AI SDK's openaiCompatible option puts it"
    );
    assert_eq!((body["parallel_tool_calls"].clone(), body["seed"].clone()), (json!(false), json!(7)));
    assert!(body.get("x").is_none(), "options of other namespaces are not sent");
}

#[tokio::test]
async fn openai_kind_sends_max_completion_tokens_and_reasoning_effort() {
    let server = FakeServer::start(vec![ok(text_answer("done"))]).await;
    let mut pre = preset("main", "oa", "gpt-5");
    pre.max_output_tokens = Some(500);
    pre.top_k = Some(3);
    pre.reasoning_effort = Some("low".into());
    pre.tool_choice = Some("required".into());
    pre.provider_options = json!({"openai": {"serviceTier": "flex"}});
    let model = resolved(provider("oa", ProviderKind::OpenAi, Some(&format!("{}/v1", server.url))), pre);
    build(&model).complete(request(&model, conversation(), vec![tool("messages_send")])).await.expect("answers");

    let body = server.only_request().body;
    assert_eq!(body["max_completion_tokens"], 500);
    assert!(body.get("max_tokens").is_none() && body.get("top_k").is_none(), "{body}");
    assert_eq!(body["reasoning_effort"], "low");
    assert_eq!(body["service_tier"], "flex");
    assert_eq!(body["tool_choice"], "required");
}

#[tokio::test]
async fn requests_without_tools_send_no_tool_fields() {
    let server = FakeServer::start(vec![ok(text_answer("plain"))]).await;
    let model =
        resolved(provider("local", ProviderKind::OpenAiCompatible, Some(&server.url)), preset("m", "local", "x"));
    let req = request(&model, vec![ChatMessage::User("hi".into())], Vec::new());
    assert_eq!(req.tool_choice, ToolChoice::None, "no tools → none (reference §6.4)");
    let response = build(&model).complete(req).await.expect("answers");
    assert_eq!((response.text.as_str(), response.stop), ("plain", StopReason::EndTurn));
    let body = server.only_request().body;
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none(), "{body}");
}

#[tokio::test]
async fn openai_response_gives_text_tool_calls_and_usage() {
    let message = json!({"role": "assistant", "content": "Working on it.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "messages_send", "arguments": "{\"recipient\":\"worker-1\"}"}},
        {"id": "c2", "type": "function", "function": {"name": "file_read", "arguments": "{\"path\": \"/a\""}},
        {"id": "c3", "type": "function", "function": {"name": "coordination_wait_for_signal", "arguments": ""}},
    ]});
    let usage = json!({"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150});
    let server = FakeServer::start(vec![ok(openai_answer(message, usage))]).await;
    let model =
        resolved(provider("local", ProviderKind::OpenAiCompatible, Some(&server.url)), preset("m", "local", "x"));
    let response = build(&model).complete(request(&model, conversation(), vec![tool("messages_send")])).await.unwrap();
    assert_eq!(response.text, "Working on it.");
    assert_eq!(response.stop, StopReason::ToolUse);
    assert_eq!(response.usage, Usage { input_tokens: 120, output_tokens: 30, cached_input_tokens: 0 });
    let calls: Vec<(&str, &str, Value)> =
        response.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.clone())).collect();
    assert_eq!(
        calls,
        vec![
            ("c1", "messages_send", json!({"recipient": "worker-1"})),
            ("c2", "file_read", json!({"__invalid_json": "{\"path\": \"/a\""})),
            ("c3", "coordination_wait_for_signal", json!({})),
        ]
    );
    assert_eq!(response.tool_calls[1].invalid_arguments(), Some("{\"path\": \"/a\""));
    assert_eq!(response.tool_calls[0].invalid_arguments(), None);
}

#[tokio::test]
async fn openai_answer_without_choices_is_a_bad_response() {
    let server = FakeServer::start(vec![ok(json!({"object": "list"}))]).await;
    let model =
        resolved(provider("local", ProviderKind::OpenAiCompatible, Some(&server.url)), preset("m", "local", "x"));
    let err = build(&model).complete(request(&model, conversation(), Vec::new())).await.unwrap_err();
    assert!(matches!(err, ProviderError::BadResponse { .. }), "{err:?}");
    assert!(err.to_string().contains("no choices"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Anthropic

#[tokio::test]
async fn anthropic_request_uses_blocks_top_level_system_and_required_headers() {
    let server = FakeServer::start(vec![ok(anthropic_text("ok")), ok(anthropic_text("ok"))]).await;
    let mut pre = preset("claude", "an", "claude-sonnet-4-5");
    pre.tool_choice = Some("required".into());
    pre.top_k = Some(5);
    pre.reasoning_effort = Some("high".into());
    pre.provider_options = json!({"anthropic": {"metadata": {"user_id": "u1"}}});
    let model = resolved(provider("an", ProviderKind::Anthropic, Some(&server.url)), pre);
    let mut messages = conversation();
    messages.push(ChatMessage::User("A P1 signal arrived.".into()));
    build(&model).complete(request(&model, messages, vec![tool("messages_send")])).await.expect("answers");

    let sent = server.requests().remove(0);
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.headers["x-api-key"], KEY);
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert!(!sent.headers.contains_key("authorization"));
    let body = sent.body;
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You are pm.", "cache_control": {"type": "ephemeral"}}]),
        "a block, so it carries the first cache breakpoint"
    );
    assert_eq!(body["max_tokens"], 4096, "required by the API; 4096 without maxOutputTokens");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Split the task."}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Sending."},
                {"type": "tool_use", "id": "call_1", "name": "messages_send", "input": {"body": "hi"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sent"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_2", "name": "file_read", "input": {"__invalid_json": "{bad"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_2", "content": "arguments are not valid JSON", "is_error": true},
                {"type": "text", "text": "A P1 signal arrived.", "cache_control": {"type": "ephemeral"}}]},
        ]),
        "the last block carries a cache breakpoint"
    );
    assert_eq!(
        body["tools"],
        json!([{"name": "messages_send", "description": "The messages_send tool.",
                "input_schema": {"type": "object", "properties": {"body": {"type": "string"}}}}])
    );
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
    assert_eq!(body["top_k"], 5);
    assert_eq!(body["metadata"], json!({"user_id": "u1"}));
    assert!(body.get("reasoning_effort").is_none(), "the Messages API has no reasoning_effort");

    // A base URL in the AI SDK form (ending in /v1) works too, and maxOutputTokens is used.
    let mut pre = preset("claude", "an", "claude-sonnet-4-5");
    pre.max_output_tokens = Some(123);
    let model = resolved(provider("an", ProviderKind::Anthropic, Some(&format!("{}/v1", server.url))), pre);
    build(&model).complete(request(&model, conversation(), Vec::new())).await.expect("answers");
    let sent = server.requests().remove(1);
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.body["max_tokens"], 123);
    assert!(sent.body.get("tools").is_none() && sent.body.get("tool_choice").is_none());
}

#[tokio::test]
async fn anthropic_tool_choice_maps_auto_and_none() {
    for (configured, wire) in [(None, "auto"), (Some("auto"), "auto"), (Some("none"), "none")] {
        let server = FakeServer::start(vec![ok(anthropic_text("ok"))]).await;
        let mut pre = preset("c", "an", "claude");
        pre.tool_choice = configured.map(str::to_string);
        let model = resolved(provider("an", ProviderKind::Anthropic, Some(&server.url)), pre);
        build(&model).complete(request(&model, conversation(), vec![tool("t")])).await.unwrap();
        assert_eq!(server.only_request().body["tool_choice"], json!({"type": wire}), "{configured:?}");
    }
}

#[tokio::test]
async fn anthropic_response_gives_text_tool_uses_usage_and_stop_reason() {
    let answer = json!({"type": "message", "role": "assistant", "content": [
        {"type": "text", "text": "Let me send that."},
        {"type": "tool_use", "id": "toolu_1", "name": "messages_send", "input": {"recipient": "worker-1", "body": "go"}},
    ], "stop_reason": "tool_use", "usage": {"input_tokens": 50, "output_tokens": 12}});
    let server = FakeServer::start(vec![ok(answer), ok(json!({"content": [], "stop_reason": "max_tokens"}))]).await;
    let model = resolved(provider("an", ProviderKind::Anthropic, Some(&server.url)), preset("c", "an", "claude"));
    let provider = build(&model);
    let response = provider.complete(request(&model, conversation(), vec![tool("messages_send")])).await.unwrap();
    assert_eq!(response.text, "Let me send that.");
    assert_eq!(response.stop, StopReason::ToolUse);
    assert_eq!(response.usage, Usage { input_tokens: 50, output_tokens: 12, cached_input_tokens: 0 });
    assert_eq!(
        response.tool_calls,
        vec![ToolCall {
            id: "toolu_1".into(),
            name: "messages_send".into(),
            arguments: json!({"recipient": "worker-1", "body": "go"})
        }]
    );
    let truncated = provider.complete(request(&model, conversation(), Vec::new())).await.unwrap();
    assert_eq!((truncated.text.as_str(), truncated.stop), ("", StopReason::MaxTokens));
}

/// The end of the replayed history (`cache_prefix`) and the end of the request are the two
/// message breakpoints; the system block is the third.
#[tokio::test]
async fn anthropic_marks_cache_breakpoints_after_the_history_and_at_the_end() {
    let server = FakeServer::start(vec![ok(anthropic_text("ok"))]).await;
    let model = resolved(provider("an", ProviderKind::Anthropic, Some(&server.url)), preset("c", "an", "claude"));
    let mut messages = conversation();
    messages.push(ChatMessage::User("# New Signals\n\nnext".into()));
    let mut req = request(&model, messages, Vec::new());
    req.cache_prefix = 4; // system, user, assistant, tool result: the history
    build(&model).complete(req).await.unwrap();
    let body = server.only_request().body;
    let marked: Vec<Value> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap().clone())
        .filter(|b| b.get("cache_control").is_some())
        .collect();
    assert_eq!(marked.len(), 2, "{body:#}");
    assert_eq!(marked[0]["tool_use_id"], "call_1");
    assert_eq!(marked[1]["text"], "# New Signals\n\nnext");
    assert_eq!(body["system"][0]["cache_control"], json!({"type": "ephemeral"}));
}

#[tokio::test]
async fn cached_input_tokens_are_read_from_both_formats() {
    let usage =
        json!({"prompt_tokens": 2000, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 1536}});
    let server = FakeServer::start(vec![ok(json!({"choices": [{"message": {"role": "assistant", "content": "hi"},
        "finish_reason": "stop"}], "usage": usage}))])
    .await;
    let model =
        resolved(provider("local", ProviderKind::OpenAiCompatible, Some(&server.url)), preset("m", "local", "x"));
    let response = build(&model).complete(request(&model, conversation(), Vec::new())).await.unwrap();
    assert_eq!(response.usage, Usage { input_tokens: 2000, output_tokens: 10, cached_input_tokens: 1536 });

    let answer = json!({"type": "message", "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 20, "cache_read_input_tokens": 1800, "cache_creation_input_tokens": 200, "output_tokens": 5}});
    let server = FakeServer::start(vec![ok(answer)]).await;
    let model = resolved(provider("an", ProviderKind::Anthropic, Some(&server.url)), preset("c", "an", "claude"));
    let response = build(&model).complete(request(&model, conversation(), Vec::new())).await.unwrap();
    assert_eq!(
        response.usage,
        Usage { input_tokens: 2020, output_tokens: 5, cached_input_tokens: 1800 },
        "input counts uncached, cache-read and cache-written tokens"
    );
}

// ---------------------------------------------------------------------------------------------
// Retries

async fn openai_with_replies(
    replies: Vec<Reply>,
) -> (FakeServer, Box<dyn ModelProvider>, ResolvedModel, Arc<Mutex<Vec<Duration>>>) {
    let server = FakeServer::start(replies).await;
    let model =
        resolved(provider("local", ProviderKind::OpenAiCompatible, Some(&server.url)), preset("m", "local", "x"));
    let (retry, slept) = recording_retry();
    let provider = build_provider_with(&model, &env, retry).expect("builds");
    (server, provider, model, slept)
}

fn ms(list: &Mutex<Vec<Duration>>) -> Vec<u128> {
    list.lock().unwrap().iter().map(Duration::as_millis).collect()
}

#[tokio::test]
async fn rate_limits_and_unavailability_are_retried_honouring_retry_after() {
    let replies = vec![
        status(429, r#"{"error":{"message":"slow down"}}"#).header("retry-after", "2"),
        status(503, "unavailable"),
        ok(text_answer("finally")),
    ];
    let (server, provider, model, slept) = openai_with_replies(replies).await;
    let response = provider.complete(request(&model, conversation(), Vec::new())).await.expect("third attempt answers");
    assert_eq!(response.text, "finally");
    assert_eq!(server.requests().len(), 3);
    assert_eq!(ms(&slept), vec![2000, 1000], "Retry-After first, then the backoff for the second retry");
}

#[tokio::test]
async fn retry_after_is_capped_at_thirty_seconds() {
    let replies = vec![status(429, "busy").header("retry-after", "3600"), ok(text_answer("ok"))];
    let (_server, provider, model, slept) = openai_with_replies(replies).await;
    provider.complete(request(&model, conversation(), Vec::new())).await.expect("answers");
    assert_eq!(ms(&slept), vec![30_000]);
}

#[tokio::test]
async fn retries_stop_after_three_with_growing_backoff() {
    let replies = vec![status(502, "a"), status(500, "b"), status(504, "c"), status(503, "still down")];
    let (server, provider, model, slept) = openai_with_replies(replies).await;
    let err = provider.complete(request(&model, conversation(), Vec::new())).await.unwrap_err();
    assert!(matches!(err, ProviderError::Http { status: 503, .. }), "{err:?}");
    assert!(err.to_string().contains("still down"), "{err}");
    assert_eq!(server.requests().len(), 4, "one attempt and three retries");
    assert_eq!(ms(&slept), vec![500, 1000, 2000]);
}

#[tokio::test]
async fn exhausted_rate_limits_are_reported_as_rate_limited() {
    let replies = (0..4).map(|_| status(429, r#"{"error":{"message":"quota","type":"rate_limit"}}"#)).collect();
    let (_server, provider, model, _slept) = openai_with_replies(replies).await;
    let err = provider.complete(request(&model, conversation(), Vec::new())).await.unwrap_err();
    assert!(matches!(err, ProviderError::RateLimited { retries: 3, .. }), "{err:?}");
    assert!(err.to_string().contains("quota [rate_limit]"), "{err}");
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let replies = vec![status(400, r#"{"error":{"message":"Invalid value for tool_choice"}}"#), ok(text_answer("x"))];
    let (server, provider, model, slept) = openai_with_replies(replies).await;
    let err = provider.complete(request(&model, conversation(), Vec::new())).await.unwrap_err();
    assert!(matches!(err, ProviderError::Http { status: 400, .. }), "{err:?}");
    assert!(err.to_string().contains("Invalid value for tool_choice"), "{err}");
    assert_eq!(server.requests().len(), 1);
    assert!(slept.lock().unwrap().is_empty());
}

#[tokio::test]
async fn anthropic_overload_529_is_retried() {
    let server = FakeServer::start(vec![
        status(529, r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
        ok(anthropic_text("back")),
    ])
    .await;
    let model = resolved(provider("an", ProviderKind::Anthropic, Some(&server.url)), preset("c", "an", "claude"));
    let (retry, slept) = recording_retry();
    let response =
        build_provider_with(&model, &env, retry).unwrap().complete(request(&model, conversation(), Vec::new())).await;
    assert_eq!(response.expect("second attempt answers").text, "back");
    assert_eq!(ms(&slept), vec![500]);
}

#[tokio::test]
async fn connection_errors_are_retried_then_reported() {
    // A port that was just free: nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let model = resolved(provider("local", ProviderKind::OpenAiCompatible, Some(&url)), preset("m", "local", "x"));
    let (retry, slept) = recording_retry();
    let err =
        build_provider_with(&model, &env, retry).unwrap().complete(request(&model, conversation(), Vec::new())).await;
    let err = err.unwrap_err();
    assert!(matches!(err, ProviderError::Network { .. }), "{err:?}");
    assert!(err.to_string().contains("provider `local` (openai-compatible): cannot reach the server"), "{err}");
    assert_eq!(ms(&slept), vec![500, 1000, 2000]);
    assert_no_key(&err.to_string());
}

// ---------------------------------------------------------------------------------------------
// Errors: timeout, context overflow, keys

#[tokio::test]
async fn a_slow_server_times_out_with_the_configured_timeout() {
    let mut slow = ok(text_answer("too late"));
    slow.delay = Duration::from_secs(5);
    let server = FakeServer::start(vec![slow]).await;
    let mut p = provider("local", ProviderKind::OpenAiCompatible, Some(&server.url));
    p.timeout_ms = Some(200);
    let model = resolved(p, preset("m", "local", "x"));
    // The server answers after 5 s: an error (not "too late") is the client giving up first.
    let err = build(&model).complete(request(&model, conversation(), Vec::new())).await.unwrap_err();
    assert!(matches!(err, ProviderError::Timeout { after_ms: 200, .. }), "{err:?}");
    assert!(err.to_string().contains("within 200 ms"), "{err}");
    assert_eq!(server.requests().len(), 1, "a timeout is not retried");
}

#[tokio::test]
async fn context_overflow_is_recognised_in_both_providers() {
    let openai_body = r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","code":"context_length_exceeded"}}"#;
    let (_server, provider, model, _) = openai_with_replies(vec![status(400, openai_body)]).await;
    let err = provider.complete(request(&model, conversation(), Vec::new())).await.unwrap_err();
    assert!(err.is_context_overflow(), "{err:?}");
    assert!(err.to_string().contains("maximum context length is 8192"), "{err}");

    let anthropic_body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
    let server = FakeServer::start(vec![status(400, anthropic_body)]).await;
    let model = resolved(provider_an(&server.url), preset("c", "an", "claude"));
    let err = build(&model).complete(request(&model, conversation(), Vec::new())).await.unwrap_err();
    assert!(err.is_context_overflow(), "{err:?}");

    let (_server, provider, model, _) = openai_with_replies(vec![status(413, "Request too large for model")]).await;
    let err = provider.complete(request(&model, conversation(), Vec::new())).await.unwrap_err();
    assert!(err.is_context_overflow(), "{err:?}");
}

fn provider_an(url: &str) -> ProviderConfig {
    provider("an", ProviderKind::Anthropic, Some(url))
}

#[tokio::test]
async fn the_api_key_never_appears_in_errors_or_descriptions() {
    let echo = format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}. Header was Bearer {KEY}"}}}}"#);
    let mut errors: Vec<String> = Vec::new();
    for kind in [ProviderKind::OpenAiCompatible, ProviderKind::OpenAi, ProviderKind::Anthropic] {
        let server = FakeServer::start(vec![
            status(401, &echo),
            status(400, &format!("prompt is too long for key {KEY}")),
            ok(json!({"choices": "not a list", "error": KEY})),
            status(429, &echo),
            status(429, &echo),
            status(429, &echo),
            status(429, &echo),
            status(200, &format!("not json {KEY}")),
        ])
        .await;
        let mut p = provider("p", kind.clone(), Some(&server.url));
        p.headers.insert("X-Custom-Token".into(), "tok-PRIVATE-777".into());
        let model = resolved(p, preset("m", "p", "x"));
        let provider = build(&model);
        errors.push(provider.describe());
        errors.push(format!("{model:?}"));
        for _ in 0..5 {
            if let Err(e) = provider.complete(request(&model, conversation(), Vec::new())).await {
                errors.push(e.to_string());
                errors.push(format!("{e:?}"));
            }
        }
        let sent = server.requests();
        assert!(sent.iter().any(|r| r.headers.values().any(|v| v.contains(KEY))), "the key is sent to the server");
    }
    assert!(errors.len() > 20, "{errors:#?}");
    assert!(errors.iter().any(|e| e.contains("Incorrect API key provided: [redacted]")), "{errors:#?}");
    for text in &errors {
        assert_no_key(text);
        assert!(!text.contains("tok-PRIVATE-777"), "a credential header leaked into: {text}");
    }

    // A key in the config file itself (apiKey) is redacted the same way.
    let server = FakeServer::start(vec![status(403, &echo)]).await;
    let mut p = provider("lit", ProviderKind::OpenAiCompatible, Some(&server.url));
    (p.api_key, p.api_key_env) = (Some(KEY.into()), None);
    let model = resolved(p, preset("m", "lit", "x"));
    let err = build_provider_with(&model, &|_| None, RetryPolicy::none()).unwrap();
    let err = err.complete(request(&model, conversation(), Vec::new())).await.unwrap_err();
    assert_no_key(&err.to_string());
    assert_eq!(server.only_request().headers["authorization"], format!("Bearer {KEY}"));
}

#[test]
fn missing_keys_name_the_environment_variable() {
    let check = |kind: ProviderKind, key_env: Option<&str>, expected_env: &str| {
        let mut p = provider("p", kind, Some("http://127.0.0.1:9"));
        p.api_key_env = key_env.map(str::to_string);
        let model = resolved(p, preset("m", "p", "x"));
        let err = build_provider_with(&model, &|_| None, RetryPolicy::none()).err().expect("fails without a key");
        assert!(
            matches!(&err, ProviderError::MissingKey { provider, env: Some(env) } if provider == "p" && env == expected_env),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!("provider `p` needs an API key: set the environment variable {expected_env}")
        );
    };
    check(ProviderKind::OpenAiCompatible, Some("MY_LLM_KEY"), "MY_LLM_KEY");
    check(ProviderKind::OpenAi, Some("MY_LLM_KEY"), "MY_LLM_KEY");
    check(ProviderKind::OpenAi, None, "OPENAI_API_KEY");
    check(ProviderKind::Anthropic, None, "ANTHROPIC_API_KEY");

    // An empty variable counts as unset.
    let model = resolved(provider("p", ProviderKind::Anthropic, None), preset("m", "p", "x"));
    let err = build_provider_with(&model, &|_| Some(" ".into()), RetryPolicy::none()).err().expect("fails");
    assert!(matches!(err, ProviderError::MissingKey { .. }), "{err:?}");
}

#[tokio::test]
async fn an_openai_compatible_server_without_a_key_gets_no_authorization() {
    let server = FakeServer::start(vec![ok(text_answer("hi"))]).await;
    let mut p = provider("ollama", ProviderKind::OpenAiCompatible, Some(&server.url));
    p.api_key_env = None;
    let model = resolved(p, preset("m", "ollama", "llama3"));
    let provider = build_provider_with(&model, &|_| None, RetryPolicy::none()).expect("no key needed");
    provider.complete(request(&model, conversation(), Vec::new())).await.expect("answers");
    assert!(!server.only_request().headers.contains_key("authorization"));
}

#[test]
fn base_urls_come_from_config_env_or_the_kind_default() {
    let build_err = |p: ProviderConfig, env: &dyn Fn(&str) -> Option<String>| {
        let model = resolved(p, preset("m", "p", "x"));
        build_provider_with(&model, env, RetryPolicy::none()).err().map(|e| e.to_string())
    };
    let mut p = provider("p", ProviderKind::OpenAiCompatible, None);
    assert_eq!(
        build_err(p.clone(), &env).as_deref(),
        Some(
            "provider `p` (openai-compatible) needs a base URL: set baseURL (e.g. http://127.0.0.1:11434/v1) or baseURLEnv"
        )
    );
    p.base_url_env = Some("LLM_URL".into());
    assert_eq!(
        build_err(p.clone(), &env).as_deref(),
        Some("provider `p`: baseURLEnv names LLM_URL, but that environment variable is not set")
    );
    let with_url = |name: &str| match name {
        "LLM_URL" => Some("http://127.0.0.1:1/v1".to_string()),
        _ => env(name),
    };
    assert_eq!(build_err(p.clone(), &with_url), None);
    let model = resolved(p.clone(), preset("m", "p", "x"));
    let described = build_provider_with(&model, &with_url, RetryPolicy::none()).unwrap().describe();
    assert_eq!(described, "provider `p` (openai-compatible) at http://127.0.0.1:1/v1");

    for (kind, default) in
        [(ProviderKind::OpenAi, "https://api.openai.com/v1"), (ProviderKind::Anthropic, "https://api.anthropic.com")]
    {
        let model = resolved(provider("p", kind, None), preset("m", "p", "x"));
        let described = build_provider_with(&model, &env, RetryPolicy::none()).unwrap().describe();
        assert!(described.ends_with(&format!(" at {default}")), "{described}");
    }
    let bad = provider("p", ProviderKind::OpenAiCompatible, Some("localhost:8080"));
    assert_eq!(
        build_err(bad, &env).as_deref(),
        Some("provider `p`: base URL must start with http:// or https://, got `localhost:8080`")
    );
}

// ---------------------------------------------------------------------------------------------
// Model selection and tool names

fn models() -> ModelsConfig {
    ModelsConfig {
        providers: vec![provider("oa", ProviderKind::OpenAi, None), provider("an", ProviderKind::Anthropic, None)],
        presets: vec![
            preset("fast", "oa", "gpt-5-mini"),
            PresetConfig {
                target: PresetTarget::Model {
                    provider: "an".into(),
                    model: "claude".into(),
                    api_model: Some("claude-x-2025".into()),
                },
                ..preset("smart", "an", "claude")
            },
            list_preset("both", &["smart", "fast"]),
            list_preset("outer", &["both", "fast"]),
            list_preset("loop-a", &["loop-b"]),
            list_preset("loop-b", &["fast", "loop-a"]),
            list_preset("broken", &["fast", "ghost"]),
            preset("orphan", "nowhere", "m"),
        ],
        default_preset: None,
    }
}

fn check_resolve(preset: &str, expected: Result<&[(&str, &str, &str)], &str>) {
    let got = resolve_presets(&models(), preset).map(|list| {
        list.iter()
            .map(|m| (m.preset_id().to_string(), m.provider.id.clone(), m.api_model().to_string()))
            .collect::<Vec<_>>()
    });
    let expected = expected
        .map(|list| list.iter().map(|(p, v, m)| (p.to_string(), v.to_string(), m.to_string())).collect::<Vec<_>>())
        .map_err(str::to_string);
    assert_eq!(got, expected, "preset {preset}");
}

#[test]
fn model_lists_expand_in_order() {
    check_resolve("fast", Ok(&[("fast", "oa", "gpt-5-mini")]));
    check_resolve("smart", Ok(&[("smart", "an", "claude-x-2025")]));
    check_resolve("both", Ok(&[("smart", "an", "claude-x-2025"), ("fast", "oa", "gpt-5-mini")]));
    check_resolve(
        "outer",
        Ok(&[("smart", "an", "claude-x-2025"), ("fast", "oa", "gpt-5-mini"), ("fast", "oa", "gpt-5-mini")]),
    );
}

#[test]
fn model_selection_errors_use_the_reference_texts() {
    check_resolve("loop-a", Err("Circular model-list preset: loop-a -> loop-b -> loop-a"));
    check_resolve("ghost", Err("Model preset not found: ghost"));
    check_resolve("broken", Err("Model preset not found: ghost"));
    check_resolve("orphan", Err("Provider not found: nowhere"));
    check_resolve("", Err("No model preset selected. Set backend.runner.model or agents.<id>.model explicitly."));
}

#[test]
fn resolved_models_carry_the_preset_parameters_into_requests() {
    let mut models = models();
    let fast = models.presets.iter_mut().find(|p| p.id == "fast").unwrap();
    fast.temperature = Some(0.5);
    fast.tool_choice = Some("required".into());
    fast.headers.insert("X-A".into(), "1".into());
    let model = resolve_presets(&models, "fast").unwrap().remove(0);
    let req = model.request("worker-1", "act-9", vec![ChatMessage::User("go".into())], vec![tool("t")]);
    assert_eq!(
        (req.model.as_str(), req.agent_id.as_str(), req.activation_id.as_str()),
        ("gpt-5-mini", "worker-1", "act-9")
    );
    assert_eq!((req.temperature, req.tool_choice), (Some(0.5), ToolChoice::Required));
    assert_eq!(req.headers.get("X-A").map(String::as_str), Some("1"));
}

#[test]
fn tool_names_are_sanitized_and_collisions_refused() {
    let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let pairs =
        safe_tool_names(&names(&["messages.send", "coordination.wait_for_signal", "my-pack.do it!", "plain_name"]))
            .unwrap();
    let safe: Vec<&str> = pairs.iter().map(|(_, s)| s.as_str()).collect();
    assert_eq!(safe, ["messages_send", "coordination_wait_for_signal", "my-pack_do_it_", "plain_name"]);
    assert_eq!(pairs[0].0, "messages.send");
    assert_eq!(safe_tool_names(&names(&["a.b", "a.b"])).unwrap().len(), 1, "a repeated name is not a collision");
    assert_eq!(
        safe_tool_names(&names(&["file.read", "file_read"])),
        Err("Tool names file.read and file_read both map to file_read".to_string())
    );
    assert_eq!(
        safe_tool_names(&names(&["x", "a..b", "a/b"])),
        Err("Tool names a..b and a/b both map to a_b".to_string())
    );
}

// ---------------------------------------------------------------------------------------------
// Scripted provider

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/scripts").join(name)
}

fn play_script() -> ScriptedProvider {
    ScriptedProvider::load("demo", Some(&script("play.yaml"))).expect("the fixture script is valid")
}

const CORE_TOOLS: [&str; 4] = ["messages_send", "coordination_wait_for_signal", "file_write", "completion_submit"];

fn scripted_request(agent: &str, activation: &str, prompt: &str) -> ModelRequest {
    ModelRequest {
        messages: vec![
            ChatMessage::System(prompt.into()),
            ChatMessage::User("Continue the assigned Suzumio activation.".into()),
        ],
        tools: CORE_TOOLS.iter().map(|n| tool(n)).collect(),
        tool_choice: ToolChoice::Auto,
        temperature: None,
        top_p: None,
        top_k: None,
        max_output_tokens: None,
        reasoning_effort: None,
        provider_options: json!({}),
        headers: BTreeMap::new(),
        model: "scripted".into(),
        agent_id: agent.into(),
        activation_id: activation.into(),
        cache_prefix: 0,
    }
}

/// One model call, summarised as `say | tool(args) tool(args)`.
async fn turn(provider: &dyn ModelProvider, agent: &str, activation: &str, prompt: &str) -> String {
    let response = provider.complete(scripted_request(agent, activation, prompt)).await.expect("scripted answers");
    let calls: Vec<String> = response.tool_calls.iter().map(|c| format!("{}({})", c.name, c.arguments)).collect();
    format!("{} | {}", response.text, calls.join(" "))
}

const WAIT: &str = r#" | coordination_wait_for_signal({"reason":"scripted: nothing more to do"})"#;

#[tokio::test]
async fn scripted_entries_match_by_agent_and_prompt_and_play_one_step_per_call() {
    let p = play_script();
    assert_eq!(
        turn(&p, "pm", "a1", "# New Signals\nPlease Write the report today").await,
        r#"I'll split the work. | messages_send({"recipient":"worker-1","body":"Write section 1 to /artifacts/worker-1/s1.md"})"#
    );
    assert_eq!(
        turn(&p, "pm", "a1", "ignored on later calls").await,
        r#" | coordination_wait_for_signal({"reason":"waiting for sections"})"#
    );
    assert_eq!(turn(&p, "pm", "a1", "").await, WAIT, "steps ran out: the fallback wait");
    assert_eq!(turn(&p, "pm", "a1", "").await, WAIT);
}

#[tokio::test]
async fn scripted_entries_are_used_once_per_agent_unless_they_repeat() {
    let p = play_script();
    let report = "Write the report";
    assert!(turn(&p, "pm", "a1", report).await.starts_with("I'll split the work."));
    // The first entry is used up for pm: the next match is the entry without `when`.
    assert_eq!(turn(&p, "pm", "a2", report).await, "Nothing asked of me yet. | ");
    assert_eq!(turn(&p, "pm", "a3", report).await, WAIT, "both pm entries are used up");
    // `repeat: true` plays on every activation, for every worker instance.
    for activation in ["w1", "w2"] {
        assert!(turn(&p, "worker-1", activation, "").await.contains("file_write"), "{activation}");
        assert_eq!(turn(&p, "worker-1", activation, "").await, format!("Done in {activation}. | "));
    }
    assert!(turn(&p, "worker-2", "w3", "").await.contains("file_write"), "base id `worker` matches worker-2");
}

#[tokio::test]
async fn scripted_when_does_not_match_other_prompts_or_agents() {
    let p = play_script();
    assert_eq!(
        turn(&p, "pm", "a1", "Plan the sprint").await,
        "Nothing asked of me yet. | ",
        "first entry needs its text"
    );
    assert!(
        turn(&p, "pm", "a2", "Write the report").await.starts_with("I'll split"),
        "still unused, so it matches now"
    );
    assert_eq!(turn(&p, "stranger", "s1", "Write the report").await, WAIT, "no entry for this agent");
    assert_eq!(turn(&p, "workers-1", "s2", "").await, WAIT, "`worker` is not a prefix match");
}

#[tokio::test]
async fn scripted_placeholders_are_filled_in_inputs_and_text() {
    let p = play_script();
    let response = p.complete(scripted_request("worker-2", "act-42", "")).await.unwrap();
    assert_eq!(
        response.tool_calls,
        vec![ToolCall {
            id: "call_1".into(),
            name: "file_write".into(),
            arguments: json!({"path": "/artifacts/worker-2/s1.md", "content": "written by worker-2 in act-42", "tags": ["worker-2", 3]}),
        }]
    );
    assert_eq!(response.stop, StopReason::ToolUse);
    assert!(response.usage.input_tokens > 0 && response.usage.output_tokens > 0, "{:?}", response.usage);
    let second = p.complete(scripted_request("worker-2", "act-42", "")).await.unwrap();
    assert_eq!((second.text.as_str(), second.stop), ("Done in act-42.", StopReason::EndTurn));
}

#[tokio::test]
async fn scripted_fallback_is_text_when_the_wait_tool_is_not_offered() {
    let p = ScriptedProvider::load("bare", None).expect("no script is fine");
    let mut req = scripted_request("pm", "a1", "");
    req.tools.retain(|t| t.name != "coordination_wait_for_signal");
    let response = p.complete(req).await.unwrap();
    assert_eq!((response.text.as_str(), response.tool_calls.len()), ("(scripted: nothing more to do)", 0));
    assert_eq!(turn(&p, "pm", "a2", "").await, WAIT);
    assert_eq!(p.describe(), "provider `bare` (scripted, no script)");
}

#[tokio::test]
async fn scripted_calls_to_tools_not_offered_are_still_returned() {
    let p = play_script();
    assert_eq!(turn(&p, "reviewer-1", "r1", "").await, r#" | shell_exec({"command":"true"})"#);
}

#[tokio::test]
async fn scripted_error_steps_fail_the_call() {
    let p = play_script();
    let err = p.complete(scripted_request("flaky", "f1", "")).await.unwrap_err();
    assert!(matches!(err, ProviderError::Scripted { .. }), "{err:?}");
    assert_eq!(err.to_string(), "scripted provider `demo`: simulated outage for flaky");
    let err = p.complete(scripted_request("flaky", "f1", "")).await.unwrap_err();
    assert!(err.is_context_overflow(), "{err:?}");
}

#[test]
fn scripted_script_errors_name_file_and_line() {
    let check = |name: &str, expected: &[&str]| {
        let path = script(name);
        let err = ScriptedProvider::load("demo", Some(&path)).err().expect("the script is refused").to_string();
        // Paths are shown relative to the working directory when they are below it.
        let lines: Vec<String> = err
            .lines()
            .skip(1)
            .map(|l| l.split_once("tests/fixtures/scripts/").map_or(l, |(_, rest)| rest).to_string())
            .collect();
        assert_eq!(err.lines().next(), Some("scripted provider `demo`: invalid script:"), "{err}");
        assert_eq!(lines, expected, "{err}");
    };
    check(
        "unknown_key.yaml",
        &[
            "unknown_key.yaml:2:5: activations[0].steps: is required",
            "unknown_key.yaml:3:5: activations[0].stpes: unknown key (did you mean `steps`?)",
        ],
    );
    check(
        "wrong_types.yaml",
        &[
            "wrong_types.yaml:3:13: activations[0].repeat: expected true or false, got a string",
            "wrong_types.yaml:8:20: activations[0].steps[0].call[0].input: expected a mapping (the tool's input), got a string",
            "wrong_types.yaml:9:9: activations[0].steps[1]: a step needs `say`, `call` (at least one tool) or `error`",
        ],
    );
    let err = ScriptedProvider::load("demo", Some(&script("bad_syntax.yaml"))).err().expect("refused").to_string();
    assert!(err.contains("bad_syntax.yaml:4:"), "{err}");
    assert!(err.contains("invalid YAML"), "{err}");

    let missing =
        ScriptedProvider::load("demo", Some(Path::new("/nonexistent/script.yaml"))).err().unwrap().to_string();
    assert!(missing.starts_with("scripted provider `demo`: cannot read script /nonexistent/script.yaml"), "{missing}");
}

#[test]
fn scripted_inline_scripts_validate_too() {
    let err = ScriptedProvider::parse("x", "activations:\n  - steps: []\n", Path::new("inline.yaml")).err().unwrap();
    assert!(err.to_string().ends_with("inline.yaml:2:5: activations[0].steps: needs at least one step"), "{err}");
    let err = ScriptedProvider::parse("x", "activations: {}\n", Path::new("inline.yaml")).err().unwrap();
    assert!(err.to_string().contains("activations: expected a list of entries, got a mapping"), "{err}");
    let err = ScriptedProvider::parse("x", "steps: [{say: hi, error: no}]\n", Path::new("inline.yaml")).err().unwrap();
    assert!(err.to_string().contains("inline.yaml:1:1: steps: unknown key"), "{err}");
    let err = ScriptedProvider::parse("x", "summary: [a]\nactivations: []\n", Path::new("inline.yaml")).err().unwrap();
    assert!(err.to_string().contains("inline.yaml:1:1: summary: expected a string, got a list"), "{err}");
    assert!(
        ScriptedProvider::parse("x", "", Path::new("empty.yaml")).is_ok(),
        "an empty script plays only the fallback"
    );
}

#[tokio::test]
async fn scripted_providers_come_from_presets_and_keep_state_in_the_pool() {
    let mut scripted = provider("scripted", ProviderKind::Scripted, None);
    scripted.api_key_env = None;
    scripted.script = Some(script("does-not-matter.yaml"));
    let mut pm_preset = preset("pm-main", "scripted", "scripted");
    pm_preset.script = Some(script("play.yaml"));
    let models = ModelsConfig { providers: vec![scripted], presets: vec![pm_preset], default_preset: None };
    let model = resolve_presets(&models, "pm-main").unwrap().remove(0);
    assert_eq!(model.script(), Some(script("play.yaml").as_path()), "the preset's script wins");

    let pool = ProviderPool::new(|_| None, RetryPolicy::none());
    let first = pool.get(&model).expect("builds without a key");
    assert!(first.describe().contains("play.yaml"), "{}", first.describe());
    assert!(turn(&*first, "pm", "a1", "Write the report").await.starts_with("I'll split"));
    let again = pool.get(&model).unwrap();
    assert!(Arc::ptr_eq(&first, &again), "one instance per provider and script");
    assert_eq!(turn(&*again, "pm", "a2", "Write the report").await, "Nothing asked of me yet. | ", "state is kept");
}

// ---------------------------------------------------------------------------------------------
// Streaming

/// Collects what a streamed call sends to its sink.
#[derive(Default)]
struct Pieces(Mutex<Vec<String>>);

impl DeltaSink for Pieces {
    fn text(&self, delta: &str) {
        self.0.lock().unwrap().push(delta.to_string());
    }
}

impl Pieces {
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

const GAP: Duration = Duration::from_millis(5);

/// A turn with text in pieces and two tool calls whose arguments are split mid-token.
fn split_turn() -> Turn {
    Turn::new(&["I'll ", "send ", "it", " now."])
        .call("call_a", "messages_send", &["{\"recip", "ient\": \"wor", "ker-1\", \"bo", "dy\": \"héllo\"}"])
        .call("call_b", "coordination_wait_for_signal", &["", "{\"reason\"", ": \"sent\"}"])
}

fn stream_model(kind: ProviderKind, url: &str) -> ResolvedModel {
    let id = if kind == ProviderKind::Anthropic { "an" } else { "local" };
    resolved(provider(id, kind, Some(url)), preset("m", id, "x"))
}

#[tokio::test]
async fn openai_streams_give_the_same_response_as_a_plain_call() {
    let turn = split_turn();
    let server = StreamServer::start(vec![
        Streamed::stream(model_stream::openai_frames(&turn), GAP),
        Streamed::Json(model_stream::openai_json(&turn)),
    ])
    .await;
    let model = stream_model(ProviderKind::OpenAiCompatible, &server.url);
    let provider = build(&model);
    let pieces = Pieces::default();
    let streamed =
        provider.stream(request(&model, conversation(), vec![tool("messages_send")]), &pieces).await.expect("streams");
    let plain = provider.complete(request(&model, conversation(), vec![tool("messages_send")])).await.expect("answers");
    assert_eq!(streamed, plain, "the streamed answer is the plain one");
    assert_eq!(streamed.text, "I'll send it now.");
    assert_eq!(pieces.all(), turn.text, "each text piece, in order");
    assert_eq!(streamed.stop, StopReason::ToolUse);
    assert_eq!(
        streamed.usage,
        Usage { input_tokens: 21, output_tokens: 8, cached_input_tokens: 0 },
        "from the usage chunk"
    );
    assert_eq!(
        streamed.tool_calls,
        vec![
            ToolCall {
                id: "call_a".into(),
                name: "messages_send".into(),
                arguments: json!({"recipient": "worker-1", "body": "héllo"})
            },
            ToolCall {
                id: "call_b".into(),
                name: "coordination_wait_for_signal".into(),
                arguments: json!({"reason": "sent"})
            },
        ]
    );
    let sent = server.requests();
    assert_eq!(
        (sent[0]["stream"].clone(), sent[0]["stream_options"].clone()),
        (json!(true), json!({"include_usage": true}))
    );
    assert!(sent[1].get("stream").is_none(), "a plain call does not ask for a stream: {}", sent[1]);
    assert_eq!(sent[0]["messages"], sent[1]["messages"], "the same conversation either way");
}

#[tokio::test]
async fn anthropic_streams_give_the_same_response_as_a_plain_call() {
    let turn = split_turn();
    let server = StreamServer::start(vec![
        Streamed::stream(model_stream::anthropic_frames(&turn), GAP),
        Streamed::Json(model_stream::anthropic_json(&turn)),
    ])
    .await;
    let model = stream_model(ProviderKind::Anthropic, &server.url);
    let provider = build(&model);
    let pieces = Pieces::default();
    let streamed =
        provider.stream(request(&model, conversation(), vec![tool("messages_send")]), &pieces).await.expect("streams");
    let plain = provider.complete(request(&model, conversation(), vec![tool("messages_send")])).await.expect("answers");
    assert_eq!(streamed, plain, "the streamed answer is the plain one");
    assert_eq!(pieces.all(), turn.text);
    assert_eq!(
        streamed.usage,
        Usage { input_tokens: 21, output_tokens: 8, cached_input_tokens: 0 },
        "message_delta's total output count"
    );
    assert_eq!(streamed.tool_calls[0].arguments, json!({"recipient": "worker-1", "body": "héllo"}));
    assert_eq!(server.requests()[0]["stream"], true);
}

#[tokio::test]
async fn interleaved_tool_call_pieces_are_assembled_by_index() {
    // Two calls whose argument pieces alternate, as parallel tool calls may arrive.
    let chunk = |delta: Value| format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": delta}]}));
    let call = |index: u64, extra: Value| {
        json!({"tool_calls": [extra.as_object().unwrap().clone().into_iter()
        .chain([("index".to_string(), json!(index))]).collect::<serde_json::Map<_, _>>()]})
    };
    let frames = vec![
        chunk(call(0, json!({"id": "c0", "function": {"name": "a", "arguments": "{\"x\":"}}))),
        chunk(call(1, json!({"id": "c1", "function": {"name": "b", "arguments": "{\"y\""}}))),
        chunk(call(0, json!({"function": {"arguments": "1}"}}))),
        chunk(call(1, json!({"function": {"arguments": ":2}"}}))),
        format!("data: {}\n\n", json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
        "data: [DONE]\n\n".to_string(),
    ];
    let server = StreamServer::start(vec![Streamed::stream(frames, GAP)]).await;
    let model = stream_model(ProviderKind::OpenAiCompatible, &server.url);
    let response = build(&model).stream(request(&model, conversation(), Vec::new()), &Pieces::default()).await.unwrap();
    let calls: Vec<(&str, &str, Value)> =
        response.tool_calls.iter().map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.clone())).collect();
    assert_eq!(calls, vec![("c0", "a", json!({"x": 1})), ("c1", "b", json!({"y": 2}))]);
    assert_eq!((response.text.as_str(), response.usage), ("", Usage::default()), "no usage chunk was sent");
}

#[tokio::test]
async fn a_stream_that_goes_quiet_times_out_with_chunk_timeout_ms() {
    for kind in [ProviderKind::OpenAiCompatible, ProviderKind::Anthropic] {
        let turn = split_turn();
        let frames = if kind == ProviderKind::Anthropic {
            model_stream::anthropic_frames(&turn)
        } else {
            model_stream::openai_frames(&turn)
        };
        let server = StreamServer::start(vec![Streamed::stalling(frames, 3, Duration::from_secs(5))]).await;
        let mut model = stream_model(kind.clone(), &server.url);
        model.provider.chunk_timeout_ms = Some(300);
        let pieces = Pieces::default();
        // The stream resumes after 5 s: an error is the client giving up on the quiet first.
        let err = build(&model).stream(request(&model, conversation(), Vec::new()), &pieces).await.unwrap_err();
        assert!(matches!(err, ProviderError::StreamStalled { after_ms: 300, .. }), "{kind:?}: {err:?}");
        assert!(
            err.to_string().ends_with(
                "the streamed answer stalled: nothing arrived for 300 ms (raise the provider's chunkTimeoutMs)"
            ),
            "{err}"
        );
        assert_eq!(server.requests().len(), 1, "a stalled stream is not retried");
    }
}

#[tokio::test]
async fn the_whole_request_timeout_bounds_a_slow_stream_too() {
    // Every piece comes in time, but the whole answer takes longer than timeoutMs.
    let frames = model_stream::openai_frames(&Turn::new(&["a"; 40]));
    let server = StreamServer::start(vec![Streamed::stream(frames, Duration::from_millis(50))]).await;
    let mut model = stream_model(ProviderKind::OpenAiCompatible, &server.url);
    (model.provider.timeout_ms, model.provider.chunk_timeout_ms) = (Some(600), Some(400));
    let err = build(&model).stream(request(&model, conversation(), Vec::new()), &Pieces::default()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Timeout { after_ms: 600, .. }), "{err:?}");
}

#[tokio::test]
async fn errors_inside_a_stream_fail_the_call() {
    // Anthropic: an `error` event after the message started.
    let mut frames = model_stream::anthropic_frames(&Turn::new(&["Par", "tial"]));
    frames.truncate(4);
    frames.push(format!(
        "event: error\ndata: {}\n\n",
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    ));
    // OpenAI-compatible: the connection ends before a finish reason or [DONE].
    let mut cut = model_stream::openai_frames(&Turn::new(&["Par", "tial"]));
    cut.truncate(3);
    // A server error object in place of a chunk.
    let error_chunk =
        vec![format!("data: {}\n\n", json!({"error": {"message": "upstream failed", "code": "server_error"}}))];
    let an = StreamServer::start(vec![Streamed::stream(frames, GAP)]).await;
    let oa = StreamServer::start(vec![Streamed::stream(cut, GAP), Streamed::stream(error_chunk, GAP)]).await;

    let model = stream_model(ProviderKind::Anthropic, &an.url);
    let pieces = Pieces::default();
    let err = build(&model).stream(request(&model, conversation(), Vec::new()), &pieces).await.unwrap_err();
    assert!(matches!(err, ProviderError::Stream { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "provider `an` (anthropic): the streamed answer failed: the server sent an error: Overloaded [overloaded_error]"
    );
    assert_eq!(pieces.all(), ["Par"], "what arrived before the error was passed on");

    let model = stream_model(ProviderKind::OpenAiCompatible, &oa.url);
    let provider = build(&model);
    let err = provider.stream(request(&model, conversation(), Vec::new()), &Pieces::default()).await.unwrap_err();
    assert!(
        err.to_string().ends_with("the streamed answer failed: the stream ended before the answer was complete"),
        "{err}"
    );
    let err = provider.stream(request(&model, conversation(), Vec::new()), &Pieces::default()).await.unwrap_err();
    assert!(err.to_string().ends_with("the server sent an error: upstream failed [server_error]"), "{err}");
}

#[tokio::test]
async fn a_stream_request_refused_for_its_size_is_a_context_overflow() {
    let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
    let server = StreamServer::start(vec![Streamed::Status(400, body.to_string())]).await;
    let model = stream_model(ProviderKind::Anthropic, &server.url);
    let err = build(&model).stream(request(&model, conversation(), Vec::new()), &Pieces::default()).await.unwrap_err();
    assert!(err.is_context_overflow(), "{err:?}");
    let server = StreamServer::start(vec![Streamed::Status(
        400,
        r#"{"error":{"message":"maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#.into(),
    )])
    .await;
    let model = stream_model(ProviderKind::OpenAiCompatible, &server.url);
    let err = build(&model).stream(request(&model, conversation(), Vec::new()), &Pieces::default()).await.unwrap_err();
    assert!(err.is_context_overflow(), "{err:?}");
}

#[tokio::test]
async fn a_server_that_ignores_stream_true_is_read_as_plain_json() {
    let turn = split_turn();
    let server = StreamServer::start(vec![Streamed::Json(model_stream::openai_json(&turn))]).await;
    let model = stream_model(ProviderKind::OpenAiCompatible, &server.url);
    let pieces = Pieces::default();
    let response = build(&model).stream(request(&model, conversation(), Vec::new()), &pieces).await.expect("answers");
    assert_eq!(response.text, "I'll send it now.");
    assert_eq!(response.tool_calls.len(), 2);
    assert!(pieces.all().is_empty(), "nothing streamed");
}

#[tokio::test]
async fn the_scripted_provider_answers_a_stream_call_as_a_plain_one() {
    let p = play_script();
    let pieces = Pieces::default();
    let response = p.stream(scripted_request("worker-2", "act-7", ""), &pieces).await.unwrap();
    assert_eq!(response.tool_calls[0].name, "file_write");
    assert!(pieces.all().is_empty());
}
