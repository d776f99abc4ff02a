//! The load run: many agents answering many messages through the real controller parts in this
//! process (the real `Scheduler`, the real model loop `Activations`, the real `Store` on a temp
//! project, the `scripted` model), each agent's runner a local process (the process backend):
//! every activation writes one file in its workspace through its runner, then waits.
//!
//! It proves that nothing is lost and measures how the cost of an activation moves as the
//! history grows:
//! 1. `agents × messages` messages, each sent once the agent's previous one was answered, so
//!    every message gets an activation of its own. At the end, counted from the store: each
//!    message's signal delivered exactly once, to exactly one completed activation of its agent;
//!    no signal pending; no activation failed; every file write completed; the store's
//!    `PRAGMA integrity_check` is `ok`. Any violation panics with what was lost.
//! 2. The throughput curve of that run: activations/s and controller CPU per activation
//!    (`getrusage(RUSAGE_SELF)`, user + system: the runners are other processes) per slice of
//!    messages, and the last slice against the first.
//! 3. Before the long run, the same measured workload (`agents × 20` messages) on a fresh store
//!    (the long run's, restarted after it) and on one aged to 100 000 rows in every table a
//!    project's history grows (copies of the fresh run's own rows, spread over the week
//!    before), side by side.
//!
//! Goals (issue #28): ≥ 500 activations/s, the aged store within 10 % of the fresh one, ≤ 2 ms
//! of controller CPU per activation.
//!
//! Run with `cargo bench --bench load` (optionally `-- <messages per agent>` for the long run,
//! default 1 000; `SUZUMIO_BENCH_QUICK=1`: 5 agents × 20 messages, 4 per agent measured, a store
//! aged to 2 000 rows; its figures mean nothing, but a lost message still fails it).

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, OptionalExtension};
use suzumio::activation::Activations;
use suzumio::config::BackendKind;
use suzumio::scheduler::Scheduler;
use suzumio::store::{Event, ProjectStatus, SendMessage};
use suzumio::support::ToolHost;
use suzumio::support::runners::AgentRunners;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

/// How long the run may go without a single activation ending before it is declared stuck.
const STALL: Duration = Duration::from_secs(180);

/// Each agent's context window, in tokens: small enough that a long run compacts every agent's
/// conversation (at half of it) many times, as a real agent's is compacted; the script's
/// `summary` answers the compaction requests.
const WINDOW: u64 = 32_000;

/// A budget no run reaches.
const HIGH: u64 = 1_000_000_000_000;

/// The tables a project's history grows, aged for point 3.
const AGED_TABLES: &[&str] = &["activations", "signals", "messages", "tool_calls", "model_calls", "events", "history"];

/// Columns that hold an activation id, renamed with the copy they belong to.
const ACTIVATION_COLUMNS: &[&str] = &["activation_id", "source_activation", "delivered_activation_id"];

/// Columns that hold a time, moved back with the copy they belong to.
const TIME_COLUMNS: &[&str] =
    &["started_at", "ended_at", "created_at", "delivered_at", "not_before", "finished_at", "at"];

struct Sizes {
    agents: usize,
    /// Messages per agent in the long run (point 1 and 2).
    long_per_agent: usize,
    /// Messages in a slice of the curve.
    slice: usize,
    /// Messages per agent in the measured workload of point 3.
    measured_per_agent: usize,
    aged_rows: usize,
}

fn main() {
    if common::listing() {
        return;
    }
    let sizes = if common::quick() {
        Sizes { agents: 5, long_per_agent: 20, slice: 20, measured_per_agent: 4, aged_rows: 2_000 }
    } else {
        // `-- <messages per agent>` shortens the long run (default 1 000).
        let long_per_agent = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1_000);
        Sizes {
            agents: 50,
            long_per_agent,
            slice: 50 * long_per_agent / 10,
            measured_per_agent: 20,
            aged_rows: 100_000,
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let fresh_dir = tempfile::Builder::new().prefix("suzumio-bench-load-").tempdir().unwrap();
    let aged_dir = tempfile::Builder::new().prefix("suzumio-bench-aged-").tempdir().unwrap();
    write_project(fresh_dir.path(), sizes.agents);
    write_project(aged_dir.path(), sizes.agents);

    let agents = sizes.agents;
    println!(
        "{agents} agents, process backend, scripted model (one file.write, then wait); every message answered by its own activation"
    );
    println!();

    // The measured workload on the fresh store, then on one aged from it; then the long run
    // on the fresh store, restarted (a controller restart, as after `suzumio run` ends).
    let mut fresh_ledger = Ledger::default();
    let (fresh, fresh_rows) = rt.block_on(async {
        let run = Controller::start(fresh_dir.path()).await;
        run.drive(&mut fresh_ledger, 1, usize::MAX).await;
        let rows = history_rows(&run.db());
        let fresh = run.drive(&mut fresh_ledger, sizes.measured_per_agent, usize::MAX).await;
        run.stop().await;
        (fresh, rows)
    });
    let aging = Instant::now();
    let store_of =
        |dir: &Path| suzumio::controller::open(dir).unwrap_or_else(|e| panic!("{e}")).store.path().to_path_buf();
    age(&store_of(aged_dir.path()), &store_of(fresh_dir.path()), sizes.aged_rows);
    let aging = aging.elapsed();
    let (aged, aged_rows) = rt.block_on(async {
        let run = Controller::start(aged_dir.path()).await;
        let mut ledger = Ledger::default();
        run.drive(&mut ledger, 1, usize::MAX).await;
        let rows = history_rows(&run.db());
        let aged = run.drive(&mut ledger, sizes.measured_per_agent, usize::MAX).await;
        run.stop().await;
        ledger.verify(&run.db(), &run.tools.project.config.root);
        (aged, rows)
    });
    println!(
        "the same workload ({} messages over {agents} agents) on a fresh and an aged store (aged in {:.1} s):",
        agents * sizes.measured_per_agent,
        aging.as_secs_f64()
    );
    println!("{:<44} {:>14} {:>16}", "store", "activations/s", "CPU/activation");
    let (a, b) = (&fresh[0], &aged[0]);
    println!("{:<44} {:>14.1} {:>13.2} ms", format!("fresh ({})", describe(&fresh_rows)), a.rate(), a.cpu_ms());
    println!("{:<44} {:>14.1} {:>13.2} ms", format!("aged ({})", describe(&aged_rows)), b.rate(), b.cpu_ms());
    println!(
        "aged / fresh: activations/s {:.2}, CPU/activation {:.2} (goal: ≥ 500/s, aged within 10 %, ≤ 2 ms CPU)",
        b.rate() / a.rate(),
        b.cpu_ms() / a.cpu_ms()
    );
    println!();

    let long = rt.block_on(async {
        let run = Controller::start(fresh_dir.path()).await;
        run.drive(&mut fresh_ledger, 1, usize::MAX).await;
        let long = run.drive(&mut fresh_ledger, sizes.long_per_agent, sizes.slice).await;
        run.stop().await;
        fresh_ledger.verify(&run.db(), &run.tools.project.config.root);
        long
    });
    let total = agents * sizes.long_per_agent;
    println!("throughput as the history grows ({total} messages, {} per slice):", sizes.slice);
    println!("{:<20} {:>12} {:>14} {:>16}", "messages", "activations", "activations/s", "CPU/activation");
    let mut done = 0;
    for s in &long {
        println!(
            "{:<20} {:>12} {:>14.1} {:>13.2} ms",
            format!("{}-{}", done + 1, done + s.activations),
            s.activations,
            s.rate(),
            s.cpu_ms()
        );
        done += s.activations;
    }
    let (first, last) = (&long[0], &long[long.len() - 1]);
    println!(
        "last slice / first slice: activations/s {:.2}, CPU/activation {:.2}",
        last.rate() / first.rate(),
        last.cpu_ms() / first.cpu_ms()
    );
}

fn write_project(dir: &Path, agents: usize) {
    std::fs::write(
        dir.join("suzumio.yaml"),
        format!(
            "name: load\ntask: Answer every message.\ntools:\n  toolpacks: [core]\nagents:\n  worker: {{count: {agents}, tools: [file.write, coordination.wait_for_signal]}}\nbudgets:\n  agents: {{maxActivationsPerHour: {HIGH}, maxTokensPerActivation: {HIGH}, maxTokensPerDay: {HIGH}}}\n  project: {{maxActivationsPerHour: {HIGH}, maxTokensPerDay: {HIGH}}}\nbackend:\n  kind: process\n  runner:\n    model: main\n    models:\n      providers: {{local: {{type: scripted, script: ./script.yaml}}}}\n      presets: {{main: {{provider: local, contextWindow: {WINDOW}, compactAt: 0.5}}}}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("script.yaml"),
        "summary: \"## Goal\\nAnswer every message.\"\nactivations:\n  - agent: worker\n    repeat: true\n    steps:\n      - call:\n          - tool: file.write\n            input: {path: /workspace/answer.md, content: \"answered in {{activationId}}\"}\n",
    )
    .unwrap();
}

/// The controller's parts, as `suzumio run` wires them (no API server: nothing here uses it).
struct Controller {
    tools: Arc<ToolHost>,
    activations: Arc<Activations>,
    runners: Arc<AgentRunners>,
    stopping: CancellationToken,
    scheduler: tokio::task::JoinHandle<()>,
    agents: Vec<String>,
}

/// One stretch of a run: how many activations ended, in how long, for how much CPU.
struct Slice {
    activations: usize,
    wall: Duration,
    cpu: Duration,
}

impl Slice {
    fn rate(&self) -> f64 {
        self.activations as f64 / self.wall.as_secs_f64()
    }
    fn cpu_ms(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e3 / self.activations as f64
    }
}

/// Every message the bench sent: its id, its signal, its recipient.
#[derive(Default)]
struct Ledger {
    sent: Vec<(String, String, String)>,
    failures: Vec<String>,
}

impl Controller {
    async fn start(dir: &Path) -> Controller {
        let tools = suzumio::controller::open(dir).unwrap_or_else(|e| panic!("{e}"));
        tools.store.set_project_status(ProjectStatus::Running).unwrap();
        let runners = suzumio::controller::runners_with(&tools, BackendKind::Process, runner_binary())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let activations = Activations::new(tools.clone(), runners.clone());
        let scheduler = Arc::new(Scheduler::new(tools.clone(), activations.clone()));
        let stopping = CancellationToken::new();
        let scheduler = tokio::spawn(scheduler.run(stopping.clone()));
        let agents = tools.project.config.agents.iter().map(|a| a.id.clone()).collect();
        Controller { tools, activations, runners, stopping, scheduler, agents }
    }

    fn db(&self) -> Connection {
        Connection::open_with_flags(self.tools.store.path(), OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
    }

    /// Send `per_agent` messages to every agent, the next one once the agent's activation that
    /// took the previous one completed; a slice is measured every `slice` messages answered.
    async fn drive(&self, ledger: &mut Ledger, per_agent: usize, slice: usize) -> Vec<Slice> {
        let store = &self.tools.store;
        let mut events = store.subscribe();
        let db = self.db();
        // Per agent: messages sent, and the signal of the one not answered yet.
        let mut sent: HashMap<String, usize> = HashMap::new();
        let mut waiting: HashMap<String, String> = HashMap::new();
        let mut taken_by: HashMap<String, Vec<String>> = HashMap::new();
        let send = |agent: &str, ledger: &mut Ledger, n: usize| {
            let out = store
                .send_message(SendMessage {
                    sender: "user".into(),
                    recipient: Some(agent.to_string()),
                    priority: Some("P2".into()),
                    body: format!("message {n} for {agent}: answer it"),
                    ..Default::default()
                })
                .unwrap_or_else(|e| panic!("sending to {agent}: {e}"));
            assert_eq!(out.signal_ids.len(), 1, "a direct message makes one signal: {:?}", out.signal_ids);
            ledger.sent.push((out.message_id, out.signal_ids[0].clone(), agent.to_string()));
            out.signal_ids[0].clone()
        };
        let mut slices = Vec::new();
        let (mut slice_start, mut slice_cpu, mut in_slice) = (Instant::now(), cpu_time(), 0usize);
        for agent in &self.agents {
            let signal = send(agent, ledger, 1);
            sent.insert(agent.clone(), 1);
            waiting.insert(agent.clone(), signal);
        }
        let mut last_progress = Instant::now();
        while !waiting.is_empty() {
            // Agents whose waited-for signal went to an activation that completed.
            let mut answered: Vec<String> = Vec::new();
            match tokio::time::timeout(Duration::from_secs(2), events.recv()).await {
                Ok(Ok(record)) => match record.event {
                    Event::ActivationStarted { activation_id, signal_ids, .. } => {
                        taken_by.insert(activation_id, signal_ids);
                    }
                    Event::ActivationCompleted(end) => {
                        let signals = taken_by.remove(&end.activation_id).unwrap_or_default();
                        if waiting.get(&end.agent_id).is_some_and(|s| signals.contains(s)) {
                            answered.push(end.agent_id);
                        }
                    }
                    Event::ActivationFailed(end) | Event::ActivationCancelled(end) => {
                        taken_by.remove(&end.activation_id);
                        ledger.failures.push(format!(
                            "activation {} of {} ended {}: {}",
                            end.activation_id,
                            end.agent_id,
                            end.status,
                            end.error.unwrap_or_default()
                        ));
                    }
                    // A paused agent answers nothing more: the run would only stall.
                    Event::AgentPaused { agent_id, reason, .. } => {
                        panic!("{agent_id} was paused ({reason}); still waiting for {} message(s)", waiting.len())
                    }
                    _ => {}
                },
                Ok(Err(RecvError::Closed)) => panic!("the store's event channel closed"),
                // Events were missed (lagged) or none came: ask the store what was answered.
                Ok(Err(RecvError::Lagged(_))) | Err(_) => {
                    for (agent, signal) in &waiting {
                        if answered_in_store(&db, signal) {
                            answered.push(agent.clone());
                        }
                    }
                    if answered.is_empty() && last_progress.elapsed() > STALL {
                        panic!(
                            "no message answered for {} s; still waiting for: {}\nfailures: {:?}",
                            STALL.as_secs(),
                            waiting.iter().map(|(a, s)| format!("{a} ({s})")).collect::<Vec<_>>().join(", "),
                            ledger.failures
                        );
                    }
                }
            }
            for agent in answered {
                if waiting.remove(&agent).is_none() {
                    continue;
                }
                last_progress = Instant::now();
                in_slice += 1;
                let count = sent.get_mut(&agent).unwrap();
                if *count < per_agent {
                    *count += 1;
                    let signal = send(&agent, ledger, *count);
                    waiting.insert(agent, signal);
                }
                if in_slice == slice || waiting.is_empty() {
                    let cpu = cpu_time();
                    let slice = Slice { activations: in_slice, wall: slice_start.elapsed(), cpu: cpu - slice_cpu };
                    eprintln!(
                        "load: {} messages answered, {:.1} activations/s, {:.2} ms CPU/activation",
                        ledger.sent.len() - waiting.len(),
                        slice.rate(),
                        slice.cpu_ms()
                    );
                    slices.push(slice);
                    (slice_start, slice_cpu, in_slice) = (Instant::now(), cpu, 0);
                }
            }
        }
        slices
    }

    async fn stop(&self) {
        self.stopping.cancel();
        self.activations.shutdown(Duration::from_secs(4)).await;
        self.scheduler.abort();
        self.runners.shutdown().await;
    }
}

/// The runner binary the local runners run: `SUZUMIO_RUNNER_BIN`, else a build of this checkout
/// (a bench executable lives in `target/<profile>/deps`, where the backend's own search does not
/// look).
fn runner_binary() -> std::path::PathBuf {
    if let Ok(path) = std::env::var("SUZUMIO_RUNNER_BIN") {
        return path.into();
    }
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    ["x86_64-unknown-linux-gnu/release", "x86_64-unknown-linux-gnu/debug", "release", "debug"]
        .iter()
        .map(|dir| target.join(dir).join("suzumio-runner"))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no suzumio-runner under {}: build it (`cargo build -p suzumio-runner`) or set SUZUMIO_RUNNER_BIN",
                target.display()
            )
        })
}

/// The signal was delivered to an activation that completed.
fn answered_in_store(db: &Connection, signal: &str) -> bool {
    db.query_row(
        "SELECT a.status FROM signals s JOIN activations a ON a.id = s.delivered_activation_id WHERE s.id = ?1",
        [signal],
        |r| r.get::<_, String>(0),
    )
    .optional()
    .unwrap()
    .is_some_and(|status| status == "completed")
}

/// This process's CPU time, user and system.
fn cpu_time() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let usage = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let micros = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    Duration::from_micros(micros(usage.user_time()) + micros(usage.system_time()))
}

impl Ledger {
    /// Panics with every message that was not delivered exactly once to one completed
    /// activation of its recipient, every failed activation, and a store that is not intact.
    fn verify(&self, db: &Connection, root: &Path) {
        let mut lost: Vec<String> = self.failures.clone();
        let integrity: String = db.query_row("PRAGMA integrity_check", [], |r| r.get(0)).unwrap();
        if integrity != "ok" {
            lost.push(format!("PRAGMA integrity_check: {integrity}"));
        }
        let mut signals: HashMap<String, (String, i64, Option<String>)> = HashMap::new();
        let mut stmt = db.prepare("SELECT id, status, deliveries, delivered_activation_id FROM signals").unwrap();
        for row in stmt.query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?)))).unwrap() {
            let (id, fields) = row.unwrap();
            signals.insert(id, fields);
        }
        // Which activations were given each signal, and how each activation ended.
        let mut given: HashMap<String, Vec<String>> = HashMap::new();
        let mut ended: HashMap<String, (String, String)> = HashMap::new();
        let mut latest: HashMap<String, String> = HashMap::new();
        let mut stmt = db
            .prepare("SELECT id, agent_id, status, signal_ids_json FROM activations WHERE id NOT LIKE 'aged%' ORDER BY rowid")
            .unwrap();
        for row in stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?))
            })
            .unwrap()
        {
            let (id, agent, status, signal_ids) = row.unwrap();
            if status != "completed" {
                lost.push(format!("activation {id} of {agent} is {status}"));
            }
            for signal in serde_json::from_str::<Vec<String>>(&signal_ids).unwrap() {
                given.entry(signal).or_default().push(id.clone());
            }
            latest.insert(agent.clone(), id.clone());
            ended.insert(id, (agent, status));
        }
        let messages: i64 =
            db.query_row("SELECT COUNT(*) FROM messages WHERE id NOT LIKE 'aged%'", [], |r| r.get(0)).unwrap();
        if messages as usize != self.sent.len() {
            lost.push(format!("{} messages sent, {messages} in the store", self.sent.len()));
        }
        for (message, signal, agent) in &self.sent {
            let what = format!("message {message} to {agent} (signal {signal})");
            let Some((status, deliveries, delivered_to)) = signals.get(signal) else {
                lost.push(format!("{what}: its signal is not in the store"));
                continue;
            };
            let takers = given.get(signal).cloned().unwrap_or_default();
            if status != "delivered" || *deliveries != 1 || takers.len() != 1 {
                lost.push(format!(
                    "{what}: {status}, {deliveries} deliveries, given to {} activation(s) {takers:?}",
                    takers.len()
                ));
                continue;
            }
            if delivered_to.as_deref() != Some(takers[0].as_str()) {
                lost.push(format!("{what}: recorded as delivered to {delivered_to:?}, given to {}", takers[0]));
            }
            match ended.get(&takers[0]) {
                Some((to, status)) if to == agent && status == "completed" => {}
                other => lost.push(format!("{what}: its activation {} is {other:?}", takers[0])),
            }
        }
        let pending: i64 =
            db.query_row("SELECT COUNT(*) FROM signals WHERE status = 'pending'", [], |r| r.get(0)).unwrap();
        if pending != 0 {
            lost.push(format!("{pending} signal(s) still pending"));
        }
        let writes: Vec<(String, i64)> = db
            .prepare("SELECT status, COUNT(*) FROM tool_calls WHERE tool = 'file.write' AND id NOT LIKE 'aged%' GROUP BY status")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        if writes.iter().any(|(status, _)| status != "completed")
            || writes.iter().map(|(_, n)| *n as usize).sum::<usize>() != ended.len()
        {
            lost.push(format!("file writes by status {writes:?}, for {} activations", ended.len()));
        }
        // The runner really wrote: each agent's file holds its last activation's id.
        for (agent, activation) in &latest {
            let file = root.join("workspaces").join(agent).join("answer.md");
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if text != format!("answered in {activation}") {
                lost.push(format!("{}: {text:?}, not its last activation {activation}", file.display()));
            }
        }
        if !lost.is_empty() {
            let shown: Vec<&String> = lost.iter().take(30).collect();
            panic!("{} violation(s) of \"every message delivered once\":\n{:#?}", lost.len(), shown);
        }
        println!(
            "verified: {} messages, each delivered once to its own completed activation; none pending; integrity ok",
            self.sent.len()
        );
    }
}

/// Rows in each aged table.
fn history_rows(db: &Connection) -> Vec<(&'static str, i64)> {
    AGED_TABLES
        .iter()
        .map(|t| (*t, db.query_row(&format!("SELECT COUNT(*) FROM {t}"), [], |r| r.get(0)).unwrap()))
        .collect()
}

fn describe(rows: &[(&str, i64)]) -> String {
    let (min, max) = rows.iter().fold((i64::MAX, 0), |(lo, hi), (_, n)| (lo.min(*n), hi.max(*n)));
    format!("{min}-{max} rows per table")
}

/// Fill `target`'s growing tables to `rows` rows each (activations to `rows` exactly) with
/// copies of `template`'s rows, in one transaction: copy `i` renames every id and activation
/// reference with a prefix of its own and moves its times back by `i` periods, spreading the
/// copies over the week before the template's run.
fn age(target: &Path, template: &Path, rows: usize) {
    let mut db = Connection::open(target).unwrap();
    db.execute("ATTACH DATABASE ?1 AS template", [template.to_str().unwrap()]).unwrap();
    let activations: i64 = db.query_row("SELECT COUNT(*) FROM template.activations", [], |r| r.get(0)).unwrap();
    let copies = (rows as u64).div_ceil(activations as u64) as i64;
    let period_minutes = (7 * 24 * 60 / copies).max(1);
    let tx = db.transaction().unwrap();
    for table in AGED_TABLES {
        let columns: Vec<(String, String)> = tx
            .prepare(&format!("PRAGMA main.table_info({table})"))
            .unwrap()
            .query_map([], |r| Ok((r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let shift = "'-' || (n.i * ".to_string() + &period_minutes.to_string() + ") || ' minutes'";
        let (mut names, mut values) = (Vec::new(), Vec::new());
        for (name, kind) in &columns {
            let value = if name == "id" && kind.eq_ignore_ascii_case("INTEGER") {
                continue;
            } else if name == "id" || ACTIVATION_COLUMNS.contains(&name.as_str()) {
                format!("'aged' || n.i || '_' || t.{name}")
            } else if name == "signal_ids_json" {
                "(SELECT json_group_array('aged' || n.i || '_' || value) FROM json_each(t.signal_ids_json))".to_string()
            } else if TIME_COLUMNS.contains(&name.as_str()) {
                format!("strftime('%Y-%m-%dT%H:%M:%fZ', t.{name}, {shift})")
            } else {
                format!("t.{name}")
            };
            names.push(name.clone());
            values.push(value);
        }
        tx.execute_batch(&format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {copies})
             INSERT INTO main.{table} ({}) SELECT {} FROM n CROSS JOIN template.{table} AS t LIMIT {rows}",
            names.join(", "),
            values.join(", ")
        ))
        .unwrap_or_else(|e| panic!("aging {table}: {e}"));
    }
    // An agent's older conversation is not in its context any more in real use: it was
    // compacted (at `contextWindow × compactAt`). Each agent's aged history ends in a compaction,
    // as it would, so the aged store measures the project's age and not a context that no model
    // would accept (`benches/model_context.rs` measures compaction itself).
    tx.execute_batch(
        "INSERT INTO main.history (id, agent_id, activation_id, kind, content_json, created_at)
         SELECT 'aged_compaction_' || id, id, NULL, 'history_compaction',
                json_object('summary', '(the aged history)', 'archivedMessages', 2000, 'keptMessages', 0,
                            'reason', 'aged store', 'model', 'scripted'),
                strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 minutes')
         FROM main.agents",
    )
    .unwrap_or_else(|e| panic!("compacting the aged history: {e}"));
    tx.commit().unwrap();
}
