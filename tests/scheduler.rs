//! The scheduler's rules (reference §1.3–§1.5, §10 items 7, 8, 13–19) on a real store, with a
//! manual clock and a fake activation launcher (the scheduler's rules, without a model loop).

mod support;

use std::sync::{Arc, Mutex};

use chrono::Duration;
use serde_json::json;
use suzumio::clock::{Clock, ManualClock, parse_iso};
use suzumio::config::AgentConfig;
use suzumio::config::load::ProcessEnv;
use suzumio::project::Project;
use suzumio::scheduler::{ActivationLauncher, Scheduler};
use suzumio::store::{
    ActivationOutcome, ActivationRecord, AgentStatus, ProjectStatus, SendMessage, SignalRecord, SignalRequest,
    SignalStatus, StateFiles, Store,
};
use suzumio::support::ToolHost;

/// Records what the scheduler asked for; activations are finished by the test.
#[derive(Default)]
struct FakeLauncher {
    started: Mutex<Vec<(ActivationRecord, Vec<SignalRecord>)>>,
    cancelled: Mutex<Vec<(String, String)>>,
}

impl ActivationLauncher for FakeLauncher {
    fn prompt(&self, agent: &AgentConfig, signals: &[SignalRecord]) -> String {
        format!("{}: {}", agent.id, signals.iter().map(|s| s.id.as_str()).collect::<Vec<_>>().join(","))
    }
    fn start(&self, activation: ActivationRecord, signals: Vec<SignalRecord>) {
        self.started.lock().unwrap().push((activation, signals));
    }
    fn cancel(&self, activation: &ActivationRecord, reason: &str) {
        self.cancelled.lock().unwrap().push((activation.id.clone(), reason.to_string()));
    }
}

struct World {
    _dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    host: Arc<ToolHost>,
    launcher: Arc<FakeLauncher>,
    scheduler: Scheduler,
}

const BASE: &str = r#"
name: sched
task: Test the scheduler.
agents:
  pm: {tools: [messages.send]}
  worker: {tools: [messages.send]}
  critic: {tools: [messages.send]}
backend:
  runner:
    model: main
    models:
      providers: {local: {type: scripted}}
      presets: {main: {provider: local}}
"#;

/// A running project from `BASE` plus `extra` YAML (e.g. a `scheduler:` section), and packs.
fn world_with(extra: &str, packs: &[(&str, &str)]) -> World {
    let tmp = tempfile::Builder::new().prefix("suzumio-sched-").tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let mut yaml = format!("{BASE}{extra}");
    if !packs.is_empty() {
        yaml.push_str("tools:\n  toolpacks:\n    - core\n");
        for (id, source) in packs {
            let pack = dir.join("packs").join(id);
            std::fs::create_dir_all(&pack).unwrap();
            let manifest = json!({"id": id, "tools": [], "webui": [{"id": format!("{id}.panel"), "title": "Panel"}]});
            std::fs::write(pack.join("suzumio.toolpack.json"), manifest.to_string()).unwrap();
            std::fs::write(pack.join("controller.mjs"), source).unwrap();
            yaml.push_str(&format!("    - {{path: ./packs/{id}, id: {id}}}\n"));
        }
    }
    std::fs::write(dir.join("suzumio.yaml"), yaml).unwrap();
    let clock = Arc::new(ManualClock::new(parse_iso("2026-03-01T09:00:00Z").unwrap()));
    let project = Arc::new(Project::load(&dir, &ProcessEnv).unwrap_or_else(|e| panic!("{e}")));
    let store = Store::open(&project.config, clock.clone()).unwrap();
    store.set_project_status(ProjectStatus::Running).unwrap();
    let host = ToolHost::new(project, store, StateFiles::new(&dir));
    let launcher = Arc::new(FakeLauncher::default());
    let scheduler = Scheduler::new(host.clone(), launcher.clone());
    World { _dir: tmp, clock, host, launcher, scheduler }
}

fn world(extra: &str) -> World {
    world_with(extra, &[])
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

    async fn tick(&self) -> suzumio::scheduler::TickReport {
        let report = self.scheduler.tick().await;
        assert!(report.errors.is_empty(), "tick errors: {:?}", report.errors);
        report
    }

    /// Signal ids each started activation carried, for one agent, in order.
    fn deliveries(&self, agent: &str) -> Vec<Vec<String>> {
        self.launcher
            .started
            .lock()
            .unwrap()
            .iter()
            .filter(|(a, _)| a.agent_id == agent)
            .map(|(_, s)| s.iter().map(|x| x.id.clone()).collect())
            .collect()
    }

    fn last_activation(&self, agent: &str) -> ActivationRecord {
        self.launcher.started.lock().unwrap().iter().rev().find(|(a, _)| a.agent_id == agent).unwrap().0.clone()
    }

    /// Finish the agent's running activation and tell the scheduler (no-effect nudge).
    fn finish(&self, agent: &str, outcome: ActivationOutcome, error: Option<&str>) -> Option<SignalRecord> {
        let id = self.store().agent(agent).unwrap().unwrap().active_activation_id.expect("running");
        let finished = self.store().finish_activation(&id, outcome, None, error).unwrap();
        self.scheduler.activation_finished(&finished).unwrap()
    }

    fn advance_ms(&self, ms: i64) {
        self.clock.advance(Duration::milliseconds(ms));
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
    w.finish("worker", ActivationOutcome::Completed, None);
    w.tick().await;
    w.finish("worker", ActivationOutcome::Completed, None);
    w.tick().await;
    assert_eq!(w.deliveries("worker"), vec![vec![p2], vec![p3a], vec![p3b]], "then P3 oldest first");

    let w = world("");
    let routine = w.send("user", "pm", "P3", "routine");
    let p1a = w.send("user", "pm", "P1", "urgent a");
    let p0 = w.send("user", "pm", "P0", "very urgent");
    let p1b = w.send("user", "pm", "P1", "urgent b");
    w.tick().await;
    assert_eq!(w.deliveries("pm"), vec![vec![p0, p1a, p1b]], "P0/P1 batch by priority then age; P3 waits");
    w.finish("pm", ActivationOutcome::Completed, None);
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

#[tokio::test]
async fn p0_cancels_a_running_activation_and_restarts_with_p0_and_p1() {
    let w = world("");
    w.send("user", "worker", "P3", "long task");
    w.tick().await;
    let first = w.last_activation("worker");
    let p1 = w.send("user", "worker", "P1", "also this");
    w.tick().await;
    assert_eq!(w.deliveries("worker").len(), 1, "P1 does not interrupt");
    let p0 = w.send("user", "worker", "P0", "stop everything");
    let report = w.tick().await;
    assert_eq!(report.cancelled.len(), 1);
    let cancelled = w.store().activation(&first.id).unwrap().unwrap();
    assert_eq!(cancelled.status.as_str(), "cancelled");
    assert_eq!(cancelled.error.as_deref(), Some(format!("Interrupted by P0 signal {p0}").as_str()));
    assert_eq!(w.launcher.cancelled.lock().unwrap()[0].0, first.id, "the launcher was told to stop it");
    assert_eq!(w.deliveries("worker")[1], vec![p0, p1], "the new activation carries pending P0 and P1");
}

#[tokio::test]
async fn p1_reaches_a_running_activation_at_its_next_tool_boundary() {
    let w = world("");
    w.send("user", "pm", "P3", "work");
    w.tick().await;
    let running = w.last_activation("pm");
    assert!(w.scheduler.tool_boundary_signals("pm", &running.id).unwrap().is_empty());
    let routine = w.send("user", "pm", "P2", "later");
    let urgent = w.send("user", "pm", "P1", "now");
    let handed = w.scheduler.tool_boundary_signals("pm", &running.id).unwrap();
    assert_eq!(handed.iter().map(|s| s.id.clone()).collect::<Vec<_>>(), vec![urgent.clone()]);
    assert_eq!(w.store().signal(&urgent).unwrap().unwrap().delivered_activation_id, Some(running.id.clone()));
    assert_eq!(w.store().signal(&routine).unwrap().unwrap().status, SignalStatus::Pending, "P2 waits");
    assert!(w.scheduler.tool_boundary_signals("worker", &running.id).unwrap().is_empty(), "only its own activation");
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
    let w = world("");
    w.send("user", "worker", "P2", "a");
    w.tick().await;
    w.finish("worker", ActivationOutcome::Failed, Some("boom"));
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
        w.tick().await;
        let nudge = w.finish("worker", ActivationOutcome::Completed, None).expect("a nudge");
        assert_eq!((nudge.kind.as_str(), nudge.priority.as_str()), ("scheduler.no_effect_nudge", "P3"));
        assert!(!nudge.useful_effect);
        delays.push(nudge.payload["delayMs"].as_u64().unwrap());
        w.advance_ms(5_000);
    }
    assert_eq!(delays, vec![0, 1000, 2000]);
    w.tick().await;
    assert!(w.finish("worker", ActivationOutcome::Completed, None).is_none(), "the 4th is over maxConsecutive");
}

#[tokio::test]
async fn no_effect_nudge_skips_useful_activations_and_speaks_to_the_coordinator_differently() {
    let w = world("");
    w.send("user", "worker", "P2", "go");
    w.tick().await;
    let act = w.last_activation("worker");
    w.store()
        .send_message(SendMessage {
            sender: "worker".into(),
            recipient: Some("pm".into()),
            body: "done".into(),
            source_agent: Some("worker".into()),
            source_activation: Some(act.id.clone()),
            ..Default::default()
        })
        .unwrap();
    assert!(w.finish("worker", ActivationOutcome::Completed, None).is_none(), "a message is a useful effect");
    w.send("user", "pm", "P3", "hi");
    w.tick().await;
    let to_pm = w.finish("pm", ActivationOutcome::Completed, None).unwrap();
    w.send("user", "critic", "P3", "hi");
    w.tick().await;
    let to_critic = w.finish("critic", ActivationOutcome::Completed, None).unwrap();
    assert_ne!(to_pm.payload["message"], to_critic.payload["message"]);
    assert!(to_critic.payload["message"].as_str().unwrap().contains("report progress to pm"));
}

/// §10 item 18: failed nudge backs off 1000 then 2000 ms and carries the error.
#[tokio::test]
async fn failed_nudge_backs_off_and_carries_the_error() {
    let w = world(
        "scheduler:\n  failedNudge: {enabled: true, initialDelayMs: 1000, backoffFactor: 2, maxConsecutive: 2}\n",
    );
    w.send("user", "worker", "P2", "go");
    w.tick().await;
    w.finish("worker", ActivationOutcome::Failed, Some("model timed out"));
    let report = w.tick().await;
    let first = &report.nudges[0];
    assert_eq!((first.kind.as_str(), first.priority.as_str()), ("scheduler.failed_nudge", "P2"));
    assert_eq!(first.payload["delayMs"], 1000);
    assert_eq!(first.payload["error"], "model timed out");
    assert!(w.tick().await.nudges.is_empty(), "one pending (not yet ready) nudge is enough");
    w.advance_ms(1000);
    w.tick().await;
    w.finish("worker", ActivationOutcome::Failed, Some("again"));
    let second = w.tick().await.nudges[0].clone();
    assert_eq!((second.payload["attempt"].clone(), second.payload["delayMs"].clone()), (json!(2), json!(2000)));
    w.advance_ms(2000);
    w.tick().await;
    w.finish("worker", ActivationOutcome::Failed, Some("third"));
    assert!(w.tick().await.nudges.is_empty(), "maxConsecutive 2 reached");
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
    assert_eq!(w2.tick().await.nudges.len(), 1);
    w2.tick().await; // delivers it
    w2.finish("pm", ActivationOutcome::Completed, None);
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
    // pm was activated by the monitor's message; keep it from muddying the quiet check.
    assert!(w.tick().await.monitor_messages.is_empty(), "not before repeatDelayMs");
    w.advance_ms(20_000);
    let again = w.tick().await.monitor_messages;
    assert_eq!(w.store().message(&again[0]).unwrap().unwrap().body, "worker quiet 1 min (attempt 2) {{unknown}}");
}

/// §10 item 19: the failed-agent monitor sends (P2 default) and repeats, deduped per failure.
#[tokio::test]
async fn failed_agent_monitor_sends_and_repeats() {
    let w = world(
        "scheduler:\n  failedAgentMonitor:\n    enabled: true\n    rules:\n      - {agent: worker, initialDelayMs: 1000, repeatDelayMs: 5000, recipient: user, message: 'failed {{activationId}}: {{error}}'}\n",
    );
    w.send("user", "worker", "P2", "go");
    w.tick().await;
    let act = w.last_activation("worker");
    w.finish("worker", ActivationOutcome::Failed, Some("disk\nfull"));
    assert!(w.tick().await.monitor_messages.is_empty());
    w.advance_ms(1000);
    let sent = w.tick().await.monitor_messages;
    let m = w.store().message(&sent[0]).unwrap().unwrap();
    assert_eq!((m.priority.as_str(), m.recipient.as_deref()), ("P2", Some("user")));
    assert_eq!(m.body, format!("failed {}: disk full", act.id), "the error is one line");
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
    let w = world_with("", &packs);
    let report = w.tick_allowing_errors().await;
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

impl World {
    async fn tick_allowing_errors(&self) -> suzumio::scheduler::TickReport {
        self.scheduler.tick().await
    }
}

/// The loop wakes on a store event: a message leads to an activation without waiting for the timer.
#[tokio::test]
async fn the_loop_ticks_when_a_signal_is_recorded() {
    let w = world("scheduler: {tickIntervalMs: 600000}\n");
    let scheduler = Arc::new(Scheduler::new(w.host.clone(), w.launcher.clone()));
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(scheduler.run(stop.clone()));
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let id = w.send("user", "pm", "P2", "wake up");
    let mut waited = 0;
    while w.deliveries("pm").is_empty() && waited < 200 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        waited += 1;
    }
    assert_eq!(w.deliveries("pm"), vec![vec![id]], "delivered long before the 10-minute timer");
    stop.cancel();
    running.await.unwrap();
}
