//! Streamed model calls end to end: a real `suzumio run` (process backend) whose coordinator talks
//! to a local OpenAI-compatible or Anthropic-style server that streams its answers in the real
//! wire formats, with small delays between frames (`support/model_stream.rs`). What a WebUI sees
//! on `GET /api/projects/:p/stream` — `activation.delta` frames, in order, before the turn they
//! belong to — adds up to the recorded turn; a tool call whose arguments came in pieces runs;
//! `stream: false` still works; a stream that goes quiet fails the activation with a clear error.
//! In a real browser (headless Chromium), the text shows on the agent's card and the
//! activation page while it is being written. And in-process: the deltas are coalesced, not one
//! event per piece.

#[path = "support/model_stream.rs"]
mod model_stream;
mod support;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use model_stream::{Reply, StreamServer, Turn};
use serde_json::{Value, json};
use support::Controller;

const P: &str = "/api/projects/streamy";
const KEY_ENV: &str = "STREAMY_TEST_KEY";
const GAP: Duration = Duration::from_millis(40);

#[derive(Clone, Copy, PartialEq, Debug)]
enum Wire {
    OpenAi,
    Anthropic,
}

impl Wire {
    fn frames(self, turn: &Turn) -> Vec<String> {
        match self {
            Wire::OpenAi => model_stream::openai_frames(turn),
            Wire::Anthropic => model_stream::anthropic_frames(turn),
        }
    }

    fn json(self, turn: &Turn) -> Value {
        match self {
            Wire::OpenAi => model_stream::openai_json(turn),
            Wire::Anthropic => model_stream::anthropic_json(turn),
        }
    }

    fn provider(self, url: &str, extra: &str) -> String {
        match self {
            Wire::OpenAi => format!("{{type: openai-compatible, baseURL: '{url}/v1'{extra}}}"),
            Wire::Anthropic => format!("{{type: anthropic, baseURL: '{url}', apiKeyEnv: {KEY_ENV}{extra}}}"),
        }
    }
}

/// A project whose coordinator `pm` uses the streaming server; `worker` is scripted and only
/// says "Noted." (so it wakes nobody).
fn project(provider: &str, preset_extra: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("suzumio-stream-").tempdir().unwrap();
    std::fs::write(
        dir.path().join("script.yaml"),
        "activations:\n  - agent: worker\n    repeat: true\n    steps:\n      - say: Noted.\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("suzumio.yaml"),
        format!(
            r#"name: streamy
task: Split the work.
tools:
  toolpacks: [core]
agents:
  pm: {{tools: [messages.send, coordination.wait_for_signal]}}
  worker: {{model: quiet, tools: [coordination.wait_for_signal]}}
backend:
  runner:
    model: main
    models:
      providers:
        llm: {provider}
        offline: {{type: scripted, script: ./script.yaml}}
      presets:
        main: {{provider: llm, model: test-model{preset_extra}}}
        quiet: {{provider: offline}}
"#
        ),
    )
    .unwrap();
    let started = support::suzumio(dir.path(), &["start", "."]);
    assert!(started.status.success(), "{}", support::text(&started.stderr));
    dir
}

fn client() -> reqwest::Client {
    suzumio::support::web_fetch::tls_provider();
    reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(60)).build().unwrap()
}

async fn get(c: &Controller, path: &str) -> Value {
    let response = client().get(c.url(path)).send().await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

/// One SSE frame: its `id:` (none for ephemeral frames) and the JSON of its `data:`.
#[derive(Debug)]
struct Frame {
    id: Option<String>,
    data: Value,
}

impl Frame {
    fn kind(&self) -> &str {
        self.data["type"].as_str().unwrap_or_default()
    }
}

/// Open the stream, then send the user's message to `pm`; collect frames until pm's activation
/// has ended.
async fn run_and_watch(c: &Controller) -> Vec<Frame> {
    let response =
        client().get(c.url(&format!("{P}/stream"))).header("Accept", "text/event-stream").send().await.unwrap();
    assert_eq!(response.status(), 200);
    // The stream is subscribed once the headers are in; the message comes after.
    let sent = client()
        .post(c.url(&format!("{P}/messages")))
        .json(&json!({"recipient": "pm", "body": "Start the work."}))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 201);
    let chunks = futures_util::stream::try_unfold(response, |mut r| async move {
        Ok::<_, reqwest::Error>(r.chunk().await?.map(|chunk| (chunk, r)))
    });
    let mut events = std::pin::pin!(chunks.eventsource());
    let mut frames = Vec::new();
    let read = async {
        while let Some(event) = events.next().await {
            let event = event.expect("a readable stream");
            let frame = Frame {
                id: (!event.id.is_empty() && event.id != frames_last_id(&frames)).then(|| event.id.clone()),
                data: serde_json::from_str(&event.data).expect("JSON data"),
            };
            let ended = ["activation.completed", "activation.failed"].contains(&frame.kind())
                && frame.data["data"]["agentId"] == "pm";
            frames.push(frame);
            if ended {
                return;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(40), read)
        .await
        .unwrap_or_else(|_| panic!("pm's activation did not end; stderr:\n{}", c.stderr()));
    frames
}

/// The decoder keeps the last `id:` for frames without one (as a browser does); a frame has its
/// own id only when it differs from the one before.
fn frames_last_id(frames: &[Frame]) -> String {
    frames.iter().rev().find_map(|f| f.id.clone()).unwrap_or_default()
}

/// pm's deltas grouped by model call (offset 0 starts one), checking that the offsets run on.
fn delta_texts(frames: &[Frame]) -> Vec<String> {
    let mut calls: Vec<String> = Vec::new();
    for f in frames.iter().filter(|f| f.kind() == "activation.delta") {
        let d = &f.data["data"];
        assert_eq!(f.data["ephemeral"], true, "{:?}", f.data);
        assert!(f.id.is_none() && f.data.get("id").is_none(), "an ephemeral frame has no id: {f:?}");
        if d["agentId"] != "pm" {
            continue;
        }
        let offset = d["offset"].as_u64().unwrap();
        if offset == 0 {
            calls.push(String::new());
        }
        let current = calls.last_mut().expect("a call's first delta has offset 0");
        assert_eq!(offset, current.chars().count() as u64, "deltas arrive in order, none lost: {current:?}");
        current.push_str(d["text"].as_str().unwrap());
    }
    calls
}

fn assistant_outputs(history: &Value) -> Vec<Value> {
    history["items"].as_array().unwrap().iter().filter(|h| h["kind"] == "assistant_output").cloned().collect()
}

fn first_turn() -> Turn {
    Turn::new(&["Splitting ", "the work ", "into ", "two ", "parts: ", "one ", "for the ", "worker."]).call(
        "call_1",
        "messages_send",
        &["{\"recip", "ient\": \"wor", "ker\", \"body\": \"Write", " part one.\"}"],
    )
}

fn second_turn() -> Turn {
    Turn::new(&["Waiting ", "for ", "the ", "worker."]).call(
        "call_2",
        "coordination_wait_for_signal",
        &["{\"reason\": ", "\"waiting for part one\"}"],
    )
}

async fn streamed_turns_reach_the_webui_and_equal_the_recorded_turn(wire: Wire) {
    let turns = [first_turn(), second_turn()];
    let server = StreamServer::start(turns.iter().map(|t| Reply::stream(wire.frames(t), GAP)).collect()).await;
    let dir = project(&wire.provider(&server.url, ""), "");
    let c = Controller::start_with_env(dir.path(), &[], &[(KEY_ENV, "sk-streamy-test")]);
    let frames = run_and_watch(&c).await;

    let ended = frames.last().unwrap();
    assert_eq!(ended.kind(), "activation.completed", "{:?}\nstderr:\n{}", ended.data, c.stderr());
    let texts = delta_texts(&frames);
    let expected: Vec<String> = turns.iter().map(Turn::full_text).collect();
    assert_eq!(texts, expected, "one run of deltas per model call, adding up to its text");
    let pm_deltas = frames.iter().filter(|f| f.kind() == "activation.delta" && f.data["data"]["agentId"] == "pm");
    assert!(pm_deltas.count() > 2, "the text arrived in several deltas, not at the end");

    // Each call's deltas come before the turn it belongs to is recorded.
    let recorded: Vec<usize> = frames
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            f.kind() == "history.appended"
                && f.data["data"]["kind"] == "assistant_output"
                && f.data["data"]["agentId"] == "pm"
        })
        .map(|(i, _)| i)
        .collect();
    let starts: Vec<usize> = frames
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            f.kind() == "activation.delta" && f.data["data"]["offset"] == 0 && f.data["data"]["agentId"] == "pm"
        })
        .map(|(i, _)| i)
        .collect();
    assert_eq!(recorded.len(), 2, "two recorded turns");
    assert!(starts[0] < recorded[0] && recorded[0] < starts[1] && starts[1] < recorded[1], "{starts:?} {recorded:?}");
    let last_delta = frames.iter().rposition(|f| f.kind() == "activation.delta" && f.data["data"]["agentId"] == "pm");
    assert!(last_delta.unwrap() < recorded[1]);

    // The recorded turns and the activation's text are the streamed text; the tool call whose
    // arguments came in pieces ran.
    let history = get(&c, &format!("{P}/agents/pm/history")).await;
    let outputs = assistant_outputs(&history);
    let recorded_texts: Vec<&str> = outputs.iter().map(|o| o["content"]["text"].as_str().unwrap()).collect();
    assert_eq!(recorded_texts, expected.iter().map(String::as_str).collect::<Vec<_>>());
    let calls = outputs[0]["content"]["toolCalls"].as_array().cloned().unwrap_or_default();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        (&calls[0]["name"], &calls[0]["arguments"]),
        (&json!("messages_send"), &json!({"recipient": "worker", "body": "Write part one."}))
    );
    let usage = &outputs[0]["content"]["usage"];
    assert_eq!((&usage["inputTokens"], &usage["outputTokens"]), (&json!(21), &json!(8)), "{usage}");
    let activation_id = ended.data["data"]["activationId"].as_str().unwrap();
    let activation = get(&c, &format!("{P}/activations/{activation_id}")).await;
    assert_eq!(activation["text"], expected[1], "{activation}");
    let messages = get(&c, &format!("{P}/messages?limit=50")).await;
    let to_worker: Vec<&Value> = messages["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["sender"] == "pm" && m["recipient"] == "worker")
        .collect();
    assert_eq!(to_worker.len(), 1, "{messages}");
    assert_eq!(to_worker[0]["body"], "Write part one.");

    // Deltas are not stored: the timeline has none.
    let events = get(&c, &format!("{P}/events?limit=500")).await;
    assert!(events["items"].as_array().unwrap().iter().all(|e| e["type"] != "activation.delta"), "{events}");
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|r| r["stream"] == true), "{sent:?}");
    c.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_compatible_turns_stream_to_the_webui() {
    streamed_turns_reach_the_webui_and_equal_the_recorded_turn(Wire::OpenAi).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_turns_stream_to_the_webui() {
    streamed_turns_reach_the_webui_and_equal_the_recorded_turn(Wire::Anthropic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preset_with_stream_false_makes_plain_calls() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let turns = [first_turn(), second_turn()];
        let server = StreamServer::start(turns.iter().map(|t| Reply::Json(wire.json(t))).collect()).await;
        let dir = project(&wire.provider(&server.url, ""), ", stream: false");
        let c = Controller::start_with_env(dir.path(), &[], &[(KEY_ENV, "sk-streamy-test")]);
        let frames = run_and_watch(&c).await;
        assert_eq!(frames.last().unwrap().kind(), "activation.completed", "{wire:?}: {}", c.stderr());
        assert!(delta_texts(&frames).is_empty(), "{wire:?}: nothing streamed");
        let history = get(&c, &format!("{P}/agents/pm/history")).await;
        let texts: Vec<Value> = assistant_outputs(&history).iter().map(|o| o["content"]["text"].clone()).collect();
        assert_eq!(texts, [json!(turns[0].full_text()), json!(turns[1].full_text())], "{wire:?}");
        assert!(server.requests().iter().all(|r| r.get("stream").is_none()), "{wire:?}");
        c.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_goes_quiet_fails_the_activation_with_a_clear_error() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let replies = vec![Reply::stalling(wire.frames(&first_turn()), 4, Duration::from_secs(20))];
        let server = StreamServer::start(replies).await;
        let dir = project(&wire.provider(&server.url, ", chunkTimeoutMs: 500"), "");
        let c = Controller::start_with_env(dir.path(), &[], &[(KEY_ENV, "sk-streamy-test")]);
        // Had the chunk timeout not fired, the stream would have gone on after its 20 s pause
        // and the activation would have completed.
        let frames = run_and_watch(&c).await;
        let ended = frames.last().unwrap();
        assert_eq!(ended.kind(), "activation.failed", "{wire:?}");
        let error = ended.data["data"]["error"].as_str().unwrap();
        assert!(
            error.contains("main: provider `llm`")
                && error.contains(
                    "the streamed answer stalled: nothing arrived for 500 ms (raise the provider's chunkTimeoutMs)"
                ),
            "{wire:?}: {error}"
        );
        // What had arrived was shown live; nothing was recorded for the broken call.
        assert!(!delta_texts(&frames).is_empty(), "{wire:?}");
        let history = get(&c, &format!("{P}/agents/pm/history")).await;
        assert!(assistant_outputs(&history).is_empty(), "{wire:?}: {history}");
        c.stop();
    }
}

/// In process: a fast stream of many small pieces becomes a few coalesced delta events.
#[tokio::test]
async fn deltas_are_coalesced() {
    use suzumio::activation::live;
    use suzumio::activation::providers::{ProviderPool, RetryPolicy, resolve_presets};
    use suzumio::clock::SystemClock;
    use suzumio::config::load::ProcessEnv;
    use suzumio::project::Project;
    use suzumio::store::{Event, Store};

    let pieces: Vec<String> = (0..400).map(|i| format!("w{i} ")).collect();
    let turn = Turn { text: pieces.clone(), ..Turn::new(&[]) };
    let server = StreamServer::start(vec![Reply::stream(model_stream::openai_frames(&turn), Duration::ZERO)]).await;
    let dir = project(&Wire::OpenAi.provider(&server.url, ""), "");
    let project = Project::load(dir.path(), &ProcessEnv).unwrap_or_else(|e| panic!("{e}"));
    let store = Store::open(&project.config, Arc::new(SystemClock)).unwrap();
    let mut live_events = store.subscribe_ephemeral();
    let model = resolve_presets(&project.config.models, "main").unwrap().remove(0);
    let provider = ProviderPool::new(|_| None, RetryPolicy::none()).get(&model).unwrap();
    let request = model.request("pm", "act_1", Vec::new(), Vec::new());
    let response = live::call_model(&store, "pm", "act_1", &model, &*provider, request).await.expect("answers");
    assert_eq!(response.text, pieces.concat());
    let mut published = Vec::new();
    while let Ok(event) = live_events.try_recv() {
        published.push(event);
    }
    let mut text = String::new();
    for event in &published {
        let Event::ActivationDelta { activation_id, agent_id, offset, text: piece } = event else {
            panic!("{event:?}");
        };
        assert_eq!((activation_id.as_str(), agent_id.as_str()), ("act_1", "pm"));
        assert_eq!(*offset, text.chars().count() as u64);
        text.push_str(piece);
    }
    assert_eq!(text, response.text);
    assert!(
        published.len() < pieces.len() / 10,
        "{} events for {} pieces: not coalesced",
        published.len(),
        pieces.len()
    );
    assert!(store.events_after(0, 1000).unwrap().iter().all(|e| !matches!(e.event, Event::ActivationDelta { .. })));
}

/// The WebUI shows the text while the model is still writing it: on pm's card in the overview,
/// then on the activation's page; once the turn is recorded the live text goes away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webui_shows_the_text_while_it_streams() {
    // The first call stops for a while after "… two parts: ", so the page can be looked at.
    let replies = vec![
        Reply::stalling(Wire::OpenAi.frames(&first_turn()), 6, Duration::from_secs(8)),
        Reply::stream(Wire::OpenAi.frames(&second_turn()), GAP),
    ];
    let server = StreamServer::start(replies).await;
    let dir = project(&Wire::OpenAi.provider(&server.url, ""), "");
    let c = Controller::start(dir.path(), &[]);
    let b = webdriver::Browser::start().await.unwrap_or_else(|e| panic!("this test needs Chromium: {e}"));
    let outcome = webui_scenario(&b, &c).await;
    if let Err(error) = outcome {
        let html = b.source().await.unwrap_or_default();
        panic!("{error}\npage:\n{html}\ncontroller log:\n{}", c.stderr());
    }
}

async fn webui_scenario(b: &webdriver::Browser, c: &Controller) -> webdriver::Result<()> {
    b.goto(&c.url("/#/overview")).await?;
    b.find(r#"[data-live-agent="pm"]"#).await?;
    b.wait_until("document.querySelector('#conn.conn-live')").await?;
    let sent = client()
        .post(c.url(&format!("{P}/messages")))
        .json(&json!({"recipient": "pm", "body": "Start the work."}))
        .send()
        .await
        .expect("an answer");
    assert_eq!(sent.status(), 201);
    b.wait_for_text(r#"[data-live-agent="pm"]"#, "Splitting the work into two parts:").await?;

    let activations = get(c, &format!("{P}/activations?agent=pm")).await;
    let id = activations["items"][0]["id"].as_str().expect("pm's activation").to_string();
    b.execute(&format!("location.hash = {};", Value::from(format!("#/activations/{id}"))), vec![]).await?;
    b.wait_for_text("pre.live-text", "Splitting the work into two parts:").await?;
    let turn_text = first_turn().full_text();
    assert!(
        !get(c, &format!("{P}/agents/pm/history")).await.to_string().contains(&turn_text),
        "the text was shown before the turn was recorded"
    );
    // The stream goes on; once the activation has ended, no live text is left on the page.
    let mut status = Value::Null;
    for _ in 0..100 {
        status = get(c, &format!("{P}/activations/{id}")).await["status"].clone();
        if status != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(status, "completed");
    b.wait_until("document.querySelector('section.live').hidden").await?;
    b.execute("location.hash = '#/overview';", vec![]).await?;
    b.find(r#"[data-live-agent="pm"]"#).await?;
    b.wait_until(r#"document.querySelector('[data-live-agent="pm"]').hidden"#).await?;
    let history = get(c, &format!("{P}/agents/pm/history")).await;
    let texts: Vec<Value> = assistant_outputs(&history).iter().map(|o| o["content"]["text"].clone()).collect();
    assert_eq!(texts, [json!(turn_text), json!(second_turn().full_text())]);
    Ok(())
}
