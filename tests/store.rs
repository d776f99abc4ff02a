//! The project store against real SQLite files: recordSignal and sendMessage rules with the
//! reference's exact error texts, signal selection, activations and tool calls, stats, reopening,
//! events, and toolpack state files. Time comes from a `ManualClock`.

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::{Value, json};
use suzumio::clock::{ManualClock, iso};
use suzumio::config::ProjectConfig;
use suzumio::store::{
    ActivationOutcome, ActivationStart, ActivationStatus, AgentStatus, HistoryEntry, LossCause, MessageQuery,
    ProjectStatus, ReadEnd, SendMessage, SignalQuery, SignalRecord, SignalRequest, SignalStatus, StartedCommand,
    StateError, StateFiles, Store, StoreError, TokenUsage, ToolCallOutcome, ToolCallStatus,
};
use tempfile::TempDir;

// ---------------------------------------------------------------------------------------------
// helpers

const TEAM: &str = "agents:\n  pm:\n    role: project-manager\n  worker:\n    count: 2\n";
const SOLO: &str = "agents:\n  pm:\n    role: project-manager\n";

/// A scratch directory removed on drop.
fn temp_dir() -> TempDir {
    tempfile::Builder::new().prefix("suzumio-store-test-").tempdir().expect("temp dir")
}

fn start_time() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).single().expect("valid time")
}

/// Write a project with the given `agents:` YAML and load it through the real config loader.
fn write_config(dir: &Path, agents_yaml: &str) -> ProjectConfig {
    let yaml = format!(
        "name: store-test\ntask: Exercise the store.\n{agents_yaml}channels: ['#project', '#blocked']\n\
         backend:\n  runner:\n    model: main\n    models:\n      providers:\n        local:\n          type: scripted\n\
         \x20     presets:\n        main:\n          provider: local\n"
    );
    std::fs::write(dir.join("suzumio.yaml"), yaml).expect("config written");
    let loaded = suzumio::config::load_config(dir, &suzumio::config::load::ProcessEnv).expect("config located");
    match loaded.config {
        Some(config) => config,
        None => panic!("test config is invalid: {:?}", loaded.diagnostics),
    }
}

struct Fixture {
    dir: TempDir,
    config: ProjectConfig,
    clock: Arc<ManualClock>,
    store: Store,
}

impl Fixture {
    fn new(agents_yaml: &str) -> Fixture {
        let dir = temp_dir();
        let config = write_config(dir.path(), agents_yaml);
        let clock = Arc::new(ManualClock::new(start_time()));
        let store = Store::open(&config, clock.clone()).expect("store opens");
        Fixture { dir, config, clock, store }
    }

    fn team() -> Fixture {
        Fixture::new(TEAM)
    }

    fn reopen(&self) -> Store {
        Store::open(&self.config, self.clock.clone()).expect("store reopens")
    }

    fn signal(&self, request: SignalRequest) -> Vec<SignalRecord> {
        self.store.record_signal(request).expect("signal recorded")
    }

    /// A pending signal for `target` at `priority`, its payload naming it `label`.
    fn work(&self, target: &str, priority: &str, label: &str) -> String {
        let recorded = self.signal(SignalRequest {
            kind: "test.work".into(),
            target_agent: Some(target.into()),
            priority: Some(priority.into()),
            payload: json!({ "label": label }),
            ..Default::default()
        });
        recorded[0].id.clone()
    }

    fn pending_labels(&self, agent: &str, limit: usize) -> Vec<String> {
        self.store
            .pending_signals(agent, limit)
            .expect("pending signals")
            .iter()
            .map(|s| s.payload["label"].as_str().unwrap_or("?").to_string())
            .collect()
    }

    /// Deliver `signals` to a new activation of `agent` and complete it.
    fn run_activation(&self, agent: &str, signals: &[SignalRecord]) {
        let ids: Vec<String> = signals.iter().map(|s| s.id.clone()).collect();
        let act = self.store.start_activation(agent, "prompt", &ids).expect("activation starts");
        self.store.finish_activation(&act.id, ActivationOutcome::Completed, Some("done"), None).expect("finishes");
    }
}

fn err_text<T: std::fmt::Debug>(result: Result<T, StoreError>) -> String {
    match result {
        Ok(value) => panic!("expected an error, got {value:?}"),
        Err(e) => e.to_string(),
    }
}

/// A compact view of recorded signals: (target agent, target channel, status, useful, priority).
type Shape = (Option<String>, Option<String>, &'static str, bool, &'static str);

fn shape(records: &[SignalRecord]) -> Vec<Shape> {
    records
        .iter()
        .map(|s| {
            (s.target_agent.clone(), s.target_channel.clone(), s.status.as_str(), s.useful_effect, s.priority.as_str())
        })
        .collect()
}

fn row(target: Option<&str>, channel: Option<&str>, status: &'static str, useful: bool, p: &'static str) -> Shape {
    (target.map(String::from), channel.map(String::from), status, useful, p)
}

// ---------------------------------------------------------------------------------------------
// recordSignal (reference §3.6, §1.4)

fn check_signal(request: SignalRequest, expected: Result<Vec<Shape>, &str>) {
    let fx = Fixture::team();
    let before = fx.store.events_after(0, 1000).expect("events").len();
    let result = fx.store.record_signal(request);
    let after = fx.store.events_after(0, 1000).expect("events");
    match (result, expected) {
        (Ok(records), Ok(shapes)) => {
            assert_eq!(shape(&records), shapes);
            // One `signal.created` event per row, and the rows read back unchanged.
            let created: Vec<String> = after[before..]
                .iter()
                .filter(|e| e.kind() == "signal.created")
                .filter_map(|e| e.data()["signalId"].as_str().map(str::to_string))
                .collect();
            assert_eq!(created, records.iter().map(|r| r.id.clone()).collect::<Vec<_>>());
            for record in &records {
                assert_eq!(fx.store.signal(&record.id).expect("read").as_ref(), Some(record));
            }
        }
        (Err(e), Err(text)) => {
            assert_eq!(e.to_string(), text);
            assert_eq!(after.len(), before, "a refused signal writes nothing");
            assert_eq!(fx.store.signal_counts().expect("counts").total, 0);
        }
        (result, expected) => panic!("got {result:?}, expected {expected:?}"),
    }
}

fn req(kind: &str) -> SignalRequest {
    SignalRequest { kind: kind.into(), ..Default::default() }
}

#[test]
fn signal_to_agent_is_pending_p2_useful() {
    check_signal(
        SignalRequest { target_agent: Some("worker-1".into()), ..req("custom") },
        Ok(vec![row(Some("worker-1"), None, "pending", true, "P2")]),
    );
}

#[test]
fn signal_to_user_counts_as_no_target() {
    check_signal(
        SignalRequest { target_agent: Some("user".into()), ..req("custom") },
        Ok(vec![row(None, None, "closed", false, "P2")]),
    );
}

#[test]
fn signal_to_unknown_agent_fails() {
    check_signal(SignalRequest { target_agent: Some("ghost".into()), ..req("custom") }, Err("Unknown agent: ghost"));
}

#[test]
fn signal_to_channel_fans_out_except_source() {
    check_signal(
        SignalRequest { target_channel: Some("#project".into()), source_agent: Some("pm".into()), ..req("custom") },
        Ok(vec![
            row(Some("worker-1"), Some("#project"), "pending", true, "P2"),
            row(Some("worker-2"), Some("#project"), "pending", true, "P2"),
        ]),
    );
}

#[test]
fn signal_to_channel_without_source_reaches_everyone() {
    check_signal(
        SignalRequest { target_channel: Some("#blocked".into()), ..req("custom") },
        Ok(vec![
            row(Some("pm"), Some("#blocked"), "pending", true, "P2"),
            row(Some("worker-1"), Some("#blocked"), "pending", true, "P2"),
            row(Some("worker-2"), Some("#blocked"), "pending", true, "P2"),
        ]),
    );
}

#[test]
fn signal_to_undeclared_channel_fails() {
    check_signal(
        SignalRequest { target_channel: Some("#nope".into()), ..req("custom") },
        Err("Unknown channel: #nope"),
    );
}

#[test]
fn signal_to_channel_with_nobody_left_is_one_closed_signal() {
    let fx = Fixture::new(SOLO);
    let records = fx.signal(SignalRequest {
        target_channel: Some("#project".into()),
        source_agent: Some("pm".into()),
        ..req("custom")
    });
    assert_eq!(shape(&records), [row(None, Some("#project"), "closed", false, "P2")]);
}

#[test]
fn signal_without_target_is_a_closed_audit_record() {
    check_signal(req("custom"), Ok(vec![row(None, None, "closed", false, "P2")]));
}

#[test]
fn signal_without_target_can_opt_into_useful_effect() {
    check_signal(
        SignalRequest { useful_effect: Some(true), ..req("custom") },
        Ok(vec![row(None, None, "closed", true, "P2")]),
    );
}

#[test]
fn closed_effect_kinds_are_useful_by_default() {
    for kind in ["message.created", "completion.submitted", "coordination.wait_for_signal"] {
        check_signal(req(kind), Ok(vec![row(None, None, "closed", true, "P2")]));
    }
}

#[test]
fn nudges_are_never_useful_by_default() {
    for kind in ["scheduler.no_effect_nudge", "scheduler.failed_nudge"] {
        check_signal(
            SignalRequest { target_agent: Some("pm".into()), ..req(kind) },
            Ok(vec![row(Some("pm"), None, "pending", false, "P2")]),
        );
    }
}

#[test]
fn explicit_useful_effect_wins_over_default() {
    check_signal(
        SignalRequest { target_agent: Some("pm".into()), useful_effect: Some(false), ..req("custom") },
        Ok(vec![row(Some("pm"), None, "pending", false, "P2")]),
    );
}

#[test]
fn closed_status_with_target_fails() {
    let text = "Targeted signals cannot be closed; omit the target or omit status";
    check_signal(
        SignalRequest { target_agent: Some("pm".into()), status: Some("closed".into()), ..req("c") },
        Err(text),
    );
    check_signal(
        SignalRequest { target_channel: Some("#project".into()), status: Some("closed".into()), ..req("c") },
        Err(text),
    );
}

#[test]
fn pending_status_without_target_becomes_closed() {
    check_signal(
        SignalRequest { status: Some("pending".into()), ..req("custom") },
        Ok(vec![row(None, None, "closed", false, "P2")]),
    );
}

#[test]
fn explicit_statuses_that_agree_are_accepted() {
    check_signal(
        SignalRequest { target_agent: Some("pm".into()), status: Some("pending".into()), ..req("custom") },
        Ok(vec![row(Some("pm"), None, "pending", true, "P2")]),
    );
    check_signal(
        SignalRequest { status: Some("closed".into()), ..req("custom") },
        Ok(vec![row(None, None, "closed", false, "P2")]),
    );
}

#[test]
fn other_statuses_fail() {
    for status in ["done", "delivered", "PENDING"] {
        let expected = format!("Invalid signal status: {status}");
        check_signal(SignalRequest { status: Some(status.into()), ..req("custom") }, Err(&expected));
    }
}

#[test]
fn priorities_are_validated() {
    check_signal(
        SignalRequest { target_agent: Some("pm".into()), priority: Some("P0".into()), ..req("custom") },
        Ok(vec![row(Some("pm"), None, "pending", true, "P0")]),
    );
    for bad in ["P4", "p1", "high"] {
        let expected = format!("Invalid priority: {bad}");
        check_signal(SignalRequest { priority: Some(bad.into()), ..req("custom") }, Err(&expected));
    }
}

#[test]
fn kind_is_required() {
    check_signal(req(""), Err("kind is required"));
    check_signal(req("   "), Err("kind is required"));
}

#[test]
fn both_targets_are_refused() {
    check_signal(
        SignalRequest { target_agent: Some("pm".into()), target_channel: Some("#project".into()), ..req("custom") },
        Err("Signal cannot have both targetAgent and targetChannel; set one of them"),
    );
}

#[test]
fn payloads_are_objects_and_sources_and_not_before_are_kept() {
    let fx = Fixture::team();
    let later = start_time() + Duration::minutes(5);
    let records = fx.signal(SignalRequest {
        kind: "custom".into(),
        source_agent: Some("pm".into()),
        source_activation: Some("act_x".into()),
        target_agent: Some("worker-1".into()),
        payload: json!("just text"),
        not_before: Some(later),
        ..Default::default()
    });
    let s = &records[0];
    assert_eq!(s.payload, json!({"value": "just text"}));
    assert_eq!(s.source_agent.as_deref(), Some("pm"));
    assert_eq!(s.source_activation.as_deref(), Some("act_x"));
    assert_eq!(s.not_before.map(iso), Some(iso(later)));
    assert_eq!(iso(s.created_at), iso(start_time()));
    assert!(s.id.starts_with("sig_"));
    let null_payload = fx.signal(req("custom"));
    assert_eq!(null_payload[0].payload, json!({}));
}

// ---------------------------------------------------------------------------------------------
// sendMessage (reference §4.2)

fn msg(sender: &str, recipient: Option<&str>, channel: Option<&str>) -> SendMessage {
    SendMessage {
        sender: sender.into(),
        recipient: recipient.map(String::from),
        channel: channel.map(String::from),
        body: "hello".into(),
        ..Default::default()
    }
}

fn check_send_error(input: SendMessage, expected: &str) {
    let fx = Fixture::team();
    assert_eq!(err_text(fx.store.send_message(input)), expected);
    assert!(fx.store.list_messages(&MessageQuery::default()).expect("list").is_empty(), "nothing written");
    assert_eq!(fx.store.signal_counts().expect("counts").total, 0);
}

#[test]
fn message_needs_recipient_or_channel() {
    check_send_error(msg("pm", None, None), "Message needs recipient or channel");
    check_send_error(msg("pm", Some(""), Some("")), "Message needs recipient or channel");
}

#[test]
fn message_cannot_have_both() {
    check_send_error(msg("pm", Some("worker-1"), Some("#project")), "Message cannot have both recipient and channel");
}

#[test]
fn message_to_unknown_agent_or_channel_fails() {
    check_send_error(msg("pm", Some("ghost"), None), "Unknown agent: ghost");
    check_send_error(msg("pm", None, Some("#random")), "Unknown channel: #random");
}

#[test]
fn message_with_bad_priority_fails() {
    check_send_error(
        SendMessage { priority: Some("P7".into()), ..msg("pm", Some("worker-1"), None) },
        "Invalid priority: P7",
    );
}

#[test]
fn direct_message_creates_row_event_and_pending_p3_signal() {
    let fx = Fixture::team();
    let mut events = fx.store.subscribe();
    let sent = fx
        .store
        .send_message(SendMessage { source_activation: Some("act_1".into()), ..msg("pm", Some("worker-1"), None) })
        .expect("sent");
    assert!(sent.message_id.starts_with("msg_"));
    let message = fx.store.message(&sent.message_id).expect("read").expect("exists");
    assert_eq!(
        (message.sender.as_str(), message.recipient.as_deref(), message.channel.as_deref(), message.priority.as_str()),
        ("pm", Some("worker-1"), None, "P3")
    );
    assert_eq!(message.source_activation.as_deref(), Some("act_1"));

    let signals: Vec<SignalRecord> =
        sent.signal_ids.iter().map(|id| fx.store.signal(id).expect("read").expect("exists")).collect();
    assert_eq!(shape(&signals), [row(Some("worker-1"), None, "pending", true, "P3")]);
    assert_eq!(signals[0].kind, "message.created");
    assert_eq!(signals[0].source_agent.as_deref(), Some("pm"));
    assert_eq!(signals[0].source_activation.as_deref(), Some("act_1"));
    assert_eq!(
        signals[0].payload,
        json!({"messageId": sent.message_id, "sender": "pm", "recipient": "worker-1", "priority": "P3", "body": "hello"})
    );

    let first = events.try_recv().expect("message event");
    assert_eq!(first.kind(), "message.created");
    assert_eq!(
        first.data(),
        json!({"messageId": sent.message_id, "sender": "pm", "recipient": "worker-1", "channel": null, "priority": "P3"})
    );
    let second = events.try_recv().expect("signal event");
    assert_eq!(second.kind(), "signal.created");
    assert_eq!(second.data()["signalId"], json!(sent.signal_ids[0]));
}

#[test]
fn message_to_user_is_a_closed_useful_effect() {
    let fx = Fixture::team();
    let sent = fx.store.send_message(msg("pm", Some("user"), None)).expect("sent");
    let signal = fx.store.signal(&sent.signal_ids[0]).expect("read").expect("exists");
    assert_eq!(shape(&[signal]), [row(None, None, "closed", true, "P3")]);
}

#[test]
fn channel_message_fans_out_to_everyone_but_the_sender() {
    let fx = Fixture::team();
    let sent = fx
        .store
        .send_message(SendMessage { priority: Some("P1".into()), ..msg("worker-1", None, Some("#project")) })
        .expect("sent");
    let signals: Vec<SignalRecord> =
        sent.signal_ids.iter().map(|id| fx.store.signal(id).expect("read").expect("exists")).collect();
    assert_eq!(
        shape(&signals),
        [
            row(Some("pm"), Some("#project"), "pending", true, "P1"),
            row(Some("worker-2"), Some("#project"), "pending", true, "P1")
        ]
    );
    assert_eq!(signals[0].payload["channel"], json!("#project"));
    assert!(signals[0].payload.get("recipient").is_none());
}

#[test]
fn channel_message_from_user_reaches_every_agent() {
    let fx = Fixture::team();
    let sent = fx.store.send_message(msg("user", None, Some("#blocked"))).expect("sent");
    assert_eq!(sent.signal_ids.len(), 3);
}

#[test]
fn channel_message_with_nobody_else_is_one_closed_signal() {
    let fx = Fixture::new(SOLO);
    let sent = fx.store.send_message(msg("pm", None, Some("#project"))).expect("sent");
    let signal = fx.store.signal(&sent.signal_ids[0]).expect("read").expect("exists");
    assert_eq!(shape(&[signal]), [row(None, Some("#project"), "closed", true, "P3")]);
}

#[test]
fn virtual_senders_are_not_validated_here() {
    let fx = Fixture::team();
    let sent = fx.store.send_message(msg("monitor", Some("pm"), None)).expect("callers validate senders");
    assert_eq!(sent.signal_ids.len(), 1);
}

// ---------------------------------------------------------------------------------------------
// pendingSignals (reference §1.3)

#[test]
fn pending_p2_and_p3_signals_are_delivered_one_at_a_time() {
    let fx = Fixture::team();
    fx.work("worker-1", "P3", "p3-a");
    fx.work("worker-1", "P2", "p2-a");
    fx.work("worker-1", "P3", "p3-b");
    fx.work("worker-1", "P2", "p2-b");
    let mut order = Vec::new();
    loop {
        let batch = fx.store.pending_signals("worker-1", 20).expect("pending");
        if batch.is_empty() {
            break;
        }
        assert_eq!(batch.len(), 1, "routine signals come one per activation");
        order.push(batch[0].payload["label"].as_str().unwrap_or("?").to_string());
        fx.run_activation("worker-1", &batch);
    }
    assert_eq!(order, ["p2-a", "p2-b", "p3-a", "p3-b"]);
}

#[test]
fn p1_signals_come_as_a_batch() {
    let fx = Fixture::team();
    fx.work("worker-1", "P2", "p2");
    fx.work("worker-1", "P1", "p1-a");
    fx.work("worker-1", "P1", "p1-b");
    fx.work("worker-1", "P1", "p1-c");
    assert_eq!(fx.pending_labels("worker-1", 20), ["p1-a", "p1-b", "p1-c"]);
}

#[test]
fn pm_pending_signals_prefer_user_p2_work_over_monitor_p3_noise() {
    let fx = Fixture::team();
    fx.store
        .send_message(SendMessage { body: "still quiet?".into(), ..msg("monitor", Some("pm"), None) })
        .expect("sent");
    fx.clock.advance(Duration::seconds(30));
    fx.store
        .send_message(SendMessage {
            priority: Some("P2".into()),
            body: "real work".into(),
            ..msg("user", Some("pm"), None)
        })
        .expect("sent");
    let batch = fx.store.pending_signals("pm", 20).expect("pending");
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].payload["body"], json!("real work"));
}

#[test]
fn p0_and_p1_batch_orders_by_priority_then_age_and_respects_limit() {
    let fx = Fixture::team();
    fx.work("pm", "P1", "p1-old");
    fx.clock.advance(Duration::seconds(1));
    fx.work("pm", "P0", "p0-old");
    fx.clock.advance(Duration::seconds(1));
    fx.work("pm", "P1", "p1-new");
    fx.work("pm", "P3", "p3");
    fx.clock.advance(Duration::seconds(1));
    fx.work("pm", "P0", "p0-new");
    assert_eq!(fx.pending_labels("pm", 3), ["p0-old", "p0-new", "p1-old"]);
    assert_eq!(fx.pending_labels("pm", 20), ["p0-old", "p0-new", "p1-old", "p1-new"]);
    assert_eq!(fx.pending_labels("pm", 0), ["p0-old"], "a zero limit still delivers urgent work");
}

#[test]
fn only_ready_pending_signals_of_the_agent_count() {
    let fx = Fixture::team();
    let later = start_time() + Duration::minutes(10);
    fx.signal(SignalRequest {
        kind: "test.work".into(),
        target_agent: Some("worker-1".into()),
        priority: Some("P0".into()),
        payload: json!({"label": "p0-later"}),
        not_before: Some(later),
        ..Default::default()
    });
    fx.work("worker-2", "P2", "someone-else");
    assert!(fx.pending_labels("worker-1", 20).is_empty());
    assert!(!fx.store.has_pending_signals_for_agent("worker-1", false).expect("query"));
    assert!(fx.store.has_pending_signals_for_agent("worker-1", true).expect("query"));
    assert!(fx.store.has_pending_signals(false).expect("query"), "worker-2 has ready work");

    fx.work("worker-1", "P3", "p3-now");
    assert_eq!(fx.pending_labels("worker-1", 20), ["p3-now"], "a future P0 does not block ready routine work");

    fx.clock.set(later);
    assert_eq!(fx.pending_labels("worker-1", 20), ["p0-later"], "ready exactly at not_before");
    assert!(fx.store.has_pending_signals_for_agent("worker-1", false).expect("query"));
}

#[test]
fn delivered_signals_are_not_pending_again() {
    let fx = Fixture::team();
    fx.work("pm", "P1", "a");
    let batch = fx.store.pending_signals("pm", 20).expect("pending");
    fx.run_activation("pm", &batch);
    assert!(fx.store.pending_signals("pm", 20).expect("pending").is_empty());
    assert!(!fx.store.has_pending_signals(true).expect("query"));
}

// ---------------------------------------------------------------------------------------------
// activations and tool calls

#[test]
fn activation_lifecycle_updates_agent_and_signals() {
    let fx = Fixture::team();
    let sig = fx.work("worker-1", "P2", "task");
    let act = fx.store.start_activation("worker-1", "the prompt", std::slice::from_ref(&sig)).expect("starts");
    assert!(act.id.starts_with("act_"));
    assert_eq!((act.status, act.signal_ids.clone()), (ActivationStatus::Running, vec![sig.clone()]));
    let agent = fx.store.agent("worker-1").expect("read").expect("exists");
    assert_eq!((agent.status, agent.active_activation_id.as_deref()), (AgentStatus::Running, Some(act.id.as_str())));
    let delivered = fx.store.signal(&sig).expect("read").expect("exists");
    assert_eq!(delivered.status, SignalStatus::Delivered);
    assert_eq!(delivered.delivered_activation_id.as_deref(), Some(act.id.as_str()));
    assert_eq!(delivered.delivered_at.map(iso), Some(iso(start_time())));

    assert_eq!(
        err_text(fx.store.start_activation("worker-1", "again", &[])),
        format!("Agent worker-1 already has a running activation {}; finish or cancel it first", act.id)
    );

    let done = fx.store.finish_activation(&act.id, ActivationOutcome::Failed, None, Some("boom")).expect("finishes");
    assert_eq!((done.status, done.error.as_deref()), (ActivationStatus::Failed, Some("boom")));
    let agent = fx.store.agent("worker-1").expect("read").expect("exists");
    assert_eq!((agent.status, agent.active_activation_id), (AgentStatus::Failed, None));
    assert_eq!(
        err_text(fx.store.finish_activation(&act.id, ActivationOutcome::Completed, None, None)),
        format!("Activation {} is not running (it is failed)", act.id)
    );

    let next = fx.store.start_activation("worker-1", "retry", &[]).expect("starts again");
    fx.store.finish_activation(&next.id, ActivationOutcome::Completed, Some("ok"), None).expect("finishes");
    assert_eq!(fx.store.agent("worker-1").expect("read").map(|a| a.status), Some(AgentStatus::Quiet));
}

#[test]
fn starting_with_a_signal_that_is_not_pending_changes_nothing() {
    let fx = Fixture::team();
    let mine = fx.work("worker-1", "P2", "mine");
    let theirs = fx.work("worker-2", "P2", "theirs");
    assert_eq!(
        err_text(fx.store.start_activation("worker-1", "p", &[mine.clone(), theirs.clone()])),
        format!("Signal {theirs} is not pending for agent worker-1; it cannot be delivered to a new activation")
    );
    // The whole start rolled back: the first signal is still pending and the agent still quiet.
    assert_eq!(fx.store.signal(&mine).expect("read").map(|s| s.status), Some(SignalStatus::Pending));
    assert_eq!(fx.store.agent("worker-1").expect("read").map(|a| a.status), Some(AgentStatus::Quiet));
    assert_eq!(fx.store.project_stats().expect("stats").activations.total, 0);
    assert_eq!(err_text(fx.store.start_activation("ghost", "p", &[])), "Unknown agent: ghost");
}

#[test]
fn a_batch_of_starts_is_one_transaction_in_which_a_start_that_cannot_happen_is_rolled_back_alone() {
    let fx = Fixture::team();
    let pm = fx.work("pm", "P2", "pm's");
    let one = fx.work("worker-1", "P2", "one's");
    let two = fx.work("worker-2", "P2", "two's");
    let busy = fx.store.start_activation("worker-2", "busy", &[]).expect("worker-2 busy");
    let events_before = fx.store.events_after(0, 10_000).expect("events").len();
    let pm_ids = [pm.clone()];
    // worker-1's batch also names pm's signal: not pending for worker-1, so its start fails.
    let one_ids = [one.clone(), pm.clone()];
    let two_ids = [two.clone()];
    let starts = [
        ActivationStart { agent_id: "pm", prompt: "p", signal_ids: &pm_ids },
        ActivationStart { agent_id: "worker-1", prompt: "p", signal_ids: &one_ids },
        ActivationStart { agent_id: "worker-2", prompt: "p", signal_ids: &two_ids },
    ];
    let outcomes = fx.store.start_activations(&starts).expect("the batch commits");
    let texts: Vec<String> =
        outcomes.iter().map(|o| o.as_ref().map(|a| a.agent_id.clone()).unwrap_or_else(|e| e.to_string())).collect();
    assert_eq!(
        texts,
        [
            "pm".to_string(),
            format!("Signal {pm} is not pending for agent worker-1; it cannot be delivered to a new activation"),
            format!("Agent worker-2 already has a running activation {}; finish or cancel it first", busy.id),
        ]
    );
    // pm started with its signal; worker-1's part left nothing behind (its own signal still
    // pending, the agent quiet); worker-2's running activation is untouched.
    let started = outcomes[0].as_ref().expect("pm started");
    assert_eq!(fx.store.signal(&pm).expect("read").and_then(|s| s.delivered_activation_id), Some(started.id.clone()));
    assert_eq!(fx.store.signal(&one).expect("read").map(|s| s.status), Some(SignalStatus::Pending));
    assert_eq!(
        fx.store.agent("worker-1").expect("read").map(|a| (a.status, a.active_activation_id)),
        Some((AgentStatus::Quiet, None))
    );
    assert_eq!(fx.store.agent("worker-2").expect("read").and_then(|a| a.active_activation_id), Some(busy.id.clone()));
    assert_eq!(fx.store.signal(&two).expect("read").map(|s| s.status), Some(SignalStatus::Pending));
    // Only pm's start is in the event log: the rolled-back parts announced nothing.
    let events = fx.store.events_after(0, 10_000).expect("events");
    let kinds: Vec<String> = events[events_before..].iter().map(|e| e.kind()).collect();
    assert_eq!(kinds, ["agent.status", "activation.started"]);
    assert_eq!(fx.store.project_stats().expect("stats").activations.total, 2);
}

#[test]
fn useful_effects_are_counted_per_source_activation() {
    let fx = Fixture::team();
    let act = fx.store.start_activation("pm", "p", &[]).expect("starts");
    let from_act = |kind: &str, target: Option<&str>| SignalRequest {
        kind: kind.into(),
        source_agent: Some("pm".into()),
        source_activation: Some(act.id.clone()),
        target_agent: target.map(String::from),
        ..Default::default()
    };
    fx.signal(from_act("custom.audit", None));
    assert_eq!(fx.store.count_activation_useful_effects(&act.id).expect("count"), 0);
    fx.signal(from_act("custom.work", Some("worker-1")));
    fx.store
        .send_message(SendMessage { source_activation: Some(act.id.clone()), ..msg("pm", Some("user"), None) })
        .expect("sent");
    assert_eq!(fx.store.count_activation_useful_effects(&act.id).expect("count"), 2);
}

#[test]
fn tool_calls_aggregate_without_inputs() {
    let fx = Fixture::team();
    let act = fx.store.start_activation("worker-1", "p", &[]).expect("starts");
    // The caller computes the target from the tool's declared `presentation.target`.
    let call = |tool: &str, input: Value, target: &str| {
        fx.store
            .start_tool_call(&act.id, "worker-1", tool, Some("core"), &input, Some(target))
            .expect("tool call starts")
    };
    let a =
        call("file.write", json!({"path": "/workspace/a.txt", "content": "TOP-SECRET-CONTENT"}), "/workspace/a.txt");
    fx.store
        .finish_tool_call(&a, ToolCallOutcome::Completed, Some(&json!({"output": "Wrote 18 chars"})), None, None)
        .expect("ok");
    fx.clock.advance(Duration::seconds(1));
    let b =
        call("file.write", json!({"path": "/workspace/b.txt", "content": "TOP-SECRET-CONTENT"}), "/workspace/b.txt");
    let long_error = "e".repeat(2000);
    let finished = fx
        .store
        .finish_tool_call(&b, ToolCallOutcome::Failed, None, Some(&long_error), Some("failed"))
        .expect("failed");
    assert_eq!(finished.status, ToolCallStatus::Failed);
    assert_eq!(
        err_text(fx.store.finish_tool_call(&b, ToolCallOutcome::Completed, None, None, None)),
        format!("Tool call {b} already finished (it is failed)")
    );
    let _running = call("shell.exec", json!({"command": "cargo test", "cwd": "/workspace"}), "cargo test · /workspace");

    let stats = fx.store.tool_stats().expect("stats");
    assert_eq!(stats.iter().map(|s| s.tool.as_str()).collect::<Vec<_>>(), ["file.write", "shell.exec"]);
    let write = &stats[0];
    assert_eq!(
        (write.call_count, write.running_count, write.completed_count, write.failed_count, write.last_status),
        (2, 0, 1, 1, ToolCallStatus::Failed)
    );
    assert_eq!(write.last_agent_id, "worker-1");
    assert_eq!(write.toolpack_id.as_deref(), Some("core"));
    assert_eq!(iso(write.last_at), iso(start_time() + Duration::seconds(1)));
    assert_eq!(write.last_error.as_deref().map(|e| e.chars().count()), Some(600));
    assert_eq!((stats[1].running_count, stats[1].last_status), (1, ToolCallStatus::Running));
    let json = serde_json::to_string(&stats).expect("serializes");
    assert!(!json.contains("TOP-SECRET") && !json.contains("input"), "{json}");
    assert!(json.contains("\"callCount\":2") && json.contains("\"lastError\""), "{json}");

    let recent = fx.store.recent_tool_calls(&["file.write", "file.read"], 10).expect("recent");
    assert_eq!(
        recent.iter().map(|c| c.target.as_deref()).collect::<Vec<_>>(),
        [Some("/workspace/b.txt"), Some("/workspace/a.txt")]
    );
    let all = fx.store.recent_tool_calls(&[], 1).expect("recent");
    assert_eq!(all[0].target.as_deref(), Some("cargo test · /workspace"));
    assert!(!serde_json::to_string(&recent).expect("serializes").contains("TOP-SECRET"));

    fx.store.finish_activation(&act.id, ActivationOutcome::Completed, None, None).expect("finishes");
    assert_eq!(
        err_text(fx.store.start_tool_call(&act.id, "worker-1", "file.read", None, &json!({}), None)),
        format!("Activation {} is not running (it is completed)", act.id)
    );
    let other = fx.store.start_activation("pm", "p", &[]).expect("starts");
    assert_eq!(
        err_text(fx.store.start_tool_call(&other.id, "worker-1", "file.read", None, &json!({}), None)),
        format!("Activation {} belongs to agent pm, not worker-1", other.id)
    );
    assert_eq!(
        err_text(fx.store.start_tool_call("act_nope", "pm", "x", None, &json!({}), None)),
        "Unknown activation: act_nope"
    );
}

// ---------------------------------------------------------------------------------------------
// queries and stats

#[test]
fn conversations_pairs_and_paging() {
    let fx = Fixture::team();
    let mut ids = Vec::new();
    for (i, (from, to)) in
        [("user", "pm"), ("pm", "user"), ("pm", "worker-1"), ("user", "pm"), ("worker-1", "pm")].into_iter().enumerate()
    {
        let sent =
            fx.store.send_message(SendMessage { body: format!("m{i}"), ..msg(from, Some(to), None) }).expect("sent");
        ids.push(sent.message_id);
    }
    fx.store.send_message(msg("pm", None, Some("#project"))).expect("sent");

    let bodies = |query: MessageQuery| -> Vec<String> {
        fx.store.list_messages(&query).expect("list").into_iter().map(|m| m.body).collect()
    };
    let pair = |a: &str, b: &str| MessageQuery {
        participant_a: Some(a.into()),
        participant_b: Some(b.into()),
        ..Default::default()
    };
    assert_eq!(bodies(pair("user", "pm")), ["m0", "m1", "m3"]);
    assert_eq!(bodies(pair("pm", "user")), ["m0", "m1", "m3"]);
    assert_eq!(bodies(MessageQuery { limit: Some(2), ..pair("user", "pm") }), ["m1", "m3"], "newest, oldest first");
    assert_eq!(bodies(MessageQuery { before_id: Some(ids[3].clone()), ..pair("user", "pm") }), ["m0", "m1"]);
    assert_eq!(bodies(MessageQuery { channel: Some("#project".into()), ..Default::default() }), ["hello"]);
    assert_eq!(bodies(MessageQuery { participant_a: Some("worker-1".into()), ..Default::default() }), ["m2", "m4"]);
    assert_eq!(
        err_text(fx.store.list_messages(&MessageQuery { before_id: Some("msg_nope".into()), ..Default::default() })),
        "Unknown message: msg_nope"
    );

    let pairs = fx.store.direct_pairs(10).expect("pairs");
    let summary: Vec<(&str, &str, u64)> = pairs.iter().map(|p| (p.a.as_str(), p.b.as_str(), p.count)).collect();
    assert_eq!(summary, [("pm", "worker-1", 2), ("pm", "user", 3)]);
    assert_eq!(pairs[0].last_message_id, ids[4]);
}

#[test]
fn signal_lists_and_counts() {
    let fx = Fixture::team();
    fx.work("pm", "P1", "a");
    fx.work("pm", "P3", "b");
    fx.work("worker-1", "P3", "c");
    fx.signal(req("audit"));

    let counts = fx.store.signal_counts().expect("counts");
    assert_eq!(counts.total, 4);
    assert_eq!(
        serde_json::to_value(&counts).expect("json"),
        json!({
            "total": 4,
            "byStatus": {"closed": 1, "delivered": 0, "pending": 3},
            "byPriority": {"P0": 0, "P1": 1, "P2": 1, "P3": 2},
        })
    );
    let labels = |q: SignalQuery| -> Vec<String> {
        fx.store
            .list_signals(&q)
            .expect("list")
            .iter()
            .map(|s| s.payload["label"].as_str().unwrap_or(&s.kind).to_string())
            .collect()
    };
    assert_eq!(labels(SignalQuery::default()), ["audit", "c", "b", "a"], "newest first");
    assert_eq!(labels(SignalQuery { target_agent: Some("pm".into()), ..Default::default() }), ["b", "a"]);
    assert_eq!(labels(SignalQuery { status: Some(SignalStatus::Closed), ..Default::default() }), ["audit"]);
    assert_eq!(labels(SignalQuery { limit: Some(1), ..Default::default() }), ["audit"]);
    assert_eq!(err_text("sleeping".parse::<SignalStatus>()), "Invalid signal status: sleeping");
}

#[test]
fn project_stats_and_status() {
    let fx = Fixture::team();
    let project = fx.store.project().expect("project");
    assert_eq!((project.name.as_str(), project.status), ("store-test", ProjectStatus::Initialized));
    let mut events = fx.store.subscribe();
    let running = fx.store.set_project_status(ProjectStatus::Running).expect("set");
    assert_eq!(running.status, ProjectStatus::Running);
    let event = events.try_recv().expect("status event");
    assert_eq!(
        (event.kind().as_str(), event.data().clone()),
        ("project.status", json!({"status": "running", "previous": "initialized"}))
    );

    fx.store.send_message(msg("user", Some("pm"), None)).expect("sent");
    let act = fx.store.start_activation("pm", "p", &[]).expect("starts");
    fx.store.start_tool_call(&act.id, "pm", "messages.send", Some("core"), &json!({}), None).expect("call");
    let stats = serde_json::to_value(fx.store.project_stats().expect("stats")).expect("json");
    let events_total = fx.store.events_after(0, 1000).expect("events").len();
    assert_eq!(
        stats,
        json!({
            "name": "store-test",
            "status": "running",
            "agents": {"total": 3, "byStatus": {"quiet": 2, "running": 1}},
            "messages": 1,
            "activations": {"total": 1, "running": 1, "waitingApproval": 0, "waitingUser": 0, "failed": 0},
            "toolCalls": 1,
            "historyCompactions": 0,
            "events": events_total,
        })
    );
}

#[test]
fn agent_records_never_serialize_their_token() {
    let fx = Fixture::team();
    let agents = fx.store.agents().expect("agents");
    assert_eq!(agents.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), ["pm", "worker-1", "worker-2"]);
    let json = serde_json::to_string(&agents).expect("json");
    assert!(agents.iter().all(|a| a.token.len() == 43 && !json.contains(&a.token)), "{json}");
    assert!(json.contains("\"displayName\""));
}

// ---------------------------------------------------------------------------------------------
// opening, reopening, events

#[test]
fn tokens_and_state_survive_reopening() {
    let fx = Fixture::team();
    let tokens: Vec<(String, String)> =
        fx.store.agents().expect("agents").into_iter().map(|a| (a.id, a.token)).collect();
    fx.store.set_project_status(ProjectStatus::Running).expect("set");
    let sent = fx.store.send_message(msg("user", Some("pm"), None)).expect("sent");
    let events_before = fx.store.events_after(0, 1000).expect("events").len();
    drop(fx.store.clone());

    for _ in 0..2 {
        let again = fx.reopen();
        let reopened: Vec<(String, String)> =
            again.agents().expect("agents").into_iter().map(|a| (a.id, a.token)).collect();
        assert_eq!(reopened, tokens);
        assert_eq!(again.project().expect("project").status, ProjectStatus::Running);
        assert!(again.message(&sent.message_id).expect("read").is_some());
        assert_eq!(again.events_after(0, 1000).expect("events").len(), events_before, "reopening adds no events");
    }
    let tokens_unique: std::collections::HashSet<&String> = tokens.iter().map(|(_, t)| t).collect();
    assert_eq!(tokens_unique.len(), tokens.len());
}

#[test]
fn migrations_record_their_version_and_are_idempotent() {
    let fx = Fixture::team();
    let version = || -> i64 {
        let conn = rusqlite::Connection::open(fx.store.path()).expect("open");
        conn.pragma_query_value(None, "user_version", |r| r.get(0)).expect("version")
    };
    assert_eq!(version(), suzumio::store::schema_version());
    fx.reopen();
    fx.reopen();
    assert_eq!(version(), suzumio::store::schema_version());
    let conn = rusqlite::Connection::open(fx.store.path()).expect("open");
    let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).expect("mode");
    assert_eq!(mode, "wal");
    assert!(fx.dir.path().join(".suzumio/state.db").is_file());
}

#[test]
fn a_database_from_a_newer_build_is_refused() {
    let fx = Fixture::team();
    let conn = rusqlite::Connection::open(fx.store.path()).expect("open");
    conn.pragma_update(None, "user_version", 99).expect("bump");
    drop(conn);
    let text = err_text(Store::open(&fx.config, fx.clock.clone()));
    assert!(text.contains("schema version 99") && text.contains("use a newer suzumio"), "{text}");
}

#[test]
fn removed_agents_are_stopped_and_come_back_when_re_added() {
    let fx = Fixture::team();
    let worker_token = fx.store.agent("worker-2").expect("read").expect("exists").token;
    let solo = write_config(fx.dir.path(), SOLO);
    let store = Store::open(&solo, fx.clock.clone()).expect("reopens with fewer agents");
    let statuses: Vec<(String, AgentStatus)> =
        store.agents().expect("agents").into_iter().map(|a| (a.id, a.status)).collect();
    assert_eq!(
        statuses,
        [
            ("pm".to_string(), AgentStatus::Quiet),
            ("worker-1".to_string(), AgentStatus::Stopped),
            ("worker-2".to_string(), AgentStatus::Stopped)
        ]
    );
    assert_eq!(err_text(store.send_message(msg("pm", Some("worker-1"), None))), "Unknown agent: worker-1");

    let team = write_config(fx.dir.path(), TEAM);
    let store = Store::open(&team, fx.clock.clone()).expect("reopens with the team");
    let back = store.agent("worker-2").expect("read").expect("exists");
    assert_eq!((back.status, back.token), (AgentStatus::Quiet, worker_token));
}

#[test]
fn events_are_published_after_commit_in_id_order() {
    let fx = Fixture::team();
    let mut rx = fx.store.subscribe();
    let other_handle = fx.store.clone();
    let sent = other_handle.send_message(msg("user", None, Some("#project"))).expect("sent");

    let mut received = Vec::new();
    while let Ok(event) = rx.try_recv() {
        // Committed before it was published: the row is readable right away.
        if let Some(id) = event.data()["messageId"].as_str() {
            assert!(fx.store.message(id).expect("read").is_some());
        }
        received.push(event);
    }
    assert_eq!(
        received.iter().map(|e| e.kind()).collect::<Vec<_>>(),
        ["message.created", "signal.created", "signal.created", "signal.created"]
    );
    assert!(received.windows(2).all(|w| w[0].id < w[1].id));
    let stored = fx.store.events_after(received[0].id - 1, 10).expect("events");
    assert_eq!(stored, received);
    assert_eq!(sent.signal_ids.len(), 3);

    // A refused write publishes nothing.
    let _ = fx.store.send_message(msg("user", Some("ghost"), None));
    assert!(rx.try_recv().is_err());
    let initialized = fx.store.events_after(0, 1).expect("events");
    assert_eq!(initialized[0].kind(), "project.initialized");
}

#[test]
fn concurrent_writers_from_threads_are_serialized() {
    let fx = Fixture::team();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let store = fx.store.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    store
                        .send_message(SendMessage { body: format!("{t}-{i}"), ..msg("user", Some("pm"), None) })
                        .expect("sent");
                    store.pending_signals("pm", 20).expect("read while others write");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("thread finished");
    }
    let stats = fx.store.project_stats().expect("stats");
    assert_eq!(stats.messages, 100);
    assert_eq!(fx.store.signal_counts().expect("counts").by_status["pending"], 100);
    // 1 message.created + 1 signal.created per message, ids without gaps after the open events.
    let events = fx.store.events_after(0, 1000).expect("events");
    assert!(events.windows(2).all(|w| w[1].id == w[0].id + 1));
}

#[test]
fn store_handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<Store>();
    assert_send_sync::<StateFiles>();
}

// ---------------------------------------------------------------------------------------------
// toolpack state files

#[test]
fn state_files_round_trip_as_pretty_json() {
    let dir = temp_dir();
    let files = StateFiles::new(dir.path());
    assert_eq!(files.read("plan", "state.json").expect("read"), None);
    let value = json!({"plans": [{"id": "pln_1", "items": ["a", "b"]}], "unicode": "ümlaut"});
    files.write("plan", "state.json", &value).expect("write");
    assert_eq!(files.read("plan", "state.json").expect("read"), Some(value.clone()));
    let path = dir.path().join("toolpack-state/plan/state.json");
    let text = std::fs::read_to_string(&path).expect("file");
    assert_eq!(text, format!("{}\n", serde_json::to_string_pretty(&value).expect("json")));
    files.write("plan", "state.json", &json!({"v": 2})).expect("overwrite");
    assert_eq!(files.read("plan", "state.json").expect("read"), Some(json!({"v": 2})));
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().expect("dir")).expect("list").collect();
    assert_eq!(leftovers.len(), 1, "no temp files left behind");
}

#[test]
fn state_file_names_are_confined() {
    let dir = temp_dir();
    let files = StateFiles::new(dir.path());
    for bad in ["../escape.json", "a/b.json", ".hidden", "x..y", "", "-flag"] {
        let err = files.write("plan", bad, &json!({})).expect_err("refused");
        assert!(matches!(&err, StateError::BadName { name } if name == bad), "{err:?}");
        assert!(err.to_string().contains(&format!("`{bad}`")), "{err}");
        assert!(files.read("plan", bad).is_err());
    }
    let err = files.write("..", "state.json", &json!({})).expect_err("refused");
    assert!(matches!(err, StateError::BadPackId { .. }), "{err:?}");
    assert!(!dir.path().join("escape.json").exists());
}

#[test]
fn corrupt_state_file_is_kept_aside_and_reported() {
    let dir = temp_dir();
    let files = StateFiles::new(dir.path());
    let pack_dir = dir.path().join("toolpack-state/scheduler");
    std::fs::create_dir_all(&pack_dir).expect("dir");
    let path = pack_dir.join("jobs.json");
    std::fs::write(&path, "{\"jobs\": [").expect("corrupt file");

    let err = files.read("scheduler", "jobs.json").expect_err("corrupt");
    let StateError::Corrupt { path: reported, kept_as, reason } = &err else {
        panic!("expected Corrupt, got {err:?}");
    };
    assert_eq!(reported, &path);
    let kept_name = kept_as.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let stamp = kept_name.strip_prefix("jobs.json.corrupt-").expect("named after the file");
    assert_eq!(stamp.len(), "20260301T120000Z".len(), "{stamp}");
    assert!(stamp.ends_with('Z') && stamp.as_bytes()[8] == b'T', "{stamp}");
    assert_eq!(std::fs::read_to_string(kept_as).expect("kept"), "{\"jobs\": [", "contents preserved");
    assert!(!reason.is_empty());
    let message = err.to_string();
    assert!(
        message.contains(&path.display().to_string()) && message.contains(&kept_as.display().to_string()),
        "{message}"
    );

    // The pack can start over; the kept copy stays.
    assert_eq!(files.read("scheduler", "jobs.json").expect("read"), None);
    files.write("scheduler", "jobs.json", &json!({"jobs": []})).expect("write");
    assert!(kept_as.exists());
}

#[test]
fn concurrent_state_writers_do_not_corrupt_or_lose_updates() {
    let dir = temp_dir();
    let root = dir.path().to_path_buf();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let root = root.clone();
            std::thread::spawn(move || {
                // Separate handles share the process-wide pack lock.
                let files = StateFiles::new(&root);
                for _ in 0..20 {
                    let guard = files.lock("counter").expect("lock");
                    let current = guard.read("count.json").expect("read").and_then(|v| v["n"].as_u64()).unwrap_or(0);
                    guard
                        .write("count.json", &json!({"n": current + 1, "by": t, "pad": "x".repeat(4096)}))
                        .expect("write");
                    drop(guard);
                    // Plain reads without a held guard always see a whole document.
                    files.read("counter", "count.json").expect("whole document").expect("exists");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("thread finished");
    }
    let files = StateFiles::new(&root);
    assert_eq!(files.read("counter", "count.json").expect("read").and_then(|v| v["n"].as_u64()), Some(80));
}

#[test]
fn submitting_records_report_status_event_and_useful_signal() {
    let fx = Fixture::team();
    let act = fx.store.start_activation("pm", "p", &[]).expect("starts");
    let signal = fx.store.submit_project("/p/final-report.md", Some("pm"), Some(&act.id)).expect("submits");
    assert_eq!(shape(std::slice::from_ref(&signal)), [row(None, None, "closed", true, "P2")]);
    assert_eq!(
        (signal.kind.as_str(), signal.payload.clone()),
        ("completion.submitted", json!({"reportPath": "/p/final-report.md"}))
    );
    let project = fx.store.project().expect("project");
    assert_eq!(
        (project.status, project.submitted_report.as_deref()),
        (ProjectStatus::Submitted, Some("/p/final-report.md"))
    );
    let kinds: Vec<String> = fx.store.events_after(0, 1000).expect("events").into_iter().map(|e| e.kind()).collect();
    assert!(
        kinds.ends_with(&["project.status".into(), "project.submitted".into(), "signal.created".into()]),
        "{kinds:?}"
    );
    assert_eq!(fx.store.count_activation_useful_effects(&act.id).expect("count"), 1);
}

// ---------------------------------------------------------------------------------------------
// background commands

/// A runner may report a command's end more than once (a lost answer, a reconnect to a new
/// controller, a reopened store): one signal, the same one each time.
#[test]
fn a_command_finish_is_recorded_once_per_command_id_even_across_reopening() {
    let f = Fixture::team();
    let payload = json!({"commandId": "cmd_1", "exitCode": 0, "output": "done"});
    let (first, new) = f.store.record_command_finished("pm", "cmd_1", payload.clone()).expect("recorded");
    assert!(new);
    assert_eq!((first.kind.as_str(), first.priority.as_str()), ("shell.command_finished", "P2"));
    assert_eq!((first.target_agent.as_deref(), first.status), (Some("pm"), SignalStatus::Pending));
    let (again, new) = f.store.record_command_finished("pm", "cmd_1", payload.clone()).expect("answered");
    assert!(!new);
    assert_eq!(again.id, first.id);
    let (after_reopen, new) = f.reopen().record_command_finished("pm", "cmd_1", payload).expect("answered");
    assert_eq!((after_reopen.id.as_str(), new), (first.id.as_str(), false));
    let (other, new) = f.store.record_command_finished("pm", "cmd_2", json!({})).expect("recorded");
    assert!(new && other.id != first.id);
    let query = SignalQuery { kind: Some("shell.command_finished".into()), ..Default::default() };
    assert_eq!(f.store.list_signals(&query).unwrap().len(), 2);
    assert!(err_text(f.store.record_command_finished("nobody", "cmd_3", json!({}))).contains("nobody"));
}

/// Reading the end (shell.check) withdraws the signal while it is pending, and only then.
#[test]
fn a_command_finish_signal_is_withdrawn_only_while_pending() {
    let f = Fixture::team();
    let (signal, _) = f.store.record_command_finished("pm", "cmd_1", json!({})).unwrap();
    assert_eq!(f.store.withdraw_command_signal("worker-1", "cmd_1").unwrap(), None, "not another agent's");
    assert_eq!(f.store.withdraw_command_signal("pm", "cmd_1").unwrap(), Some(signal.id.clone()));
    assert_eq!(f.store.signal(&signal.id).unwrap().unwrap().status, SignalStatus::Closed);
    assert_eq!(f.store.withdraw_command_signal("pm", "cmd_1").unwrap(), None);
    let (delivered, _) = f.store.record_command_finished("pm", "cmd_2", json!({})).unwrap();
    f.run_activation("pm", std::slice::from_ref(&delivered));
    assert_eq!(f.store.withdraw_command_signal("pm", "cmd_2").unwrap(), None, "a delivered signal stays");
    assert_eq!(f.store.signal(&delivered.id).unwrap().unwrap().status, SignalStatus::Delivered);
}

/// A dead runner is looked at more than once (its watcher, the next start, every restart): its
/// running commands become `lost` and are signalled once, in the transaction of the status
/// change; an end recorded first (reported, read) stays, and a late report adds nothing.
#[test]
fn a_lost_command_is_marked_and_signalled_once_however_often_its_runner_is_looked_at() {
    let f = Fixture::team();
    let started = |id: &str| StartedCommand {
        id: id.to_string(),
        name: Some("job".into()),
        command: "sleep 300".into(),
        cwd: "/workspace".into(),
    };
    for id in ["cmd_1", "cmd_2", "cmd_3"] {
        f.store.record_command_started("pm", &started(id)).unwrap();
    }
    let read = ReadEnd { status: "exited".into(), exit_code: Some(0), signal: None };
    f.store.record_command_read("pm", "cmd_2", &read).unwrap();
    f.store.record_command_finished("pm", "cmd_3", json!({"status": "exited", "exitCode": 1})).unwrap();
    assert_eq!(f.store.running_commands("pm").unwrap(), ["cmd_1"]);

    let all: Vec<String> = ["cmd_1", "cmd_2", "cmd_3"].map(String::from).to_vec();
    let lost = f.store.record_commands_lost("pm", &all, LossCause::Killed, "killed (SIGKILL, exit code 137)").unwrap();
    assert_eq!(lost.len(), 1, "only the running one: {lost:?}");
    assert_eq!(lost[0].payload["commandId"], "cmd_1");
    assert_eq!((lost[0].payload["status"].as_str(), lost[0].payload["cause"].as_str()), (Some("lost"), Some("killed")));
    assert_eq!((lost[0].kind.as_str(), lost[0].status), ("shell.command_finished", SignalStatus::Pending));
    let again = f.reopen().record_commands_lost("pm", &all, LossCause::Removed, "its container was removed").unwrap();
    assert!(again.is_empty(), "{again:?}");
    let (late, new) = f.store.record_command_finished("pm", "cmd_1", json!({"status": "exited"})).unwrap();
    assert_eq!((late.id.as_str(), new), (lost[0].id.as_str(), false), "a late report is the lost signal");

    let listed = f.store.lost_commands("pm", 10).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!((listed[0].status.as_str(), listed[0].cause.as_deref()), ("lost", Some("killed")));
    assert_eq!(listed[0].command, "sleep 300");
    let query = SignalQuery { kind: Some("shell.command_finished".into()), ..Default::default() };
    assert_eq!(f.store.list_signals(&query).unwrap().len(), 2, "cmd_3's end and cmd_1's loss");
    // A quick command may report its end before its start is recorded: the end stays.
    f.store.record_command_finished("pm", "cmd_4", json!({"status": "exited", "command": "true"})).unwrap();
    f.store.record_command_started("pm", &started("cmd_4")).unwrap();
    assert_eq!(f.store.background_command("pm", "cmd_4").unwrap().unwrap().status, "exited");
}

/// Rows keep typed times and usage; serialized (the API, `--json`) they must read as the text
/// the store wrote, so existing databases and golden output stay the same.
#[test]
fn typed_times_and_usage_serialize_as_the_text_the_store_wrote() {
    let fx = Fixture::team();
    fx.clock.set(start_time() + Duration::milliseconds(123));
    let act = fx.store.start_activation("worker-1", "the prompt", &[]).expect("starts");
    let call = |cost| TokenUsage { model_calls: 1, input_tokens: 10, cached_input_tokens: 2, output_tokens: 5, cost };
    fx.store.record_model_usage(&act.id, "worker-1", "main (m)", &call(0.25), true).expect("usage");
    fx.store.record_model_usage(&act.id, "worker-1", "other (n)", &call(0.0), false).expect("usage");
    let read = fx.store.activation(&act.id).expect("read").expect("exists");
    let conn = rusqlite::Connection::open(fx.store.path()).expect("open");
    let (started, usage): (String, String) = conn
        .query_row("SELECT started_at, usage_json FROM activations WHERE id = ?1", [&act.id], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .expect("row");
    assert_eq!(started, "2026-03-01T12:00:00.123Z");
    assert_eq!(serde_json::to_value(&read).unwrap()["startedAt"], started);
    assert_eq!(serde_json::to_string(&read.usage).unwrap(), usage);
    assert_eq!(read.usage.map(|u| u.models), Some(vec!["main (m)".to_string(), "other (n)".to_string()]));
}

/// What budgets count, recorded through the store: three activations of two agents across two
/// hours, two model calls each. Returns the day and the first hour.
fn budget_rows(fx: &Fixture) -> (DateTime<Utc>, DateTime<Utc>) {
    let call = |n| TokenUsage { model_calls: 1, input_tokens: n, cached_input_tokens: 1, output_tokens: 2, cost: 0.5 };
    for (agent, minutes, tokens) in [("worker-1", 0, 10), ("worker-2", 10, 20), ("worker-1", 70, 30)] {
        fx.clock.set(start_time() + Duration::minutes(minutes));
        let act = fx.store.start_activation(agent, "p", &[]).expect("starts");
        fx.store.record_model_usage(&act.id, agent, "m", &call(tokens), true).expect("usage");
        fx.store.record_model_usage(&act.id, agent, "m", &call(tokens), true).expect("usage");
        fx.store.finish_activation(&act.id, ActivationOutcome::Completed, None, None).expect("finishes");
    }
    (start_time() - Duration::hours(12), start_time())
}

/// The counters agree with the rows they count, per agent and for the project, in each period.
fn assert_counters_agree(store: &Store, day: DateTime<Utc>, hour: DateTime<Utc>) {
    let next_hour = hour + Duration::hours(1);
    for agent in [Some("worker-1"), Some("worker-2"), None] {
        let counted = store.usage_of_day(agent, day).expect("counter");
        assert_eq!(counted, store.usage_since(agent, &iso(day)).expect("sum"), "{agent:?}");
        let this_hour = store.activations_of_hour(agent, hour).expect("counter");
        let later = store.activations_of_hour(agent, next_hour).expect("counter");
        assert_eq!(later, store.count_activations_since(agent, &iso(next_hour)).expect("count"), "{agent:?}");
        assert_eq!(this_hour + later, store.count_activations_since(agent, &iso(hour)).expect("count"));
    }
    let project = store.usage_of_day(None, day).expect("counter");
    assert_eq!((project.model_calls, project.input_tokens, project.cost), (6, 120, 3.0));
    assert_eq!(store.activations_of_hour(None, hour).expect("counter"), 2);
    assert_eq!(store.usage_of_day(None, day + Duration::days(1)).expect("counter"), TokenUsage::default());
}

/// Budgets read running counters instead of summing the period's rows (flat cost however busy
/// the day): they must agree with the rows they count, a new hour counts activations from zero,
/// and a reopened store keeps them.
#[test]
fn budget_counters_agree_with_the_rows_they_count() {
    let fx = Fixture::team();
    let (day, hour) = budget_rows(&fx);
    assert_counters_agree(&fx.store, day, hour);
    assert_counters_agree(&fx.reopen(), day, hour);
}

/// A store from before the counters gets them filled from the rows it already has, so the first
/// budget check after the upgrade counts the whole day.
#[test]
fn budget_counters_of_an_older_store_are_filled_from_its_rows() {
    let fx = Fixture::team();
    let (day, hour) = budget_rows(&fx);
    let conn = rusqlite::Connection::open(fx.store.path()).expect("open");
    // Undo the step that added them (its indexes too) and the one after it, as a store of
    // version 12 has it.
    conn.execute_batch(
        "ALTER TABLE tool_calls DROP COLUMN call_key; ALTER TABLE activations DROP COLUMN rejected_tool_calls;
         DROP TABLE usage_counters; DROP INDEX history_compactions; DROP INDEX history_in_order;
         DROP INDEX activated_tools_in_order; DROP INDEX approval_requests_pending;
         DROP INDEX permission_rules_by_tool; DROP INDEX permission_rules_by_activation;
         DROP INDEX activations_by_agent_status; DROP TABLE tool_switches; DROP TABLE live_permission_rules;
         DROP TABLE permission_mode_overrides; DROP TABLE questions; PRAGMA user_version = 12;",
    )
    .expect("downgraded");
    drop(conn);
    assert_counters_agree(&fx.reopen(), day, hour);
}

#[test]
fn replay_reads_what_was_added_since_and_starts_over_at_a_compaction() {
    let fx = Fixture::team();
    let signals = |n: usize| HistoryEntry::Signals { delivery: "test".into(), signal_ids: vec![format!("sig_{n}")] };
    let ids = |records: std::sync::Arc<Vec<suzumio::store::HistoryRecord>>| {
        records.iter().map(|r| r.id.clone()).collect::<Vec<_>>()
    };
    let mut written = Vec::new();
    for n in 0..3 {
        written.push(fx.store.append_history("pm", None, &signals(n)).expect("appended"));
    }
    assert_eq!(ids(fx.store.replay_history("pm").expect("replay")), written);
    // Rows another process writes (another handle on the same file) are replayed too.
    let other = fx.reopen();
    written.push(other.append_history("pm", None, &signals(3)).expect("appended elsewhere"));
    written.push(fx.store.append_history("pm", None, &signals(4)).expect("appended"));
    assert_eq!(ids(fx.store.replay_history("pm").expect("replay")), written);
    // Another agent's rows stay its own.
    fx.store.append_history("worker-1", None, &signals(5)).expect("appended");
    assert_eq!(ids(fx.store.replay_history("pm").expect("replay")), written);
    // A compaction keeping the last row as its tail: replay is the tail, then the summary.
    let compaction = HistoryEntry::HistoryCompaction {
        summary: "so far".into(),
        archived_messages: 4,
        kept_messages: 1,
        reason: "test".into(),
        model: "m".into(),
        fallback: None,
        tail_from: Some(written[4].clone()),
        kept_prompt: None,
    };
    let summary = fx.store.append_history("pm", None, &compaction).expect("compacted");
    let after = fx.store.append_history("pm", None, &signals(6)).expect("appended");
    let replayed = ids(fx.store.replay_history("pm").expect("replay"));
    assert_eq!(replayed, [written[4].clone(), summary, after]);
    // What a fresh handle reads from the file is the same.
    assert_eq!(ids(fx.reopen().replay_history("pm").expect("replay")), replayed);
}
