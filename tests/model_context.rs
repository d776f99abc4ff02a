//! What the model loop sends to real providers over many activations (issue [K]): local
//! OpenAI-compatible and Anthropic-style servers on 127.0.0.1 log every request and answer in
//! their wire format, and the real scheduler, loop, store and tools run against them. Checked:
//! the system prompt and the task are in every request, each request starts with the previous
//! one's messages (the share of identical leading bytes), tool calls are replayed natively, a
//! small `contextWindow` compacts before the provider overflows, the history has no row cap,
//! and a model-list fallback after a tool call does not run the tool again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
use suzumio::store::{HistoryEntry, MessageQuery, ProjectStatus, SendMessage, StateFiles, Store};
use suzumio::support::ToolHost;

const TASK: &str = "Report the progress of every round to the user.";
const SUMMARY: &str = "## Goal\nReport every round to the user.";

// ---------------------------------------------------------------------------------------------
// A model server: answers each request with what `respond` says, and logs the request bodies.

type Respond = dyn Fn(&Value, u64) -> (u16, Value) + Send + Sync;

#[derive(Clone)]
struct ModelServer {
    url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

#[derive(Clone)]
struct ServerState {
    requests: Arc<Mutex<Vec<Value>>>,
    calls: Arc<AtomicU64>,
    respond: Arc<Respond>,
}

impl ModelServer {
    async fn start(respond: impl Fn(&Value, u64) -> (u16, Value) + Send + Sync + 'static) -> ModelServer {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let state =
            ServerState { requests: requests.clone(), calls: Arc::new(AtomicU64::new(0)), respond: Arc::new(respond) };
        let app = axum::Router::new().fallback(serve).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        ModelServer { url, requests }
    }

    fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }

    /// The loop's requests, without the compaction summary requests.
    fn turns(&self) -> Vec<Value> {
        self.requests().into_iter().filter(|r| !is_summary_request(r)).collect()
    }
}

async fn serve(State(state): State<ServerState>, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let n = state.calls.fetch_add(1, Ordering::SeqCst);
    let (status, answer) = (state.respond)(&body, n);
    state.requests.lock().unwrap().push(body);
    (StatusCode::from_u16(status).unwrap(), axum::Json(answer)).into_response()
}

fn is_summary_request(body: &Value) -> bool {
    body.to_string().contains("Summarize the conversation below")
}

/// What a request costs, as both fake servers report it: a token per four bytes of its body.
fn reported_tokens(body: &Value) -> u64 {
    body.to_string().len() as u64 / 4
}

#[derive(Clone, Copy, Debug)]
enum Format {
    OpenAi,
    Anthropic,
}

impl Format {
    fn provider(self, url: &str) -> String {
        match self {
            Format::OpenAi => format!("{{type: openai-compatible, baseURL: '{url}/v1'}}"),
            Format::Anthropic => format!("{{type: anthropic, baseURL: '{url}', apiKey: sk-test}}"),
        }
    }

    /// The system prompt a request carries.
    fn system(self, body: &Value) -> String {
        match self {
            Format::OpenAi => {
                let first = &body["messages"][0];
                assert_eq!(first["role"], "system", "the system prompt comes first: {first}");
                first["content"].as_str().unwrap().to_string()
            }
            Format::Anthropic => body["system"][0]["text"].as_str().expect("a system block").to_string(),
        }
    }

    /// What a provider's prompt cache matches: the system prompt, then the messages. Anthropic's
    /// `cache_control` markers move with the end of the request and are not part of what is
    /// cached, so they are left out ([`Format::raw_prefix_text`] keeps them).
    fn prefix_text(self, body: &Value) -> String {
        let mut text = json!([body["system"], body["messages"]]);
        without_cache_markers(&mut text);
        text.to_string()
    }

    fn raw_prefix_text(self, body: &Value) -> String {
        json!([body["system"], body["messages"]]).to_string()
    }

    /// A reply that makes the loop call `tool` (model-facing name) with `input`.
    fn call(self, id: &str, tool: &str, input: Value, tokens: u64) -> Value {
        match self {
            Format::OpenAi => json!({
                "choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": tool, "arguments": input.to_string()}}]},
                    "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": tokens, "completion_tokens": 9,
                          "prompt_tokens_details": {"cached_tokens": tokens / 2}},
            }),
            Format::Anthropic => json!({
                "type": "message", "role": "assistant", "stop_reason": "tool_use",
                "content": [{"type": "tool_use", "id": id, "name": tool, "input": input}],
                "usage": {"input_tokens": tokens / 2, "cache_read_input_tokens": tokens / 2, "output_tokens": 9},
            }),
        }
    }

    fn text(self, text: &str) -> Value {
        match self {
            Format::OpenAi => json!({"choices": [{"message": {"role": "assistant", "content": text},
                "finish_reason": "stop"}], "usage": {"prompt_tokens": 10, "completion_tokens": 10}}),
            Format::Anthropic => json!({"type": "message", "role": "assistant", "stop_reason": "end_turn",
                "content": [{"type": "text", "text": text}], "usage": {"input_tokens": 10, "output_tokens": 10}}),
        }
    }

    /// The id of the tool call the last message answers, if it is a tool result.
    fn answered_call(self, body: &Value) -> Option<String> {
        let last = body["messages"].as_array()?.last()?;
        match self {
            Format::OpenAi => (last["role"] == "tool").then(|| last["tool_call_id"].as_str().unwrap().to_string()),
            Format::Anthropic => {
                let blocks = last["content"].as_array()?;
                let result = blocks.iter().rev().find(|b| b["type"] == "tool_result")?;
                // A new prompt after the result means a new activation started.
                (blocks.last()? == result).then(|| result["tool_use_id"].as_str().unwrap().to_string())
            }
        }
    }
}

/// The agent's model: send the user one message per activation, then wait for the next signal;
/// summarize when asked to.
fn reporting_model(format: Format) -> impl Fn(&Value, u64) -> (u16, Value) + Send + Sync + 'static {
    move |body, n| {
        if is_summary_request(body) {
            return (200, format.text(SUMMARY));
        }
        let tokens = reported_tokens(body);
        let answer = match format.answered_call(body) {
            Some(id) if id.starts_with("send-") => format.call(
                &format!("wait-{n}"),
                "coordination_wait_for_signal",
                json!({"reason": "next round"}),
                tokens,
            ),
            _ => format.call(
                &format!("send-{n}"),
                "messages_send",
                json!({"recipient": "user", "body": format!("Progress report {n}.")}),
                tokens,
            ),
        };
        (200, answer)
    }
}

// ---------------------------------------------------------------------------------------------
// A project whose one agent talks to the model servers.

struct World {
    _dir: tempfile::TempDir,
    host: Arc<ToolHost>,
    scheduler: Arc<Scheduler>,
    activations: Arc<Activations>,
}

/// `providers` and `presets` are YAML flow mappings; the agent uses preset `main`.
fn world(providers: &str, presets: &str) -> World {
    let tmp = tempfile::Builder::new().prefix("suzumio-ctx-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    std::fs::write(
        dir.join("suzumio.yaml"),
        format!(
            r#"name: ctx
task: {TASK}
tools:
  toolpacks: [core]
agents:
  pm: {{tools: [messages.send, coordination.wait_for_signal]}}
backend:
  runner:
    model: main
    models:
      providers: {providers}
      presets: {presets}
"#
        ),
    )
    .unwrap();
    let project = Arc::new(Project::load(&dir, &ProcessEnv).unwrap_or_else(|e| panic!("{e}")));
    let store = Store::open(&project.config, Arc::new(SystemClock)).unwrap();
    store.set_project_status(ProjectStatus::Running).unwrap();
    let host = ToolHost::new(project, store, StateFiles::new(&dir));
    let providers = ProviderPool::new(|name| std::env::var(name).ok(), RetryPolicy::none());
    let activations =
        Activations::with_providers(host.clone(), Arc::new(NoRunner("no container here".into())), providers);
    let scheduler = Arc::new(Scheduler::new(host.clone(), activations.clone()));
    World { _dir: tmp, host, scheduler, activations }
}

impl World {
    async fn settle(&self) {
        for _ in 0..500 {
            let report = self.scheduler.tick().await;
            assert!(report.errors.is_empty(), "{:?}", report.errors);
            tokio::time::sleep(Duration::from_millis(5)).await;
            let idle = self.activations.running() == 0 && !self.host.store.has_pending_signals(false).unwrap();
            if idle && report.started.is_empty() {
                return;
            }
        }
        panic!("the project did not settle");
    }

    /// One round: a user message wakes the agent, and its activation runs to the end.
    async fn round(&self, body: &str) {
        self.host
            .store
            .send_message(SendMessage {
                sender: "user".into(),
                recipient: Some("pm".into()),
                body: body.into(),
                ..Default::default()
            })
            .unwrap();
        self.settle().await;
        let act = self.host.store.latest_activation("pm", None).unwrap().unwrap();
        assert_eq!(act.status.as_str(), "completed", "{body}: {:?}", act.error);
    }

    fn sent_to_user(&self) -> Vec<String> {
        let q = MessageQuery {
            participant_a: Some("pm".into()),
            participant_b: Some("user".into()),
            limit: Some(500),
            ..Default::default()
        };
        self.host.store.list_messages(&q).unwrap().into_iter().filter(|m| m.sender == "pm").map(|m| m.body).collect()
    }

    fn compactions(&self) -> Vec<HistoryEntry> {
        let history = self.host.store.history("pm", 5000).unwrap();
        history.into_iter().map(|h| h.entry).filter(HistoryEntry::is_compaction).collect()
    }
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
    same as f64 / a.len() as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

// ---------------------------------------------------------------------------------------------
// Tests

async fn fifty_activations(format: Format) {
    let server = ModelServer::start(reporting_model(format)).await;
    let w = world(&format!("{{fake: {}}}", format.provider(&server.url)), "{main: {provider: fake, model: m}}");
    for round in 0..50 {
        w.round(&format!("Round {round}: how far are you?")).await;
    }
    let turns = server.turns();
    assert_eq!(turns.len(), 100, "two model calls per activation");
    assert_eq!(w.sent_to_user().len(), 50);
    assert!(w.compactions().is_empty(), "the default window is far away");

    // The system prompt, with the task and the agent's identity, heads every request unchanged.
    let system = format.system(&turns[0]);
    assert!(system.contains(TASK) && system.contains("# Agent Identity\n\n- ID: pm"), "{system}");
    for (i, turn) in turns.iter().enumerate() {
        assert_eq!(format.system(turn), system, "request {i}");
    }

    // Each request starts with the previous one's messages.
    let shares: Vec<f64> = turns
        .windows(2)
        .map(|pair| shared_prefix(&format.prefix_text(&pair[0]), &format.prefix_text(&pair[1])))
        .collect();
    let (median, min) = (median(shares.clone()), shares.iter().copied().fold(1.0, f64::min));
    let raw: Vec<f64> = turns
        .windows(2)
        .map(|pair| shared_prefix(&format.raw_prefix_text(&pair[0]), &format.raw_prefix_text(&pair[1])))
        .collect();
    eprintln!(
        "{format:?}: prefix stability over {} request pairs: median {median:.4}, min {min:.4} \
         (bytes as sent, cache markers included: median {:.4}, min {:.4})",
        shares.len(),
        self::median(raw.clone()),
        raw.iter().copied().fold(1.0, f64::min)
    );
    assert!(median > 0.99 && min > 0.9, "median {median}, min {min}");

    // Earlier activations' calls come back in the native structure, never as text records.
    let last = turns.last().unwrap();
    let text = last.to_string();
    assert!(!text.contains("# Tool Call Record") && !text.contains("# Tool Result Record"));
    let messages = last["messages"].as_array().unwrap();
    match format {
        Format::OpenAi => {
            let calls: Vec<&Value> = messages.iter().filter(|m| m["tool_calls"].is_array()).collect();
            let results: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
            assert_eq!((calls.len(), results.len()), (99, 99), "49 activations × 2 calls, and this one's send");
            assert_eq!(calls[0]["tool_calls"][0]["function"]["name"], "messages_send");
            assert_eq!(results[0]["tool_call_id"], calls[0]["tool_calls"][0]["id"]);
        }
        Format::Anthropic => {
            let blocks: Vec<&Value> = messages.iter().flat_map(|m| m["content"].as_array().unwrap()).collect();
            let uses: Vec<&&Value> = blocks.iter().filter(|b| b["type"] == "tool_use").collect();
            let results: Vec<&&Value> = blocks.iter().filter(|b| b["type"] == "tool_result").collect();
            assert_eq!((uses.len(), results.len()), (99, 99));
            assert_eq!(results[0]["tool_use_id"], uses[0]["id"]);
            let marks = blocks.iter().filter(|b| b.get("cache_control").is_some()).count();
            assert_eq!(marks, 2, "the end of the history and the end of the request");
            assert_eq!(last["system"][0]["cache_control"], json!({"type": "ephemeral"}));
        }
    }
    // The newest signals come last, after the history.
    let act = w.host.store.latest_activation("pm", None).unwrap().unwrap();
    let first_of_last = &turns[98];
    assert!(format.prefix_text(first_of_last).contains("Round 49: how far are you?"));
    let usage = act.usage.expect("usage recorded");
    assert!(usage.cached_input_tokens > 0, "{usage:?}");
    assert!(usage.input_tokens >= usage.cached_input_tokens, "{usage:?}");
}

#[tokio::test]
async fn fifty_activations_keep_a_stable_prefix_with_an_openai_compatible_server() {
    fifty_activations(Format::OpenAi).await;
}

#[tokio::test]
async fn fifty_activations_keep_a_stable_prefix_with_an_anthropic_server() {
    fifty_activations(Format::Anthropic).await;
}

async fn compaction_before_overflow(format: Format) {
    let server = ModelServer::start(reporting_model(format)).await;
    let window = 6000;
    let w = world(
        &format!("{{fake: {}}}", format.provider(&server.url)),
        &format!("{{main: {{provider: fake, model: m, contextWindow: {window}, compactAt: 0.5}}}}"),
    );
    for round in 0..40 {
        w.round(&format!("Round {round}: how far are you?")).await;
    }
    let compactions = w.compactions();
    assert!(!compactions.is_empty(), "a compaction before the window filled");
    for c in &compactions {
        let HistoryEntry::HistoryCompaction { reason, summary, fallback, .. } = c else { unreachable!() };
        assert_eq!((reason.as_str(), summary.as_str(), fallback), ("context_window_threshold", SUMMARY, &None));
    }
    let turns = server.turns();
    let system = format.system(&turns[0]);
    let sizes: Vec<u64> = turns.iter().map(reported_tokens).collect();
    let largest = *sizes.iter().max().unwrap();
    eprintln!(
        "{format:?}: {} compactions in 40 activations; request tokens (bytes/4) first {}, largest {largest}, last {}",
        compactions.len(),
        sizes[0],
        sizes.last().unwrap()
    );
    assert!(largest < window, "no request reached the window: {sizes:?}");
    assert!(
        sizes[sizes.len() - 10..].iter().all(|s| *s <= window * 6 / 10),
        "requests stay near the threshold instead of growing: {sizes:?}"
    );
    for (i, turn) in turns.iter().enumerate() {
        assert_eq!(format.system(turn), system, "the system prompt is never dropped (request {i})");
    }
    // Every request carries its activation's newest signals, and after a compaction the history
    // starts with the summary; replay gives back exactly what the compacting request sent.
    let last = turns.last().unwrap();
    let text = format.prefix_text(last);
    assert!(text.contains("Round 39: how far are you?") && text.contains("# Compacted Agent History"), "{text}");
    let summaries = server.requests().iter().filter(|r| is_summary_request(r)).count();
    assert_eq!(summaries, compactions.len());
    let mut breaks = 0;
    for pair in turns.windows(2) {
        let share = shared_prefix(&format.prefix_text(&pair[0]), &format.prefix_text(&pair[1]));
        if share < 0.9 {
            breaks += 1;
        }
    }
    assert_eq!(breaks, compactions.len(), "the prefix changes only where a compaction happened");
}

#[tokio::test]
async fn a_small_context_window_compacts_proactively_openai() {
    compaction_before_overflow(Format::OpenAi).await;
}

#[tokio::test]
async fn a_small_context_window_compacts_proactively_anthropic() {
    compaction_before_overflow(Format::Anthropic).await;
}

/// Regression: replay read only the newest 2000 rows, so a long history lost its beginning.
#[tokio::test]
async fn replay_has_no_row_cap() {
    let server = ModelServer::start(reporting_model(Format::OpenAi)).await;
    let w = world(&format!("{{fake: {}}}", Format::OpenAi.provider(&server.url)), "{main: {provider: fake, model: m}}");
    for i in 0..2100 {
        let entry = HistoryEntry::ActivationPrompt {
            text: format!("old prompt {i}"),
            delivery: "activation_start".into(),
            signal_ids: Vec::new(),
            priorities: Vec::new(),
        };
        w.host.store.append_history("pm", None, &entry).unwrap();
    }
    w.round("Round 0").await;
    let first = server.turns().remove(0);
    let messages = first["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1 + 2100 + 1, "system, every earlier row, the new signals");
    assert_eq!(messages[1]["content"], "old prompt 0");
}

/// A model of a model-list that fails after a tool call hands the conversation over: the next
/// model sees the call and its result, and the tool does not run again.
#[tokio::test]
async fn a_fallback_after_a_tool_call_does_not_run_the_tool_again() {
    let first = ModelServer::start(|_, n| match n {
        0 => (
            200,
            Format::OpenAi.call("send-once", "messages_send", json!({"recipient": "user", "body": "only once"}), 10),
        ),
        _ => (400, json!({"error": {"message": "this model is gone"}})),
    })
    .await;
    let second = ModelServer::start(|_, _| {
        (200, Format::OpenAi.call("wait-1", "coordination_wait_for_signal", json!({"reason": "done"}), 10))
    })
    .await;
    let w = world(
        &format!(
            "{{first: {}, second: {}}}",
            Format::OpenAi.provider(&first.url),
            Format::OpenAi.provider(&second.url)
        ),
        "{a: {provider: first, model: m1}, b: {provider: second, model: m2}, main: {model-list: [a, b]}}",
    );
    w.round("Send the report.").await;
    assert_eq!(w.sent_to_user(), ["only once"], "the tool ran once");
    assert_eq!(first.requests().len(), 2);
    let handed = second.requests().remove(0);
    let messages = handed["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 2]["tool_calls"][0]["id"], "send-once", "{handed:#}");
    assert_eq!(messages[n - 1]["role"], "tool");
    assert_eq!(messages[n - 1]["tool_call_id"], "send-once");
    // The second model's request starts with everything the first model was sent.
    let share = shared_prefix(&first.requests()[1]["messages"].to_string(), &handed["messages"].to_string());
    assert!(share > 0.99, "{share}");
    let act = w.host.store.latest_activation("pm", None).unwrap().unwrap();
    let usage = act.usage.unwrap();
    assert_eq!(usage.models, ["a (m1)", "b (m2)"]);
}

#[test]
fn compact_at_and_context_window_are_checked() {
    for (preset, error) in [
        ("{provider: local, compactAt: 1.5}", "compactAt is the share of contextWindow"),
        ("{provider: local, compactAt: 0}", "a number in (0, 1]"),
        ("{provider: local, contextWindow: 1000, contextLimit: 2000}", "set contextWindow or contextLimit, not both"),
        ("{provider: local, contextWindow: 0}", "contextWindow"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("suzumio.yaml"),
            format!(
                "name: c\ntask: t\nagents:\n  pm: {{}}\nbackend:\n  runner:\n    model: main\n    models:\n      providers: {{local: {{type: scripted}}}}\n      presets: {{main: {preset}}}\n"
            ),
        )
        .unwrap();
        let err = match Project::load(dir.path(), &ProcessEnv) {
            Ok(_) => panic!("{preset} should not load"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(error), "{preset}: {err}");
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("suzumio.yaml"),
        "name: c\ntask: t\nagents:\n  pm: {}\nbackend:\n  runner:\n    model: main\n    models:\n      providers: {local: {type: scripted}}\n      presets: {main: {provider: local, contextWindow: 32000, compactAt: 0.6}, old: {provider: local, contextLimit: 9000}, plain: {provider: local}}\n",
    )
    .unwrap();
    let project = Project::load(dir.path(), &ProcessEnv).unwrap_or_else(|e| panic!("{e}"));
    let preset = |id: &str| project.config.models.preset(id).unwrap().clone();
    assert_eq!((preset("main").context_window, preset("main").compact_at), (32_000, 0.6));
    assert_eq!(
        (preset("old").context_window, preset("old").compact_at),
        (9_000, 0.8),
        "contextLimit is the older name"
    );
    assert_eq!(preset("plain").context_window, 260_000);
}
