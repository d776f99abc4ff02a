//! What the model loop sends over a long conversation (issue [K]): one agent, 50 activations
//! (a user message each; the model answers with a tool call or two, then text), through the
//! real scheduler, model loop, store and tools, against local OpenAI-compatible and
//! Anthropic-style servers on 127.0.0.1 that log every request body. Each server enforces its
//! context window like a provider does (a request over it is refused with the provider's
//! "too long" error), so a loop that does not compact in time sees the overflow a real model
//! would report.
//!
//! Per configuration (a generous preset with the default window, and a small `contextLimit`
//! that forces compaction): request bytes and estimated tokens (bytes / 4, what the servers
//! report as usage) per activation, prefix stability (the share of request N's system prompt
//! and messages that request N+1 starts with; Anthropic's `cache_control` markers move with
//! the end of each request and are not part of what a cache matches, so they are stripped),
//! compactions and refused requests. The preset key is `contextLimit`, the older name of
//! `contextWindow`, so the same program also runs on the loop before [K].
//!
//! Run with `cargo bench --bench model_context` (byte counts, not timings: any profile gives
//! the same numbers; `SUZUMIO_BENCH_QUICK=1`: 5 activations per configuration).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use suzumio::activation::providers::{ProviderPool, RetryPolicy};
use suzumio::activation::{Activations, NoRunner};
use suzumio::clock::SystemClock;
use suzumio::config::load::ProcessEnv;
use suzumio::project::Project;
use suzumio::scheduler::Scheduler;
use suzumio::store::{ProjectStatus, SendMessage, StateFiles, Store};
use suzumio::support::ToolHost;

/// Activations per configuration.
fn activations_per_run() -> usize {
    common::iterations(50, 5)
}

/// The window of the small preset, in tokens: with the default `compactAt` (0.8) the loop
/// should compact near 6 400 tokens, every dozen activations or so.
const SMALL_WINDOW: u64 = 8_000;
/// The default `contextWindow` of a preset that sets none.
const DEFAULT_WINDOW: u64 = 260_000;

// ---------------------------------------------------------------------------------------------
// A model server that logs every request and answers in its provider's wire format.

#[derive(Clone, Copy, Debug, PartialEq)]
enum Format {
    OpenAi,
    Anthropic,
}

struct Logged {
    body: Value,
    bytes: usize,
    refused: bool,
}

#[derive(Clone)]
struct Server {
    format: Format,
    window: u64,
    log: Arc<Mutex<Vec<Logged>>>,
    /// Activations begun (reports sent): every other one adds a note.
    reports: Arc<AtomicUsize>,
}

async fn serve(State(server): State<Server>, body: Bytes) -> Response {
    let bytes = body.len();
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut log = server.log.lock().unwrap();
    let n = log.len();
    let (status, answer) = server.answer(&parsed, bytes, n);
    log.push(Logged { body: parsed, bytes, refused: status != 200 });
    (StatusCode::from_u16(status).unwrap(), axum::Json(answer)).into_response()
}

fn is_summary_request(body: &Value) -> bool {
    body.to_string().contains("Summarize the conversation below")
}

impl Server {
    async fn start(format: Format, window: u64) -> (Server, String) {
        let server =
            Server { format, window, log: Arc::new(Mutex::new(Vec::new())), reports: Arc::new(AtomicUsize::new(0)) };
        let app = axum::Router::new().fallback(serve).with_state(server.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (server, url)
    }

    fn provider(&self, url: &str) -> String {
        match self.format {
            Format::OpenAi => format!("{{type: openai-compatible, baseURL: '{url}/v1'}}"),
            Format::Anthropic => format!("{{type: anthropic, baseURL: '{url}', apiKey: sk-bench}}"),
        }
    }

    /// The agent's model: report to the user, sometimes add a note, then end the turn with text.
    fn answer(&self, body: &Value, bytes: usize, n: usize) -> (u16, Value) {
        let tokens = bytes as u64 / 4;
        if tokens > self.window {
            return (400, self.overflow(tokens));
        }
        if is_summary_request(body) {
            return (200, self.text("## Goal\nReport the progress of every round to the user.", tokens));
        }
        let answer = match self.answered_call(body) {
            Some(id) if id.starts_with("send-") && id.ends_with("-even") => self.call(
                &format!("note-{n}"),
                json!({"recipient": "user", "body": format!("Note {n}: the details of this round are in the log.")}),
                tokens,
            ),
            Some(_) => self.text(&format!("Round reported (request {n}); waiting for the next message."), tokens),
            None => self.call(
                &format!(
                    "send-{n}-{}",
                    if self.reports.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) { "even" } else { "odd" }
                ),
                json!({"recipient": "user", "body": format!("Progress report {n}: all steps of this round are done.")}),
                tokens,
            ),
        };
        (200, answer)
    }

    fn call(&self, id: &str, input: Value, tokens: u64) -> Value {
        match self.format {
            Format::OpenAi => json!({
                "choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": "messages_send", "arguments": input.to_string()}}]},
                    "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": tokens, "completion_tokens": 30},
            }),
            Format::Anthropic => json!({
                "type": "message", "role": "assistant", "stop_reason": "tool_use",
                "content": [{"type": "tool_use", "id": id, "name": "messages_send", "input": input}],
                "usage": {"input_tokens": tokens, "output_tokens": 30},
            }),
        }
    }

    fn text(&self, text: &str, tokens: u64) -> Value {
        match self.format {
            Format::OpenAi => json!({"choices": [{"message": {"role": "assistant", "content": text},
                "finish_reason": "stop"}], "usage": {"prompt_tokens": tokens, "completion_tokens": 20}}),
            Format::Anthropic => json!({"type": "message", "role": "assistant", "stop_reason": "end_turn",
                "content": [{"type": "text", "text": text}], "usage": {"input_tokens": tokens, "output_tokens": 20}}),
        }
    }

    fn overflow(&self, tokens: u64) -> Value {
        let window = self.window;
        match self.format {
            Format::OpenAi => json!({"error": {
                "message": format!("This model's maximum context length is {window} tokens, your request has {tokens}."),
                "type": "invalid_request_error", "code": "context_length_exceeded"}}),
            Format::Anthropic => json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": format!("prompt is too long: {tokens} tokens > {window} maximum")}}),
        }
    }

    /// The id of the tool call the request's last message answers, if it ends with a result.
    fn answered_call(&self, body: &Value) -> Option<String> {
        let last = body["messages"].as_array()?.last()?;
        match self.format {
            Format::OpenAi => (last["role"] == "tool").then(|| last["tool_call_id"].as_str().unwrap_or("").to_string()),
            Format::Anthropic => {
                let blocks = last["content"].as_array()?;
                let result = blocks.iter().rev().find(|b| b["type"] == "tool_result")?;
                (blocks.last()? == result).then(|| result["tool_use_id"].as_str().unwrap_or("").to_string())
            }
        }
    }
}

/// What a prompt cache matches after the tools: the system prompt, then the messages.
fn prefix_text(body: &Value) -> String {
    let mut text = json!([body["system"], body["messages"]]);
    without_cache_markers(&mut text);
    text.to_string()
}

fn without_cache_markers(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("cache_control");
            map.values_mut().for_each(without_cache_markers);
        }
        Value::Array(items) => items.iter_mut().for_each(without_cache_markers),
        _ => {}
    }
}

/// The share of `a`'s bytes that `b` starts with.
fn shared_prefix(a: &str, b: &str) -> f64 {
    let same = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    same as f64 / a.len().max(1) as f64
}

fn quantile<T: Copy + PartialOrd>(values: &[T], p: f64) -> T {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

// ---------------------------------------------------------------------------------------------
// One configuration: a project with one agent, 50 rounds.

struct Report {
    label: String,
    /// Bytes of the largest request of each activation.
    request_bytes: Vec<usize>,
    /// Bytes of everything each activation sent (its turns, summaries and refused requests).
    activation_bytes: Vec<usize>,
    shares: Vec<f64>,
    compactions: usize,
    refused: usize,
    tools_identical: bool,
    system_identical: bool,
    elapsed: Duration,
}

async fn run(format: Format, window: Option<u64>) -> Report {
    let started = Instant::now();
    let (server, url) = Server::start(format, window.unwrap_or(DEFAULT_WINDOW)).await;
    let preset = match window {
        Some(w) => format!("{{main: {{provider: fake, model: m, contextLimit: {w}}}}}"),
        None => "{main: {provider: fake, model: m}}".to_string(),
    };
    let tmp = tempfile::Builder::new().prefix("suzumio-bench-ctx-").tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(
        dir.join("suzumio.yaml"),
        format!(
            "name: ctx\ntask: Report the progress of every round to the user.\ntools:\n  toolpacks: [core]\nagents:\n  pm: {{tools: [messages.send, coordination.wait_for_signal]}}\nbackend:\n  runner:\n    model: main\n    models:\n      providers: {{fake: {}}}\n      presets: {preset}\n",
            server.provider(&url)
        ),
    )
    .unwrap();
    let project = Arc::new(Project::load(dir, &ProcessEnv).unwrap_or_else(|e| panic!("{e}")));
    let store = Store::open(&project.config, Arc::new(SystemClock)).unwrap();
    store.set_project_status(ProjectStatus::Running).unwrap();
    let host = ToolHost::new(project, store, StateFiles::new(dir));
    let providers = ProviderPool::new(|_| None, RetryPolicy::none());
    let activations = Activations::with_providers(host.clone(), Arc::new(NoRunner("bench".into())), providers);
    let scheduler = Arc::new(Scheduler::new(host.clone(), activations.clone()));

    let mut bounds = vec![0];
    for round in 0..activations_per_run() {
        host.store
            .send_message(SendMessage {
                sender: "user".into(),
                recipient: Some("pm".into()),
                body: format!("Round {round}: how far are you? Report what you did and what comes next."),
                ..Default::default()
            })
            .unwrap();
        let mut settled = false;
        for _ in 0..2000 {
            let report = scheduler.tick().await;
            assert!(report.errors.is_empty(), "{:?}", report.errors);
            tokio::time::sleep(Duration::from_millis(2)).await;
            let idle = activations.running() == 0
                && !host.store.has_pending_signals(false).unwrap()
                && host.store.agent("pm").unwrap().is_some_and(|a| a.active_activation_id.is_none());
            if idle && report.started.is_empty() {
                settled = true;
                break;
            }
        }
        assert!(settled, "round {round} did not settle");
        let act = host.store.latest_activation("pm", None).unwrap().unwrap();
        assert_eq!(act.status.as_str(), "completed", "round {round}: {:?}", act.error);
        bounds.push(server.log.lock().unwrap().len());
    }

    let log = server.log.lock().unwrap();
    let mut request_bytes = Vec::new();
    let mut activation_bytes = Vec::new();
    for pair in bounds.windows(2) {
        let requests = &log[pair[0]..pair[1]];
        request_bytes.push(requests.iter().map(|r| r.bytes).max().unwrap_or(0));
        activation_bytes.push(requests.iter().map(|r| r.bytes).sum());
    }
    let turns: Vec<&Logged> = log.iter().filter(|r| !is_summary_request(&r.body)).collect();
    let texts: Vec<String> = turns.iter().map(|r| prefix_text(&r.body)).collect();
    let shares = texts.windows(2).map(|p| shared_prefix(&p[0], &p[1])).collect();
    let tools_identical = turns.iter().all(|r| r.body["tools"] == turns[0].body["tools"]);
    // The loop before [K] sent no system prompt: identity and task were the first user message.
    let system = |body: &Value| match format {
        Format::OpenAi => Some(body["messages"][0].clone()).filter(|m| m["role"] == "system"),
        Format::Anthropic => {
            let mut s = body["system"].clone();
            without_cache_markers(&mut s);
            Some(s).filter(|s| !s.is_null())
        }
    };
    let system_identical = turns.iter().all(|r| system(&r.body).is_some() && system(&r.body) == system(&turns[0].body));
    let history = host.store.history("pm", 100_000).unwrap();
    let compactions = history.iter().filter(|h| h.entry.is_compaction()).count();
    let label = format!(
        "{} {}",
        match format {
            Format::OpenAi => "OpenAI",
            Format::Anthropic => "Anthropic",
        },
        match window {
            Some(w) => format!("contextLimit {w}"),
            None => format!("default window ({DEFAULT_WINDOW})"),
        }
    );
    Report {
        label,
        request_bytes,
        activation_bytes,
        shares,
        compactions,
        refused: log.iter().filter(|r| r.refused).count(),
        tools_identical,
        system_identical,
        elapsed: started.elapsed(),
    }
}

fn stats(values: &[usize]) -> String {
    let kb = |b: usize| format!("{:.1}", b as f64 / 1000.0);
    format!(
        "{} / {} / {} / {}",
        kb(values[0]),
        kb(quantile(values, 0.5)),
        kb(*values.iter().max().unwrap()),
        kb(*values.last().unwrap())
    )
}

fn tokens(values: &[usize]) -> String {
    let t = |b: usize| format!("{}", b / 4);
    format!(
        "{} / {} / {} / {}",
        t(values[0]),
        t(quantile(values, 0.5)),
        t(*values.iter().max().unwrap()),
        t(*values.last().unwrap())
    )
}

fn main() {
    if common::listing() {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let mut reports = Vec::new();
    for window in [None, Some(SMALL_WINDOW)] {
        for format in [Format::OpenAi, Format::Anthropic] {
            reports.push(rt.block_on(run(format, window)));
        }
    }
    println!("{} activations per configuration; KB = 1000 bytes; tokens estimated as bytes / 4", activations_per_run());
    println!("first / median / max / last activation:");
    println!(
        "{:<36} {:>30} {:>30} {:>28} {:>6} {:>8} {:>8}",
        "configuration",
        "largest request (KB)",
        "tokens sent per activation",
        "prefix share median/p10/min",
        "compact",
        "refused",
        "time"
    );
    for r in &reports {
        println!(
            "{:<36} {:>30} {:>30} {:>28} {:>6} {:>8} {:>7.1}s",
            r.label,
            stats(&r.request_bytes),
            tokens(&r.activation_bytes),
            format!(
                "{:.4} / {:.4} / {:.4}",
                quantile(&r.shares, 0.5),
                quantile(&r.shares, 0.1),
                r.shares.iter().copied().fold(1.0, f64::min)
            ),
            r.compactions,
            r.refused,
            r.elapsed.as_secs_f64()
        );
    }
    for r in &reports {
        let below = r.shares.iter().filter(|s| **s < 0.95).count();
        println!(
            "{}: {} of {} request pairs share < 95 %; the same system prompt in every request: {}; tools identical: {}; \
             largest request {} est. tokens",
            r.label,
            below,
            r.shares.len(),
            r.system_identical,
            r.tools_identical,
            r.request_bytes.iter().max().unwrap() / 4
        );
    }
}
