//! The scheduler's rules (reference §1.3–§1.5, §10 items 7, 8, 13–19) on a real store with a
//! manual clock, starting real activations: the controller's model loop (`Activations`) with
//! the `scripted` provider. An activation ends as its script says (by default at once, with no
//! useful effect); one that must stay running fetches a page on 127.0.0.1 that answers only when
//! the test lets it ([`HeldPage`]).

mod support;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::Duration;
use serde_json::json;
use suzumio::activation::providers::{ProviderPool, RetryPolicy};
use suzumio::activation::{Activations, NoRunner};
use suzumio::clock::{Clock, ManualClock, parse_iso};
use suzumio::config::load::ProcessEnv;
use suzumio::project::Project;
use suzumio::scheduler::Scheduler;
use suzumio::scheduler::nudges::{FAILED, NO_EFFECT};
use suzumio::store::{
    ActivationRecord, ActivationStatus, AgentStatus, Event, ProjectStatus, SendMessage, SignalQuery, SignalRecord,
    SignalRequest, SignalStatus, StateFiles, Store,
};
use suzumio::support::ToolHost;
use tokio::sync::{mpsc, watch};

/// Guards every wait against hanging; never what decides a result.
const DEADLINE: StdDuration = StdDuration::from_secs(60);

struct World {
    _dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    host: Arc<ToolHost>,
    activations: Arc<Activations>,
    scheduler: Scheduler,
}

const BASE: &str = r#"
name: sched
task: Test the scheduler.
agents:
  pm: {tools: [messages.send, web.fetch]}
  worker: {tools: [messages.send, web.fetch]}
  critic: {tools: [messages.send, web.fetch]}
backend:
  runner:
    model: main
    models:
      providers: {local: {type: scripted, script: ./script.yaml}}
      presets: {main: {provider: local}}
"#;

/// A running project from `BASE` plus `extra` YAML (e.g. a `scheduler:` section), the model's
/// `script` (scripted provider; empty: every activation ends at once) and packs.
fn world_with(extra: &str, script: &str, packs: &[(&str, &str)]) -> World {
    let tmp = tempfile::Builder::new().prefix("suzumio-sched-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let mut yaml = format!(
        "{BASE}{extra}tools:\n  webFetch: {{allowPrivateAddresses: true}}\n  toolpacks:\n    - core\n    - web\n"
    );
    for (id, source) in packs {
        let pack = dir.join("packs").join(id);
        std::fs::create_dir_all(&pack).unwrap();
        let manifest = json!({"id": id, "tools": [], "webui": [{"id": format!("{id}.panel"), "title": "Panel"}]});
        std::fs::write(pack.join("suzumio.toolpack.json"), manifest.to_string()).unwrap();
        std::fs::write(pack.join("controller.mjs"), source).unwrap();
        yaml.push_str(&format!("    - {{path: ./packs/{id}, id: {id}}}\n"));
    }
    std::fs::write(dir.join("suzumio.yaml"), yaml).unwrap();
    std::fs::write(dir.join("script.yaml"), if script.is_empty() { "activations: []\n" } else { script }).unwrap();
    let clock = Arc::new(ManualClock::new(parse_iso("2026-03-01T09:00:00Z").unwrap()));
    let project = Arc::new(Project::load(&dir, &ProcessEnv).unwrap_or_else(|e| panic!("{e}")));
    let store = Store::open(&project.config, clock.clone()).unwrap();
    store.set_project_status(ProjectStatus::Running).unwrap();
    let host = ToolHost::new(project, store, StateFiles::new(&dir));
    let providers = ProviderPool::new(|_| None, RetryPolicy::none());
    let activations =
        Activations::with_providers(host.clone(), Arc::new(NoRunner("no container in this test".into())), providers);
    let scheduler = Scheduler::new(host.clone(), activations.clone());
    World { _dir: tmp, clock, host, activations, scheduler }
}

fn world(extra: &str) -> World {
    world_with(extra, "", &[])
}

fn scripted(extra: &str, script: &str) -> World {
    world_with(extra, script, &[])
}

impl World {
    fn store(&self) -> &Store {
        &self.host.store
    }

    fn send(&self, sender: &str, recipient: &str, priority: &str, body: &str) -> String {
        let sent = self
            .store()
            .send_message(SendMessage {
                sender: sender.into(),
                recipient: Some(recipient.into()),
                priority: Some(priority.into()),
                body: body.into(),
                ..Default::default()
            })
            .unwrap();
        sent.signal_ids[0].clone()
    }

    /// One tick, then until every activation it started has ended.
    async fn tick(&self) -> suzumio::scheduler::TickReport {
        let report = self.tick_only().await;
        for activation in &report.started {
            self.ended(&activation.id).await;
        }
        report
    }

    /// One tick; what it started keeps running.
    async fn tick_only(&self) -> suzumio::scheduler::TickReport {
        let report = self.scheduler.tick().await;
        assert!(report.errors.is_empty(), "tick errors: {:?}", report.errors);
        report
    }

    /// Waits until `done` holds, checking again after every store event.
    async fn until<T>(&self, what: &str, mut done: impl FnMut() -> Option<T>) -> T {
        let mut events = self.store().subscribe();
        let waiting = async {
            loop {
                if let Some(value) = done() {
                    return value;
                }
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) = events.recv().await {
                    panic!("{what}: the store closed");
                }
            }
        };
        tokio::time::timeout(DEADLINE, waiting).await.unwrap_or_else(|_| panic!("{what}: not within {DEADLINE:?}"))
    }

    /// The activation once its end is recorded. `Activations` records the end and then, in the
    /// same step of its task (no await between), the no-effect nudge; on the test's
    /// single-threaded runtime the test resumes only after both, so what follows an end sees
    /// whether a nudge was made.
    async fn ended(&self, id: &str) -> ActivationRecord {
        self.until(&format!("activation {id} ends"), || {
            self.store().activation(id).unwrap().filter(|a| a.status != ActivationStatus::Running)
        })
        .await
    }

    /// Signal ids each activation of one agent was started with, oldest first.
    fn deliveries(&self, agent: &str) -> Vec<Vec<String>> {
        let mut all = self.store().list_activations(Some(agent), None, None).unwrap();
        all.reverse();
        all.into_iter().map(|a| a.signal_ids).collect()
    }

    fn last_activation(&self, agent: &str) -> ActivationRecord {
        self.store().latest_activation(agent, None).unwrap().expect("an activation")
    }

    /// Nudges of `kind` made after `activation`.
    fn nudges_after(&self, kind: &str, activation: &str) -> Vec<SignalRecord> {
        let query = SignalQuery { kind: Some(kind.into()), limit: Some(500), ..Default::default() };
        let all = self.store().list_signals(&query).unwrap();
        all.into_iter().filter(|s| s.payload["previousActivationId"] == activation).collect()
    }

    /// The one no-effect nudge made after `activation`, if any.
    fn no_effect_nudge(&self, activation: &str) -> Option<SignalRecord> {
        let mut nudges = self.nudges_after(NO_EFFECT, activation);
        assert!(nudges.len() <= 1, "one nudge per activation: {nudges:?}");
        nudges.pop()
    }

    fn advance_ms(&self, ms: i64) {
        self.clock.advance(Duration::milliseconds(ms));
    }
}

/// A page on 127.0.0.1 that answers only once the test releases it: an activation that fetches
/// it stays in that tool call as long as the test needs. It tells when a request has arrived
/// and when a client hung up before its answer.
struct HeldPage {
    url: String,
    arrived: mpsc::UnboundedReceiver<()>,
    hung_up: mpsc::UnboundedReceiver<()>,
    release: watch::Sender<bool>,
}

impl HeldPage {
    async fn start() -> HeldPage {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/held", listener.local_addr().unwrap());
        let (arrived_tx, arrived) = mpsc::unbounded_channel();
        let (hung_up_tx, hung_up) = mpsc::unbounded_channel();
        let (release, released) = watch::channel(false);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (arrived, hung_up, mut released) = (arrived_tx.clone(), hung_up_tx.clone(), released.clone());
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = arrived.send(());
                    tokio::select! {
                        _ = async { released.wait_for(|r| *r).await.map(drop) } => {
                            let _ = socket
                                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nContent-Type: text/plain\r\n\r\nheld page")
                                .await;
                        }
                        _ = socket.read(&mut buf) => { let _ = hung_up.send(()); }
                    }
                });
            }
        });
        HeldPage { url, arrived, hung_up, release }
    }

    /// A script entry for `agent`: when its prompt contains `when`, fetch this page, then
    /// `then` (YAML steps, may be empty).
    fn entry(&self, agent: &str, when: &str, then: &str) -> String {
        format!(
            "  - agent: {agent}\n    when: \"{when}\"\n    steps:\n      - call: [{{tool: web.fetch, input: {{url: \"{}\"}}}}]\n{then}",
            self.url
        )
    }

    async fn arrived(&mut self) {
        tokio::time::timeout(DEADLINE, self.arrived.recv()).await.expect("the fetch reached the page").unwrap();
    }

    async fn hung_up(&mut self) {
        tokio::time::timeout(DEADLINE, self.hung_up.recv()).await.expect("the fetch was dropped").unwrap();
    }

    fn release(&self) {
        self.release.send_replace(true);
    }
}

/// §10 item 7: P2 and P3 one per activation; P1 as a batch, by priority then age.
#[tokio::test]
async fn routine_signals_one_at_a_time_urgent_ones_as_a_batch() {
    let w = world("");
    let p3a = w.send("user", "worker", "P3", "a");
    let p3b = w.send("user", "worker", "P3", "b");
    let p2 = w.send("user", "worker", "P2", "c");
    w.tick().await;
    assert_eq!(w.deliveries("worker"), vec![vec![p2.clone()]], "exactly one, P2 first");
    w.tick().await;
    w.tick().await;
    assert_eq!(w.deliveries("worker"), vec![vec![p2], vec![p3a], vec![p3b]], "then P3 oldest first");

    let w = world("");
    let routine = w.send("user", "pm", "P3", "routine");
    let p1a = w.send("user", "pm", "P1", "urgent a");
    let p0 = w.send("user", "pm", "P0", "very urgent");
    let p1b = w.send("user", "pm", "P1", "urgent b");
    w.tick().await;
    assert_eq!(w.deliveries("pm"), vec![vec![p0, p1a, p1b]], "P0/P1 batch by priority then age; P3 waits");
    w.tick().await;
    assert_eq!(w.deliveries("pm")[1], vec![routine]);
}

#[tokio::test]
async fn the_batch_is_capped_at_max_signals_per_activation() {
    let w = world("scheduler: {maxSignalsPerActivation: 2}\n");
    let ids: Vec<String> = (0..3).map(|i| w.send("user", "pm", "P1", &format!("u{i}"))).collect();
    w.tick().await;
    assert_eq!(w.deliveries("pm"), vec![ids[..2].to_vec()]);
}

/// §10 item 8: a user's P2 message goes before a monitor's older P3 message.
#[tokio::test]
async fn user_p2_before_monitor_p3() {
    let w = world("");
    let _noise = w.send("monitor", "pm", "P3", "worker is quiet");
    w.advance_ms(1000);
    let work = w.send("user", "pm", "P2", "please do the thing");
    w.tick().await;
    assert_eq!(w.deliveries("pm"), vec![vec![work]]);
}

#[tokio::test]
async fn not_before_holds_a_signal_until_due_and_sets_the_next_wake() {
    let w = world("");
    let when = w.clock.now() + Duration::seconds(30);
    let request = SignalRequest {
        kind: "reminder".into(),
        target_agent: Some("pm".into()),
        not_before: Some(when),
        ..Default::default()
    };
    let id = w.store().record_signal(request).unwrap()[0].id.clone();
    let report = w.tick().await;
    assert!(w.deliveries("pm").is_empty());
    assert_eq!(report.next_due, Some(when), "the scheduler knows when to wake");
    w.advance_ms(30_000);
    w.tick().await;
    assert_eq!(w.deliveries("pm"), vec![vec![id]]);
}

/// The model loop of the running activation is stopped in the middle of its tool call (the
/// fetch is dropped), its end is recorded as cancelled by the P0, and a new activation carries
/// the P0 and the P1 that waited.
#[tokio::test]
async fn p0_cancels_a_running_activation_and_restarts_with_p0_and_p1() {
    let mut page = HeldPage::start().await;
    let w = scripted("", &format!("activations:\n{}", page.entry("worker", "long task", "")));
    w.send("user", "worker", "P3", "long task");
    let first = w.tick_only().await.started[0].clone();
    page.arrived().await;
    let p1 = w.send("user", "worker", "P1", "also this");
    w.tick_only().await;
    assert_eq!(w.deliveries("worker").len(), 1, "P1 does not interrupt");
    let mut events = w.store().subscribe();
    let p0 = w.send("user", "worker", "P0", "stop everything");
    let report = w.tick_only().await;
    assert_eq!(report.cancelled.iter().map(|a| a.id.clone()).collect::<Vec<_>>(), vec![first.id.clone()]);
    let reason = format!("Interrupted by P0 signal {p0}");
    let cancelled = w.store().activation(&first.id).unwrap().unwrap();
    assert_eq!((cancelled.status, cancelled.error.as_deref()), (ActivationStatus::Cancelled, Some(reason.as_str())));
    let ended = loop {
        let record = tokio::time::timeout(DEADLINE, events.recv()).await.expect("an event").unwrap();
        if let Event::ActivationCancelled(ended) = record.event {
            break ended;
        }
    };
    assert_eq!((ended.activation_id.as_str(), ended.error.as_deref()), (first.id.as_str(), Some(reason.as_str())));
    page.hung_up().await;
    assert_eq!(w.deliveries("worker")[1], vec![p0, p1], "the new activation carries pending P0 and P1");
    let second = w.last_activation("worker");
    w.ended(&second.id).await;
    assert_eq!(w.store().activation(&first.id).unwrap().unwrap().status, ActivationStatus::Cancelled, "stays so");
}

/// §1.3: a P1 sent while the model loop is in a tool call reaches that activation when the call
/// returns, appended to its result; a P2 waits, and another agent's activation takes nothing.
#[tokio::test]
async fn p1_reaches_a_running_activation_at_its_next_tool_boundary() {
    let mut page = HeldPage::start().await;
    let w = scripted("", &format!("activations:\n{}", page.entry("pm", "work", "")));
    w.send("user", "pm", "P3", "work");
    let running = w.tick_only().await.started[0].clone();
    page.arrived().await;
    let routine = w.send("user", "pm", "P2", "later");
    let urgent = w.send("user", "pm", "P1", "now");
    let for_worker = w.send("user", "worker", "P1", "yours");
    assert!(w.scheduler.tool_boundary_signals("worker", &running.id).unwrap().is_empty(), "only its own activation");
    assert_eq!(w.store().signal(&for_worker).unwrap().unwrap().status, SignalStatus::Pending);
    page.release();
    w.ended(&running.id).await;
    assert_eq!(w.store().signal(&urgent).unwrap().unwrap().delivered_activation_id, Some(running.id.clone()));
    assert_eq!(w.store().signal(&routine).unwrap().unwrap().status, SignalStatus::Pending, "P2 waits");
    let history = w.store().activation_history(&running.id).unwrap();
    let result = history.iter().find(|h| h.kind() == "tool_result").expect("the fetch's result");
    let content = result.content()["content"].as_str().unwrap().to_string();
    assert!(
        content.starts_with("held page") && content.contains("# New Signals") && content.contains("now"),
        "{content}"
    );
}

#[tokio::test]
async fn quiet_stopped_and_not_running_projects() {
    let w = world("");
    w.store().set_agent_status("worker", AgentStatus::Stopped).unwrap();
    w.send("user", "worker", "P2", "x");
    w.tick().await;
    assert!(w.deliveries("worker").is_empty(), "stopped agents are skipped");
    w.store().set_project_status(ProjectStatus::Stopped).unwrap();
    w.send("user", "pm", "P2", "x");
    let report = w.scheduler.tick().await;
    assert!(!report.ran && w.deliveries("pm").is_empty(), "only running projects are scheduled");
}

#[tokio::test]
async fn failed_agents_with_pending_signals_are_restarted() {
    let w = scripted("", "activations:\n  - agent: worker\n    steps: [{error: boom}]\n");
    w.send("user", "worker", "P2", "a");
    let failed = w.tick().await.started[0].clone();
    let failed = w.store().activation(&failed.id).unwrap().unwrap();
    assert_eq!(failed.status, ActivationStatus::Failed);
    assert!(failed.error.as_deref().unwrap_or("").contains("boom"), "{:?}", failed.error);
    assert_eq!(w.store().agent("worker").unwrap().unwrap().status, AgentStatus::Failed);
    let next = w.send("user", "worker", "P2", "b");
    w.tick().await;
    assert_eq!(w.deliveries("worker")[1], vec![next]);
}

/// §10 items 13, 14, 16: no-effect nudge defaults to P3, backs off 0 / 1000 / 2000 ms, stops at
/// maxConsecutive.
#[tokio::test]
async fn no_effect_nudge_backs_off_and_stops_at_max_consecutive() {
    let w = world("scheduler:\n  noEffectNudge: {maxConsecutive: 3, initialDelayMs: 1000, backoffFactor: 2}\n");
    w.send("user", "worker", "P2", "go");
    let mut delays = Vec::new();
    for _ in 0..3 {
        let activation = w.tick().await.started[0].clone();
        let nudge = w.no_effect_nudge(&activation.id).expect("a nudge");
        assert_eq!((nudge.kind.as_str(), nudge.priority.as_str()), (NO_EFFECT, "P3"));
        assert!(!nudge.useful_effect);
        delays.push(nudge.payload["delayMs"].as_u64().unwrap());
        w.advance_ms(5_000);
    }
    assert_eq!(delays, vec![0, 1000, 2000]);
    let fourth = w.tick().await.started[0].clone();
    assert!(w.no_effect_nudge(&fourth.id).is_none(), "the 4th is over maxConsecutive");
}

#[tokio::test]
async fn no_effect_nudge_skips_useful_activations_and_speaks_to_the_coordinator_differently() {
    let script = "activations:\n  - agent: worker\n    steps:\n      - call: [{tool: messages.send, input: {recipient: pm, body: done}}]\n";
    let w = scripted("", script);
    w.send("user", "worker", "P2", "go");
    let useful = w.tick().await.started[0].clone();
    assert_eq!(w.store().activation(&useful.id).unwrap().unwrap().status, ActivationStatus::Completed);
    assert!(w.no_effect_nudge(&useful.id).is_none(), "a message is a useful effect");
    // pm has the worker's message and this one; either activation gets the nudge.
    w.send("user", "pm", "P3", "hi");
    let pm = w.tick().await.started;
    let to_pm = w.no_effect_nudge(&pm[0].id).expect("a nudge for pm");
    w.send("user", "critic", "P3", "hi");
    let started = w.tick().await.started;
    let critic = started.iter().find(|a| a.agent_id == "critic").expect("the critic's activation");
    let to_critic = w.no_effect_nudge(&critic.id).expect("a nudge for the critic");
    let (to_pm, to_critic) = (to_pm.payload["message"].clone(), to_critic.payload["message"].clone());
    assert_ne!(to_pm, to_critic);
    assert!(to_critic.as_str().unwrap().contains("report progress to pm"), "{to_critic}");
}

/// §10 item 18: failed nudge backs off 1000 then 2000 ms and carries the error.
#[tokio::test]
async fn failed_nudge_backs_off_and_carries_the_error() {
    let script = "activations:\n  - {agent: worker, steps: [{error: model timed out}]}\n  - {agent: worker, steps: [{error: again}]}\n  - {agent: worker, steps: [{error: third}]}\n";
    let w = scripted(
        "scheduler:\n  failedNudge: {enabled: true, initialDelayMs: 1000, backoffFactor: 2, maxConsecutive: 2}\n",
        script,
    );
    w.send("user", "worker", "P2", "go");
    let failed = w.tick().await.started[0].clone();
    let failed = w.store().activation(&failed.id).unwrap().unwrap();
    assert!(failed.error.as_deref().unwrap_or("").contains("model timed out"), "{:?}", failed.error);
    w.tick().await;
    let first = w.nudges_after(FAILED, &failed.id);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!((first[0].kind.as_str(), first[0].priority.as_str()), (FAILED, "P2"));
    assert_eq!(first[0].payload["delayMs"], 1000);
    assert_eq!(first[0].payload["error"], json!(failed.error));
    assert!(w.tick().await.nudges.is_empty(), "one pending (not yet ready) nudge is enough");
    w.advance_ms(1000);
    let again = w.tick().await.started[0].clone();
    assert_eq!(again.signal_ids, vec![first[0].id.clone()], "the nudge starts the next activation");
    w.tick().await;
    let second = w.nudges_after(FAILED, &again.id);
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!((second[0].payload["attempt"].clone(), second[0].payload["delayMs"].clone()), (json!(2), json!(2000)));
    w.advance_ms(2000);
    let third = w.tick().await.started[0].clone();
    assert_eq!(w.store().activation(&third.id).unwrap().unwrap().status, ActivationStatus::Failed);
    assert!(w.tick().await.nudges.is_empty(), "maxConsecutive 2 reached");
    assert!(w.nudges_after(FAILED, &third.id).is_empty());
}

/// §10 item 15: the all-quiet nudge reaches pm at P3, then waits for its cooldown.
#[tokio::test]
async fn all_quiet_nudge_reaches_pm_at_p3_with_cooldown() {
    let w = world("scheduler:\n  allQuietNudge: {enabled: true, cooldownMs: 60000}\n");
    let report = w.tick().await;
    let nudge = &report.nudges[0];
    assert_eq!(
        (nudge.kind.as_str(), nudge.target_agent.as_deref(), nudge.priority.as_str()),
        ("scheduler.all_quiet_nudge", Some("pm"), "P3")
    );
    assert!(nudge.useful_effect);
    // pm takes it and finishes; everybody is quiet again, but the cooldown holds the next nudge.
    let w2 =
        world("scheduler:\n  allQuietNudge: {enabled: true, cooldownMs: 60000}\n  noEffectNudge: {enabled: false}\n");
    let nudge = w2.tick().await.nudges[0].id.clone();
    let delivered = w2.tick().await;
    assert_eq!(delivered.started[0].signal_ids, vec![nudge], "pm's activation takes it");
    let held = w2.tick().await;
    assert!(held.nudges.is_empty(), "cooldown");
    assert!(held.next_due.is_some());
    w2.advance_ms(60_000);
    assert_eq!(w2.tick().await.nudges.len(), 1, "after the cooldown");
}

/// §10 item 17: the quiet-agent monitor messages the recipient after the delay, then repeats.
#[tokio::test]
async fn quiet_agent_monitor_sends_and_repeats() {
    let w = world(
        "scheduler:\n  noEffectNudge: {enabled: false}\n  quietAgentMonitor:\n    enabled: true\n    rules:\n      - agent: worker\n        initialDelayMs: 60000\n        repeatDelayMs: 30000\n        message: '{{agent}} quiet {{quietMinutes}} min (attempt {{attempt}}) {{unknown}}'\n",
    );
    w.store().set_agent_status("worker", AgentStatus::Running).unwrap();
    w.store().set_agent_status("worker", AgentStatus::Quiet).unwrap();
    assert!(w.tick().await.monitor_messages.is_empty());
    w.advance_ms(60_000);
    let sent = w.tick().await.monitor_messages;
    assert_eq!(sent.len(), 1);
    let message = w.store().message(&sent[0]).unwrap().unwrap();
    assert_eq!(
        (message.sender.as_str(), message.recipient.as_deref(), message.priority.as_str()),
        ("monitor", Some("pm"), "P3")
    );
    assert_eq!(message.body, "worker quiet 1 min (attempt 1) {{unknown}}");
    w.advance_ms(10_000);
    // pm is activated by the monitor's message (and ends); the worker stays quiet.
    assert!(w.tick().await.monitor_messages.is_empty(), "not before repeatDelayMs");
    w.advance_ms(20_000);
    let again = w.tick().await.monitor_messages;
    assert_eq!(w.store().message(&again[0]).unwrap().unwrap().body, "worker quiet 1 min (attempt 2) {{unknown}}");
}

/// §10 item 19: the failed-agent monitor sends (P2 default) and repeats, deduped per failure.
#[tokio::test]
async fn failed_agent_monitor_sends_and_repeats() {
    let w = scripted(
        "scheduler:\n  failedAgentMonitor:\n    enabled: true\n    rules:\n      - {agent: worker, initialDelayMs: 1000, repeatDelayMs: 5000, recipient: user, message: 'failed {{activationId}}: {{error}}'}\n",
        "activations:\n  - agent: worker\n    steps: [{error: \"disk\\nfull\"}]\n",
    );
    w.send("user", "worker", "P2", "go");
    let act = w.tick().await.started[0].clone();
    let error = w.store().activation(&act.id).unwrap().unwrap().error.unwrap_or_default();
    assert!(error.contains("disk\nfull"), "{error}");
    assert!(w.tick().await.monitor_messages.is_empty());
    w.advance_ms(1000);
    let sent = w.tick().await.monitor_messages;
    let m = w.store().message(&sent[0]).unwrap().unwrap();
    assert_eq!((m.priority.as_str(), m.recipient.as_deref()), ("P2", Some("user")));
    assert!(m.body.starts_with(&format!("failed {}: ", act.id)), "{}", m.body);
    assert!(m.body.ends_with("disk full") && !m.body.contains('\n'), "the error is one line: {}", m.body);
    w.advance_ms(4999);
    assert!(w.tick().await.monitor_messages.is_empty());
    w.advance_ms(1);
    assert_eq!(w.tick().await.monitor_messages.len(), 1, "repeats");
}

/// Hooks are isolated: one that throws, loops or returns garbage does not stop another.
#[tokio::test]
async fn a_failing_hook_does_not_stop_other_hooks() {
    let good = r#"export async function schedulerTick(context) {
        const alive = context.agents.find((a) => a.id === "pm").modelAlive;
        return { signals: [{ kind: "custom.ping", targetAgent: "pm", priority: "P3", payload: { alive, now: context.now } }], wakeAt: "2026-03-01T10:00:00Z" };
    }"#;
    let packs = [
        ("a-throws", "export function schedulerTick() { throw new Error('hook broke'); }"),
        ("b-garbage", "export function schedulerTick() { return 42; }"),
        (
            "c-bad-item",
            "export function schedulerTick() { return [{ targetAgent: 'pm' }, 'x', { kind: 'ok.kind', usefulEffect: 'yes' }]; }",
        ),
        ("d-good", good),
        (
            "e-factory",
            "export function createSchedulerToolpack(ctx) { return { tick() { return [{ kind: 'factory.ping', targetAgent: 'worker' }]; } }; }",
        ),
    ];
    let w = world_with("", "", &packs);
    let report = w.scheduler.tick().await;
    let by_pack = |id: &str| report.hooks.iter().find(|h| h.pack == id).unwrap().clone();
    let thrown = &by_pack("a-throws").errors[0];
    assert!(thrown.starts_with("toolpack a-throws: hook broke\n    at schedulerTick"), "message and stack: {thrown}");
    assert!(by_pack("b-garbage").errors[0].contains("expected an array of signal requests"));
    let bad = by_pack("c-bad-item").errors;
    assert!(bad[0].ends_with("kind is required"), "{bad:?}");
    assert!(bad[1].ends_with("Tool input must be an object"), "{bad:?}");
    assert!(bad[2].ends_with("Expected boolean, got \"yes\""), "{bad:?}");
    let good = by_pack("d-good");
    assert_eq!(good.recorded.len(), 1);
    assert_eq!(good.wake_at, parse_iso("2026-03-01T10:00:00Z"));
    assert_eq!(report.next_due, parse_iso("2026-03-01T10:00:00Z"));
    let ping = w.store().signal(&good.recorded[0]).unwrap().unwrap();
    assert_eq!((ping.payload["alive"].clone(), ping.source_agent.clone()), (json!(false), None));
    assert_eq!(by_pack("e-factory").recorded.len(), 1);
}

/// The loop wakes on a store event: a message sent while the loop waits on its 10-minute timer
/// leads to an activation at once.
#[tokio::test]
async fn the_loop_ticks_when_a_signal_is_recorded() {
    let w = world("scheduler: {tickIntervalMs: 600000}\n");
    let scheduler = Arc::new(Scheduler::new(w.host.clone(), w.activations.clone()));
    let mut ticks = scheduler.ticks();
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(scheduler.clone().run(stop.clone()));
    // The first tick (at start) is done: the loop now waits for an event or its timer.
    tokio::time::timeout(DEADLINE, ticks.wait_for(|n| *n >= 1)).await.expect("the first tick").unwrap();
    let id = w.send("user", "pm", "P2", "wake up");
    let started = w
        .until("pm's activation starts", || {
            w.store().list_activations(Some("pm"), None, None).unwrap().into_iter().next()
        })
        .await;
    assert_eq!(started.signal_ids, vec![id], "delivered long before the 10-minute timer");
    w.ended(&started.id).await;
    stop.cancel();
    running.await.unwrap();
}
