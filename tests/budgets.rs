//! Budgets and the wake-loop guard end to end in the controller: scheduler → activation →
//! scripted model (or a local OpenAI-compatible server when the usage numbers matter) → store,
//! with a manual clock so periods roll over by hand, and the real `suzumio` binary for
//! `status` and `resume`, and Chromium for the WebUI's banner.

mod support;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DurationRound, Utc};
use serde_json::{Value, json};
use support::{suzumio, text};
use suzumio::activation::providers::{ProviderPool, RetryPolicy};
use suzumio::activation::{Activations, NoRunner};
use suzumio::clock::ManualClock;
use suzumio::config::load::ProcessEnv;
use suzumio::project::Project;
use suzumio::scheduler::Scheduler;
use suzumio::store::{Event, MessageQuery, ProjectStatus, SendMessage, SignalQuery, SignalStatus, StateFiles, Store};
use suzumio::support::ToolHost;

struct World {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    host: Arc<ToolHost>,
    scheduler: Arc<Scheduler>,
    activations: Arc<Activations>,
}

const SCRIPTED: &str =
    "      providers: {local: {type: scripted, script: ./script.yaml}}\n      presets: {main: {provider: local}}\n";

/// A project with `pm` and `worker`, `extra` YAML at the top level (budgets) and `worker`'s
/// own settings, on a manual clock that starts now.
fn world(script: &str, top: &str, worker: &str, models: &str) -> World {
    let tmp = tempfile::Builder::new().prefix("suzumio-budget-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    std::fs::write(dir.join("script.yaml"), script).unwrap();
    std::fs::write(
        dir.join("suzumio.yaml"),
        format!(
            r#"name: budgets
task: Exchange messages.
tools:
  toolpacks: [core]
agents:
  pm: {{tools: [messages.send, coordination.wait_for_signal]}}
  worker: {{tools: [messages.send, coordination.wait_for_signal, completion.submit]{worker}}}
{top}backend:
  runner:
    model: main
    models:
{models}"#
        ),
    )
    .unwrap();
    open(tmp, Arc::new(ManualClock::new(Utc::now())))
}

/// The controller's parts over a project directory (again, after its config changed).
fn open(tmp: tempfile::TempDir, clock: Arc<ManualClock>) -> World {
    let dir = tmp.path().to_path_buf();
    let project = Arc::new(Project::load(&dir, &ProcessEnv).unwrap_or_else(|e| panic!("{e}")));
    let store = Store::open(&project.config, clock.clone()).unwrap();
    store.set_project_status(ProjectStatus::Running).unwrap();
    let host = ToolHost::new(project, store, StateFiles::new(&dir));
    let providers = ProviderPool::new(|name| std::env::var(name).ok(), RetryPolicy::none());
    let activations =
        Activations::with_providers(host.clone(), Arc::new(NoRunner("no container in this test".into())), providers);
    let scheduler = Arc::new(Scheduler::new(host.clone(), activations.clone()));
    World { dir: tmp, clock, host, scheduler, activations }
}

impl World {
    fn store(&self) -> &Store {
        &self.host.store
    }

    /// Tick until nothing runs and nothing a non-paused agent could start on is pending.
    async fn settle(&self) {
        for _ in 0..2000 {
            let report = self.scheduler.tick().await;
            assert!(report.errors.is_empty(), "{:?}", report.errors);
            tokio::time::sleep(Duration::from_millis(5)).await;
            let idle = self.activations.running() == 0 && !self.store().has_schedulable_signals().unwrap();
            if idle && report.started.is_empty() {
                return;
            }
        }
        panic!("the project did not settle");
    }

    fn user_says(&self, to: &str, body: &str) {
        self.store()
            .send_message(SendMessage {
                sender: "user".into(),
                recipient: Some(to.into()),
                body: body.into(),
                ..Default::default()
            })
            .unwrap();
    }

    fn cli(&self, args: &[&str]) -> String {
        let dir = self.dir.path().to_string_lossy().to_string();
        let mut full = vec![args[0], &dir];
        full.extend(&args[1..]);
        let out = suzumio(self.dir.path(), &full);
        assert_eq!(out.status.code(), Some(0), "{full:?}: {}", text(&out.stderr));
        text(&out.stdout)
    }

    fn activations_of(&self, agent: &str) -> Vec<suzumio::store::ActivationRecord> {
        let mut all = self.store().list_activations(Some(agent), None, Some(500)).unwrap();
        all.reverse();
        all
    }

    fn events(&self, kind: &str) -> Vec<Event> {
        self.store().events_of_kind(kind, 1000).unwrap().into_iter().map(|e| e.event).collect()
    }

    fn pending_for(&self, agent: &str) -> usize {
        let q = SignalQuery {
            target_agent: Some(agent.into()),
            status: Some(SignalStatus::Pending),
            limit: Some(500),
            ..Default::default()
        };
        self.store().list_signals(&q).unwrap().len()
    }

    fn bodies_between(&self, a: &str, b: &str) -> Vec<String> {
        let q = MessageQuery { participant_a: Some(a.into()), participant_b: Some(b.into()), ..Default::default() };
        self.store().list_messages(&q).unwrap().into_iter().map(|m| m.body).collect()
    }
}

#[tokio::test]
async fn a_token_budget_pauses_an_agent_mid_run_and_resume_continues_it() {
    let script = r#"
activations:
  - agent: worker
    when: "Do the work"
    steps:
      - call: [{tool: messages.send, input: {recipient: pm, body: "part one"}}]
      - call: [{tool: messages.send, input: {recipient: pm, body: "part two"}}]
  - agent: worker
    when: "You were paused"
    steps:
      - call:
          - {tool: messages.send, input: {recipient: pm, body: "part two, after the pause"}}
          - {tool: coordination.wait_for_signal, input: {reason: "done", notifyPm: false}}
"#;
    // The first call alone (the whole prompt) is over 100 tokens: the second call never happens.
    let w = world(script, "", ", budget: {maxTokensPerActivation: 100}", SCRIPTED);
    w.user_says("worker", "Do the work.");
    w.settle().await;

    let first = &w.activations_of("worker")[0];
    assert_eq!(first.status.as_str(), "completed", "the activation that hit the budget ends cleanly");
    let note = first.text.as_deref().unwrap_or_default();
    assert!(note.starts_with("Paused: budget: worker used") && note.contains("(maxTokensPerActivation 100)"), "{note}");
    let pause = w.store().agent("worker").unwrap().unwrap().paused.expect("worker is paused");
    assert_eq!((pause.limit.as_str(), pause.activation_id.as_deref()), ("maxTokensPerActivation", Some(&*first.id)));
    assert_eq!(w.bodies_between("worker", "pm"), ["part one"]);
    assert!(matches!(&w.events("agent.paused")[..], [Event::AgentPaused { agent_id, .. }] if agent_id == "worker"));
    let status = w.cli(&["status"]);
    assert!(
        status.contains("PAUSED: budget: worker used") && status.contains("suzumio resume <dir> worker"),
        "{status}"
    );

    // Nothing starts while it is paused, however long the scheduler runs.
    w.settle().await;
    assert_eq!(w.activations_of("worker").len(), 1);

    assert_eq!(w.cli(&["resume", "worker"]).trim(), format!("worker: resumed (was paused: {})", pause.reason));
    w.settle().await;
    let after = w.activations_of("worker");
    assert_eq!(after.len(), 2, "resuming started one activation, which continued the work");
    assert_eq!(after[1].status.as_str(), "completed");
    let prompt = w.store().activation(&after[1].id).unwrap().unwrap().prompt;
    assert!(prompt.contains("You were paused during activation"), "{prompt}");
    assert_eq!(w.bodies_between("worker", "pm"), ["part one", "part two, after the pause"]);
    assert!(w.store().agent("worker").unwrap().unwrap().paused.is_none());
    assert!(
        matches!(&w.events("agent.resumed")[..], [Event::AgentResumed { reason, .. }] if reason == "resumed by the user")
    );
}

#[tokio::test]
async fn an_activations_per_hour_budget_pauses_and_the_next_hour_resumes() {
    let script = r#"
activations:
  - agent: worker
    repeat: true
    steps:
      - call: [{tool: coordination.wait_for_signal, input: {reason: "read it", notifyPm: false}}]
"#;
    let w = world(script, "", ", budget: {maxActivationsPerHour: 2}", SCRIPTED);
    for i in 1..=3 {
        w.user_says("worker", &format!("note {i}"));
    }
    w.settle().await;
    let runs = w.activations_of("worker");
    assert_eq!(runs.len(), 3);
    assert_eq!(runs.iter().map(|a| a.status.as_str()).collect::<Vec<_>>(), ["completed", "completed", "cancelled"]);
    let error = runs[2].error.as_deref().unwrap_or_default();
    assert!(error.contains("worker started 3 activations this hour (maxActivationsPerHour 2)"), "{error}");
    // Paused before its first model call: its message went back to pending.
    assert_eq!(w.pending_for("worker"), 1);
    let pause = w.store().agent("worker").unwrap().unwrap().paused.expect("paused");
    let next_hour = w.store().now().duration_trunc(chrono::Duration::hours(1)).unwrap() + chrono::Duration::hours(1);
    assert_eq!(pause.until.map(suzumio::clock::iso), Some(suzumio::clock::iso(next_hour)));

    // Paused agents get no activation, though signals keep arriving: they stay pending.
    w.user_says("worker", "note 4");
    w.clock.set(next_hour - chrono::Duration::seconds(1));
    w.settle().await;
    assert_eq!((w.activations_of("worker").len(), w.pending_for("worker")), (3, 2));

    w.clock.set(next_hour + chrono::Duration::seconds(1));
    w.settle().await;
    assert!(w.store().agent("worker").unwrap().unwrap().paused.is_none());
    let resumed = w.events("agent.resumed");
    assert!(
        matches!(&resumed[..], [Event::AgentResumed { reason, .. }] if reason == "the period of maxActivationsPerHour ended"),
        "{resumed:?}"
    );
    let runs = w.activations_of("worker");
    assert_eq!((runs.len(), w.pending_for("worker")), (5, 0), "both pending notes were delivered in the new hour");
    assert!(runs[3..].iter().all(|a| a.status.as_str() == "completed"));
}

/// The issue measured 803 activations in 56 s with two agents that answer every message.
#[tokio::test]
async fn the_ping_pong_loop_is_stopped_by_the_guard_within_its_window() {
    let script = r#"
activations:
  - agent: pm
    repeat: true
    steps:
      - call:
          - {tool: messages.send, input: {recipient: worker, body: "ping"}}
          - {tool: coordination.wait_for_signal, input: {reason: "waiting for the worker"}}
  - agent: worker
    repeat: true
    steps:
      - call:
          - {tool: messages.send, input: {recipient: pm, body: "pong"}}
          - {tool: coordination.wait_for_signal, input: {reason: "waiting for the pm"}}
"#;
    let guard = "budgets:\n  loopGuard: {maxActivations: 10, windowSeconds: 60}\n";
    let w = world(script, guard, "", SCRIPTED);
    w.user_says("pm", "Start talking.");
    w.settle().await;

    let (pm, worker) = (w.activations_of("pm").len(), w.activations_of("worker").len());
    assert!(pm <= 12 && worker <= 12, "the guard stopped the loop: {pm} pm and {worker} worker activations");
    for agent in ["pm", "worker"] {
        let pause = w.store().agent(agent).unwrap().unwrap().paused.unwrap_or_else(|| panic!("{agent} is paused"));
        assert!(pause.reason.starts_with("wake loop: "), "{}", pause.reason);
        assert!(pause.until.is_none(), "a wake loop waits for the user");
    }
    let status = w.cli(&["status"]);
    assert!(status.contains("PAUSED: wake loop:") && status.contains("loopGuard.maxActivations 10"), "{status}");
    // The reason names who woke whom.
    let pm_line = status.lines().find(|l| l.trim_start().starts_with("pm ")).unwrap();
    assert!(pm_line.contains("woken by worker") || pm_line.contains("woken by pm"), "{pm_line}");
}

#[tokio::test]
async fn real_work_in_the_window_keeps_the_guard_quiet() {
    // Same exchange, but the worker submits (a useful effect that is not a message) once:
    // the guard only stops loops in which nobody does anything but talk.
    let script = r#"
activations:
  - agent: worker
    when: "ping 1"
    steps:
      - call: [{tool: completion.submit, input: {report: "done"}}]
  - agent: worker
    repeat: true
    steps:
      - call: [{tool: messages.send, input: {recipient: pm, body: "pong"}}]
"#;
    let guard = "budgets:\n  loopGuard: {maxActivations: 2, windowSeconds: 60}\n";
    let w = world(script, guard, "", SCRIPTED);
    for i in 1..=4 {
        w.store()
            .send_message(SendMessage {
                sender: "pm".into(),
                recipient: Some("worker".into()),
                body: format!("ping {i}"),
                source_agent: Some("pm".into()),
                ..Default::default()
            })
            .unwrap();
        w.settle().await;
        // Submitting stops scheduling; this test is about the guard, so keep the project going.
        w.store().set_project_status(ProjectStatus::Running).unwrap();
    }
    assert_eq!(w.activations_of("worker").len(), 4);
    assert!(w.store().agent("worker").unwrap().unwrap().paused.is_none());
}

#[tokio::test]
async fn wait_for_signal_does_not_wake_a_coordinator_that_is_itself_waiting() {
    let script = r#"
activations:
  - agent: pm
    steps:
      - call: [{tool: coordination.wait_for_signal, input: {reason: "waiting for the worker"}}]
  - agent: worker
    steps:
      - call: [{tool: coordination.wait_for_signal, input: {reason: "nothing to do"}}]
"#;
    let w = world(script, "", "", SCRIPTED);
    w.user_says("pm", "Wait.");
    w.settle().await;
    w.user_says("worker", "Wait too.");
    w.settle().await;
    // notifyPm still tells the coordinator (the message is there), but does not wake it.
    let notes = w.bodies_between("worker", "pm");
    assert_eq!(notes, ["Waiting for future signals.\n\nReason: nothing to do"]);
    assert_eq!(w.activations_of("pm").len(), 1);
    assert_eq!(w.pending_for("pm"), 0);
}

// ---------------------------------------------------------------------------------------------
// A local OpenAI-compatible server: every answer calls `coordination.wait_for_signal` and
// reports fixed usage, so tokens and cost are known.

async fn openai_server(prompt_tokens: u64, completion_tokens: u64) -> (String, Arc<Mutex<u64>>) {
    let calls = Arc::new(Mutex::new(0u64));
    let counter = calls.clone();
    let app = axum::Router::new().fallback(move || {
        let counter = counter.clone();
        async move {
            *counter.lock().unwrap() += 1;
            axum::Json(json!({
                "choices": [{
                    "message": {"role": "assistant", "content": null, "tool_calls": [{
                        "id": "call_1", "type": "function",
                        "function": {"name": "coordination_wait_for_signal", "arguments": "{\"reason\":\"read\",\"notifyPm\":false}"}
                    }]},
                    "finish_reason": "tool_calls"
                }],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
            }))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, calls)
}

#[tokio::test]
async fn cost_is_computed_from_the_preset_prices_and_a_cost_budget_pauses() {
    let (url, calls) = openai_server(1000, 500).await;
    let models = format!(
        "      providers: {{local: {{type: openai-compatible, baseURL: \"{url}\"}}}}\n      presets: {{main: {{provider: local, model: m, inputPerMTok: 2, outputPerMTok: 10}}}}\n"
    );
    let w = world("activations: []\n", "", ", budget: {maxCostPerDay: 0.01}", &models);
    for i in 1..=3 {
        w.user_says("worker", &format!("note {i}"));
    }
    w.settle().await;

    // 1000 input tokens at 2 and 500 output tokens at 10 per million: 0.007 a call.
    let runs = w.activations_of("worker");
    let usage = runs[0].usage.as_ref().expect("usage recorded");
    assert_eq!((usage.model_calls, usage.input_tokens), (1, 1000));
    assert_eq!((usage.cached_input_tokens, usage.output_tokens), (0, 500));
    assert!((usage.cost.unwrap() - 0.007).abs() < 1e-12, "{usage:?}");
    assert_eq!(usage.models, ["main (m)"]);

    // The second activation starts under the limit (0.007 < 0.01); the third finds 0.014 spent.
    assert_eq!(runs.iter().map(|a| a.status.as_str()).collect::<Vec<_>>(), ["completed", "completed", "cancelled"]);
    assert_eq!(*calls.lock().unwrap(), 2, "no model call once the budget was spent");
    let pause = w.store().agent("worker").unwrap().unwrap().paused.expect("paused");
    assert_eq!(pause.reason, "budget: worker spent 0.0140 today (maxCostPerDay 0.01)");

    let status = w.cli(&["status"]);
    let line = status.lines().find(|l| l.trim_start().starts_with("worker ") && l.contains("tokens")).unwrap();
    assert!(
        line.contains("tokens 3000 of 20000000 (input 2000, cached 0, output 1000), cost 0.0140 of 0.01"),
        "{status}"
    );
    assert!(line.contains("activations this hour 3 of 120"), "{line}");
}

#[tokio::test]
async fn a_project_budget_pauses_and_raising_it_resumes() {
    let script = r#"
activations:
  - agent: worker
    steps:
      - call: [{tool: messages.send, input: {recipient: pm, body: "one"}}]
      - call: [{tool: messages.send, input: {recipient: pm, body: "two"}}]
"#;
    let budget = "budgets:\n  project: {maxTokensPerDay: 100}\n";
    let w = world(script, budget, "", SCRIPTED);
    w.user_says("worker", "Go.");
    w.settle().await;
    let pause = w.store().agent("worker").unwrap().unwrap().paused.expect("paused by the project budget");
    assert!(pause.reason.starts_with("budget: the project used "), "{}", pause.reason);
    assert!(pause.reason.ends_with(" tokens today (budgets.project.maxTokensPerDay 100)"), "{}", pause.reason);
    assert_eq!((pause.scope.as_str(), w.bodies_between("worker", "pm")), ("project", vec!["one".to_string()]));

    // The user raises the budget and runs the project again: the pause ends by itself.
    let file = w.dir.path().join("suzumio.yaml");
    let raised = std::fs::read_to_string(&file).unwrap().replace("maxTokensPerDay: 100", "maxTokensPerDay: 1000000");
    std::fs::write(&file, raised).unwrap();
    let World { dir, clock, .. } = w;
    let w = open(dir, clock);
    w.settle().await;
    assert!(w.store().agent("worker").unwrap().unwrap().paused.is_none());
    // The pm, woken by the message, found the project over budget too; both resume.
    let resumed: Vec<(String, String)> = w
        .events("agent.resumed")
        .into_iter()
        .filter_map(|e| match e {
            Event::AgentResumed { agent_id, reason } => Some((agent_id, reason)),
            _ => None,
        })
        .collect();
    let raised = "maxTokensPerDay was raised from 100 to 1000000".to_string();
    assert_eq!(resumed, [("worker".to_string(), raised.clone()), ("pm".to_string(), raised)]);
    // The worker was stopped mid-activation, so it was told to continue.
    assert_eq!(w.activations_of("worker").len(), 2);
}

#[test]
fn the_api_shows_a_paused_agent_and_its_budget_and_resumes_it() {
    let (_w, c) = paused_worker_controller();
    let p = "/api/projects/budgets";
    let sent =
        support::http("POST", &c.url(&format!("{p}/messages")), &[], Some(r#"{"recipient": "worker", "body": "Go."}"#));
    assert_eq!(sent.status, 201, "{}", sent.body);
    let worker = support::wait_for("the worker to be paused", Some(&c), || {
        let agents = support::http("GET", &c.url(&format!("{p}/agents")), &[], None).json();
        let worker = agents.as_array().unwrap().iter().find(|a| a["id"] == "worker").unwrap().clone();
        worker.get("paused").is_some().then_some(worker)
    });
    assert_eq!(worker["paused"]["limit"], "maxTokensPerActivation");
    assert_eq!(worker["budget"]["maxTokensPerActivation"], 100);
    assert!(worker["budget"]["today"]["inputTokens"].as_u64().unwrap() > 100, "{worker}");
    let summary = support::http("GET", &c.url(p), &[], None).json();
    assert_eq!(summary["budget"]["today"], worker["budget"]["today"], "the worker is the only one that spent");

    let resumed = support::http("POST", &c.url(&format!("{p}/agents/worker/resume")), &[], Some("{}"));
    assert_eq!((resumed.status, resumed.json()["resumed"].clone()), (200, json!(true)), "{}", resumed.body);
    let again = support::http("POST", &c.url(&format!("{p}/agents/worker/resume")), &[], Some("{}"));
    assert_eq!(again.json()["resumed"], json!(false));
    let unknown = support::http("POST", &c.url(&format!("{p}/agents/ghost/resume")), &[], Some("{}"));
    assert_eq!(unknown.status, 404);
}

/// A controller whose worker pauses on its first activation (its budget is 100 tokens).
fn paused_worker_controller() -> (World, support::Controller) {
    let w = world(
        "activations:\n  - agent: worker\n    steps:\n      - say: thinking\n        call: [{tool: messages.send, input: {recipient: user, body: hi}}]\n",
        "",
        ", budget: {maxTokensPerActivation: 100}",
        SCRIPTED,
    );
    let c = support::Controller::start(w.dir.path(), &[]);
    (w, c)
}

#[tokio::test]
async fn the_overview_shows_a_banner_for_a_paused_agent_and_resumes_it() {
    let (_w, c) = paused_worker_controller();
    suzumio::support::web_fetch::tls_provider();
    let http = reqwest::Client::builder().no_proxy().build().expect("the HTTP client builds");
    let sent = http
        .post(c.url("/api/projects/budgets/messages"))
        .json(&json!({"recipient": "worker", "body": "Go."}))
        .send()
        .await
        .expect("an answer");
    assert_eq!(sent.status(), 201);
    let b = webdriver::Browser::start().await.unwrap_or_else(|e| panic!("this test needs Chromium: {e}"));
    let outcome = async {
        b.goto(&c.url("/")).await?;
        b.wait_for_text(r#".pause-banner[data-agent="worker"]"#, "maxTokensPerActivation 100").await?;
        b.wait_for_text(".usage-line", "activations this hour").await?;
        b.click_css(r#".pause-banner[data-agent="worker"] button"#).await?;
        b.wait_until(r#"document.querySelector('.pause-banner[data-agent="worker"]') === null"#).await?;
        webdriver::Result::Ok(())
    }
    .await;
    if let Err(e) = outcome {
        let html = b.source().await.unwrap_or_default();
        panic!("{e}\npage:\n{html}\ncontroller log:\n{}", c.stderr());
    }
    let agents: Value = http.get(c.url("/api/projects/budgets/agents")).send().await.unwrap().json().await.unwrap();
    assert!(agents[1].get("paused").is_none(), "{agents}");
}
