//! Group commit's durability against a real process and a real SQLite file: a child process
//! (this test binary re-executed) writes through 16 threads of real `Store` calls — signals,
//! events, tool-call starts and finishes — and prints each write's id only after the call
//! returned; the parent kills it with SIGKILL after a number of acknowledgements, reopens the
//! store and checks that every acknowledged write is there, that no write is half there (each
//! one is a row and its event), and that `PRAGMA integrity_check` is clean.
//!
//! A kill -9 loses what the process had not handed to SQLite; an acknowledgement given before
//! the batch's COMMIT returned would show up here as a missing id.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use suzumio::clock::SystemClock;
use suzumio::config::ProjectConfig;
use suzumio::store::{Event, SignalRequest, Store, ToolCallOutcome};

/// Set in the child: the project directory to write to.
const CHILD: &str = "SUZUMIO_GROUP_COMMIT_CHILD";
const THREADS: usize = 16;
/// Acknowledgements the parent waits for before the kill: enough for many batches.
const ACKS_BEFORE_KILL: usize = 600;
const ROUNDS: usize = 5;
const PROBE: &str = "durability.probe";
const TEST_NAME: &str = "every_acknowledged_write_survives_a_kill_9_of_16_concurrent_writers";

fn config(dir: &Path) -> ProjectConfig {
    let yaml = "name: durability\ntask: Write until killed.\nagents:\n  pm: {}\nbackend:\n  runner:\n    model: main\n    \
                models:\n      providers: {local: {type: scripted}}\n      presets: {main: {provider: local}}\n";
    std::fs::write(dir.join("suzumio.yaml"), yaml).expect("config written");
    let loaded = suzumio::config::load_config(dir, &suzumio::config::load::ProcessEnv).expect("config located");
    loaded.config.unwrap_or_else(|| panic!("test config is invalid: {:?}", loaded.diagnostics))
}

#[test]
fn every_acknowledged_write_survives_a_kill_9_of_16_concurrent_writers() {
    if let Ok(dir) = std::env::var(CHILD) {
        write_until_killed(Path::new(&dir));
        return;
    }
    let dir = tempfile::Builder::new().prefix("suzumio-group-commit-").tempdir().expect("temp dir");
    let config = config(dir.path());
    // Each round kills a child mid-stream and checks the store; the next child reopens the
    // same file. A kill lands in a commit's window only some of the time: several rounds make
    // an acknowledgement given too early very likely to show.
    let mut acked: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for _round in 0..ROUNDS {
        kill_a_writing_child(dir.path(), &mut acked);
        check_store(&config, &acked);
    }
}

/// Run a child until `ACKS_BEFORE_KILL` acknowledgements, SIGKILL it, and add every id it
/// acknowledged to `acked`.
fn kill_a_writing_child(dir: &Path, acked: &mut BTreeMap<String, BTreeSet<String>>) {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("child started");
    let lines = BufReader::new(child.stdout.take().expect("child stdout"));
    let mut count = 0;
    let mut killed = false;
    // Lines already in the pipe at the kill were acknowledged too: read to the end.
    for line in lines.lines() {
        let line = line.expect("child output");
        let Some(ack) = line.strip_prefix("ack ") else { continue };
        let (kind, id) = ack.split_once(' ').expect("`ack <kind> <id>`");
        acked.entry(kind.to_string()).or_default().insert(id.to_string());
        count += 1;
        if count == ACKS_BEFORE_KILL {
            child.kill().expect("SIGKILL sent");
            killed = true;
        }
    }
    let status = child.wait().expect("child reaped");
    assert!(killed, "the child stopped after {count} acknowledgements ({status}), before the kill");
    for kind in ["signal", "event", "tool", "finished"] {
        assert!(acked.get(kind).is_some_and(|ids| !ids.is_empty()), "no {kind} write was acknowledged: {acked:?}");
    }
}

/// Reopen the store after a kill: sound, every acknowledged write there, nothing half there.
fn check_store(config: &ProjectConfig, acked: &BTreeMap<String, BTreeSet<String>>) {
    // The store opens again (migrations, config sync) and SQLite finds the file sound.
    let store = Store::open(config, Arc::new(SystemClock)).expect("store reopens after the kill");
    let db = rusqlite::Connection::open(store.path()).expect("database opens");
    let integrity: String = db.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity_check");
    assert_eq!(integrity, "ok");

    let events = event_links(&db);
    let signals = ids(&db, "SELECT id FROM signals WHERE kind = ?1", [PROBE]);
    let started = ids(&db, "SELECT id FROM tool_calls WHERE tool = ?1", [PROBE]);
    let finished = ids(&db, "SELECT id FROM tool_calls WHERE tool = ?1 AND status != 'running'", [PROBE]);
    let event_ids = ids(&db, "SELECT id FROM events WHERE type = ?1", [PROBE]);

    // Acknowledged means present.
    let missing = |kind: &str, present: &BTreeSet<String>| -> Vec<String> {
        acked[kind].iter().filter(|id| !present.contains(*id)).cloned().collect()
    };
    assert_eq!(missing("signal", &signals), Vec::<String>::new(), "acknowledged signals lost");
    assert_eq!(missing("event", &event_ids), Vec::<String>::new(), "acknowledged events lost");
    assert_eq!(missing("tool", &started), Vec::<String>::new(), "acknowledged tool-call starts lost");
    assert_eq!(missing("finished", &finished), Vec::<String>::new(), "acknowledged tool-call finishes lost");

    // Nothing half-written: each row has its event and each event its row, whether or not
    // the write was acknowledged before the kill.
    assert_eq!(signals, events["signal.created"], "signal rows and their signal.created events");
    assert_eq!(started, events["tool_call.started"], "tool-call rows and their tool_call.started events");
    assert_eq!(finished, events["tool_call.finished"], "finished tool calls and their tool_call.finished events");
}

/// The ids each probe event names, by event type.
fn event_links(db: &rusqlite::Connection) -> BTreeMap<String, BTreeSet<String>> {
    let mut links: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for kind in ["signal.created", "tool_call.started", "tool_call.finished"] {
        links.insert(kind.to_string(), BTreeSet::new());
    }
    let mut stmt = db.prepare("SELECT type, data_json FROM events").expect("events query");
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))).expect("events read");
    for row in rows {
        let (kind, data) = row.expect("event row");
        let data: Value = serde_json::from_str(&data).expect("event data is JSON");
        let id = match kind.as_str() {
            "signal.created" if data["kind"] == PROBE => data["signalId"].as_str(),
            "tool_call.started" | "tool_call.finished" if data["tool"] == PROBE => data["toolCallId"].as_str(),
            _ => None,
        };
        if let Some(id) = id {
            links.get_mut(&kind).expect("a tracked type").insert(id.to_string());
        }
    }
    links
}

fn ids<const N: usize>(db: &rusqlite::Connection, sql: &str, params: [&str; N]) -> BTreeSet<String> {
    let mut stmt = db.prepare(sql).expect("query");
    let rows = stmt
        .query_map(rusqlite::params_from_iter(params), |r| {
            r.get::<_, rusqlite::types::Value>(0).map(|v| match v {
                rusqlite::types::Value::Integer(i) => i.to_string(),
                rusqlite::types::Value::Text(t) => t,
                other => format!("{other:?}"),
            })
        })
        .expect("rows");
    rows.collect::<Result<_, _>>().expect("ids read")
}

/// The child: 16 threads writing through the store's real methods until the parent kills the
/// process, each acknowledgement printed after its call returned. The deadline only stops a
/// child whose parent is gone.
fn write_until_killed(dir: &Path) {
    let store = Store::open(&config(dir), Arc::new(SystemClock)).expect("store opens");
    // The activation a killed child left running is this one's too.
    let running = store.agent("pm").expect("agent read").and_then(|a| a.active_activation_id);
    let activation = match running {
        Some(id) => id,
        None => store.start_activation("pm", "write until killed", &[]).expect("activation").id,
    };
    let next = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(300);
    let ack = |kind: &str, id: &str| {
        let mut out = std::io::stdout().lock();
        writeln!(out, "ack {kind} {id}").expect("ack written");
        out.flush().expect("ack flushed");
    };
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            let (store, activation, next) = (&store, &activation, next.clone());
            scope.spawn(move || {
                while Instant::now() < deadline {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    match n % 3 {
                        0 => {
                            let signals = store
                                .record_signal(SignalRequest {
                                    kind: PROBE.into(),
                                    payload: json!({"n": n}),
                                    ..SignalRequest::default()
                                })
                                .expect("signal recorded");
                            for signal in signals {
                                ack("signal", &signal.id);
                            }
                        }
                        1 => {
                            let event = Event::Unrecognized { kind: PROBE.into(), data: json!({"n": n}) };
                            let record = store.append_event(event).expect("event appended");
                            ack("event", &record.id.to_string());
                        }
                        _ => {
                            let id = store
                                .start_tool_call(activation, "pm", PROBE, None, &json!({"n": n}), None)
                                .expect("tool call started");
                            ack("tool", &id);
                            store
                                .finish_tool_call(&id, ToolCallOutcome::Completed, Some(&json!("ok")), None, None)
                                .expect("tool call finished");
                            ack("finished", &id);
                        }
                    }
                }
            });
        }
    });
}
