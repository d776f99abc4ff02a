//! Streaming model servers for the tests: a local HTTP server on 127.0.0.1 that answers each
//! model call with the next queued reply — a `text/event-stream` body written frame by frame with
//! small delays (optionally going quiet in the middle), plain JSON, or an HTTP error — and records
//! every request body. The frames are the real wire formats: OpenAI Chat Completions chunks
//! (`choices[].delta`, tool calls by `index`, a usage chunk, `[DONE]`) and Anthropic Messages
//! events (`message_start` … `message_stop`), built from one [`Turn`] so that the streamed and
//! the non-streamed answer of the same turn can be compared.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// What one model call answers: text in pieces, tool calls with their arguments in pieces.
#[derive(Clone, Debug)]
pub struct Turn {
    pub text: Vec<String>,
    pub calls: Vec<Call>,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

#[derive(Clone, Debug)]
pub struct Call {
    pub id: String,
    pub name: String,
    pub arguments: Vec<String>,
}

impl Turn {
    pub fn new(text: &[&str]) -> Turn {
        Turn {
            text: text.iter().map(|s| s.to_string()).collect(),
            calls: Vec::new(),
            input_tokens: 21,
            output_tokens: 8,
        }
    }

    pub fn call(mut self, id: &str, name: &str, arguments: &[&str]) -> Turn {
        self.calls.push(Call {
            id: id.to_string(),
            name: name.to_string(),
            arguments: arguments.iter().map(|s| s.to_string()).collect(),
        });
        self
    }

    pub fn full_text(&self) -> String {
        self.text.concat()
    }
}

fn frame(data: &Value) -> String {
    format!("data: {data}\n\n")
}

fn named(event: &str, data: &Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// The turn as OpenAI `chat.completion.chunk` frames: a role chunk, the text pieces, each tool
/// call's first chunk (id, name) and its argument pieces, the finish reason, usage, `[DONE]`.
pub fn openai_frames(turn: &Turn) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        frame(&json!({"id": "chatcmpl-s1", "object": "chat.completion.chunk", "model": "m",
                      "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
    };
    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    for piece in &turn.text {
        out.push(chunk(json!({"content": piece}), Value::Null));
    }
    for (index, call) in turn.calls.iter().enumerate() {
        out.push(chunk(
            json!({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                                   "function": {"name": call.name, "arguments": ""}}]}),
            Value::Null,
        ));
        for piece in &call.arguments {
            out.push(chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}), Value::Null));
        }
    }
    let finish = if turn.calls.is_empty() { "stop" } else { "tool_calls" };
    out.push(chunk(json!({}), json!(finish)));
    out.push(frame(&json!({"id": "chatcmpl-s1", "object": "chat.completion.chunk", "choices": [],
                           "usage": {"prompt_tokens": turn.input_tokens, "completion_tokens": turn.output_tokens,
                                     "total_tokens": turn.input_tokens + turn.output_tokens}})));
    out.push("data: [DONE]\n\n".to_string());
    out
}

/// The same turn as one non-streamed Chat Completions answer.
pub fn openai_json(turn: &Turn) -> Value {
    let mut message = json!({"role": "assistant", "content": turn.full_text()});
    if !turn.calls.is_empty() {
        message["tool_calls"] = turn
            .calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments.concat()}}))
            .collect();
    }
    let finish = if turn.calls.is_empty() { "stop" } else { "tool_calls" };
    json!({"id": "chatcmpl-j1", "choices": [{"index": 0, "message": message, "finish_reason": finish}],
           "usage": {"prompt_tokens": turn.input_tokens, "completion_tokens": turn.output_tokens}})
}

/// The turn as Anthropic Messages events: `message_start`, a text block with `text_delta`s, a
/// `tool_use` block per call with `input_json_delta`s, `message_delta` (stop reason, usage),
/// `message_stop`, with a `ping` as the API sends them.
/// An OpenAI-compatible reply whose one step calls `tool` (as the model names it) with `arguments`.
pub fn call(id: &str, tool: &str, arguments: Value) -> Reply {
    Reply::Json(openai_json(&Turn::new(&[]).call(id, tool, &[&arguments.to_string()])))
}

/// The tool names an OpenAI-compatible request offered.
pub fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["function"]["name"].as_str()).map(str::to_string).collect())
        .unwrap_or_default()
}

/// The content of the tool message answering `call_id` in an OpenAI-compatible request.
pub fn tool_result(request: &Value, call_id: &str) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no tool result for {call_id} in {request}"))
        .to_string()
}

pub fn anthropic_frames(turn: &Turn) -> Vec<String> {
    let mut out = vec![
        named(
            "message_start",
            &json!({"type": "message_start", "message": {"id": "msg_s1", "type": "message", "role": "assistant",
                    "model": "claude", "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": turn.input_tokens, "output_tokens": 1}}}),
        ),
        named("ping", &json!({"type": "ping"})),
    ];
    let mut index = 0;
    if !turn.text.is_empty() {
        out.push(named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        ));
        for piece in &turn.text {
            out.push(named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        out.push(named("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    for call in &turn.calls {
        out.push(named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}}),
        ));
        for piece in &call.arguments {
            out.push(named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece}}),
            ));
        }
        out.push(named("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    let stop = if turn.calls.is_empty() { "end_turn" } else { "tool_use" };
    out.push(named(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                "usage": {"output_tokens": turn.output_tokens}}),
    ));
    out.push(named("message_stop", &json!({"type": "message_stop"})));
    out
}

/// The same turn as one non-streamed Messages answer.
pub fn anthropic_json(turn: &Turn) -> Value {
    let mut content = Vec::new();
    if !turn.text.is_empty() {
        content.push(json!({"type": "text", "text": turn.full_text()}));
    }
    for c in &turn.calls {
        let input: Value = serde_json::from_str(&c.arguments.concat()).expect("the test's arguments are JSON");
        content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
    }
    let stop = if turn.calls.is_empty() { "end_turn" } else { "tool_use" };
    json!({"id": "msg_j1", "type": "message", "role": "assistant", "content": content, "stop_reason": stop,
           "usage": {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens}})
}

/// One queued answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// `text/event-stream`: the frames, `gap` apart; after `stall_after` frames (if set) the
    /// server goes quiet for `stall` before it goes on.
    Stream {
        frames: Vec<String>,
        gap: Duration,
        stall_after: Option<usize>,
        stall: Duration,
    },
    Json(Value),
    Status(u16, String),
    /// The reply, once the test opens the gate: the request is recorded at once, so a test can
    /// wait for it, change something, and only then let the model answer.
    Gated(Gate, Box<Reply>),
}

/// A gate a [`Reply::Gated`] waits at until [`Gate::open`].
#[derive(Clone, Debug)]
pub struct Gate(Arc<tokio::sync::watch::Sender<bool>>);

impl Gate {
    pub fn new() -> Gate {
        Gate(Arc::new(tokio::sync::watch::channel(false).0))
    }

    pub fn open(&self) {
        self.0.send_replace(true);
    }

    async fn passed(&self) {
        let _ = self.0.subscribe().wait_for(|open| *open).await;
    }
}

impl Reply {
    pub fn stream(frames: Vec<String>, gap: Duration) -> Reply {
        Reply::Stream { frames, gap, stall_after: None, stall: Duration::ZERO }
    }

    pub fn stalling(frames: Vec<String>, after: usize, stall: Duration) -> Reply {
        Reply::Stream { frames, gap: Duration::from_millis(5), stall_after: Some(after), stall }
    }
}

#[derive(Clone, Default)]
struct Shared {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    requests: Arc<Mutex<Vec<Value>>>,
    /// The same bodies as the bytes received.
    raw: Arc<Mutex<Vec<Vec<u8>>>>,
}

pub struct StreamServer {
    pub url: String,
    shared: Shared,
}

impl StreamServer {
    pub async fn start(replies: Vec<Reply>) -> StreamServer {
        let shared = Shared { replies: Arc::new(Mutex::new(replies.into())), ..Shared::default() };
        let app = axum::Router::new().fallback(answer).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("local addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        StreamServer { url, shared }
    }

    /// The request bodies received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The request bodies received so far, in order, as the bytes that came over the socket.
    pub fn raw_requests(&self) -> Vec<Vec<u8>> {
        self.shared.raw.lock().unwrap().clone()
    }
}

async fn answer(State(shared): State<Shared>, body: Bytes) -> Response {
    shared.requests.lock().unwrap().push(serde_json::from_slice(&body).unwrap_or(Value::Null));
    shared.raw.lock().unwrap().push(body.to_vec());
    let mut reply = shared.replies.lock().unwrap().pop_front();
    while let Some(Reply::Gated(gate, inner)) = reply {
        gate.passed().await;
        reply = Some(*inner);
    }
    match reply {
        None => (StatusCode::INTERNAL_SERVER_ERROR, "no reply queued").into_response(),
        Some(Reply::Gated(..)) => unreachable!("passed above"),
        Some(Reply::Status(status, body)) => (StatusCode::from_u16(status).unwrap(), body).into_response(),
        Some(Reply::Json(value)) => axum::Json(value).into_response(),
        Some(Reply::Stream { frames, gap, stall_after, stall }) => {
            let pieces = futures_util::stream::unfold(0usize, move |i| {
                let frames = frames.clone();
                async move {
                    let frame = frames.get(i)?.clone();
                    let wait = if Some(i) == stall_after { stall } else { gap };
                    tokio::time::sleep(wait).await;
                    Some((Ok::<_, Infallible>(frame), i + 1))
                }
            });
            Response::builder()
                .header("content-type", "text/event-stream")
                .header("cache-control", "no-cache")
                .body(Body::from_stream(pieces))
                .unwrap()
        }
    }
}
