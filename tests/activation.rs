//! The activation loop end to end in the controller: scheduler → activation → scripted model →
//! tools → store, with no container (controller-side tools only; runner-side tools get a clear
//! error from `NoRunner`). Real SQLite, real JS packs, a real HTTP server for web.fetch.

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use suzumio::activation::providers::{ProviderPool, RetryPolicy};
use suzumio::activation::{Activations, NoRunner};
use suzumio::clock::SystemClock;
use suzumio::config::load::ProcessEnv;
use suzumio::project::Project;
use suzumio::scheduler::Scheduler;
use suzumio::store::{MessageQuery, ProjectStatus, SendMessage, StateFiles, Store};
use suzumio::support::ToolHost;

struct World {
    dir: tempfile::TempDir,
    host: Arc<ToolHost>,
    scheduler: Arc<Scheduler>,
    activations: Arc<Activations>,
}

const SCRIPTED_MODELS: &str =
    "      providers: {local: {type: scripted, script: ./script.yaml}}\n      presets: {main: {provider: local}}\n";

fn world(script: &str, extra: &str) -> World {
    world_with_models(script, extra, SCRIPTED_MODELS)
}

fn world_with_models(script: &str, extra: &str, models: &str) -> World {
    world_with(script, extra, models, "")
}

/// A project where `web.fetch` may reach 127.0.0.1 (the tests' slow server).
fn world_fetching_locally(script: &str) -> World {
    world_with(script, "", SCRIPTED_MODELS, "  webFetch: {allowPrivateAddresses: true}\n")
}

fn world_with(script: &str, extra: &str, models: &str, tools_extra: &str) -> World {
    let tmp = tempfile::Builder::new().prefix("suzumio-act-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    std::fs::write(dir.join("script.yaml"), script).unwrap();
    std::fs::write(
        dir.join("suzumio.yaml"),
        format!(
            r#"name: act
task: Write a two-line report.
tools:
  toolpacks: [core, shell, web]
{tools_extra}agents:
  pm: {{tools: [messages.send, coordination.wait_for_signal, completion.submit, web.fetch]}}
  worker: {{tools: [messages.send, coordination.wait_for_signal, file.write]}}
backend:
  runner:
    model: main
    models:
{models}{extra}"#
        ),
    )
    .unwrap();
    let project = Arc::new(Project::load(&dir, &ProcessEnv).unwrap_or_else(|e| panic!("{e}")));
    let store = Store::open(&project.config, Arc::new(SystemClock)).unwrap();
    store.set_project_status(ProjectStatus::Running).unwrap();
    let host = ToolHost::new(project, store, StateFiles::new(&dir));
    // No retry delays: a dead endpoint fails at once.
    let providers = ProviderPool::new(|name| std::env::var(name).ok(), RetryPolicy::none());
    let activations =
        Activations::with_providers(host.clone(), Arc::new(NoRunner("no container in this test".into())), providers);
    let scheduler = Arc::new(Scheduler::new(host.clone(), activations.clone()));
    World { dir: tmp, host, scheduler, activations }
}

impl World {
    /// Tick until nothing runs and nothing is pending (or give up after a while).
    async fn settle(&self) {
        let started = std::time::Instant::now();
        loop {
            let report = self.scheduler.tick().await;
            assert!(report.errors.is_empty(), "{:?}", report.errors);
            tokio::time::sleep(Duration::from_millis(10)).await;
            let idle = self.activations.running() == 0 && !self.host.store.has_pending_signals(false).unwrap();
            if idle && report.started.is_empty() {
                return;
            }
            assert!(started.elapsed() < support::PATIENCE, "the project did not settle");
        }
    }

    fn user_says(&self, to: &str, body: &str) {
        self.host
            .store
            .send_message(SendMessage {
                sender: "user".into(),
                recipient: Some(to.into()),
                body: body.into(),
                ..Default::default()
            })
            .unwrap();
    }
}

const SCRIPT: &str = r##"
activations:
  - agent: pm
    when: "Start"
    steps:
      - say: "Delegating."
        call: [{tool: messages.send, input: {recipient: worker, body: "Write line one.", priority: P2}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "waiting for the worker"}}]
  - agent: worker
    steps:
      - call: [{tool: messages.send, input: {}}]
      - call: [{tool: messages.send, input: {recipient: pm, body: "Line one is: hello."}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "done"}}]
  - agent: pm
    when: "Line one"
    steps:
      - call: [{tool: completion.submit, input: {report: "# Report\nhello."}}]
"##;

#[tokio::test]
async fn a_project_runs_from_a_user_message_to_a_submitted_report() {
    let w = world(SCRIPT, "");
    w.user_says("pm", "Start the report.");
    w.settle().await;
    let store = &w.host.store;
    assert_eq!(store.project().unwrap().status.as_str(), "submitted");
    assert_eq!(std::fs::read_to_string(w.dir.path().join("final-report.md")).unwrap(), "# Report\nhello.\n");
    let q =
        MessageQuery { participant_a: Some("worker".into()), participant_b: Some("pm".into()), ..Default::default() };
    let bodies: Vec<String> = store.list_messages(&q).unwrap().into_iter().map(|m| m.body).collect();
    assert!(
        bodies.contains(&"Write line one.".to_string()) && bodies.contains(&"Line one is: hello.".to_string()),
        "{bodies:?}"
    );

    // The worker's first call had no body: the schema refused it before anything ran, the model
    // was told which field, and the refused call is on record as failed.
    let history = store.history("worker", 100).unwrap();
    let refused =
        history.iter().find(|h| h.kind() == "tool_result" && h.content()["isError"] == true).expect("an error result");
    let text = refused.content()["content"].as_str().unwrap().to_string();
    assert!(text.starts_with("Invalid input for messages.send:") && text.contains("body"), "{text}");
    let status = tool_status(&w.host);
    let send = status.iter().find(|t| t["tool"] == "messages.send").unwrap();
    assert_eq!((send["callCount"].clone(), send["failedCount"].clone()), (json!(3), json!(1)), "{send}");
    let submit = status.iter().find(|t| t["tool"] == "completion.submit").unwrap();
    assert_eq!(submit["completedCount"], 1);
    // The first prompt of the worker is its signals only: the task travels in the system prompt.
    let first_prompt = &history.iter().find(|h| h.kind() == "activation_prompt").unwrap().content()["text"];
    assert!(first_prompt.as_str().unwrap().starts_with("# New Signals"), "{first_prompt}");
    assert!(!first_prompt.as_str().unwrap().contains("# Project Task"), "{first_prompt}");
}

#[tokio::test]
async fn runner_side_tools_without_a_runner_fail_the_call_not_the_activation() {
    let script = r#"
activations:
  - agent: worker
    steps:
      - call: [{tool: file.write, input: {path: notes.md, content: x}}]
      - call: [{tool: messages.send, input: {recipient: pm, body: "could not write"}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "blocked"}}]
"#;
    let w = world(script, "");
    w.user_says("worker", "Write notes.");
    w.settle().await;
    let calls = tool_status(&w.host);
    let write = calls.iter().find(|t| t["tool"] == "file.write").unwrap();
    assert_eq!(
        (write["failedCount"].clone(), write["lastError"].as_str().unwrap().contains("not available")),
        (json!(1), true)
    );
    let act = w.host.store.latest_activation("worker", None).unwrap().unwrap();
    assert_eq!(act.status.as_str(), "completed");
}

#[tokio::test]
async fn max_tool_calls_fails_the_activation() {
    let script = r#"
activations:
  - agent: pm
    steps:
      - call:
          - {tool: messages.send, input: {recipient: user, body: one}}
          - {tool: messages.send, input: {recipient: user, body: two}}
          - {tool: messages.send, input: {recipient: user, body: three}}
"#;
    let w = world(script, "    maxToolCalls: 2\n");
    w.user_says("pm", "Go.");
    w.settle().await;
    let act = w.host.store.latest_activation("pm", None).unwrap().unwrap();
    assert_eq!((act.status.as_str(), act.error.as_deref()), ("failed", Some("Exceeded maxToolCalls: 2")));
    assert_eq!(w.host.store.agent("pm").unwrap().unwrap().status.as_str(), "failed");
}

#[tokio::test]
async fn a_failing_model_falls_back_to_the_next_in_the_list() {
    let script = r#"
activations:
  - agent: pm
    steps:
      - call: [{tool: messages.send, input: {recipient: user, body: "from the fallback"}}]
"#;
    let models = "      providers:\n        local: {type: scripted, script: ./script.yaml}\n        dead: {type: openai-compatible, baseURL: 'http://127.0.0.1:9/v1', timeoutMs: 2000}\n      presets:\n        first: {provider: dead, model: gpt-x}\n        second: {provider: local}\n        main: {model-list: [first, second]}\n";
    let w = world_with_models(script, "", models);
    w.user_says("pm", "Go.");
    w.settle().await;
    let q = MessageQuery { participant_a: Some("pm".into()), participant_b: Some("user".into()), ..Default::default() };
    let sent = w.host.store.list_messages(&q).unwrap();
    assert!(sent.iter().any(|m| m.body == "from the fallback"), "{sent:?}");
}

/// A tiny HTTP server on 127.0.0.1 that answers only once the returned gate is opened (for a
/// web.fetch that is in flight for as long as the test needs).
async fn gated_server() -> (String, Arc<tokio::sync::Notify>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let gate = Arc::new(tokio::sync::Notify::new());
    let opened = gate.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let opened = opened.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = [0u8; 1024];
                let _ = socket.read(&mut buf).await;
                opened.notified().await;
                let _ = socket
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Type: text/plain\r\n\r\nslow")
                    .await;
            });
        }
    });
    (format!("http://{addr}/"), gate)
}

/// Until the activation's web.fetch is in flight.
async fn fetch_in_flight(host: &ToolHost) {
    support::wait_for_async("the web.fetch call in flight", async || {
        tool_status(host).iter().any(|t| t["tool"] == "web.fetch" && t["runningCount"] == 1).then_some(())
    })
    .await
}

/// P0 cancels a running activation in the middle of a tool call; the next activation carries it.
#[tokio::test]
async fn p0_interrupts_a_running_activation() {
    // The fetch never answers: only an interruption ends the activation.
    let (url, _never_opened) = gated_server().await;
    let script = format!(
        r#"
activations:
  - agent: pm
    when: "Fetch"
    steps:
      - call: [{{tool: web.fetch, input: {{url: "{url}"}}}}]
  - agent: pm
    when: "Stop"
    steps:
      - call: [{{tool: messages.send, input: {{recipient: user, body: "stopped as asked"}}}}]
"#
    );
    let w = world_fetching_locally(&script);
    w.user_says("pm", "Fetch the slow page.");
    w.scheduler.tick().await;
    let first = w.host.store.latest_activation("pm", None).unwrap().unwrap();
    fetch_in_flight(&w.host).await;
    w.host
        .store
        .send_message(SendMessage {
            sender: "user".into(),
            recipient: Some("pm".into()),
            priority: Some("P0".into()),
            body: "Stop now.".into(),
            ..Default::default()
        })
        .unwrap();
    w.settle().await;
    let fetch = w.host.store.activation_tool_calls(&first.id).unwrap();
    let fetch = fetch.iter().find(|c| c.tool == "web.fetch").expect("the fetch call is recorded");
    assert_ne!(fetch.status.as_str(), "completed", "the P0 did not wait for the fetch: {fetch:?}");
    let cancelled = w.host.store.activation(&first.id).unwrap().unwrap();
    assert_eq!(cancelled.status.as_str(), "cancelled");
    assert!(cancelled.error.as_deref().unwrap_or("").starts_with("Interrupted by P0 signal sig_"));
    let q = MessageQuery { participant_a: Some("pm".into()), participant_b: Some("user".into()), ..Default::default() };
    assert!(w.host.store.list_messages(&q).unwrap().iter().any(|m| m.body == "stopped as asked"));
}

/// A fake OpenAI-compatible endpoint on 127.0.0.1 (a stand-in for the model provider): it
/// answers each call with the next canned response and records every request body.
async fn fake_openai(responses: Vec<serde_json::Value>) -> (String, Arc<std::sync::Mutex<Vec<serde_json::Value>>>) {
    use axum::routing::post;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let queue = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::from(responses)));
    let (seen_in, queue_in) = (seen.clone(), queue.clone());
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |body: axum::Json<serde_json::Value>| {
            let (seen, queue) = (seen_in.clone(), queue_in.clone());
            async move {
                seen.lock().unwrap().push(body.0);
                let next =
                    queue.lock().unwrap().pop_front().unwrap_or_else(
                        || json!({"choices": [{"message": {"content": "done"}, "finish_reason": "stop"}]}),
                    );
                axum::Json(next)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/v1"), seen)
}

/// `GET tool-status` as the API serves it.
fn tool_status(host: &ToolHost) -> Vec<serde_json::Value> {
    let views = suzumio::web::views::tool_status(host).unwrap();
    views.iter().map(|t| serde_json::to_value(t).unwrap()).collect()
}

fn tool_call(id: &str, name: &str, args: serde_json::Value) -> serde_json::Value {
    json!({"choices": [{"message": {"content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}}]}, "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 10, "completion_tokens": 5}})
}

/// The model makes an invalid call, gets the schema error with the failing field, and recovers.
#[tokio::test]
async fn an_openai_compatible_model_recovers_from_a_schema_error() {
    let (base, seen) = fake_openai(vec![
        tool_call("c1", "messages_send", json!({"recipient": "user"})),
        tool_call("c2", "messages_send", json!({"recipient": "user", "body": "fixed"})),
        tool_call("c3", "coordination_wait_for_signal", json!({"reason": "done"})),
    ])
    .await;
    let models = format!(
        "      providers:\n        fake: {{type: openai-compatible, baseURL: '{base}', apiKey: sk-test-SECRET-42}}\n      presets:\n        main: {{provider: fake, model: fake-model}}\n"
    );
    let w = world_with_models("activations: []\n", "", &models);
    w.user_says("pm", "Say something.");
    w.settle().await;
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 3, "three model calls");
    let tools: Vec<&str> =
        requests[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert!(tools.contains(&"messages_send") && tools.contains(&"web_fetch"), "model-safe names: {tools:?}");
    assert!(!requests[0].to_string().contains("presentation"), "presentation is never sent to a model");
    let error =
        requests[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").expect("a tool result");
    let text = error["content"].as_str().unwrap();
    assert!(text.starts_with("Invalid input for messages.send:") && text.contains("body"), "{text}");
    let q = MessageQuery { participant_a: Some("pm".into()), participant_b: Some("user".into()), ..Default::default() };
    assert!(w.host.store.list_messages(&q).unwrap().iter().any(|m| m.body == "fixed"));
    let events = w.host.store.events_after(0, 1000).unwrap();
    assert!(!events.iter().any(|e| e.data().to_string().contains("sk-test-SECRET-42")), "the key is in no event");
    let act = w.host.store.latest_activation("pm", None).unwrap().unwrap();
    assert_eq!(act.status.as_str(), "completed");
    let usage = act.usage.expect("usage recorded");
    assert_eq!((usage.model_calls, usage.input_tokens, usage.output_tokens), (3, 30, 15));
}

/// A P1 message reaches a running activation at its next tool boundary, appended to the result.
#[tokio::test]
async fn p1_arrives_at_the_tool_boundary() {
    let (url, gate) = gated_server().await;
    let script = format!(
        r#"
activations:
  - agent: pm
    when: "Fetch"
    steps:
      - call: [{{tool: web.fetch, input: {{url: "{url}"}}}}]
      - call: [{{tool: coordination.wait_for_signal, input: {{reason: "done"}}}}]
"#
    );
    let w = world_fetching_locally(&script);
    w.user_says("pm", "Fetch the page.");
    w.scheduler.tick().await;
    fetch_in_flight(&w.host).await;
    let urgent = w
        .host
        .store
        .send_message(SendMessage {
            sender: "user".into(),
            recipient: Some("pm".into()),
            priority: Some("P1".into()),
            body: "Also check the footer.".into(),
            ..Default::default()
        })
        .unwrap();
    // The message is recorded while the fetch is still in flight; now the fetch answers.
    gate.notify_one();
    w.settle().await;
    let history = w.host.store.history("pm", 100).unwrap();
    let result = history.iter().find(|h| h.kind() == "tool_result").unwrap();
    let content = result.content()["content"].as_str().unwrap().to_string();
    assert!(content.starts_with("slow\n\n# New Signals"), "{content}");
    assert!(content.contains("Also check the footer."), "{content}");
    let signal = w.host.store.signal(&urgent.signal_ids[0]).unwrap().unwrap();
    let first = w.host.store.list_activations(Some("pm"), None, None).unwrap().last().unwrap().id.clone();
    assert_eq!(signal.delivered_activation_id, Some(first), "delivered to the running activation, not a new one");
}

/// A script's `summary` answers the loop's compaction requests without playing a step: with a
/// small context window the history is compacted again and again while every activation still
/// plays its own step, and later activations replay from the summary.
#[tokio::test]
async fn a_scripted_summary_answers_compactions_without_playing_steps() {
    let script = r###"
summary: "## Goal\nAnswer every round."
activations:
  - agent: pm
    repeat: true
    steps:
      - call: [{tool: messages.send, input: {recipient: user, body: "answered in {{activationId}}"}}]
"###;
    let models = "      providers: {local: {type: scripted, script: ./script.yaml}}\n      presets: {main: {provider: local, contextWindow: 6000, compactAt: 0.5}}\n";
    let w = world_with_models(script, "", models);
    for round in 0..30 {
        w.user_says("pm", &format!("Round {round}: {}", "how far are you? ".repeat(20)));
        w.settle().await;
    }
    let history = w.host.store.history("pm", 10_000).unwrap();
    let summaries: Vec<_> = history.iter().filter(|h| h.kind() == "history_compaction").collect();
    assert!(summaries.len() >= 2, "the small window was compacted more than once: {}", summaries.len());
    for c in &summaries {
        assert_eq!(c.content()["summary"], "## Goal\nAnswer every round.", "{:?}", c.content());
        assert!(c.content()["fallback"].is_null(), "{:?}", c.content());
    }
    // Every activation sent its own answer: no step went to a summary request.
    let activations = w.host.store.list_activations(Some("pm"), None, None).unwrap();
    assert_eq!(activations.len(), 30);
    let q = MessageQuery {
        participant_a: Some("pm".into()),
        participant_b: Some("user".into()),
        limit: Some(500),
        ..Default::default()
    };
    let answers: std::collections::HashSet<String> =
        w.host.store.list_messages(&q).unwrap().into_iter().filter(|m| m.sender == "pm").map(|m| m.body).collect();
    for a in &activations {
        assert_eq!(a.status.as_str(), "completed", "{:?}", a.error);
        assert!(answers.contains(&format!("answered in {}", a.id)), "{} did not answer: {answers:?}", a.id);
    }
}

/// A context overflow compacts the older history into a summary written by the model, the call
/// is retried, and later activations replay from the summary (reference §6.6).
#[tokio::test]
async fn a_context_overflow_compacts_history_and_retries() {
    let script = r###"
activations:
  - agent: pm
    when: "First"
    steps:
      - call: [{tool: messages.send, input: {recipient: user, body: "one"}}]
      - call: [{tool: messages.send, input: {recipient: user, body: "two"}}]
      - call: [{tool: messages.send, input: {recipient: user, body: "three"}}]
      - call: [{tool: messages.send, input: {recipient: user, body: "four"}}]
      - call: [{tool: messages.send, input: {recipient: user, body: "five"}}]
      - call: [{tool: messages.send, input: {recipient: user, body: "six"}}]
      - call: [{tool: messages.send, input: {recipient: user, body: "seven"}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "done"}}]
  - agent: pm
    when: "Second"
    steps:
      - error: "prompt is too long: 300000 tokens > 200000 maximum"
      - say: "## Goal\nSend seven messages, then one more."
      - call: [{tool: messages.send, input: {recipient: user, body: "after compaction"}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "done"}}]
"###;
    let w = world(script, "");
    w.user_says("pm", "First round.");
    w.settle().await;
    w.user_says("pm", "Second round.");
    w.settle().await;
    let history = w.host.store.history("pm", 500).unwrap();
    let compaction = history.iter().find(|h| h.kind() == "history_compaction").expect("a compaction was recorded");
    assert_eq!(compaction.content()["summary"], "## Goal\nSend seven messages, then one more.");
    assert!(compaction.content()["archivedMessages"].as_u64().unwrap() > 0);
    assert_eq!(w.host.store.project_stats().unwrap().history_compactions, 1);
    let q = MessageQuery { participant_a: Some("pm".into()), participant_b: Some("user".into()), ..Default::default() };
    assert!(w.host.store.list_messages(&q).unwrap().iter().any(|m| m.body == "after compaction"));
    let act = w.host.store.latest_activation("pm", None).unwrap().unwrap();
    assert_eq!(act.status.as_str(), "completed", "{:?}", act.error);

    // The API shows the activation's context and the archive the compaction replaced.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/api/projects/act", listener.local_addr().unwrap());
    let router = suzumio::web::router(w.host.clone(), None);
    tokio::spawn(async move { axum::serve(listener, router).await });
    suzumio::support::web_fetch::tls_provider();
    let get =
        |path: String| async move { reqwest::get(path).await.unwrap().json::<serde_json::Value>().await.unwrap() };
    let context = get(format!("{base}/activations/{}/context", act.id)).await;
    assert!(context["activationPrompt"].as_str().unwrap().contains("Second round."));
    let kinds: Vec<&str> =
        context["context"]["messages"].as_array().unwrap().iter().map(|m| m["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"activation_prompt"), "{kinds:?}");
    assert!(kinds.contains(&"history_compaction") && kinds.contains(&"tool_result"), "{kinds:?}");
    let archive = get(format!("{base}/agents/pm/history-archive/{}", compaction.id)).await;
    assert_eq!(archive["compaction"]["id"], json!(compaction.id));
    assert!(archive["archive"].as_array().unwrap().len() > 10, "the first round's rows");
}
