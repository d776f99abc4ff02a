//! The WebUI's "what happened" views against a real `suzumio run` (process backend) in headless
//! Chromium, and the API routes behind them:
//!
//! - an activation's timeline grows while the activation runs: its coordinator talks to a local
//!   streaming model server (`support/model_stream.rs`) whose answers pause, so the page is
//!   looked at mid-activation; a P1 message sent then arrives at a tool boundary and shows
//!   between the calls; `GET activations/{id}/timeline` and `GET message-graph` as golden files;
//! - the Overview's activity feed and message graph (its counts checked against the messages
//!   the store lists), a failed agent's card with its reason, the history view's real tool
//!   names, a pack panel that refreshes when an agent calls that pack's tool, and a required
//!   field checked before anything is sent (and the server's own 400).

#[path = "support/model_stream.rs"]
mod model_stream;
mod support;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use model_stream::{Reply, StreamServer, Turn};
use serde_json::{Value, json};
use support::{Controller, repo_root};
use webdriver::{Browser, arg};

const P: &str = "/api/projects/team";

fn client() -> reqwest::Client {
    suzumio::support::web_fetch::tls_provider();
    reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30)).build().unwrap()
}

async fn get(c: &Controller, path: &str) -> Value {
    let response = client().get(c.url(path)).send().await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

async fn post(c: &Controller, path: &str, body: Value) -> (u16, Value) {
    let response = client().post(c.url(path)).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn say(c: &Controller, to: &str, body: &str, priority: &str) {
    let (status, sent) =
        post(c, &format!("{P}/messages"), json!({"recipient": to, "body": body, "priority": priority})).await;
    assert_eq!(status, 201, "{sent}");
}

async fn browser() -> Browser {
    Browser::start().await.unwrap_or_else(|e| panic!("the browser tests need Chromium: {e}"))
}

/// A JavaScript string literal.
fn js(text: &str) -> String {
    Value::from(text).to_string()
}

/// The project `team` in a fresh directory, started: `pm` on the model server at `model_url`
/// (priced, so turns have a cost) or scripted like the others.
fn project(model_url: Option<&str>, script: &str) -> tempfile::TempDir {
    let (pm_model, providers, presets) = match model_url {
        Some(url) => (
            "streamed",
            format!("        llm: {{type: openai-compatible, baseURL: '{url}/v1'}}\n"),
            "        streamed: {provider: llm, model: test-model, inputPerMTok: 2, outputPerMTok: 10}\n",
        ),
        None => ("scripted", String::new(), ""),
    };
    let dir = tempfile::Builder::new().prefix("suzumio-webui-").tempdir().unwrap();
    std::fs::write(dir.path().join("script.yaml"), script).unwrap();
    let scheduler = repo_root().join("toolpacks/scheduler");
    std::fs::write(
        dir.path().join("suzumio.yaml"),
        format!(
            r#"name: team
task: Keep the team in sync.
tools:
  toolpacks:
    - core
    - {{path: '{}', id: scheduler}}
agents:
  pm: {{model: {pm_model}, tools: [messages.send, coordination.wait_for_signal, schedule.*]}}
  worker: {{tools: [messages.send, coordination.wait_for_signal, file.write]}}
  broken: {{tools: [coordination.wait_for_signal]}}
backend:
  runner:
    model: scripted
    models:
      providers:
        offline: {{type: scripted, script: ./script.yaml}}
{providers}      presets:
        scripted: {{provider: offline}}
{presets}"#,
            scheduler.display()
        ),
    )
    .unwrap();
    let started = support::suzumio(dir.path(), &["start", "."]);
    assert!(started.status.success(), "{}", support::text(&started.stderr));
    dir
}

/// Save what the browser showed and panic with the scenario's error and the controller's log.
async fn check(name: &str, b: &Browser, c: &Controller, outcome: webdriver::Result<()>) {
    let Err(error) = outcome else { return };
    let dir = repo_root().join("target/browser-artifacts");
    let _ = std::fs::create_dir_all(&dir);
    if let Ok(png) = b.screenshot().await {
        let _ = std::fs::write(dir.join(format!("{name}-failure.png")), png);
    }
    if let Ok(html) = b.source().await {
        let _ = std::fs::write(dir.join(format!("{name}-failure.html")), html);
    }
    panic!("{error}\n(page saved in {}/{name}-failure.*)\ncontroller log:\n{}", dir.display(), c.stderr());
}

/// Ids, times and durations replaced by placeholders, and the prompt's text by its kind, so a
/// golden file holds the shape and the content that is the same on every run.
fn normalized(value: &Value) -> Value {
    fn walk(key: &str, v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let prompt = map.get("kind") == Some(&json!("prompt"));
                Value::Object(
                    map.iter()
                        .map(|(k, v)| {
                            let v = if prompt && k == "text" { json!("<prompt>") } else { walk(k, v) };
                            (k.clone(), v)
                        })
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(|v| walk(key, v)).collect()),
            Value::Number(_) if key == "durationMs" => json!("<ms>"),
            Value::String(_) if key == "at" || key.ends_with("At") || key == "since" => json!("<time>"),
            Value::String(s) => json!(without_ids(s)),
            other => other.clone(),
        }
    }
    walk("", value)
}

/// `text` with every id (`act_`, `tc_`, … and 32 hex digits) replaced by `<act>`, `<tc>`, ….
fn without_ids(text: &str) -> String {
    const PREFIXES: [&str; 6] = ["act", "tc", "sig", "msg", "his", "sch"];
    let mut out = String::new();
    let mut rest = text;
    'scan: while !rest.is_empty() {
        for prefix in PREFIXES {
            let hex = rest.strip_prefix(prefix).and_then(|r| r.strip_prefix('_')).and_then(|r| r.get(..32));
            let boundary = !out.ends_with(|c: char| c.is_ascii_alphanumeric());
            if boundary && hex.is_some_and(|h| h.chars().all(|c| c.is_ascii_hexdigit())) {
                out.push_str(&format!("<{prefix}>"));
                rest = &rest[prefix.len() + 33..];
                continue 'scan;
            }
        }
        let c = rest.chars().next().unwrap_or_default();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The activations of `agent`, newest first, once there is one.
async fn first_activation(c: &Controller, agent: &str) -> String {
    for _ in 0..100 {
        let list = get(c, &format!("{P}/activations?agent={agent}")).await;
        if let Some(id) = list["items"].as_array().and_then(|a| a.last()).and_then(|a| a["id"].as_str()) {
            return id.to_string();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{agent} never started; log:\n{}", c.stderr());
}

async fn wait_ended(c: &Controller, id: &str) -> Value {
    for _ in 0..200 {
        let a = get(c, &format!("{P}/activations/{id}")).await;
        if a["status"] != "running" {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("activation {id} did not end; log:\n{}", c.stderr());
}

/// Messages from a sender to a recipient (or `#channel`).
type Count = (String, String, u64);

/// Messages per sender and recipient (`#channel`), from the messages the store lists.
async fn message_counts(c: &Controller) -> Vec<Count> {
    let messages = get(c, &format!("{P}/messages?limit=500")).await;
    let mut counts: BTreeMap<(String, String), u64> = BTreeMap::new();
    for m in messages["items"].as_array().unwrap() {
        let to = match m["recipient"].as_str() {
            Some(r) => r.to_string(),
            None => format!("#{}", m["channel"].as_str().unwrap_or_default().trim_start_matches('#')),
        };
        *counts.entry((m["sender"].as_str().unwrap().to_string(), to)).or_default() += 1;
    }
    counts.into_iter().map(|((from, to), n)| (from, to, n)).collect()
}

/// `li` kinds of the timeline list, in page order.
const KINDS: &str = "[...document.querySelectorAll('ol.timeline > li')].map((li) => li.dataset.kind)";
const TOOLS: &str =
    "[...document.querySelectorAll('ol.timeline > li[data-kind=tool_call]')].map((li) => li.dataset.tool)";

fn turn(text: &[&str], call: (&str, &str, &str), tokens: (u64, u64)) -> Turn {
    let mut t = Turn::new(text).call(call.0, call.1, &[call.2]);
    (t.input_tokens, t.output_tokens) = tokens;
    t
}

/// The scenario of the issue: a run with three tool calls and a P1 arriving mid-activation shows
/// them in order, live — the page is open while the activation runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeline_shows_turns_tool_calls_and_a_p1_in_order_while_the_activation_runs() {
    let turns = [
        turn(
            &["Asking ", "the worker ", "for part one."],
            ("call_1", "messages_send", r#"{"recipient": "worker", "body": "Part one, please."}"#),
            (120, 14),
        ),
        turn(
            &["Sending ", "part two ", "now."],
            ("call_2", "messages_send", r#"{"recipient": "worker", "body": "Part two, please."}"#),
            (180, 12),
        ),
        turn(
            &["Noted the ", "change; waiting."],
            ("call_3", "coordination_wait_for_signal", r#"{"reason": "waiting for both parts"}"#),
            (260, 9),
        ),
    ];
    // The second answer stops after "Sending part two " for a while: time to look at the page
    // and to send the P1; the third pauses less.
    let server = StreamServer::start(vec![
        Reply::stream(model_stream::openai_frames(&turns[0]), Duration::from_millis(20)),
        Reply::stalling(model_stream::openai_frames(&turns[1]), 3, Duration::from_secs(5)),
        Reply::stalling(model_stream::openai_frames(&turns[2]), 2, Duration::from_secs(1)),
    ])
    .await;
    let script = "activations:\n  - agent: worker\n    repeat: true\n    steps:\n      - say: Noted.\n";
    let dir = project(Some(&server.url), script);
    let c = Controller::start(dir.path(), &[]);
    let b = browser().await;
    let mut b = b;
    let outcome = timeline_scenario(&mut b, &c).await;
    check("timeline-live", &b, &c, outcome).await;

    // The same timeline through the API, and the message graph of the run.
    let id = first_activation(&c, "pm").await;
    let timeline = get(&c, &format!("{P}/activations/{id}/timeline")).await;
    support::golden("webui.timeline.json").assert_eq(&format!("{:#}\n", normalized(&timeline)));
    let graph = get(&c, &format!("{P}/message-graph?hours=24")).await;
    support::golden("webui.message-graph.json").assert_eq(&format!("{:#}\n", normalized(&graph)));
    for bad in ["0", "721", "soon"] {
        let response = client().get(c.url(&format!("{P}/message-graph?hours={bad}"))).send().await.unwrap();
        assert_eq!(response.status(), 400, "hours={bad}");
        let body: Value = response.json().await.unwrap();
        assert!(body["error"].as_str().unwrap().contains("hours must be"), "{body}");
    }
    let missing = client().get(c.url(&format!("{P}/activations/act_nope/timeline"))).send().await.unwrap();
    assert_eq!(missing.status(), 404);
}

async fn timeline_scenario(b: &mut Browser, c: &Controller) -> webdriver::Result<()> {
    b.goto(&c.url("/#/overview")).await?;
    b.wait_until("document.querySelector('#conn.conn-live')").await?;
    say(c, "pm", "Start the work.", "P2").await;
    let id = first_activation(c, "pm").await;
    b.execute(&format!("location.hash = {};", js(&format!("#/activations/{id}"))), vec![]).await?;
    b.execute("window.suzumioNoReload = true;", vec![]).await?;

    // Mid-activation: the first turn and its call are there, the second turn is being written,
    // its call has not happened yet.
    b.wait_for_text("section.live pre.live-text", "Sending part two").await?;
    b.wait_until(&format!("{TOOLS}.length === 1")).await?;
    let now: Vec<String> = serde_json::from_value(b.execute(&format!("return {KINDS};"), vec![]).await?).unwrap();
    assert_eq!(now, ["prompt", "model_turn", "tool_call"], "while the second answer is written");
    assert_eq!(
        get(c, &format!("{P}/activations/{id}")).await["status"],
        "running",
        "the page was looked at while the activation ran"
    );
    say(c, "pm", "Change of plan: part two goes first.", "P1").await;

    // Then the rest arrives without a reload, in order; the P1 arrives after the second call.
    b.patience = Duration::from_secs(30);
    b.wait_until(&format!("{KINDS}.includes('ended')")).await?;
    let kinds: Vec<String> = serde_json::from_value(b.execute(&format!("return {KINDS};"), vec![]).await?).unwrap();
    assert_eq!(
        kinds,
        ["prompt", "model_turn", "tool_call", "model_turn", "tool_call", "signals", "model_turn", "tool_call", "ended"]
    );
    let tools: Vec<String> = serde_json::from_value(b.execute(&format!("return {TOOLS};"), vec![]).await?).unwrap();
    assert_eq!(tools, ["messages.send", "messages.send", "coordination.wait_for_signal"]);
    let signals = b.find("ol.timeline > li[data-kind=signals]").await?;
    let text = signals.text().await?;
    assert!(text.contains("Change of plan: part two goes first.") && text.contains("P1"), "{text}");
    let texts = b
        .execute("return [...document.querySelectorAll('[data-turn-text]')].map((p) => p.textContent);", vec![])
        .await?;
    assert_eq!(
        texts,
        json!(["Asking the worker for part one.", "Sending part two now.", "Noted the change; waiting."])
    );
    let usage = b.find("ol.timeline > li[data-kind=model_turn] [data-usage]").await?.text().await?;
    assert!(usage.contains("120 in") && usage.contains("14 out"), "{usage}");
    // A call's input is one click away; the keyboard moves between the steps.
    let first_call = b.find("ol.timeline > li[data-kind=tool_call]").await?;
    b.click(&b.find_in(&first_call, "summary").await?).await?;
    let input = b.find_in(&first_call, "[data-input]").await?.text().await?;
    assert!(input.contains("Part one, please."), "{input}");
    let first = b.find("ol.timeline > li").await?;
    b.execute("arguments[0].focus();", vec![arg(&first)]).await?;
    first.send_keys("\u{E015}").await?; // ArrowDown
    let focused = b.execute("return document.activeElement.dataset.kind;", vec![]).await?;
    assert_eq!(focused, json!("model_turn"));
    b.wait_until("document.querySelector('section.live').hidden").await?;
    assert_eq!(b.execute("return window.suzumioNoReload === true;", vec![]).await?, json!(true), "no reload");
    b.execute("document.querySelector('ol.timeline > li[data-kind=signals]').scrollIntoView();", vec![]).await?;
    save_screenshot(b, "timeline").await
}

/// What the page looks like, for reading a run (`target/browser-artifacts/<name>.png`).
async fn save_screenshot(b: &Browser, name: &str) -> webdriver::Result<()> {
    let dir = repo_root().join("target/browser-artifacts");
    std::fs::create_dir_all(&dir).expect("create target/browser-artifacts");
    let png = b.screenshot().await?;
    std::fs::write(dir.join(format!("{name}.png")), png).expect("write the screenshot");
    Ok(())
}

const SCRIPT: &str = r#"
activations:
  - agent: pm
    when: "Plan the day"
    steps:
      - say: "Asking the worker twice."
        call: [{tool: messages.send, input: {recipient: worker, body: "Write the notes."}}]
      - call: [{tool: messages.send, input: {recipient: worker, body: "And the summary."}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "waiting"}}]
  - agent: pm
    when: "Schedule a ping"
    steps:
      - call: [{tool: schedule.once, input: {body: "Ping from pm", afterMinutes: 30, recipient: worker}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "scheduled"}}]
  - agent: worker
    repeat: true
    steps:
      - call: [{tool: file.write, input: {path: "/workspace/notes.md", content: "notes"}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "done"}}]
  - agent: broken
    steps:
      - error: "simulated model failure: the provider is down"
"#;

/// The Overview says what happened (activity, who talks to whom, why an agent failed), the
/// history names tools as everywhere else, a pack panel follows the agents' calls of its tools,
/// and a form checks its required fields before it sends anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_history_and_tools_pages_follow_what_agents_do() {
    support::runner_binary();
    let dir = project(None, SCRIPT);
    let c = Controller::start(dir.path(), &[]);
    let b = browser().await;
    let mut b = b;
    let outcome = overview_scenario(&mut b, &c, dir.path()).await;
    check("overview-live", &b, &c, outcome).await;

    // The server's own check stays: the same empty form, sent directly, is a 400 naming `body`.
    let (status, refused) = post(&c, &format!("{P}/tool-ui/scheduler/schedule.once"), json!({})).await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused["details"].as_array().unwrap().iter().any(|d| d["message"].as_str().unwrap().contains("body")));
}

async fn overview_scenario(b: &mut Browser, c: &Controller, _dir: &Path) -> webdriver::Result<()> {
    b.goto(&c.url("/#/overview")).await?;
    b.wait_until("document.querySelector('#conn.conn-live')").await?;
    b.find("[data-message-graph-table]").await?;
    say(c, "pm", "Plan the day.", "P2").await;
    say(c, "broken", "Are you there?", "P2").await;
    b.patience = Duration::from_secs(30);

    // A failed agent's card says why.
    let reason = b.wait_for_text(r#"[data-agent="broken"] [data-last-error]"#, "simulated model failure").await?;
    assert!(reason.text().await?.contains("the provider is down"));
    // The feed tells the story as it happens.
    b.wait_for_text("[data-activity] li", "pm sent a").await?;
    b.wait_for_text("[data-activity] li", "broken's activation failed").await?;
    b.wait_for_text("[data-activity] li", "worker called file.write").await?;
    // What only echoes another event stays out of the feed, by the server's list of types (the
    // history rows and call starts of the turns above were recorded).
    let types = get(c, "/api/event-types").await;
    let echoes: Vec<&str> = types["types"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["inFeed"] == false)
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(echoes.contains(&"history.appended") && echoes.contains(&"tool_call.started"), "{types}");
    let recorded = get(c, &format!("{P}/events?limit=999")).await;
    assert!(recorded["items"].as_array().unwrap().iter().any(|e| e["type"] == "history.appended"), "{recorded}");
    let listed = "return [...document.querySelectorAll('[data-activity] li[data-type]')].map((li) => li.dataset.type);";
    let shown: Vec<String> = serde_json::from_value(b.execute(listed, vec![]).await?).unwrap();
    let echoed: Vec<&String> =
        shown.iter().filter(|t| echoes.contains(&t.as_str()) && *t != "signal.created").collect();
    assert!(echoed.is_empty(), "the feed shows echoes {echoed:?} of {shown:?}");

    // The graph's counts are the messages the store lists, per sender and recipient.
    let pm = first_activation(c, "pm").await;
    wait_ended(c, &pm).await;
    // Read again until the two agree: a nudge may still be on its way.
    let read_table = "return [...document.querySelectorAll('[data-message-graph-table] tr[data-from]')]
        .map((tr) => [tr.dataset.from, tr.dataset.to, Number(tr.querySelector('[data-count]').textContent)]);";
    let (mut shown, mut want): (Vec<Count>, Vec<Count>) = Default::default();
    for _ in 0..100 {
        want = message_counts(c).await;
        shown = serde_json::from_value(b.execute(read_table, vec![]).await?).unwrap();
        if shown == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(shown, want, "the graph's table shows the store's counts");
    assert!(want.contains(&("pm".into(), "worker".into(), 2)), "{want:?}");
    let edge = b.find(r#"[data-message-graph] svg [data-edge="pm->worker"] text"#).await?;
    assert_eq!(edge.text().await?, "2");

    b.execute("document.querySelector('[data-message-graph]').scrollIntoView();", vec![]).await?;
    save_screenshot(b, "overview").await?;

    // The history names tools as the rest of the UI does: file.write, not file_write.
    b.execute("location.hash = '#/history/worker';", vec![]).await?;
    b.wait_for_text("[data-tool-name]", "file.write").await?;
    let names = b
        .execute("return [...document.querySelectorAll('[data-tool-name]')].map((c) => c.textContent);", vec![])
        .await?;
    let names: Vec<String> = serde_json::from_value(names).unwrap();
    assert!(names.iter().all(|n| n.contains('.')), "real names only: {names:?}");
    assert!(names.iter().any(|n| n == "coordination.wait_for_signal"), "{names:?}");

    // The jobs panel refreshes when pm schedules a job, without a click.
    b.execute("location.hash = '#/tools/schedule.list';", vec![]).await?;
    let jobs = r#"section[data-entry="scheduler/schedule.jobs"]"#;
    b.find(&format!("{jobs} [data-result] pre")).await?;
    say(c, "pm", "Schedule a ping.", "P2").await;
    b.wait_for_text(&format!("{jobs} [data-result] pre"), "Ping from pm").await?;

    // An empty required field is caught before anything is sent.
    b.execute("location.hash = '#/tools/schedule.once';", vec![]).await?;
    let once = r#"section[data-entry="scheduler/schedule.once"]"#;
    let card = b.find(once).await?;
    b.execute(
        "window.suzumioPosts = 0;
         const original = window.fetch;
         window.fetch = (url, init) => {
           if ((init?.method || 'GET') === 'POST') window.suzumioPosts += 1;
           return original(url, init);
         };",
        vec![],
    )
    .await?;
    let minutes = b.find_in(&card, r#"[name="afterMinutes"]"#).await?;
    minutes.send_keys("5").await?;
    b.click(&b.find_in(&card, r#"button[type="submit"]"#).await?).await?;
    let body = b.find_in(&card, r#"[name="body"]"#).await?;
    b.wait_until(&format!(
        "document.querySelector({}).classList.contains('invalid')",
        js(&format!(r#"{once} [name="body"]"#))
    ))
    .await?;
    let message = b.find_in(&card, r#"[data-field="body"] .field-error"#).await?.text().await?;
    assert!(message.contains("required"), "{message}");
    assert_eq!(b.execute("return window.suzumioPosts;", vec![]).await?, json!(0), "nothing was sent");
    assert_eq!(b.execute("return document.activeElement === arguments[0];", vec![arg(&body)]).await?, json!(true));
    Ok(())
}
