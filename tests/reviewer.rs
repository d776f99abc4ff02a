//! The safety reviewer (`permissions.reviewer`, issue [V] points 4 and 5) end to end: a real
//! `suzumio run` (process backend) whose agent `writer`, in `auto` mode, is played by the
//! scripted model, and whose reviewer is either a second scripted model or a local
//! OpenAI-compatible server on 127.0.0.1 that plays the reviewer and counts what reaches it.
//! What happened is read from what happened: the `danger` pack counts every real run of
//! `danger.tally` on the controller side, the store has the tool calls, approvals and events,
//! the audit file its lines, and the server the requests it received.
//!
//! - scripted reviewer: its three answers — allow (the call runs without a person), ask (an
//!   approval request carrying the reviewer's reason and the decision's code, categories and
//!   actions, shown on the WebUI's Approvals page in Chromium), deny (the model reads the reason);
//! - HTTP reviewer: a garbage answer and a time-out (the server holds its answer until the test
//!   has seen the fallback) both ask, saying why; the verdict cache (a second identical call
//!   does not reach the server); a rule's `ask` stays ask when the reviewer allows, a rule's
//!   `deny` never reaches it, nor does a call a rule allows; and no secret of the calls is in
//!   anything the server received;
//! - a review the server holds keeps no other agent waiting: another agent's activation runs to
//!   its end meanwhile, and the reviewed call runs once the verdict comes.

#[path = "support/model_stream.rs"]
mod model_stream;
mod support;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use model_stream::{Turn, openai_json};
use serde_json::{Value, json};
use support::{Controller, cli, wait_for};
use suzumio::store::{ApprovalRecord, ApprovalStatus, EventQuery, ToolCallStatus};

/// The `approvals` fixture (its `danger` pack counts real runs), under a name of its own, with
/// `writer` in auto mode, the rules and the reviewer given, and the agent's script.
fn project(reviewer_provider: &str, reviewer_extra: &str, script: &str) -> support::TempProject {
    let project = support::TempProject::copy_of("approvals");
    let unique = project.dir.file_name().unwrap().to_string_lossy().rsplit('-').next().unwrap().to_string();
    let yaml = format!(
        r#"name: rev-{unique}
task: Tally the files of the workspace and write notes about them.
tools:
  toolpacks:
    - core
    - {{path: ./toolpacks/danger, id: danger}}
permissions:
  rules:
    - {{tool: file.write, decision: ask, paths: ["guarded/**"], reason: "guarded files are written with a person"}}
    - {{tool: file.write, decision: deny, paths: ["secret/**"], reason: "nobody writes secret/"}}
    - {{tool: file.write, decision: allow, paths: ["open/**"]}}
  reviewer: {{model: rev{reviewer_extra}}}
agents:
  writer:
    permissionMode: auto
    tools: [danger.remove, danger.tally, file.write, messages.send, coordination.wait_for_signal]
backend:
  runner:
    model: main
    models:
      providers:
        local: {{type: scripted, script: ./script.yaml}}
        {reviewer_provider}
      presets:
        main: {{provider: local}}
        rev: {{provider: reviewer, model: review-1}}
"#
    );
    std::fs::write(project.dir.join("suzumio.yaml"), yaml).unwrap();
    std::fs::write(project.dir.join("script.yaml"), script).unwrap();
    project
}

fn host(dir: &Path) -> Arc<suzumio::support::ToolHost> {
    suzumio::controller::open_read_only(dir).unwrap_or_else(|e| panic!("{e}"))
}

/// How many times `danger.tally` really ran, and on which paths.
fn runs(dir: &Path) -> (u64, Vec<Value>) {
    let state = host(dir).state.read("danger", "runs.json").unwrap();
    state.map_or((0, Vec::new()), |v| (v["runs"].as_u64().unwrap(), v["paths"].as_array().unwrap().clone()))
}

/// The one pending request, once there is one.
fn pending(dir: &Path, ctl: &Controller) -> ApprovalRecord {
    wait_for("a pending approval request", Some(ctl), || host(dir).store.approvals(true, 10).unwrap().pop())
}

/// The calls of `tool`, once there are `n` finished ones.
fn finished(
    dir: &Path,
    tool: &str,
    n: usize,
    ctl: &Controller,
) -> Vec<(ToolCallStatus, Option<Value>, Option<String>)> {
    wait_for(&format!("{n} finished call(s) of {tool}"), Some(ctl), || {
        let calls = support::tool_calls(dir, tool);
        let done = calls.iter().filter(|c| c.0 != ToolCallStatus::Running).count();
        (done >= n).then_some(calls)
    })
}

/// The audit's decision lines, as `suzumio audit --json` prints them.
fn decisions(dir: &Path) -> Vec<Value> {
    let out = cli(dir, &["audit", &dir.to_string_lossy(), "--json"]);
    out.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|e| e["kind"] == "decision").collect()
}

fn decided_events(dir: &Path) -> Vec<Value> {
    let query = EventQuery {
        agent_id: Some("writer".into()),
        kind: Some("permission.decided".into()),
        after_id: None,
        limit: Some(100),
    };
    host(dir).store.list_events(&query).unwrap().iter().map(|e| e.data()).collect()
}

const SCRIPTED_REVIEWS: &str = r#"
activations:
  - agent: reviewer
    steps: [{say: '{"decision": "allow", "reason": "tallying a is the task"}'}]
  - agent: reviewer
    steps: [{say: '{"decision": "ask", "reason": "a person should look at b first"}'}]
  - agent: reviewer
    steps: [{say: '{"decision": "deny", "reason": "c is outside the task"}'}]
"#;

const TALLY_THREE: &str = r#"
activations:
  - agent: writer
    steps:
      - call: [{tool: danger.tally, input: {path: a}}]
      - call: [{tool: danger.tally, input: {path: b}}]
      - call: [{tool: danger.tally, input: {path: c}}]
      - say: "Tallied."
        call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_reviewer_allows_asks_with_its_reason_and_denies() {
    let p = project("reviewer: {type: scripted, script: ./review.yaml}", "", TALLY_THREE);
    std::fs::write(p.dir.join("review.yaml"), SCRIPTED_REVIEWS).unwrap();
    let dir = p.dir.to_string_lossy().to_string();
    // `explain` says the reviewer will see such a call, and what the engine saw.
    let explained = cli(&p.dir, &["permissions", "explain", &dir, "writer", "danger.tally", r#"{"path": "a"}"#]);
    for line in [
        "decision: ask",
        "code: mode_default",
        "categories: writes",
        "actions: allow_once, allow_remember, deny, deny_with_feedback",
        "reviewer: rev reviews this call when it runs: it may answer deny, ask, or at most allow",
    ] {
        assert!(explained.contains(line), "{line}:\n{explained}");
    }
    cli(&p.dir, &["send", &dir, "writer", "Tally a, b and c."]);
    let ctl = Controller::start(&p.dir, &[]);

    // allow: `a` ran without anybody; ask: `b` waits, with the reviewer's reason.
    let request = tokio::task::block_in_place(|| pending(&p.dir, &ctl));
    assert_eq!(runs(&p.dir), (1, vec![json!("a")]), "the reviewer's allow ran the call without a person");
    assert_eq!(request.input, json!({"path": "b"}));
    let d = &request.decision;
    assert_eq!(
        (d["behavior"].as_str(), d["code"].as_str(), d["source"].as_str()),
        (Some("ask"), Some("reviewer"), Some("reviewer rev")),
        "{d}"
    );
    assert!(request.reason().contains("a person should look at b first"), "{}", request.reason());
    assert_eq!(d["categories"], json!(["writes"]), "{d}");
    assert_eq!(d["actions"], json!(["allow_once", "allow_remember", "deny", "deny_with_feedback"]), "{d}");

    // The API's approvals JSON carries them, and the WebUI's card shows them.
    let name = host(&p.dir).project.config.name.clone();
    let api = tokio::task::block_in_place(|| {
        support::http("GET", &ctl.url(&format!("/api/projects/{name}/approvals")), &[], None)
    });
    assert_eq!(api.status, 200, "{}", api.body);
    let listed = api.json();
    let listed = listed.as_array().or_else(|| listed["approvals"].as_array()).cloned().unwrap_or_default();
    let shown = listed.iter().find(|r| r["id"] == request.id.as_str()).unwrap_or_else(|| panic!("{}", api.body));
    assert_eq!(shown["decision"]["code"], "reviewer", "{shown}");
    assert_eq!(shown["decision"]["categories"], json!(["writes"]), "{shown}");
    let b = webdriver::Browser::start().await.unwrap_or_else(|e| panic!("the browser tests need Chromium: {e}"));
    let card = format!(r#"article[data-approval="{}"]"#, request.id);
    let seen = async {
        b.goto(&ctl.url("/#/approvals")).await?;
        let (_, reason) =
            b.wait_for_text_of(&format!("{card} .approval-reason"), "a person should look at b first").await?;
        let code = b.find(&format!("{card} [data-reason-code=reviewer]")).await?.text().await?;
        let category = b.find(&format!("{card} [data-category=writes]")).await?.text().await?;
        let actions = b.find(&format!("{card} [data-actions]")).await?.attr("data-actions").await?;
        webdriver::Result::Ok((reason, code, category, actions))
    }
    .await;
    let (reason, code, category, actions) = seen.unwrap_or_else(|e| panic!("{e}\n{}", ctl.stderr()));
    assert!(reason.contains("reviewer rev"), "{reason}");
    assert_eq!((code.as_str(), category.as_str()), ("reviewer", "writes"));
    assert_eq!(actions.as_deref(), Some("allow_once allow_remember deny deny_with_feedback"));

    tokio::task::block_in_place(|| {
        cli(&p.dir, &["approvals", "allow", &dir, &request.id]);
        // deny: `c` never ran, and the model read why.
        let calls = finished(&p.dir, "danger.tally", 3, &ctl);
        assert_eq!(runs(&p.dir), (2, vec![json!("a"), json!("b")]));
        let (status, _, error) = &calls[2];
        assert_eq!(*status, ToolCallStatus::Failed);
        let error = error.as_deref().unwrap_or_default();
        assert!(error.contains("c is outside the task") && error.contains("reviewer rev"), "{error}");

        // The audit and the events say the reviewer decided, with its code and reasons.
        let lines = wait_for("the audit's three lines", Some(&ctl), || {
            let lines: Vec<Value> = decisions(&p.dir).into_iter().filter(|l| l["tool"] == "danger.tally").collect();
            (lines.len() >= 3).then_some(lines)
        });
        let tally: Vec<&Value> = lines.iter().collect();
        let seen: Vec<(&str, &str, &str)> = tally
            .iter()
            .map(|l| (l["decision"].as_str().unwrap(), l["code"].as_str().unwrap(), l["source"].as_str().unwrap()))
            .collect();
        assert_eq!(
            seen,
            [
                ("allow", "reviewer", "reviewer rev"),
                ("ask", "reviewer", "reviewer rev"),
                ("deny", "reviewer", "reviewer rev")
            ]
        );
        assert!(tally[0]["reason"].as_str().unwrap().contains("tallying a is the task"), "{}", tally[0]);
        assert_eq!(tally[0]["categories"], json!(["writes"]));
        let events = decided_events(&p.dir);
        let codes: Vec<(&str, &str)> =
            events.iter().map(|e| (e["behavior"].as_str().unwrap(), e["code"].as_str().unwrap())).collect();
        assert_eq!(codes, [("allow", "reviewer"), ("ask", "reviewer"), ("deny", "reviewer")], "{events:?}");

        // The reviewer's model calls are counted with the activation, as other model calls are.
        let activation = host(&p.dir).store.activation(&request.activation_id).unwrap().unwrap();
        let models = activation.usage.map(|u| u.models).unwrap_or_default();
        assert!(models.iter().any(|m| m.starts_with("reviewer rev")), "{models:?}");
    });
    assert_eq!(tokio::task::block_in_place(|| ctl.stop()), Some(0));
}

/// One answer of the reviewer server.
#[derive(Clone)]
enum Answer {
    Says(String),
    /// Holds the response until the test releases it, then says this.
    Holds(String),
}

#[derive(Clone, Default)]
struct Server {
    answers: Arc<Mutex<VecDeque<Answer>>>,
    requests: Arc<Mutex<Vec<String>>>,
    release: Arc<tokio::sync::Notify>,
}

async fn answer(State(s): State<Server>, body: Bytes) -> Response {
    s.requests.lock().unwrap().push(String::from_utf8_lossy(&body).into_owned());
    let next = s.answers.lock().unwrap().pop_front();
    let says = match next {
        None => return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "no answer queued").into_response(),
        Some(Answer::Says(text)) => text,
        Some(Answer::Holds(text)) => {
            s.release.notified().await;
            text
        }
    };
    axum::Json(openai_json(&Turn::new(&[&says]))).into_response()
}

const SECRET_PASSWORD: &str = "hunter2hunter2";
const SECRET_TOKEN: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_reviewer_falls_back_to_ask_caches_and_never_loosens_a_rule() {
    let verdict = |d: &str, r: &str| Answer::Says(json!({"decision": d, "reason": r}).to_string());
    let server = Server {
        answers: Arc::new(Mutex::new(VecDeque::from([
            Answer::Says("Sure, that looks fine to me!".into()),
            Answer::Holds(json!({"decision": "allow", "reason": "too late"}).to_string()),
            verdict("allow", "tallying three is the task"),
            verdict("allow", "writing guarded notes is fine"),
            verdict("ask", "the notes hold a credential"),
            verdict("deny", "c.txt is not part of the task"),
        ]))),
        ..Server::default()
    };
    let app = axum::Router::new().fallback(answer).with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let script = format!(
        r#"
activations:
  - agent: writer
    steps:
      - call: [{{tool: danger.tally, input: {{path: one, note: "password={SECRET_PASSWORD}"}}}}]
      - call: [{{tool: danger.tally, input: {{path: two}}}}]
      - call: [{{tool: danger.tally, input: {{path: three, note: "x"}}}}]
      - call: [{{tool: danger.tally, input: {{note: "x", path: three}}}}]
      - call: [{{tool: file.write, input: {{path: guarded/a.txt, content: "a", createDirs: true}}}}]
      - call: [{{tool: file.write, input: {{path: notes/b.txt, content: "token {SECRET_TOKEN}", createDirs: true}}}}]
      - call: [{{tool: file.write, input: {{path: notes/c.txt, content: "c", createDirs: true}}}}]
      - call: [{{tool: file.write, input: {{path: secret/d.txt, content: "d", createDirs: true}}}}]
      - call: [{{tool: file.write, input: {{path: open/e.txt, content: "e", createDirs: true}}}}]
      - say: "Done."
        call: [{{tool: coordination.wait_for_signal, input: {{reason: done}}}}]
"#
    );
    let provider = format!("reviewer: {{type: openai-compatible, baseURL: '{url}'}}");
    let p = project(&provider, ", timeout: 1s, cacheTtl: 1h", &script);
    let dir = p.dir.to_string_lossy().to_string();
    cli(&p.dir, &["send", &dir, "writer", "Tally and write notes."]);
    let ctl = Controller::start(&p.dir, &[]);
    let requests = || server.requests.lock().unwrap().clone();

    tokio::task::block_in_place(|| {
        // Garbage: the call asks, saying the answer was not the format.
        let garbage = pending(&p.dir, &ctl);
        assert_eq!(garbage.input["path"], "one");
        assert_eq!(garbage.decision["code"], "reviewer_unavailable", "{}", garbage.decision);
        assert!(garbage.reason().contains("not the JSON object asked for"), "{}", garbage.reason());
        assert!(garbage.reason().contains("so a person decides"), "{}", garbage.reason());
        cli(&p.dir, &["approvals", "deny", &dir, &garbage.id]);

        // Time-out: the server holds its answer; the call asks once the reviewer's time is up.
        let held = wait_for("the held call's request", Some(&ctl), || {
            host(&p.dir).store.approvals(true, 10).unwrap().into_iter().find(|r| r.input["path"] == "two")
        });
        assert_eq!(held.decision["code"], "reviewer_unavailable", "{}", held.decision);
        assert!(held.reason().contains("did not answer within 1s"), "{}", held.reason());
        assert_eq!(requests().len(), 2);
        server.release.notify_one();
        cli(&p.dir, &["approvals", "deny", &dir, &held.id]);

        // Allow, then the same call again (its arguments in another order): it runs from the
        // cache, without reaching the server. Then a rule's ask: the reviewer allows, it stays ask.
        let guarded = wait_for("the guarded write's request", Some(&ctl), || {
            host(&p.dir).store.approvals(true, 10).unwrap().into_iter().find(|r| r.tool == "file.write")
        });
        assert_eq!(runs(&p.dir), (2, vec![json!("three"), json!("three")]), "both identical calls ran");
        assert_eq!(requests().len(), 4, "the second identical call reused the verdict");
        assert_eq!(guarded.input["path"], "guarded/a.txt");
        assert_eq!(
            (guarded.decision["code"].as_str(), guarded.decision["behavior"].as_str()),
            (Some("rule"), Some("ask"))
        );
        let why = guarded.reason();
        assert!(why.contains("guarded files are written with a person") && why.contains("can only make"), "{why}");
        cli(&p.dir, &["approvals", "allow", &dir, &guarded.id]);

        // The reviewer's ask, with its reason.
        let asked = wait_for("the reviewer's ask", Some(&ctl), || {
            host(&p.dir).store.approvals(true, 10).unwrap().into_iter().find(|r| r.input["path"] == "notes/b.txt")
        });
        assert_eq!(asked.decision["code"], "reviewer");
        assert!(asked.reason().contains("the notes hold a credential"), "{}", asked.reason());
        assert!(
            asked.decision["categories"].as_array().unwrap().contains(&json!("secrets_in_arguments")),
            "{}",
            asked.decision
        );
        cli(&p.dir, &["approvals", "allow", &dir, &asked.id]);

        // The reviewer's deny reaches the model; the config's deny never reaches the reviewer.
        let writes = finished(&p.dir, "file.write", 4, &ctl);
        let error = |i: usize| writes[i].2.clone().unwrap_or_default();
        assert_eq!((writes[0].0, writes[1].0), (ToolCallStatus::Completed, ToolCallStatus::Completed), "{writes:?}");
        assert_eq!(writes[2].0, ToolCallStatus::Failed);
        assert!(error(2).contains("c.txt is not part of the task"), "{}", error(2));
        assert_eq!(writes[3].0, ToolCallStatus::Failed);
        assert!(error(3).contains("nobody writes secret/"), "{}", error(3));
        assert_eq!(requests().len(), 6, "the rule's deny was not shown to the reviewer");

        // Nothing the server received holds a secret of the calls.
        let received = requests();
        for body in &received {
            assert!(
                !body.contains(SECRET_PASSWORD) && !body.contains(SECRET_TOKEN),
                "a secret reached the reviewer: {body}"
            );
        }
        let first: Value = serde_json::from_str(&received[0]).unwrap();
        let prompt = first.to_string();
        assert!(prompt.contains("danger.tally") && prompt.contains("Tally the files of the workspace"), "{prompt}");
        assert!(prompt.contains(r#"\"decision\": \"allow\" | \"ask\" | \"deny\""#), "the format is stated: {prompt}");

        let codes: Vec<String> = wait_for("the audit's eight lines", Some(&ctl), || {
            let lines = decisions(&p.dir);
            (lines.len() >= 8).then_some(lines)
        })
        .iter()
        .map(|l| {
            format!(
                "{} {} {}",
                l["tool"].as_str().unwrap(),
                l["decision"].as_str().unwrap(),
                l["code"].as_str().unwrap()
            )
        })
        .collect();
        assert_eq!(
            codes[..8],
            [
                "danger.tally ask reviewer_unavailable",
                "danger.tally ask reviewer_unavailable",
                "danger.tally allow reviewer",
                "danger.tally allow reviewer",
                "file.write ask rule",
                "file.write ask reviewer",
                "file.write deny reviewer",
                "file.write deny rule",
            ],
            "{codes:?}"
        );
    });
    // Calls that run anyway (a rule's allow, the coordination tool that ends the activation)
    // never reach the reviewer.
    tokio::task::block_in_place(|| {
        let writes = finished(&p.dir, "file.write", 5, &ctl);
        assert_eq!(writes[4].0, ToolCallStatus::Completed, "{:?}", writes[4]);
        finished(&p.dir, "coordination.wait_for_signal", 1, &ctl);
    });
    assert_eq!(requests().len(), 6, "an allowed call was shown to the reviewer");
    let approvals = host(&p.dir).store.approvals(false, 10).unwrap();
    assert!(approvals.iter().all(|a| a.status != ApprovalStatus::Pending), "{approvals:?}");
    assert_eq!(tokio::task::block_in_place(|| ctl.stop()), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_in_progress_blocks_no_other_agent() {
    let server = Server {
        answers: Arc::new(Mutex::new(VecDeque::from([Answer::Holds(
            json!({"decision": "allow", "reason": "fine"}).to_string(),
        )]))),
        ..Server::default()
    };
    let app = axum::Router::new().fallback(answer).with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let script = r#"
activations:
  - agent: writer
    steps:
      - call: [{tool: danger.tally, input: {path: slow}}]
      - say: "Tallied."
        call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
  - agent: pm
    steps:
      - call: [{tool: messages.send, input: {recipient: user, body: "pm is not kept waiting"}}]
      - say: "Reported."
        call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;
    let provider = format!("reviewer: {{type: openai-compatible, baseURL: '{url}'}}");
    let p = project(&provider, ", timeout: 10m", script);
    let yaml = std::fs::read_to_string(p.dir.join("suzumio.yaml")).unwrap();
    let yaml = yaml.replace("agents:\n", "agents:\n  pm: {tools: [messages.send, coordination.wait_for_signal]}\n");
    std::fs::write(p.dir.join("suzumio.yaml"), yaml).unwrap();
    let dir = p.dir.to_string_lossy().to_string();
    cli(&p.dir, &["send", &dir, "writer", "Tally slow."]);
    let ctl = Controller::start(&p.dir, &[]);
    tokio::task::block_in_place(|| {
        wait_for("the writer's review to reach the reviewer", Some(&ctl), || {
            (!server.requests.lock().unwrap().is_empty()).then_some(())
        });
        // While the reviewer holds its answer, another agent's activation runs to its end.
        cli(&p.dir, &["send", &dir, "pm", "Report."]);
        let pm = wait_for("pm's activation to end", Some(&ctl), || {
            host(&p.dir).store.latest_activation("pm", None).ok()?.filter(|a| a.ended_at.is_some())
        });
        assert_eq!(pm.status.as_str(), "completed", "{pm:?}");
        assert_eq!(runs(&p.dir).0, 0, "the reviewed call waits for its verdict");
        server.release.notify_one();
        wait_for("the reviewed call to run", Some(&ctl), || (runs(&p.dir).0 == 1).then_some(()));
    });
    assert_eq!(tokio::task::block_in_place(|| ctl.stop()), Some(0));
}
