//! The packaged scheduler toolpack (`toolpacks/scheduler`, reference §5.1 plus cron, time zones,
//! endAt, maxRuns, pause/resume and missed runs) against real SQLite and the real JavaScript
//! engine, through `ToolHost` as the controller calls it. Time is a `ManualClock`: tests move it
//! and tick; nothing sleeps waiting for a schedule.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use support::TempProject;
use suzumio::clock::{Clock, ManualClock, iso, parse_iso};
use suzumio::config::load::ProcessEnv;
use suzumio::js::{CONTROLLER_GLUE, CallScope, JsCall, JsHost, JsLimits, ModuleSpec};
use suzumio::project::Project;
use suzumio::store::{ActivationOutcome, MessageQuery, MessageRecord, StateFiles, Store};
use suzumio::support::ops::ControllerOps;
use suzumio::support::{HookOutcome, InvokeError, ToolHost, ToolOutput};

/// A Monday.
const START: &str = "2026-01-05T09:00:00.000Z";
/// How the fixture names the pack; the temporary copy points at the repository's pack instead.
const FIXTURE_PACK_PATH: &str = "../../../../toolpacks/scheduler";
const WORKER_BLOCK: &str = "  worker:\n    tools: [messages.send, coordination.wait_for_signal, schedule.*]\n";

fn t(text: &str) -> DateTime<Utc> {
    parse_iso(text).unwrap_or_else(|| panic!("bad timestamp in test: {text}"))
}

fn pack_dir() -> PathBuf {
    support::repo_root().join("toolpacks/scheduler")
}

/// A temporary copy of the `sched` fixture with its own store, clock and tool host.
struct Env {
    project: TempProject,
    clock: Arc<ManualClock>,
    host: Arc<ToolHost>,
}

impl Env {
    fn new() -> Env {
        Env::build(START, |yaml| yaml)
    }

    fn at(start: &str) -> Env {
        Env::build(start, |yaml| yaml)
    }

    fn with_config(edit: impl FnOnce(String) -> String) -> Env {
        Env::build(START, edit)
    }

    /// For tests of what large job files cost in ticks, not of the hook deadline: a debug build
    /// on a loaded machine can take longer than the production default of 1 s to parse 10 000
    /// jobs once, and the deadline (tested on its own) would fail the tick.
    fn generous_deadline() -> Env {
        Env::with_config(|yaml| format!("{yaml}scheduler:\n  hookTimeoutMs: 60000\n"))
    }

    fn build(start: &str, edit: impl FnOnce(String) -> String) -> Env {
        let project = TempProject::copy_of("sched");
        let yaml = std::fs::read_to_string(project.dir.join("suzumio.yaml")).expect("fixture config");
        assert!(yaml.contains(FIXTURE_PACK_PATH), "the fixture registers the pack by relative path");
        let yaml = yaml.replace(FIXTURE_PACK_PATH, pack_dir().to_str().expect("UTF-8 repository path"));
        std::fs::write(project.dir.join("suzumio.yaml"), edit(yaml)).expect("config written");
        let clock = Arc::new(ManualClock::new(t(start)));
        let host = open_host(&project.dir, clock.clone());
        Env { project, clock, host }
    }

    /// Stop this host (its JavaScript runtime and module cache go with it) and open the project
    /// again, as a controller restart does. `edit` may change the config first.
    fn restart_with(&mut self, edit: impl FnOnce(String) -> String) {
        let path = self.project.dir.join("suzumio.yaml");
        let yaml = std::fs::read_to_string(&path).expect("config");
        std::fs::write(&path, edit(yaml)).expect("config written");
        let fresh = open_host(&self.project.dir, self.clock.clone());
        let old = std::mem::replace(&mut self.host, fresh);
        assert_eq!(Arc::strong_count(&old), 1, "nothing else holds the old host");
    }

    fn restart(&mut self) {
        self.restart_with(|yaml| yaml);
    }

    fn set(&self, at: &str) {
        self.clock.set(t(at));
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    fn now(&self) -> String {
        iso(self.clock.now())
    }

    async fn call(&self, tool: &str, input: Value) -> Result<ToolOutput, InvokeError> {
        self.host.support("pm", "act_test", "scheduler", tool, input).await
    }

    async fn ok(&self, tool: &str, input: Value) -> ToolOutput {
        let shown = input.to_string();
        self.call(tool, input).await.unwrap_or_else(|e| panic!("{tool} {shown} failed: {e}"))
    }

    async fn err(&self, tool: &str, input: Value) -> String {
        let shown = input.to_string();
        match self.call(tool, input).await {
            Ok(out) => panic!("{tool} {shown} should fail, got: {}", out.output),
            Err(e) => e.to_string(),
        }
    }

    async fn webui(&self, entry: &str, input: Value) -> Result<ToolOutput, InvokeError> {
        self.host.invoke_webui("scheduler", entry, input).await
    }

    /// Create a job through a tool and return it (from the output metadata).
    async fn create(&self, tool: &str, input: Value) -> Value {
        metadata_job(&self.ok(tool, input).await)
    }

    async fn tick(&self) -> HookOutcome {
        let outcomes = self.host.run_scheduler_hooks().await;
        outcomes.into_iter().find(|o| o.pack == "scheduler").expect("the scheduler pack has a hook")
    }

    /// A tick that must not report errors.
    async fn tick_ok(&self) -> HookOutcome {
        let outcome = self.tick().await;
        assert!(outcome.errors.is_empty(), "tick errors: {:?}", outcome.errors);
        assert!(outcome.recorded.is_empty(), "the scheduler returns no signal requests");
        outcome
    }

    fn messages(&self) -> Vec<MessageRecord> {
        self.host.store.list_messages(&MessageQuery { limit: Some(500), ..Default::default() }).expect("messages")
    }

    fn state_dir(&self) -> PathBuf {
        self.project.dir.join("toolpack-state/scheduler")
    }

    fn jobs_path(&self) -> PathBuf {
        self.state_dir().join("jobs.json")
    }

    fn jobs_file(&self) -> Value {
        let text = std::fs::read_to_string(self.jobs_path()).expect("jobs.json exists");
        assert!(text.ends_with("}\n"), "pretty JSON with a trailing newline");
        serde_json::from_str(&text).expect("jobs.json is JSON")
    }

    fn jobs(&self) -> Vec<Value> {
        let doc = self.jobs_file();
        assert_eq!(doc["version"], 1);
        doc["jobs"].as_array().expect("jobs array").clone()
    }

    fn job(&self, id: &Value) -> Value {
        self.jobs().into_iter().find(|j| j["id"] == *id).unwrap_or_else(|| panic!("job {id} in jobs.json"))
    }

    async fn list(&self, include_inactive: bool) -> ToolOutput {
        self.ok("schedule.list", json!({"includeInactive": include_inactive})).await
    }
}

fn open_host(dir: &Path, clock: Arc<ManualClock>) -> Arc<ToolHost> {
    let project = Project::load(dir, &ProcessEnv).unwrap_or_else(|e| panic!("fixture loads: {e}"));
    let clock: Arc<dyn Clock> = clock;
    let store = Store::open(&project.config, clock).expect("store opens");
    let state = StateFiles::new(&project.config.root);
    ToolHost::new(Arc::new(project), store, state)
}

fn metadata_job(out: &ToolOutput) -> Value {
    out.metadata.as_ref().and_then(|m| m.get("job")).cloned().expect("metadata.job")
}

fn handler_error(message: &str) -> String {
    format!("toolpack scheduler: {message}")
}

/// `expected` is the exact message, or a prefix when it ends with `…`.
fn assert_message(context: &str, got: &str, expected: &str) {
    match expected.strip_suffix('…') {
        Some(prefix) => {
            assert!(got.starts_with(&handler_error(prefix)), "{context}:\n  got      {got}\n  expected {prefix}…")
        }
        None => assert_eq!(got, handler_error(expected), "{context}"),
    }
}

fn remove_worker(yaml: String) -> String {
    assert!(yaml.contains(WORKER_BLOCK));
    yaml.replace(WORKER_BLOCK, "")
}

// ---------------------------------------------------------------------------------------------
// Reference §10, items 9 and 10.

#[tokio::test]
async fn due_job_is_sent_as_a_p3_message_from_scheduler_and_listed_done_once() {
    let env = Env::new();
    // Scheduled by the user: a job an agent schedules is sent as that agent (tests/policy.rs).
    let scheduled = env.webui("schedule.once", json!({"afterMinutes": 5, "body": "Check the **build**."})).await;
    let job = metadata_job(&scheduled.expect("scheduled from the WebUI"));
    assert_eq!(job["recipient"], "pm", "the coordinator by default");

    env.advance(Duration::minutes(5) - Duration::milliseconds(1));
    env.tick_ok().await;
    assert!(env.messages().is_empty(), "not due yet");

    env.advance(Duration::milliseconds(1));
    env.tick_ok().await;
    let messages = env.messages();
    assert_eq!(messages.len(), 1);
    let m = &messages[0];
    assert_eq!(
        (m.sender.as_str(), m.recipient.as_deref(), m.channel.as_deref(), m.priority.as_str(), m.body.as_str()),
        ("scheduler", Some("pm"), None, "P3", "Check the **build**.")
    );
    assert_eq!((m.source_agent.as_deref(), m.source_activation.as_deref()), (None, None), "nobody's useful effect");

    let stored = env.job(&job["id"]);
    assert_eq!(stored["status"], "done");
    assert_eq!(stored["sentCount"], 1);
    assert_eq!(stored["lastSentAt"], env.now());
    assert_eq!(stored["completedAt"], env.now());
    assert_eq!(stored["lastMessageId"], m.id.as_str());

    let panel = env.webui("schedule.jobs", json!({"includeInactive": true})).await.expect("panel");
    assert_eq!(panel.title.as_deref(), Some("scheduled messages"));
    assert!(panel.output.contains(&format!("- {} [done/once]", job["id"].as_str().unwrap())), "{}", panel.output);
    let hidden = env.webui("schedule.jobs", json!({})).await.expect("panel");
    assert_eq!(hidden.output, "Scheduled messages:\n- none");

    env.advance(Duration::hours(1));
    env.tick_ok().await;
    assert_eq!(env.messages().len(), 1, "a once job is sent once");
}

#[tokio::test]
async fn wait_for_quiet_holds_a_job_until_the_recipient_activation_ends() {
    let env = Env::new();
    let held = env
        .create(
            "schedule.once",
            json!({"afterMinutes": 1, "recipient": "worker", "waitForQuiet": true, "body": "held"}),
        )
        .await;
    let to_channel = env
        .create(
            "schedule.once",
            json!({"afterMinutes": 1, "channel": "#team", "waitForQuiet": true, "body": "channel"}),
        )
        .await;
    let to_user = env
        .create("schedule.once", json!({"afterMinutes": 1, "recipient": "user", "waitForQuiet": true, "body": "user"}))
        .await;
    let later = env.create("schedule.once", json!({"afterMinutes": 30, "body": "later"})).await;
    let activation = env.host.store.start_activation("worker", "p", &[]).expect("activation starts");

    env.advance(Duration::minutes(2));
    let outcome = env.tick_ok().await;
    let bodies: Vec<String> = env.messages().into_iter().map(|m| m.body).collect();
    assert_eq!(bodies, ["channel", "user"], "waitForQuiet is ignored for channels and the user");
    assert_eq!(env.job(&held["id"])["status"], "active");
    assert_eq!(env.job(&held["id"])["sentCount"], 0);
    assert_eq!(outcome.wake_at, Some(t(later["nextAt"].as_str().unwrap())), "a held job does not ask for a wake-up");
    assert_eq!(env.job(&to_channel["id"])["status"], "done");
    assert_eq!(env.job(&to_user["id"])["status"], "done");

    env.advance(Duration::minutes(5));
    env.tick_ok().await;
    assert_eq!(env.messages().len(), 2, "still held while the activation runs");

    env.host.store.finish_activation(&activation.id, ActivationOutcome::Completed, None, None).expect("finishes");
    env.tick_ok().await;
    let messages = env.messages();
    assert_eq!(messages.len(), 3);
    assert_eq!((messages[2].recipient.as_deref(), messages[2].body.as_str()), (Some("worker"), "held"));
    assert_eq!(env.job(&held["id"])["status"], "done");
}

// ---------------------------------------------------------------------------------------------
// Input errors.

#[tokio::test]
async fn invalid_inputs_fail_with_the_reference_messages_and_write_nothing() {
    let env = Env::new();
    let body = "Ping";
    let cases: Vec<(&str, Value, &str)> = vec![
        ("schedule.once", json!({"body": body}), "schedule.once requires at or a positive after* delay"),
        (
            "schedule.once",
            json!({"body": body, "afterMinutes": 0}),
            "schedule.once requires at or a positive after* delay",
        ),
        (
            "schedule.once",
            json!({"body": body, "afterMs": 0.4}),
            "schedule.once requires at or a positive after* delay",
        ),
        ("schedule.once", json!({"body": "  \n ", "afterMinutes": 1}), "body is required"),
        (
            "schedule.once",
            json!({"body": body, "afterMinutes": 1, "recipient": "pm", "channel": "#team"}),
            "Use either recipient or channel, not both",
        ),
        ("schedule.once", json!({"body": body, "afterMinutes": 1, "channel": "#nope"}), "Unknown channel: #nope"),
        ("schedule.once", json!({"body": body, "afterMinutes": 1, "recipient": "ghost"}), "Unknown recipient: ghost"),
        ("schedule.once", json!({"body": body, "afterMinutes": 1, "sender": "ghost"}), "Unknown sender: ghost"),
        (
            "schedule.once",
            json!({"body": body, "afterDays": 4e6}),
            "Scheduled time is out of range (after 9999-12-31)…",
        ),
        (
            "schedule.recurring",
            json!({"body": body}),
            "schedule.recurring requires a positive every* interval, or weekday plus time",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "everyHours": 0}),
            "schedule.recurring requires a positive every* interval, or weekday plus time",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "weekday": "mon"}),
            "schedule.recurring requires a positive every* interval, or weekday plus time",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "time": "09:00"}),
            "schedule.recurring requires a positive every* interval, or weekday plus time",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "everyHours": 1, "weekday": "mon", "time": "09:00"}),
            "Use either an every* interval or weekday/time, not both",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "everyMinutes": 5, "time": "09:00"}),
            "Use either an every* interval or weekday/time, not both",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "cron": "0 9 * * *", "everyHours": 1}),
            "Use only one of every*, weekday/time or cron",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "cron": "0 9 * * *", "weekday": "mon", "time": "09:00"}),
            "Use only one of every*, weekday/time or cron",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "weekday": "mon", "time": "24:00"}),
            "Invalid time, expected HH:MM: 24:00",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "weekday": "mon", "time": "9:60"}),
            "Invalid time, expected HH:MM: 9:60",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "cron": "0 9 * * 1-5"}),
            "Use day names (sun, mon, tue, wed, thu, fri, sat) in the cron day-of-week field, not numbers: 0 9 * * 1-5",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "cron": "0 9 * *"}),
            "Invalid cron expression `0 9 * *`: expected 5 fields…",
        ),
        ("schedule.recurring", json!({"body": body, "cron": "61 * * * *"}), "Invalid cron expression `61 * * * *`…"),
        (
            "schedule.recurring",
            json!({"body": body, "cron": "0 0 30 2 *"}),
            "Cron expression 0 0 30 2 * has no future run",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "cron": "0 9 * * *", "timezone": "Mars/Base"}),
            "Unknown time zone: Mars/Base…",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "weekday": "mon", "time": "09:00", "timezone": "Europe/Nowhere"}),
            "Unknown time zone: Europe/Nowhere…",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "everyHours": 1, "endAt": "2026-01-05T09:30:00Z"}),
            "endAt 2026-01-05T09:30:00.000Z is before the first run at 2026-01-05T10:00:00.000Z",
        ),
        (
            "schedule.recurring",
            json!({"body": body, "everyHours": 1, "channel": "#team", "recipient": "worker"}),
            "Use either recipient or channel, not both",
        ),
        ("schedule.cancel", json!({"id": "sch_nope"}), "Unknown scheduled job: sch_nope"),
        ("schedule.pause", json!({"id": "sch_nope"}), "Unknown scheduled job: sch_nope"),
        ("schedule.resume", json!({"id": "sch_nope"}), "Unknown scheduled job: sch_nope"),
    ];
    for (tool, input, expected) in cases {
        let context = format!("{tool} {input}");
        let got = env.err(tool, input).await;
        assert_message(&context, &got, expected);
    }
    assert!(!env.jobs_path().exists(), "failed calls write nothing");
}

/// Inputs the manifest schemas already refuse, sent straight to the controller module (as a
/// runner or caller that skipped the schema would), get the module's own messages.
#[tokio::test]
async fn inputs_the_schema_refuses_are_still_checked_by_the_module() {
    let env = Env::new();
    let ops = Arc::new(ControllerOps::new(env.host.project.snapshot(), env.host.store.clone(), env.host.state.clone()));
    let root = pack_dir().canonicalize().expect("pack dir");
    let spec = ModuleSpec {
        pack_id: "scheduler".into(),
        module: root.join("controller.mjs"),
        root,
        glue: CONTROLLER_GLUE,
        limits: JsLimits::default(),
    };
    let raw = JsHost::spawn(spec, ops).await.expect("the module loads");
    let base =
        json!({"project": "sched-demo", "toolpackId": "scheduler", "agent": {"id": "pm"}, "activationId": "act_raw"})
            .to_string();
    let call = |tool: &str, input: &str| {
        let call = JsCall {
            export: "support",
            args: vec![base.clone(), tool.to_string(), input.to_string()],
            scope: CallScope::default(),
        };
        let raw = raw.clone();
        async move { raw.call(call).await.map_err(|e| e.to_string()) }
    };
    let cases: &[(&str, &str, &str)] = &[
        ("schedule.once", "[1]", "Tool input must be an object"),
        ("schedule.once", r#""at noon""#, "Tool input must be an object"),
        ("schedule.recurring", "42", "Tool input must be an object"),
        ("schedule.once", r#"{"afterMinutes": 1, "body": 42}"#, "body is required"),
        ("schedule.once", r#"{"afterMinutes": 1}"#, "body is required"),
        ("schedule.once", r#"{"body": "x", "at": "tomorrow"}"#, "Invalid at timestamp: tomorrow"),
        (
            "schedule.once",
            r#"{"body": "x", "at": "2026-02-30T09:00:00Z"}"#,
            "Invalid at timestamp: 2026-02-30T09:00:00Z",
        ),
        ("schedule.once", r#"{"body": "x", "at": "2026-03-01T09:00:00"}"#, "Invalid at timestamp: 2026-03-01T09:00:00"),
        ("schedule.once", r#"{"body": "x", "at": 1767603600000}"#, "Invalid at timestamp: 1767603600000"),
        ("schedule.once", r#"{"body": "x", "afterMs": "soon"}"#, "Expected finite number, got soon"),
        ("schedule.once", r#"{"body": "x", "afterHours": true}"#, "Expected finite number, got true"),
        (
            "schedule.once",
            r#"{"body": "x", "afterMinutes": -5}"#,
            "schedule.once requires at or a positive after* delay",
        ),
        ("schedule.once", r#"{"body": "x", "afterMinutes": 1, "priority": "P9"}"#, "Invalid priority: P9"),
        ("schedule.once", r#"{"body": "x", "afterMinutes": 1, "priority": "p2"}"#, "Invalid priority: p2"),
        ("schedule.once", r#"{"body": "x", "afterMinutes": 1, "waitForQuiet": "yes"}"#, "Expected boolean, got yes"),
        ("schedule.recurring", r#"{"body": "x", "everyMinutes": "often"}"#, "Expected finite number, got often"),
        ("schedule.recurring", r#"{"body": "x", "weekday": "someday", "time": "09:00"}"#, "Invalid weekday: someday"),
        (
            "schedule.recurring",
            r#"{"body": "x", "weekday": "mon", "time": "0900"}"#,
            "Invalid time, expected HH:MM: 0900",
        ),
        (
            "schedule.recurring",
            r#"{"body": "x", "everyHours": 1, "startAt": "later"}"#,
            "Invalid startAt timestamp: later",
        ),
        ("schedule.recurring", r#"{"body": "x", "everyHours": 1, "endAt": "never"}"#, "Invalid endAt timestamp: never"),
        (
            "schedule.recurring",
            r#"{"body": "x", "everyHours": 1, "maxRuns": 0}"#,
            "Invalid maxRuns, expected a positive integer: 0",
        ),
        (
            "schedule.recurring",
            r#"{"body": "x", "everyHours": 1, "maxRuns": 1.5}"#,
            "Invalid maxRuns, expected a positive integer: 1.5",
        ),
        ("schedule.cancel", "{}", "id is required"),
        ("schedule.pause", r#"{"id": "  "}"#, "id is required"),
        ("schedule.list", r#"{"includeInactive": "yes"}"#, "Expected boolean, got yes"),
    ];
    for (tool, input, expected) in cases {
        let got = match call(tool, input).await {
            Ok(value) => panic!("{tool} {input} should fail, got {value}"),
            Err(e) => e,
        };
        assert_message(&format!("{tool} {input}"), &got, expected);
    }
    // Negative delays are clamped to 0, not subtracted.
    let created = call("schedule.once", r#"{"body": "x", "afterMinutes": -5, "afterSeconds": 30}"#).await.expect("ok");
    assert_eq!(created["metadata"]["job"]["nextAt"], "2026-01-05T09:00:30.000Z");
}

// ---------------------------------------------------------------------------------------------
// Creating jobs: first runs, stored shape, outputs.

#[tokio::test]
async fn first_runs_follow_the_reference_rules() {
    let env = Env::new(); // Monday 2026-01-05 09:00 UTC
    let cases: Vec<(&str, Value, &str)> = vec![
        ("schedule.once", json!({"afterMinutes": 5}), "2026-01-05T09:05:00.000Z"),
        ("schedule.once", json!({"afterSeconds": 30, "afterMs": 500}), "2026-01-05T09:00:30.500Z"),
        ("schedule.once", json!({"afterDays": 1, "afterHours": 2, "afterMinutes": 0.5}), "2026-01-06T11:00:30.000Z"),
        ("schedule.once", json!({"at": "2026-01-06T10:00:00+01:00"}), "2026-01-06T09:00:00.000Z"),
        ("schedule.once", json!({"at": "2026-01-07T00:00:00Z", "afterMinutes": 5}), "2026-01-07T00:00:00.000Z"),
        ("schedule.once", json!({"at": "2026-01-01T00:00:00Z"}), "2026-01-01T00:00:00.000Z"),
        ("schedule.recurring", json!({"everyMinutes": 30}), "2026-01-05T09:30:00.000Z"),
        ("schedule.recurring", json!({"everyMs": 90000}), "2026-01-05T09:01:30.000Z"),
        ("schedule.recurring", json!({"everyHours": 1, "everyMinutes": 30}), "2026-01-05T10:30:00.000Z"),
        ("schedule.recurring", json!({"everyDays": 1}), "2026-01-06T09:00:00.000Z"),
        ("schedule.recurring", json!({"everyHours": 1, "startAt": "2026-01-05T12:00:00Z"}), "2026-01-05T12:00:00.000Z"),
        ("schedule.recurring", json!({"everyHours": 1, "startAt": "2026-01-05T08:00:00Z"}), "2026-01-05T10:00:00.000Z"),
        ("schedule.recurring", json!({"weekday": "mon", "time": "09:00"}), "2026-01-12T09:00:00.000Z"),
        ("schedule.recurring", json!({"weekday": "mon", "time": "10:15"}), "2026-01-05T10:15:00.000Z"),
        ("schedule.recurring", json!({"weekday": "sun", "time": "7:05"}), "2026-01-11T07:05:00.000Z"),
        (
            "schedule.recurring",
            json!({"weekday": "mon", "time": "09:00", "startAt": "2026-01-12T09:00:00Z"}),
            "2026-01-12T09:00:00.000Z",
        ),
        (
            "schedule.recurring",
            json!({"weekday": "tue", "time": "08:00", "startAt": "2026-01-20T12:00:00+02:00"}),
            "2026-01-27T08:00:00.000Z",
        ),
        (
            "schedule.recurring",
            json!({"weekday": "mon", "time": "09:00", "timezone": "Europe/Berlin"}),
            "2026-01-12T08:00:00.000Z",
        ),
        (
            "schedule.recurring",
            json!({"weekday": "mon", "time": "10:30", "timezone": "Europe/Berlin"}),
            "2026-01-05T09:30:00.000Z",
        ),
        ("schedule.recurring", json!({"cron": "*/15 * * * *"}), "2026-01-05T09:15:00.000Z"),
        ("schedule.recurring", json!({"cron": "30 0 9 * * mon-fri"}), "2026-01-05T09:00:30.000Z"),
        (
            "schedule.recurring",
            json!({"cron": "0 9 * * *", "timezone": "America/New_York"}),
            "2026-01-05T14:00:00.000Z",
        ),
        (
            "schedule.recurring",
            json!({"cron": "0 9 * * sat", "startAt": "2026-02-01T00:00:00Z"}),
            "2026-02-07T09:00:00.000Z",
        ),
    ];
    for (tool, mut input, next) in cases {
        input["body"] = json!("b");
        let context = format!("{tool} {input}");
        let job = env.create(tool, input).await;
        assert_eq!(job["nextAt"], next, "{context}");
        assert_eq!(env.job(&job["id"])["nextAt"], next, "{context}: stored");
    }
}

#[tokio::test]
async fn created_jobs_have_the_reference_shape_and_output() {
    let env = Env::new();
    let out = env.ok("schedule.once", json!({"afterMinutes": 5, "body": "Hello"})).await;
    let job = metadata_job(&out);
    let id = job["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("sch_") && id.len() == 4 + 36, "sch_<uuid>: {id}");
    assert_eq!(out.title.as_deref(), Some("scheduled message created"));
    assert_eq!(
        out.output,
        format!("Scheduled {id}.\nNext: 2026-01-05T09:05:00.000Z\nRoute: pm -> pm\nPriority: P3"),
        "a job an agent schedules is sent as that agent"
    );
    assert_eq!(
        env.jobs_file(),
        json!({"version": 1, "jobs": [{
            "id": id, "type": "once", "status": "active", "createdAt": START, "nextAt": "2026-01-05T09:05:00.000Z",
            "sentCount": 0, "sender": "pm", "recipient": "pm", "priority": "P3", "waitForQuiet": false,
            "body": "Hello", "schedule": {"afterMs": 300000}, "createdBy": "pm",
        }]})
    );

    let cases: Vec<(Value, Value)> = vec![
        (json!({"at": "2026-01-06T10:00:00+01:00"}), json!({"at": "2026-01-06T09:00:00.000Z"})),
        (
            json!({"everyHours": 2, "startAt": "2026-01-06T00:00:00Z", "maxRuns": 3}),
            json!({"mode": "interval", "everyMs": 7200000, "startAt": "2026-01-06T00:00:00.000Z", "maxRuns": 3}),
        ),
        (
            json!({"weekday": "fri", "time": "17:30"}),
            json!({"mode": "weekly", "weekday": "fri", "hour": 17, "minute": 30, "timezone": "UTC"}),
        ),
        (
            json!({"weekday": "fri", "time": "7:05", "timezone": "Asia/Tokyo", "endAt": "2026-12-31T00:00:00Z"}),
            json!({"mode": "weekly", "weekday": "fri", "hour": 7, "minute": 5, "timezone": "Asia/Tokyo", "endAt": "2026-12-31T00:00:00.000Z"}),
        ),
        (
            json!({"cron": "0 9 * * mon-fri", "timezone": "Europe/Berlin"}),
            json!({"mode": "cron", "cron": "0 9 * * mon-fri", "timezone": "Europe/Berlin"}),
        ),
    ];
    for (input, schedule) in cases {
        let tool = if input.get("at").is_some() { "schedule.once" } else { "schedule.recurring" };
        let mut input = input;
        input["body"] = json!("b");
        let job = env.create(tool, input.clone()).await;
        assert_eq!(env.job(&job["id"])["schedule"], schedule, "{input}");
    }

    // Other senders are the user's to choose (the WebUI).
    let out = env
        .webui(
            "schedule.recurring",
            json!({"everyDays": 1, "channel": "#team", "sender": "worker", "priority": "P1", "body": "x"}),
        )
        .await
        .expect("webui recurring");
    assert!(out.output.ends_with("\nRoute: worker -> #team\nPriority: P1"), "{}", out.output);
    let job = metadata_job(&out);
    assert_eq!((job["channel"].clone(), job.get("recipient")), (json!("#team"), None));
    let out = env
        .webui("schedule.once", json!({"afterMinutes": 1, "sender": "user", "recipient": "user", "body": "x"}))
        .await
        .expect("webui once");
    assert!(out.output.contains("\nRoute: user -> user\n"), "{}", out.output);
}

#[tokio::test]
async fn default_recipient_is_the_coordinator_else_the_first_agent() {
    let cases: &[(&str, &str)] = &[
        ("", "pm"),
        ("communication:\n  coordinatorAgent: worker\n", "worker"),
        // (A coordinatorAgent that names no agent is refused by `check`: fixture coordinator_unknown.)
    ];
    for (extra, expected) in cases {
        let env = Env::with_config(|yaml| format!("{yaml}{extra}"));
        let job = env.create("schedule.once", json!({"afterMinutes": 1, "body": "x"})).await;
        assert_eq!(job["recipient"], *expected, "config extra {extra:?}");
        env.advance(Duration::minutes(1));
        env.tick_ok().await;
        assert_eq!(env.messages()[0].recipient.as_deref(), Some(*expected));
    }
}

// ---------------------------------------------------------------------------------------------
// Running schedules.

/// Create a recurring job at `created`, then walk the clock through `runs`: one second before
/// each expected run nothing is sent, at the run exactly one message is, and nextAt and the
/// returned wakeAt move to the next expected run. Returns the environment and job id.
async fn assert_runs(input: Value, created: &str, runs: &[&str]) -> (Env, Value) {
    let env = Env::at(created);
    let mut input = input;
    input["body"] = json!("tick");
    let context = input.to_string();
    let job = env.create("schedule.recurring", input).await;
    assert_eq!(job["nextAt"], runs[0], "{context}: first run");
    for (i, run) in runs.iter().enumerate() {
        env.clock.set(t(run) - Duration::seconds(1));
        let outcome = env.tick_ok().await;
        assert_eq!(env.messages().len(), i, "{context}: nothing before {run}");
        assert_eq!(outcome.wake_at, Some(t(run)), "{context}: wakeAt before {run}");
        env.set(run);
        let outcome = env.tick_ok().await;
        assert_eq!(env.messages().len(), i + 1, "{context}: sent at {run}");
        let stored = env.job(&job["id"]);
        assert_eq!(stored["sentCount"], i + 1);
        assert_eq!(stored["lastSentAt"], *run);
        assert_eq!(stored.get("missedRuns"), None, "{context}: nothing missed");
        if let Some(next) = runs.get(i + 1) {
            assert_eq!(stored["nextAt"], *next, "{context}: next after {run}");
            assert_eq!(outcome.wake_at, Some(t(next)), "{context}: wakeAt after {run}");
        }
    }
    (env, job["id"].clone())
}

#[tokio::test]
async fn weekly_and_cron_schedules_fire_at_the_right_instants_across_dst() {
    let cases: Vec<(Value, &str, Vec<&str>)> = vec![
        // Weekly UTC (reference rule): strictly after the creation time.
        (
            json!({"weekday": "mon", "time": "09:00"}),
            "2026-01-05T09:00:00.000Z",
            vec!["2026-01-12T09:00:00.000Z", "2026-01-19T09:00:00.000Z"],
        ),
        (
            json!({"weekday": "mon", "time": "09:00"}),
            "2026-01-05T08:59:59.000Z",
            vec!["2026-01-05T09:00:00.000Z", "2026-01-12T09:00:00.000Z"],
        ),
        // Europe/Berlin springs forward on 2026-03-29: 09:00 local is 08:00Z, then 07:00Z.
        (
            json!({"cron": "0 9 * * *", "timezone": "Europe/Berlin"}),
            "2026-03-27T12:00:00.000Z",
            vec!["2026-03-28T08:00:00.000Z", "2026-03-29T07:00:00.000Z", "2026-03-30T07:00:00.000Z"],
        ),
        // ... and falls back on 2026-10-25: 07:00Z, then 08:00Z.
        (
            json!({"cron": "0 9 * * *", "timezone": "Europe/Berlin"}),
            "2026-10-23T12:00:00.000Z",
            vec!["2026-10-24T07:00:00.000Z", "2026-10-25T08:00:00.000Z", "2026-10-26T08:00:00.000Z"],
        ),
        // 02:30 does not exist on 2026-03-29 (skipped) and happens twice on 2026-10-25 (fires once).
        (
            json!({"cron": "30 2 * * *", "timezone": "Europe/Berlin"}),
            "2026-03-27T12:00:00.000Z",
            vec!["2026-03-28T01:30:00.000Z", "2026-03-30T00:30:00.000Z"],
        ),
        (
            json!({"cron": "30 2 * * *", "timezone": "Europe/Berlin"}),
            "2026-10-24T12:00:00.000Z",
            vec!["2026-10-25T00:30:00.000Z", "2026-10-26T01:30:00.000Z"],
        ),
        // Weekday/time in a zone is local time there.
        (
            json!({"weekday": "sun", "time": "09:00", "timezone": "Europe/Berlin"}),
            "2026-03-21T12:00:00.000Z",
            vec!["2026-03-22T08:00:00.000Z", "2026-03-29T07:00:00.000Z", "2026-04-05T07:00:00.000Z"],
        ),
        // Six fields: seconds first.
        (
            json!({"cron": "*/30 * * * * *"}),
            "2026-01-05T09:00:00.000Z",
            vec!["2026-01-05T09:00:30.000Z", "2026-01-05T09:01:00.000Z", "2026-01-05T09:01:30.000Z"],
        ),
        (
            json!({"cron": "0 8 * * mon-fri", "timezone": "Europe/Berlin"}),
            "2026-01-09T12:00:00.000Z",
            vec!["2026-01-12T07:00:00.000Z", "2026-01-13T07:00:00.000Z"],
        ),
    ];
    for (input, created, runs) in cases {
        let (env, id) = assert_runs(input, created, &runs).await;
        assert_eq!(env.job(&id)["status"], "active");
    }
}

#[tokio::test]
async fn intervals_drift_from_the_send_time_and_never_catch_up() {
    let env = Env::new();
    let job = env.create("schedule.recurring", json!({"everyMinutes": 30, "body": "drift"})).await;
    assert_eq!(job["nextAt"], "2026-01-05T09:30:00.000Z");
    let steps: &[(&str, usize, &str)] = &[
        ("2026-01-05T09:29:59.999Z", 0, "2026-01-05T09:30:00.000Z"),
        // Sent 70 s late: the next run is 30 min after the send, not after the due time.
        ("2026-01-05T09:31:10.000Z", 1, "2026-01-05T10:01:10.000Z"),
        ("2026-01-05T10:01:09.000Z", 1, "2026-01-05T10:01:10.000Z"),
        ("2026-01-05T10:01:10.000Z", 2, "2026-01-05T10:31:10.000Z"),
    ];
    for (at, sent, next) in steps {
        env.set(at);
        let outcome = env.tick_ok().await;
        assert_eq!(env.messages().len(), *sent, "at {at}");
        assert_eq!(env.job(&job["id"])["nextAt"], *next, "at {at}");
        assert_eq!(outcome.wake_at, Some(t(next)), "at {at}");
    }
}

#[tokio::test]
async fn end_at_and_max_runs_finish_recurring_jobs() {
    // endAt: no run after it; the job is done once the next run would be after it.
    let (env, id) = assert_runs(
        json!({"everyHours": 1, "endAt": "2026-01-05T11:30:00Z"}),
        START,
        &["2026-01-05T10:00:00.000Z", "2026-01-05T11:00:00.000Z"],
    )
    .await;
    let job = env.job(&id);
    assert_eq!((job["status"].clone(), job["completedAt"].clone()), (json!("done"), json!("2026-01-05T11:00:00.000Z")));
    env.set("2026-01-05T12:00:00.000Z");
    assert_eq!(env.tick_ok().await.wake_at, None);
    assert_eq!(env.messages().len(), 2);

    // A run exactly at endAt still happens.
    let (env, id) = assert_runs(
        json!({"cron": "0 * * * *", "endAt": "2026-01-05T11:00:00Z"}),
        START,
        &["2026-01-05T10:00:00.000Z", "2026-01-05T11:00:00.000Z"],
    )
    .await;
    assert_eq!(env.job(&id)["status"], "done");

    // maxRuns: done after that many sends.
    let (env, id) = assert_runs(
        json!({"weekday": "mon", "time": "10:00", "maxRuns": 2}),
        START,
        &["2026-01-05T10:00:00.000Z", "2026-01-12T10:00:00.000Z"],
    )
    .await;
    assert_eq!(env.job(&id)["status"], "done");
    env.set("2026-02-01T00:00:00.000Z");
    env.tick_ok().await;
    assert_eq!(env.messages().len(), 2);
    let list = env.list(true).await;
    assert!(list.output.contains(&format!("- {} [done/recurring]", id.as_str().unwrap())), "{}", list.output);
}

#[tokio::test]
async fn missed_runs_collapse_into_one_delivery() {
    let cases: Vec<(Value, &str, u64, &str)> = vec![
        // Due 10:00, 11:00, 12:00, 13:00 by 13:30: one delivery, three missed, next from now.
        (json!({"everyHours": 1}), "2026-01-05T13:30:00.000Z", 3, "2026-01-05T14:30:00.000Z"),
        (json!({"cron": "0 * * * *"}), "2026-01-05T13:30:00.000Z", 3, "2026-01-05T14:00:00.000Z"),
        (json!({"weekday": "mon", "time": "10:00"}), "2026-01-27T00:00:00.000Z", 3, "2026-02-02T10:00:00.000Z"),
        // Counting stops at 1000.
        (json!({"cron": "* * * * * *"}), "2026-01-05T11:00:00.000Z", 1000, "2026-01-05T11:00:01.000Z"),
        (json!({"everyMs": 1000}), "2026-01-06T09:00:00.000Z", 1000, "2026-01-06T09:00:01.000Z"),
        // endAt bounds what counts as missed.
        (json!({"everyHours": 1, "endAt": "2026-01-05T12:30:00Z"}), "2026-01-05T20:00:00.000Z", 2, "done"),
    ];
    for (mut input, at, missed, next) in cases {
        input["body"] = json!("standup");
        let context = format!("{input} at {at}");
        let env = Env::new();
        let job = env.create("schedule.recurring", input).await;
        env.set(at);
        env.tick_ok().await;
        assert_eq!(env.messages().len(), 1, "{context}: one delivery");
        let stored = env.job(&job["id"]);
        assert_eq!(stored["missedRuns"], missed, "{context}");
        assert_eq!(stored["lastMissedAt"], at, "{context}");
        assert_eq!(stored["sentCount"], 1, "{context}");
        if next == "done" {
            assert_eq!(stored["status"], "done", "{context}");
        } else {
            assert_eq!(stored["nextAt"], next, "{context}");
            let list = env.list(false).await;
            let line = list.output.lines().nth(1).expect("a job line");
            assert!(line.ends_with(&format!(", missed {missed} run(s) while stopped")), "{context}: {line}");
        }
        env.tick_ok().await;
        assert_eq!(env.messages().len(), 1, "{context}: nothing more until the next run");
    }
}

#[tokio::test]
async fn missed_runs_across_a_restart_are_delivered_once() {
    let mut env = Env::new();
    let job =
        env.create("schedule.recurring", json!({"cron": "0 */2 * * *", "recipient": "worker", "body": "report"})).await;
    let once = env.create("schedule.once", json!({"afterMinutes": 90, "body": "once"})).await;
    env.set("2026-01-05T10:00:00.000Z");
    env.tick_ok().await;
    assert_eq!(env.messages().len(), 1);

    // The controller is down from 10:00:01 until 19:15.
    env.restart();
    env.set("2026-01-05T19:15:00.000Z");
    let outcome = env.tick_ok().await;
    let bodies: Vec<String> = env.messages().into_iter().map(|m| m.body).collect();
    assert_eq!(bodies, ["report", "once", "report"], "each job delivered once");
    let stored = env.job(&job["id"]);
    // Due 12:00, 14:00, 16:00, 18:00: one delivered, three missed.
    assert_eq!((stored["missedRuns"].clone(), stored["sentCount"].clone()), (json!(3), json!(2)));
    assert_eq!(stored["nextAt"], "2026-01-05T20:00:00.000Z");
    assert_eq!(outcome.wake_at, Some(t("2026-01-05T20:00:00.000Z")));
    assert_eq!(env.job(&once["id"])["status"], "done");

    env.restart();
    env.tick_ok().await;
    assert_eq!(env.messages().len(), 3, "a second restart sends nothing again");
    let line = env.list(false).await.output.lines().nth(1).expect("job line").to_string();
    assert!(line.ends_with(": report, missed 3 run(s) while stopped"), "{line}");
}

#[tokio::test]
async fn pause_and_resume() {
    let env = Env::new();
    let once = env.create("schedule.once", json!({"afterMinutes": 5, "body": "once"})).await;
    let every = env.create("schedule.recurring", json!({"everyMinutes": 30, "body": "every"})).await;
    let once_id = once["id"].as_str().unwrap();
    let every_id = every["id"].as_str().unwrap();

    env.set("2026-01-05T09:01:00.000Z");
    let out = env.ok("schedule.pause", json!({"id": once_id})).await;
    assert_eq!(
        (out.title.as_deref(), out.output.as_str()),
        (Some("scheduled message paused"), format!("Paused {once_id}.").as_str())
    );
    assert_eq!(env.job(&once["id"])["pausedAt"], "2026-01-05T09:01:00.000Z");
    env.ok("schedule.pause", json!({"id": every_id})).await;
    assert_message(
        "pause twice",
        &env.err("schedule.pause", json!({"id": once_id})).await,
        &format!("Cannot pause {once_id}: it is paused; only active jobs can be paused"),
    );

    env.set("2026-01-05T10:45:00.000Z");
    let outcome = env.tick_ok().await;
    assert!(env.messages().is_empty(), "paused jobs are not delivered");
    assert_eq!(outcome.wake_at, None, "paused jobs do not wake the scheduler");
    let list = env.list(false).await;
    assert!(
        list.output.contains(&format!("- {once_id} [paused/once]")),
        "paused jobs are always listed: {}",
        list.output
    );
    let metrics = &list.metadata.as_ref().unwrap()["metrics"];
    assert_eq!(metrics[3], json!({"label": "Paused", "value": 2}));

    let out = env.ok("schedule.resume", json!({"id": every_id})).await;
    assert_eq!(
        (out.title.as_deref(), out.output.as_str()),
        (Some("scheduled message resumed"), format!("Resumed {every_id}.").as_str())
    );
    let stored = env.job(&every["id"]);
    assert_eq!(
        (stored["status"].clone(), stored["nextAt"].clone()),
        (json!("active"), json!("2026-01-05T11:15:00.000Z")),
        "recomputed from now"
    );
    assert_eq!(stored.get("pausedAt"), None);
    assert_message(
        "resume active",
        &env.err("schedule.resume", json!({"id": every_id})).await,
        &format!("Cannot resume {every_id}: it is active, not paused"),
    );

    // A once job whose time passed while paused fires on the next tick.
    env.ok("schedule.resume", json!({"id": once_id})).await;
    assert_eq!(env.job(&once["id"])["nextAt"], "2026-01-05T09:05:00.000Z");
    let outcome = env.tick_ok().await;
    let bodies: Vec<String> = env.messages().into_iter().map(|m| m.body).collect();
    assert_eq!(bodies, ["once"]);
    assert_eq!(outcome.wake_at, Some(t("2026-01-05T11:15:00.000Z")));
    assert_eq!(env.job(&every["id"]).get("missedRuns"), None, "time spent paused is not missed runs");

    assert_message(
        "pause done",
        &env.err("schedule.pause", json!({"id": once_id})).await,
        &format!("Cannot pause {once_id}: it is done; only active jobs can be paused"),
    );
    assert_message(
        "resume done",
        &env.err("schedule.resume", json!({"id": once_id})).await,
        &format!("Cannot resume {once_id}: it is done, not paused"),
    );

    // A paused job can be cancelled; a recurring job past its endAt cannot be resumed.
    let ending = env
        .create("schedule.recurring", json!({"everyMinutes": 10, "endAt": "2026-01-05T11:30:00Z", "body": "e"}))
        .await;
    let ending_id = ending["id"].as_str().unwrap();
    env.ok("schedule.pause", json!({"id": ending_id})).await;
    env.set("2026-01-05T11:25:00.000Z");
    assert_message(
        "resume after endAt",
        &env.err("schedule.resume", json!({"id": ending_id})).await,
        &format!("Cannot resume {ending_id}: it has no run left before its endAt 2026-01-05T11:30:00.000Z"),
    );
    assert_eq!(env.job(&ending["id"])["status"], "paused");
    env.ok("schedule.cancel", json!({"id": ending_id})).await;
    assert_eq!(env.job(&ending["id"])["status"], "cancelled");

    // The WebUI entries do the same.
    env.webui("schedule.pause", json!({"id": every_id})).await.expect("webui pause");
    assert_eq!(env.job(&every["id"])["status"], "paused");
    env.webui("schedule.resume", json!({"id": every_id})).await.expect("webui resume");
    assert_eq!(env.job(&every["id"])["status"], "active");
}

#[tokio::test]
async fn cancel_is_permanent_and_a_no_op_for_finished_jobs() {
    let env = Env::new();
    let job = env.create("schedule.recurring", json!({"everyMinutes": 5, "body": "x"})).await;
    let id = job["id"].as_str().unwrap();
    env.advance(Duration::minutes(1));
    let out = env.ok("schedule.cancel", json!({"id": id})).await;
    assert_eq!(
        (out.title.as_deref(), out.output.as_str()),
        (Some("scheduled message cancelled"), format!("Cancelled {id}.").as_str())
    );
    let stored = env.job(&job["id"]);
    assert_eq!(
        (stored["status"].clone(), stored["cancelledAt"].clone()),
        (json!("cancelled"), json!("2026-01-05T09:01:00.000Z"))
    );

    env.advance(Duration::minutes(1));
    let again = env.ok("schedule.cancel", json!({"id": id})).await;
    assert_eq!(again.output, format!("Cancelled {id}."));
    assert_eq!(env.job(&job["id"])["cancelledAt"], "2026-01-05T09:01:00.000Z", "unchanged");
    assert_message(
        "resume cancelled",
        &env.err("schedule.resume", json!({"id": id})).await,
        &format!("Cannot resume {id}: it is cancelled, not paused"),
    );

    env.advance(Duration::hours(1));
    assert_eq!(env.tick_ok().await.wake_at, None);
    assert!(env.messages().is_empty());
    let webui = env.webui("schedule.cancel", json!({"id": "sch_missing"})).await.expect_err("unknown id");
    assert_eq!(webui.to_string(), handler_error("Unknown scheduled job: sch_missing"));
}

// ---------------------------------------------------------------------------------------------
// Listing.

#[tokio::test]
async fn list_lines_and_metrics_follow_the_reference_format() {
    let env = Env::new();
    let empty = env.list(false).await;
    assert_eq!(
        (empty.title.as_deref(), empty.output.as_str()),
        (Some("scheduled messages"), "Scheduled messages:\n- none")
    );

    let long = format!("Line one\n\n  line two {}", "x".repeat(200));
    let a = env.create("schedule.once", json!({"afterMinutes": 5, "body": long})).await;
    let b = env
        .webui(
            "schedule.recurring",
            json!({"everyHours": 1, "channel": "#team", "sender": "worker", "priority": "P1", "body": "Channel note"}),
        )
        .await
        .map(|out| metadata_job(&out))
        .expect("webui recurring");
    let c = env
        .create(
            "schedule.once",
            json!({"afterMinutes": 10, "recipient": "worker", "waitForQuiet": true, "body": "quiet"}),
        )
        .await;
    let d = env.create("schedule.once", json!({"afterMinutes": 1, "body": "to be done"})).await;
    let e = env.create("schedule.once", json!({"afterMinutes": 1, "body": "to be cancelled"})).await;
    env.ok("schedule.cancel", json!({"id": e["id"]})).await;
    env.advance(Duration::minutes(1));
    env.tick_ok().await;

    let id = |job: &Value| job["id"].as_str().unwrap().to_string();
    let preview = format!("Line one line two {}…", "x".repeat(140 - "Line one line two ".len()));
    let active = [
        format!("- {} [active/once] next 2026-01-05T09:05:00.000Z, P3 pm -> pm, sent 0: {preview}", id(&a)),
        format!(
            "- {} [active/recurring] next 2026-01-05T10:00:00.000Z, P1 worker -> #team, sent 0: Channel note",
            id(&b)
        ),
        format!(
            "- {} [active/once] next 2026-01-05T09:10:00.000Z, P3 pm -> worker, sent 0, waits for quiet: quiet",
            id(&c)
        ),
    ];
    let inactive = [
        format!("- {} [done/once] next 2026-01-05T09:01:00.000Z, P3 pm -> pm, sent 1: to be done", id(&d)),
        format!("- {} [cancelled/once] next 2026-01-05T09:01:00.000Z, P3 pm -> pm, sent 0: to be cancelled", id(&e)),
    ];
    let list = env.list(false).await;
    assert_eq!(list.output, format!("Scheduled messages:\n{}", active.join("\n")));
    let metadata = list.metadata.expect("metadata");
    assert_eq!(
        metadata["metrics"],
        json!([
            {"label": "Active", "value": 3}, {"label": "Done", "value": 1},
            {"label": "Cancelled", "value": 1}, {"label": "Paused", "value": 0},
        ])
    );
    assert_eq!(metadata["jobs"].as_array().map(Vec::len), Some(3));

    // Jobs are listed in creation order.
    let all = env.list(true).await;
    let expected: Vec<String> = active.iter().chain(inactive.iter()).cloned().collect();
    assert_eq!(all.output, format!("Scheduled messages:\n{}", expected.join("\n")));
    let panel = env.webui("schedule.jobs", json!({"includeInactive": true})).await.expect("panel");
    assert_eq!(panel.output, all.output, "the panel shows what the tool shows");
}

// ---------------------------------------------------------------------------------------------
// Delivery robustness, concurrency, wake-ups.

#[tokio::test]
async fn a_job_that_cannot_be_delivered_does_not_stop_the_others() {
    let mut env = Env::new();
    let to_worker =
        env.create("schedule.recurring", json!({"everyMinutes": 10, "recipient": "worker", "body": "w"})).await;
    let to_pm = env.create("schedule.once", json!({"afterMinutes": 10, "body": "p"})).await;
    let after = env.create("schedule.once", json!({"afterMinutes": 11, "body": "after"})).await;

    env.restart_with(remove_worker);
    env.set("2026-01-05T09:10:00.000Z");
    let outcome = env.tick_ok().await;
    let bodies: Vec<String> = env.messages().into_iter().map(|m| m.body).collect();
    assert_eq!(bodies, ["p"]);
    let failing = env.job(&to_worker["id"]);
    assert_eq!(failing["status"], "active", "it retries");
    assert_eq!(failing["lastError"], "Unknown agent: worker");
    assert_eq!(failing["lastErrorAt"], "2026-01-05T09:10:00.000Z");
    assert_eq!(env.job(&to_pm["id"])["status"], "done");
    assert_eq!(outcome.wake_at, Some(t(after["nextAt"].as_str().unwrap())), "a failing job does not ask for a wake-up");
    let line = env.list(false).await.output;
    assert!(line.contains(": w (last delivery failed: Unknown agent: worker)"), "{line}");

    env.set("2026-01-05T09:10:30.000Z");
    let before = std::fs::read_to_string(env.jobs_path()).unwrap();
    env.tick_ok().await;
    assert_eq!(std::fs::read_to_string(env.jobs_path()).unwrap(), before, "the same error again writes nothing");

    env.restart_with(|yaml| yaml.replace("agents:\n", &format!("agents:\n{WORKER_BLOCK}")));
    env.set("2026-01-05T09:12:00.000Z");
    env.tick_ok().await;
    let stored = env.job(&to_worker["id"]);
    assert_eq!(
        (stored["sentCount"].clone(), stored.get("lastError")),
        (json!(1), None),
        "delivered once the agent is back"
    );
    assert_eq!(stored["nextAt"], "2026-01-05T09:22:00.000Z");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_keep_every_job() {
    let env = Env::new();
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..20 {
        let host = env.host.clone();
        let (agent, tool, input) = match i % 4 {
            0 => ("pm", "schedule.once", json!({"afterMinutes": i + 1, "body": format!("job {i}")})),
            1 => ("worker", "schedule.once", json!({"afterSeconds": i, "body": format!("job {i}")})),
            2 => ("pm", "schedule.recurring", json!({"everyMinutes": i, "body": format!("job {i}")})),
            _ => ("worker", "schedule.recurring", json!({"cron": "0 9 * * *", "body": format!("job {i}")})),
        };
        calls.spawn(async move { host.support(agent, "act_test", "scheduler", tool, input).await });
    }
    let mut ids = Vec::new();
    while let Some(done) = calls.join_next().await {
        ids.push(metadata_job(&done.expect("task").expect("call succeeds"))["id"].clone());
    }
    let jobs = env.jobs();
    assert_eq!(jobs.len(), 20);
    let mut stored: Vec<Value> = jobs.iter().map(|j| j["id"].clone()).collect();
    stored.sort_by_key(|v| v.to_string());
    ids.sort_by_key(|v| v.to_string());
    assert_eq!(stored, ids);
    let mut bodies: Vec<String> = jobs.iter().map(|j| j["body"].as_str().unwrap().to_string()).collect();
    bodies.sort();
    let mut expected: Vec<String> = (0..20).map(|i| format!("job {i}")).collect();
    expected.sort();
    assert_eq!(bodies, expected);
}

#[tokio::test]
async fn wake_at_is_the_earliest_next_run() {
    let env = Env::new();
    assert_eq!(env.tick_ok().await.wake_at, None, "no jobs");
    env.create("schedule.once", json!({"afterMinutes": 30, "body": "a"})).await;
    let first = env.create("schedule.recurring", json!({"cron": "10 9 * * *", "body": "b"})).await;
    env.create("schedule.once", json!({"afterMinutes": 20, "body": "c"})).await;
    let outcome = env.tick_ok().await;
    assert_eq!(outcome.wake_at, Some(t("2026-01-05T09:10:00.000Z")));
    assert_eq!(first["nextAt"], "2026-01-05T09:10:00.000Z");

    env.set("2026-01-05T09:10:00.000Z");
    assert_eq!(env.tick_ok().await.wake_at, Some(t("2026-01-05T09:20:00.000Z")));
    env.ok("schedule.cancel", json!({"id": first["id"]})).await;
    env.set("2026-01-05T09:30:00.000Z");
    assert_eq!(env.tick_ok().await.wake_at, None, "everything delivered or cancelled");
}

// ---------------------------------------------------------------------------------------------
// State file.

#[tokio::test]
async fn a_corrupt_jobs_file_is_reported_and_never_replaced() {
    let mut env = Env::new();
    std::fs::create_dir_all(env.state_dir()).unwrap();
    std::fs::write(env.jobs_path(), "{\"version\": 1, \"jobs\": [").unwrap();
    env.restart();

    let error = env.err("schedule.list", json!({})).await;
    assert!(error.starts_with(&handler_error("Scheduled jobs are unavailable: toolpack state file ")), "{error}");
    assert!(error.contains("is not valid JSON"), "{error}");
    assert!(error.contains(r#"write {"version": 1, "jobs": []} there to start with no jobs"#), "{error}");
    let kept: Vec<PathBuf> = std::fs::read_dir(env.state_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("jobs.json.corrupt-"))
        .collect();
    assert_eq!(kept.len(), 1, "moved aside, not deleted");
    assert_eq!(std::fs::read_to_string(&kept[0]).unwrap(), "{\"version\": 1, \"jobs\": [");

    let again = env.err("schedule.once", json!({"afterMinutes": 1, "body": "x"})).await;
    assert!(again.contains("Scheduled jobs are unavailable"), "{again}");
    assert!(!env.jobs_path().exists(), "no empty jobs.json replaces the corrupt one");
    let first = env.tick().await;
    assert!(first.errors.iter().any(|e| e.contains("Scheduled jobs are unavailable")), "{:?}", first.errors);
    assert!(env.tick().await.errors.is_empty(), "reported once, not on every tick");

    env.restart();
    let after_restart = env.err("schedule.once", json!({"afterMinutes": 1, "body": "x"})).await;
    assert!(after_restart.contains("Scheduled jobs are unavailable"), "still refused after a restart: {after_restart}");
    assert!(!env.jobs_path().exists());

    std::fs::write(env.jobs_path(), "{\"version\": 1, \"jobs\": []}\n").unwrap();
    env.ok("schedule.once", json!({"afterMinutes": 1, "body": "x"})).await;
    assert_eq!(env.jobs().len(), 1);
    env.restart();
    assert_eq!(env.list(false).await.metadata.unwrap()["jobs"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn a_jobs_file_of_the_wrong_shape_is_reported_and_left_alone() {
    let cases: &[(&str, &str)] = &[
        (r#"{"version": 2, "jobs": []}"#, "unsupported version 2, expected 1"),
        (r#"{"jobs": []}"#, "unsupported version undefined, expected 1"),
        (r#"{"version": 1, "jobs": {}}"#, "jobs is not an array"),
        (r#"[]"#, "the top level is not an object"),
        (r#"{"version": 1, "jobs": [{"type": "once"}]}"#, "jobs[0] is not a job with a string id"),
    ];
    for (text, problem) in cases {
        let mut env = Env::new();
        std::fs::create_dir_all(env.state_dir()).unwrap();
        std::fs::write(env.jobs_path(), text).unwrap();
        env.restart();
        let error = env.err("schedule.once", json!({"afterMinutes": 1, "body": "x"})).await;
        assert_message(
            text,
            &error,
            &format!("toolpack-state/scheduler/jobs.json is not a scheduler jobs document ({problem})…"),
        );
        assert!(env.tick().await.errors.iter().any(|e| e.contains(problem)), "{text}: the tick reports it");
        assert_eq!(std::fs::read_to_string(env.jobs_path()).unwrap(), *text, "{text}: untouched");
    }
}

#[tokio::test]
async fn a_failed_write_after_sending_never_sends_twice() {
    let env = Env::new();
    let job = env.create("schedule.once", json!({"afterMinutes": 1, "body": "once only"})).await;
    // Writes fail while jobs.json is a directory (the atomic rename onto it fails).
    std::fs::remove_file(env.jobs_path()).unwrap();
    std::fs::create_dir_all(env.jobs_path().join("in-the-way")).unwrap();

    env.advance(Duration::minutes(1));
    let outcome = env.tick().await;
    assert_eq!(env.messages().len(), 1, "sent");
    assert!(
        outcome.errors.iter().any(|e| e.contains("jobs.json")),
        "the failed write is reported: {:?}",
        outcome.errors
    );
    let error = env.err("schedule.once", json!({"afterMinutes": 5, "body": "not kept"})).await;
    assert!(error.contains("jobs.json"), "{error}");
    env.advance(Duration::seconds(2));
    assert!(!env.tick().await.errors.is_empty(), "still failing to write");
    assert_eq!(env.messages().len(), 1, "the sent job is not sent again while the write fails");

    std::fs::remove_dir_all(env.jobs_path()).unwrap();
    env.advance(Duration::seconds(2));
    assert_eq!(env.tick_ok().await.wake_at, None);
    assert_eq!(env.messages().len(), 1);
    let jobs = env.jobs();
    assert_eq!(jobs.len(), 1, "the failed call left no job behind");
    assert_eq!((jobs[0]["id"].clone(), jobs[0]["status"].clone()), (job["id"].clone(), json!("done")));
}

/// Jobs written straight into jobs.json (as after a long run of the controller).
fn write_jobs(env: &Env, jobs: Vec<Value>) {
    std::fs::create_dir_all(env.state_dir()).unwrap();
    let text = serde_json::to_string(&json!({"version": 1, "jobs": jobs})).unwrap();
    std::fs::write(env.jobs_path(), text).unwrap();
}

fn stored_once(i: usize, next_at: &str) -> Value {
    json!({
        "id": format!("sch_bulk_{i:05}"), "type": "once", "status": "active", "createdAt": START, "nextAt": next_at,
        "sentCount": 0, "sender": "scheduler", "recipient": "worker", "priority": "P3", "waitForQuiet": false,
        "body": format!("bulk {i}"), "schedule": {"afterMs": 60000},
    })
}

#[tokio::test]
async fn ten_thousand_jobs_cost_nothing_until_one_is_due() {
    let mut env = Env::generous_deadline();
    let far = t("2027-01-01T00:00:00.000Z");
    let jobs: Vec<Value> = (0..10_000).map(|i| stored_once(i, &iso(far + Duration::minutes(i as i64)))).collect();
    write_jobs(&env, jobs);
    env.restart();
    assert_eq!(env.tick_ok().await.wake_at, Some(far), "the first tick reads the file");

    // From now on the cache is the truth: a tick with nothing due does not even read the file.
    // (A corrupt file on disk would be moved aside by any read.)
    let on_disk = std::fs::read_to_string(env.jobs_path()).unwrap();
    std::fs::write(env.jobs_path(), "garbage").unwrap();
    for _ in 0..200 {
        assert_eq!(env.tick_ok().await.wake_at, Some(far));
    }
    assert_eq!(std::fs::read_to_string(env.jobs_path()).unwrap(), "garbage", "not read");
    std::fs::write(env.jobs_path(), on_disk).unwrap();

    // One job due: one message, one write, the rest untouched.
    env.clock.set(far + Duration::seconds(30));
    let outcome = env.tick_ok().await;
    assert_eq!(env.messages().len(), 1);
    assert_eq!(outcome.wake_at, Some(far + Duration::minutes(1)));
    let jobs = env.jobs();
    assert_eq!(jobs.len(), 10_000);
    assert_eq!(jobs.iter().filter(|j| j["status"] == "done").count(), 1);
    assert_eq!(jobs[0]["status"], "done");

    // Tools still work at this size.
    env.ok("schedule.once", json!({"afterMinutes": 1, "body": "one more"})).await;
    assert_eq!(env.jobs().len(), 10_001);
    let list = env.list(false).await;
    assert_eq!(list.metadata.unwrap()["metrics"][0], json!({"label": "Active", "value": 10_000}));
}

#[tokio::test]
async fn a_large_backlog_is_delivered_over_several_quick_ticks() {
    let mut env = Env::generous_deadline();
    let jobs: Vec<Value> = (0..250).map(|i| stored_once(i, START)).collect();
    write_jobs(&env, jobs);
    env.restart();
    env.advance(Duration::seconds(1));
    let first = env.tick_ok().await;
    assert_eq!(env.messages().len(), 200);
    assert_eq!(first.wake_at, Some(env.clock.now()), "more is due: come back at once");
    let second = env.tick_ok().await;
    assert_eq!(env.messages().len(), 250);
    assert_eq!(second.wake_at, None);
    assert!(env.jobs().iter().all(|j| j["status"] == "done"));
}

#[tokio::test]
async fn webui_entries_schedule_like_the_tools() {
    let env = Env::new();
    let once = env.webui("schedule.once", json!({"body": "In an hour"})).await.expect("webui once");
    let job = metadata_job(&once);
    assert_eq!(job["nextAt"], "2026-01-05T10:00:00.000Z", "afterMinutes defaults to 60 on the WebUI");
    assert_eq!((job["sender"].clone(), job["createdBy"].clone()), (json!("scheduler"), json!("user")));
    let job = metadata_job(&env.webui("schedule.once", json!({"afterHours": 2, "body": "x"})).await.expect("once"));
    assert_eq!(job["nextAt"], "2026-01-05T11:00:00.000Z");
    let error = env.webui("schedule.once", json!({"afterMinutes": 0, "body": "x"})).await.expect_err("zero delay");
    assert_eq!(error.to_string(), handler_error("schedule.once requires at or a positive after* delay"));

    let rec = env
        .webui(
            "schedule.recurring",
            json!({"weekday": "wed", "time": "12:00", "recipient": "worker", "body": "Weekly"}),
        )
        .await
        .expect("webui recurring");
    let job = metadata_job(&rec);
    assert_eq!(job["nextAt"], "2026-01-07T12:00:00.000Z");
    let rec = env
        .webui(
            "schedule.recurring",
            json!({"cron": "0 8 * * mon", "timezone": "Asia/Tokyo", "maxRuns": 1, "body": "x"}),
        )
        .await
        .expect("webui cron");
    assert_eq!(metadata_job(&rec)["nextAt"], "2026-01-11T23:00:00.000Z");
    let cancelled = env.webui("schedule.cancel", json!({"id": job["id"]})).await.expect("webui cancel");
    assert_eq!(cancelled.output, format!("Cancelled {}.", job["id"].as_str().unwrap()));
    let error = env.webui("schedule.once", json!({"afterMinutes": 1, "priority": "P7", "body": "x"})).await;
    assert!(matches!(error, Err(InvokeError::InvalidInput(_))), "the entry schema is checked first: {error:?}");
}
