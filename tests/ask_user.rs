//! `ask_user` end to end: the real `suzumio run` (process backend) with the scripted model, a
//! real SQLite store shared with the real CLI, the real HTTP API, a real Chromium on the WebUI
//! and the official Python MCP SDK as an MCP client with elicitation. An agent's question parks
//! its activation (`waiting_user`) until it is answered from one of the four channels, across a
//! kill -9 of the controller, or until its deadline (then its default, or a failure the model
//! can act on); `onAsk: deny` answers at once. What the model got is read from its history.

mod support;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use support::mcp_client;
use support::{Controller, TempProject, cli, http, refused, wait_for};
use suzumio::store::{ActivationStatus, QuestionRecord, QuestionStatus};
use suzumio::support::ToolHost;

/// The `ask` fixture with `script` as its model, each `(from, to)` of `edits` made to its
/// `suzumio.yaml`.
fn project(script: &str, edits: &[(&str, &str)]) -> TempProject {
    let project = TempProject::copy_of("ask");
    let path = project.dir.join("suzumio.yaml");
    let mut yaml = std::fs::read_to_string(&path).unwrap();
    for (from, to) in edits {
        assert!(yaml.contains(from), "the ask fixture has no {from:?}");
        yaml = yaml.replace(from, to);
    }
    std::fs::write(&path, yaml).unwrap();
    std::fs::write(project.dir.join("script.yaml"), script).unwrap();
    project
}

fn say(dir: &Path, to: &str, priority: &str, body: &str) {
    cli(dir, &["send", &dir.to_string_lossy(), to, "--priority", priority, body]);
}

fn store(dir: &Path) -> Arc<ToolHost> {
    suzumio::controller::open_read_only(dir).unwrap_or_else(|e| panic!("{e}"))
}

/// The open question, once its activation is parked on it.
fn parked_question(dir: &Path, ctl: &Controller) -> QuestionRecord {
    wait_for("a question its activation waits on", Some(ctl), || {
        let host = store(dir);
        let q = host.store.questions(true, 10).unwrap().pop()?;
        let a = host.store.activation(&q.activation_id).unwrap()?;
        (a.status == ActivationStatus::WaitingUser).then_some(q)
    })
}

fn activation_ended(dir: &Path, id: &str, ctl: &Controller) -> suzumio::store::ActivationRecord {
    wait_for(&format!("activation {id} to end"), Some(ctl), || {
        store(dir).store.activation(id).unwrap().filter(|a| a.ended_at.is_some())
    })
}

/// The tool results of an activation, as its history recorded them (what the model is sent).
fn results(dir: &Path, activation: &str) -> Vec<Value> {
    store(dir)
        .store
        .activation_history(activation)
        .unwrap()
        .iter()
        .filter(|h| h.kind() == "tool_result")
        .map(|h| h.content())
        .collect()
}

fn assistant_turns(dir: &Path, activation: &str) -> usize {
    store(dir).store.activation_history(activation).unwrap().iter().filter(|h| h.kind() == "assistant_output").count()
}

/// The audit's `answer` lines.
fn answer_lines(dir: &Path) -> Vec<Value> {
    let out = cli(dir, &["audit", &dir.to_string_lossy(), "--json"]);
    out.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|e| e["kind"] == "answer").collect()
}

/// The `question.answered` events' data.
fn answered_events(dir: &Path) -> Vec<Value> {
    let host = store(dir);
    let events = host.store.events_after(0, 10_000).unwrap();
    events
        .into_iter()
        .map(|r| serde_json::to_value(&r).unwrap())
        .filter(|e| e["type"] == "question.answered")
        .map(|e| e["data"].clone())
        .collect()
}

const ASK_COLOUR: &str = r#"
activations:
  - agent: writer
    steps:
      - call: [{tool: ask_user, input: {question: "Which colour for the note?", choices: [red, blue, green], default: red}}]
      - say: "Noted."
        call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;

#[test]
fn a_question_parks_its_activation_and_the_cli_answer_goes_back_to_the_model() {
    let p = project(ASK_COLOUR, &[]);
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Write the note.");
    let ctl = Controller::start(&p.dir, &[]);
    let q = parked_question(&p.dir, &ctl);
    assert_eq!(
        (q.question.as_str(), q.choices.as_slice()),
        ("Which colour for the note?", &["red".to_string(), "blue".into(), "green".into()][..])
    );
    assert_eq!(q.default.as_deref(), Some("red"));
    // Parked: its first turn recorded, no model call while it waits.
    assert_eq!(assistant_turns(&p.dir, &q.activation_id), 1);

    let status = cli(&p.dir, &["status", &dir]);
    assert!(status.contains(&format!("writer           waiting for an answer ({})", q.activation_id)), "{status}");
    assert!(
        status.contains(&format!("writer: waiting for an answer to \"Which colour for the note?\" (#{})", q.id)),
        "{status}"
    );
    assert!(status.contains("1 waiting for an answer"), "{status}");
    let activations = cli(&p.dir, &["activations", &dir]);
    assert!(activations.contains("waiting_user"), "{activations}");
    let listed = cli(&p.dir, &["questions", &dir]);
    assert!(listed.contains(&q.id) && listed.contains("2. blue") && listed.contains("1. red  (default)"), "{listed}");

    // Bad answers are refused, naming what is wrong; the question stays open.
    let short = &q.id[..q.id.len() - 4];
    let why = refused(&p.dir, &["answer", &dir, short, "purple"]);
    assert!(why.contains("/answer must be one of the choices (1 = red, 2 = blue, 3 = green)"), "{why}");
    let why = refused(&p.dir, &["answer", &dir, short, "--choice", "4"]);
    assert!(why.contains("/choice must be the number of one of the choices"), "{why}");
    let why = refused(&p.dir, &["answer", &dir, short, "red", "--choice", "2"]);
    assert!(why.contains("names choice 1 but choice 2 was given"), "{why}");
    let why = refused(&p.dir, &["answer", &dir, "q_nonexistent", "red"]);
    assert!(why.contains("Unknown question: q_nonexistent"), "{why}");
    assert_eq!(store(&p.dir).store.question(&q.id).unwrap().unwrap().status, QuestionStatus::Pending);

    let out = cli(&p.dir, &["answer", &dir, short, "--choice", "2"]);
    assert!(out.contains(&format!("answered {} of writer: blue (choice 2)", q.id)), "{out}");
    let ended = activation_ended(&p.dir, &q.activation_id, &ctl);
    assert_eq!(
        (ended.status, ended.text.as_deref()),
        (ActivationStatus::Completed, Some("Noted.")),
        "{}",
        ctl.stderr()
    );
    let results = results(&p.dir, &q.activation_id);
    let first = results[0].to_string();
    assert!(first.contains("answered: blue"), "{results:?}");
    let answered = store(&p.dir).store.question(&q.id).unwrap().unwrap();
    let by = answered.answered_by.clone().unwrap();
    assert!(by.starts_with("cli (") && by.ends_with(')'), "{by}");
    assert_eq!((answered.status, answered.choice), (QuestionStatus::Answered, Some(2)));
    assert!(answered.consumed_at.is_some());
    // The call's recorded result carries the structured answer.
    let calls = support::tool_calls(&p.dir, "ask_user");
    let output = calls[0].1.clone().unwrap_or_default();
    assert_eq!(output["structuredContent"], json!({"answer": "blue", "choice": 2, "answeredBy": by}), "{calls:?}");

    let again = refused(&p.dir, &["answer", &dir, &q.id, "red"]);
    assert!(again.contains("is already answered"), "{again}");
    let lines = answer_lines(&p.dir);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!((lines[0]["userAction"].as_str(), lines[0]["feedback"].as_str()), (Some("answer"), Some("blue")));
    assert_eq!(lines[0]["source"], format!("question {} by {by}", q.id));
    let events = answered_events(&p.dir);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!((events[0]["answeredBy"].as_str(), events[0]["answer"].as_str()), (Some(by.as_str()), Some("blue")));
    assert_eq!(ctl.stop(), Some(0));
}

const ASK_FREE: &str = r#"
activations:
  - agent: writer
    steps:
      - call: [{tool: ask_user, input: {question: "What title?"}}]
      - say: "Titled."
        call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;

#[test]
fn the_api_answers_a_question_and_refuses_bad_answers_naming_the_field() {
    let p = project(ASK_COLOUR, &[]);
    say(&p.dir, "writer", "P2", "Write the note.");
    let ctl = Controller::start(&p.dir, &[]);
    let q = parked_question(&p.dir, &ctl);
    let listed = http("GET", &ctl.url("/api/projects/ask/questions"), &[], None).json();
    assert_eq!(listed["questions"][0]["id"], q.id.as_str(), "{listed}");
    assert_eq!(listed["questions"][0]["choices"], json!(["red", "blue", "green"]));
    let answer = |body: &str| {
        let url = ctl.url(&format!("/api/projects/ask/questions/{}/answer", q.id));
        http("POST", &url, &[("content-type", "application/json")], Some(body))
    };
    for (body, status, pointer, needle) in [
        (r#"{"answer": "purple"}"#, 400, "/answer", "must be one of the choices"),
        (r#"{"choice": 0}"#, 400, "/choice", "must be the number of one of the choices"),
        (r#"{"choice": "two"}"#, 400, "/choice", "invalid type"),
        (r#"{"answer": "red", "why": 1}"#, 400, "", "unknown field `why`"),
        (r#"{}"#, 400, "/answer", "give one of the choices"),
    ] {
        let r = answer(body);
        let b = r.json();
        assert_eq!(r.status, status, "{body}: {b}");
        assert!(b["error"].as_str().unwrap_or_default().contains(needle), "{body}: {b}");
        if !pointer.is_empty() {
            assert_eq!(b["details"][0]["path"], pointer, "{body}: {b}");
        }
    }
    let unknown = http(
        "POST",
        &ctl.url("/api/projects/ask/questions/q_nothing/answer"),
        &[("content-type", "application/json")],
        Some(r#"{"answer": "red"}"#),
    );
    assert_eq!(unknown.status, 404, "{}", unknown.json());
    assert_eq!(store(&p.dir).store.question(&q.id).unwrap().unwrap().status, QuestionStatus::Pending);

    let ok = answer(r#"{"answer": "green"}"#);
    assert_eq!(ok.status, 200, "{}", ok.json());
    assert_eq!(ok.json()["answered"]["answeredBy"], "api");
    assert_eq!(ok.json()["answered"]["choice"], 3);
    let again = answer(r#"{"answer": "red"}"#);
    assert_eq!(again.status, 409, "{}", again.json());
    let ended = activation_ended(&p.dir, &q.activation_id, &ctl);
    assert_eq!(ended.status, ActivationStatus::Completed, "{}", ctl.stderr());
    assert!(results(&p.dir, &q.activation_id)[0].to_string().contains("(api) answered: green"));
    assert_eq!(ctl.stop(), Some(0));

    // A free-text question takes any text, but not a choice number or an empty answer.
    let p = project(ASK_FREE, &[]);
    say(&p.dir, "writer", "P2", "Write the note.");
    let ctl = Controller::start(&p.dir, &[]);
    let q = parked_question(&p.dir, &ctl);
    let url = ctl.url(&format!("/api/projects/ask/questions/{}/answer", q.id));
    let post = |body: &str| http("POST", &url, &[("content-type", "application/json")], Some(body));
    let r = post(r#"{"choice": 1}"#);
    assert_eq!((r.status, r.json()["details"][0]["path"].as_str()), (400, Some("/choice")), "{}", r.json());
    let r = post(r#"{"answer": "   "}"#);
    assert_eq!((r.status, r.json()["details"][0]["path"].as_str()), (400, Some("/answer")), "{}", r.json());
    assert_eq!(post(r#"{"answer": "On rain"}"#).status, 200);
    activation_ended(&p.dir, &q.activation_id, &ctl);
    assert!(results(&p.dir, &q.activation_id)[0].to_string().contains("answered: On rain"));
    assert_eq!(ctl.stop(), Some(0));
}

#[test]
fn a_question_survives_kill_9_and_its_answer_after_the_restart_reaches_the_model_once() {
    let p = project(ASK_COLOUR, &[]);
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Write the note.");
    let mut ctl = Controller::start(&p.dir, &[]);
    let q = parked_question(&p.dir, &ctl);
    ctl.child.kill().unwrap();
    ctl.child.wait().unwrap();
    drop(ctl);
    let host = store(&p.dir);
    assert_eq!(host.store.question(&q.id).unwrap().unwrap().status, QuestionStatus::Pending);
    assert_eq!(host.store.activation(&q.activation_id).unwrap().unwrap().status, ActivationStatus::WaitingUser);
    drop(host);

    let ctl = Controller::start(&p.dir, &[]);
    // Adopted: the resumed activation waits on the same question, not a new one.
    let again = parked_question(&p.dir, &ctl);
    assert_eq!(again.id, q.id);
    cli(&p.dir, &["answer", &dir, &q.id, "green"]);
    let ended = activation_ended(&p.dir, &q.activation_id, &ctl);
    assert_eq!(
        (ended.status, ended.text.as_deref()),
        (ActivationStatus::Completed, Some("Noted.")),
        "{}",
        ctl.stderr()
    );
    let results = results(&p.dir, &q.activation_id);
    assert_eq!(results.len(), 2, "the answer, then the next turn's result: {results:?}");
    assert!(results[0].to_string().contains("answered: green"), "{results:?}");
    assert_eq!(assistant_turns(&p.dir, &q.activation_id), 2);
    let all = store(&p.dir).store.questions(false, 10).unwrap();
    assert_eq!(all.len(), 1, "nothing was asked twice: {all:?}");
    assert_eq!(ctl.stop(), Some(0));
}

const ASK_TWICE: &str = r#"
activations:
  - agent: writer
    steps:
      - call: [{tool: ask_user, input: {question: "Which colour?", choices: [red, blue], default: blue}}]
      - call: [{tool: ask_user, input: {question: "What title?"}}]
      - call: [{tool: ask_user, input: {question: "Which size?", choices: [S, M], default: L}}]
      - call: [{tool: ask_user, input: {question: "Which size?", choices: S}}]
      - say: "Done asking."
        call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;

/// Each question's result in the activation, in order.
fn run_unattended(p: &TempProject) -> (Vec<Value>, Vec<QuestionRecord>) {
    say(&p.dir, "writer", "P2", "Write the note.");
    let ctl = Controller::start(&p.dir, &[]);
    let act = wait_for("the writer's activation", Some(&ctl), || {
        store(&p.dir).store.list_activations(Some("writer"), None, Some(10)).ok()?.pop().map(|a| a.id)
    });
    let ended = activation_ended(&p.dir, &act, &ctl);
    assert_eq!(
        (ended.status, ended.text.as_deref()),
        (ActivationStatus::Completed, Some("Done asking.")),
        "{}",
        ctl.stderr()
    );
    let results = results(&p.dir, &act);
    let questions = store(&p.dir).store.questions(false, 10).unwrap();
    assert_eq!(ctl.stop(), Some(0));
    (results, questions)
}

#[test]
fn nobody_answering_by_the_deadline_gives_the_default_or_a_failure_the_model_can_act_on() {
    let p = project(ASK_TWICE, &[("writer: {tools:", "writer: {permissions: {approvalTimeout: 2s}, tools:")]);
    let (results, questions) = run_unattended(&p);
    assert_eq!(questions.len(), 2, "the third call's default is not among its choices: {questions:?}");
    let (first, second, third) = (results[0].to_string(), results[1].to_string(), results[2].to_string());
    assert!(
        first.contains("did not answer (nobody answered within 2 s (permissions.approvalTimeout)), so the default answer applies: blue"),
        "{first}"
    );
    assert!(second.contains("Nobody answered your question") && second.contains("it has no default"), "{second}");
    assert!(third.contains("/default `L` must be one of the choices (S, M)"), "{third}");
    // The schema is checked as for every tool: choices must be an array of strings.
    let fourth = results[3].to_string();
    assert!(fourth.contains("/choices") && fourth.contains("ask_user"), "{fourth}");
    assert_eq!(
        (questions[0].status, questions[0].answered_by.as_deref()),
        (QuestionStatus::Defaulted, Some("timeout"))
    );
    assert_eq!((questions[0].answer.as_deref(), questions[0].choice), (Some("blue"), Some(2)));
    assert_eq!((questions[1].status, questions[1].answer.as_deref()), (QuestionStatus::Unanswered, None));
    let actions: Vec<_> = answer_lines(&p.dir).iter().map(|l| l["userAction"].as_str().unwrap().to_string()).collect();
    assert_eq!(actions, ["default", "unanswered"]);
}

#[test]
fn on_ask_deny_answers_at_once_with_the_default_or_the_failure() {
    let p = project(ASK_TWICE, &[("writer: {tools:", "writer: {permissions: {onAsk: deny}, tools:")]);
    let (results, questions) = run_unattended(&p);
    let (first, second) = (results[0].to_string(), results[1].to_string());
    assert!(
        first.contains("nobody is asked here (permissions.onAsk: deny)") && first.contains("applies: blue"),
        "{first}"
    );
    assert!(second.contains("Nobody answered your question (nobody is asked here"), "{second}");
    let by: Vec<_> = questions.iter().map(|q| (q.status, q.answered_by.clone().unwrap())).collect();
    assert_eq!(
        by,
        [
            (QuestionStatus::Defaulted, "permissions.onAsk: deny".to_string()),
            (QuestionStatus::Unanswered, "permissions.onAsk: deny".to_string())
        ]
    );
    // Closed at once: the agent's deadline is the default 24 h, so nothing waited for it.
    assert!(questions.iter().all(|q| q.expires_at - q.created_at > chrono::Duration::hours(23)), "{questions:?}");
}

const SILENT_ASKS: &str = r#"
activations:
  - agent: silent
    steps:
      - call: [{tool: ask_user, input: {question: "May I?"}}]
      - say: "Went on."
        call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;

/// `ask_user` is a tool like any other: an agent whose allowlist lacks it cannot ask.
#[test]
fn an_agent_without_ask_user_in_its_allowlist_cannot_ask() {
    let p = project(SILENT_ASKS, &[]);
    say(&p.dir, "silent", "P2", "Go.");
    let ctl = Controller::start(&p.dir, &[]);
    let act = wait_for("silent's activation", Some(&ctl), || {
        store(&p.dir).store.list_activations(Some("silent"), None, Some(10)).ok()?.pop().map(|a| a.id)
    });
    let ended = activation_ended(&p.dir, &act, &ctl);
    assert_eq!(ended.text.as_deref(), Some("Went on."), "{}", ctl.stderr());
    let first = results(&p.dir, &act)[0].to_string();
    assert!(first.contains("Tool not allowed for silent: ask_user"), "{first}");
    assert!(store(&p.dir).store.questions(false, 10).unwrap().is_empty());
    assert_eq!(ctl.stop(), Some(0));
}

const ASK_THEN_PM: &str = r#"
activations:
  - agent: writer
    steps:
      - call: [{tool: ask_user, input: {question: "Which colour?", choices: [red, blue]}}]
      - say: "Never reached."
  - agent: writer
    steps:
      - say: "Handled the P0."
        call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;

/// A P0 pre-empts an activation parked on a question: the question is cancelled with it (an
/// answer afterwards is refused) and the P0's activation runs.
#[test]
fn a_p0_preempts_a_waiting_question() {
    let p = project(ASK_THEN_PM, &[]);
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Write the note.");
    let ctl = Controller::start(&p.dir, &[]);
    let q = parked_question(&p.dir, &ctl);
    say(&p.dir, "writer", "P0", "Stop, urgent.");
    let ended = activation_ended(&p.dir, &q.activation_id, &ctl);
    assert_eq!(ended.status, ActivationStatus::Cancelled, "{}", ctl.stderr());
    let cancelled = store(&p.dir).store.question(&q.id).unwrap().unwrap();
    assert_eq!(cancelled.status, QuestionStatus::Cancelled);
    let why = refused(&p.dir, &["answer", &dir, &q.id, "red"]);
    assert!(why.contains("is already cancelled"), "{why}");
    wait_for("the P0's activation", Some(&ctl), || {
        let all = store(&p.dir).store.list_activations(Some("writer"), None, Some(10)).ok()?;
        all.into_iter().find(|a| a.text.as_deref() == Some("Handled the P0.")).map(drop)
    });
    assert_eq!(ctl.stop(), Some(0));
}

const ASK_COLOUR_THEN_TITLE: &str = r#"
activations:
  - agent: writer
    steps:
      - call: [{tool: ask_user, input: {question: "Which colour for the note?", choices: [red, blue, green], default: red}}]
      - call: [{tool: ask_user, input: {question: "What title?"}}]
      - say: "Noted."
        call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;

/// The WebUI in a real Chromium: the Approvals page lists the question with its choices as
/// buttons; clicking one answers it (as `webui`); the next question, without choices, is
/// answered in its text field (an empty answer is refused on the card); the activation
/// continues with both answers.
#[tokio::test(flavor = "multi_thread")]
async fn the_webui_answers_questions_with_a_choice_button_and_a_text_field() {
    let p = project(ASK_COLOUR_THEN_TITLE, &[]);
    say(&p.dir, "writer", "P2", "Write the note.");
    let ctl = tokio::task::block_in_place(|| Controller::start(&p.dir, &[]));
    let q = tokio::task::block_in_place(|| parked_question(&p.dir, &ctl));
    let b = webdriver::Browser::start().await.unwrap_or_else(|e| panic!("the browser tests need Chromium: {e}"));
    let outcome = webui_answers(&b, &ctl, &q).await;
    if let Err(e) = outcome {
        let html = b.source().await.unwrap_or_default();
        panic!("{e}\npage:\n{html}\ncontroller:\n{}", ctl.stderr());
    }
    let ended = tokio::task::block_in_place(|| activation_ended(&p.dir, &q.activation_id, &ctl));
    assert_eq!(ended.status, ActivationStatus::Completed);
    let answered = store(&p.dir).store.question(&q.id).unwrap().unwrap();
    assert_eq!((answered.answered_by.as_deref(), answered.answer.as_deref()), (Some("webui"), Some("green")));
    let results = results(&p.dir, &q.activation_id);
    assert!(results[0].to_string().contains("(webui) answered: green"), "{results:?}");
    assert!(results[1].to_string().contains("(webui) answered: Green notes"), "{results:?}");
    assert_eq!(tokio::task::block_in_place(|| ctl.stop()), Some(0));
}

async fn webui_answers(b: &webdriver::Browser, ctl: &Controller, q: &QuestionRecord) -> webdriver::Result<()> {
    b.goto(&ctl.url("/")).await?;
    b.wait_for_text(r#"[data-questions-agent="writer"]"#, "1 question(s) for you").await?;
    b.wait_for_text("#approvals-count", "1").await?;
    b.goto(&ctl.url(&format!("/#/activations/{}", q.activation_id))).await?;
    b.wait_for_text(".page-head .pill", "waiting_user").await?;
    b.click(&b.find(r#"a[data-view="approvals"]"#).await?).await?;
    let card_css = format!(r#"article[data-question="{}"]"#, q.id);
    let card = b.wait_for_text(&card_css, "Which colour for the note?").await?;
    let shown = card.text().await?;
    for needle in ["writer", "red (default)", "blue", "green"] {
        assert!(shown.contains(needle), "{needle:?} on the card:\n{shown}");
    }
    b.click(&b.find_in(&card, r#"button[data-choice="3"]"#).await?).await?;
    let (_, answered) = b.wait_for_text_of(&format!(r#"[data-answered="{}"]"#, q.id), "green").await?;
    assert!(answered.contains("by webui"), "{answered}");
    b.wait_until(&format!("!document.querySelector('{card_css}')")).await?;

    // The next question has no choices: a text field.
    let card = b.wait_for_text("article[data-question]", "What title?").await?;
    let answer = b.find_in(&card, r#"textarea[name="answer"]"#).await?;
    b.click(&b.find_in(&card, r#"button[data-action="answer"]"#).await?).await?;
    b.wait_for_text("article[data-question] [role=status]", "an answer is required").await?;
    answer.send_keys("Green notes").await?;
    b.click(&b.find_in(&card, r#"button[data-action="answer"]"#).await?).await?;
    b.wait_for_text("[data-answered]", "Green notes").await?;
    b.wait_until("!document.querySelector('article[data-question]')").await?;
    Ok(())
}

/// An MCP client (the official Python SDK over `suzumio mcp` stdio) that declared elicitation:
/// the agent's `ask_user` call is put to it as a form whose answer is one of the choices, and
/// its answer is the call's result, recorded as `mcp:<client>`. A client answering outside the
/// choices is refused and asked again.
const CLIENT: &str = r#"
import asyncio, json, sys
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

async def main():
    suzumio, project, answers = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    asked = []
    async def elicit(context, params):
        asked.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return types.ElicitResult(action="accept", content={"answer": answers[min(len(asked), len(answers)) - 1]})
    params = StdioServerParameters(command=suzumio, args=["mcp", project, "--agent", "writer", "--backend", "process"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicit,
                                 client_info=types.Implementation(name="ask-stdio", version="1.0")) as session:
            await session.initialize()
            result = await session.call_tool("ask_user", {"question": "Which colour?", "choices": ["red", "blue"]})
    print(json.dumps({"result": result.model_dump(mode="json", by_alias=True, exclude_none=True), "asked": asked}))

asyncio.run(main())
"#;

#[test]
fn an_mcp_client_with_elicitation_answers_the_question() {
    let p = project("activations: []\n", &[]);
    let suzumio = env!("CARGO_BIN_EXE_suzumio");
    // The first answer is not a choice: refused, the question stays open and is asked again.
    let printed =
        mcp_client::run(&p.dir, "client.py", CLIENT, &[suzumio, &p.dir.to_string_lossy(), r#"["purple", "blue"]"#]);
    let asked = mcp_client::list(&printed, "asked");
    assert!(asked.len() >= 2, "asked again after a refused answer: {asked:?}");
    let message = asked[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("The agent `writer` asks you: Which colour?"), "{message}");
    assert_eq!(asked[0]["requestedSchema"]["properties"]["answer"]["enum"], json!(["red", "blue"]), "{asked:?}");
    let result = &printed["result"];
    assert_ne!(result["isError"], true, "{result}");
    assert_eq!(
        result["structuredContent"],
        json!({"answer": "blue", "choice": 2, "answeredBy": "mcp:ask-stdio"}),
        "{result}"
    );
    let questions = store(&p.dir).store.questions(false, 10).unwrap();
    assert_eq!(questions.len(), 1, "{questions:?}");
    assert_eq!(questions[0].answered_by.as_deref(), Some("mcp:ask-stdio"));
    let lines = answer_lines(&p.dir);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["source"], format!("question {} by mcp:ask-stdio", questions[0].id));
}

/// The SDK's high-level `Client` over `/mcp/<agent>` of a running `suzumio run`: it negotiates
/// the stateless protocol (2026-07-28, no requests to the client), so the question comes back as
/// "input required", and the client's retry carries the answer.
const MODERN_CLIENT: &str = r#"
import asyncio, json, sys
from mcp import Client, types

async def main():
    url, answers = sys.argv[1], json.loads(sys.argv[2])
    asked = []
    async def elicit(context, params):
        asked.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return types.ElicitResult(action="accept", content={"answer": answers[min(len(asked), len(answers)) - 1]})
    async with Client(url, elicitation_callback=elicit,
                      client_info=types.Implementation(name="ask-modern", version="1.0")) as client:
        result = await client.call_tool("ask_user", {"question": "Which size?", "choices": ["S", "M", "L"]})
        version = client.protocol_version
    print(json.dumps({"version": version, "result": result.model_dump(mode="json", by_alias=True, exclude_none=True),
                      "asked": asked}))

asyncio.run(main())
"#;

#[test]
fn a_client_on_the_stateless_protocol_answers_through_input_required() {
    let p = project("activations: []\n", &[]);
    let ctl = Controller::start(&p.dir, &[]);
    let url = ctl.url("/mcp/writer");
    let printed = mcp_client::run(&p.dir, "modern_client.py", MODERN_CLIENT, &[&url, r#"["XL", "M"]"#]);
    assert_eq!(printed["version"], "2026-07-28", "{printed}");
    let asked = mcp_client::list(&printed, "asked");
    assert_eq!(asked.len(), 2, "asked again after the refused answer: {asked:?}");
    assert!(asked[0]["message"].as_str().unwrap_or_default().contains("asks you: Which size?"), "{asked:?}");
    let result = &printed["result"];
    assert_eq!(
        result["structuredContent"],
        json!({"answer": "M", "choice": 2, "answeredBy": "mcp:ask-modern"}),
        "{result}"
    );
    assert_eq!(ctl.stop(), Some(0));
    let questions = store(&p.dir).store.questions(false, 10).unwrap();
    assert_eq!(questions.len(), 1, "{questions:?}");
    assert_eq!((questions[0].status, questions[0].answer.as_deref()), (QuestionStatus::Answered, Some("M")));
}
