//! Scheduler tick time at scale: 100 agents, 10 000 pending signals, 10 000 scheduled jobs in the
//! packaged scheduler toolpack (plus the plan toolpack's hook), on a real SQLite file.
//! Reports: the first tick (starts an activation for every agent, in one transaction): when the
//! last of them was handed to the launcher, and the whole tick with the packs' first hook runs
//! (which `suzumio run` does not wait for); medians and p99 of steady ticks while every agent is
//! busy. Targets: the 100 starts under 50 ms, a steady tick under 20 ms.
//!
//! Run with `cargo bench --bench scheduler` (optionally `-- <ticks>`; `SUZUMIO_BENCH_QUICK=1`:
//! 200 signals, 200 jobs and 3 ticks).

mod common;

use common::percentile;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use suzumio::clock::{SystemClock, iso};
use suzumio::config::AgentConfig;
use suzumio::config::load::ProcessEnv;
use suzumio::project::Project;
use suzumio::scheduler::{ActivationLauncher, Scheduler};
use suzumio::store::{ActivationRecord, ProjectStatus, SendMessage, SignalRecord, StateFiles, Store};
use suzumio::support::ToolHost;

/// Starts nothing, but notes when each activation was handed over (recorded and committed).
#[derive(Default)]
struct NoopLauncher {
    handed: std::sync::Mutex<Vec<Instant>>,
}

impl ActivationLauncher for NoopLauncher {
    fn prompt(&self, agent: &AgentConfig, _signals: &[SignalRecord]) -> String {
        agent.id.clone()
    }
    fn start(&self, _activation: ActivationRecord, _signals: Vec<SignalRecord>) {
        self.handed.lock().unwrap().push(Instant::now());
    }
    fn cancel(&self, _activation: &ActivationRecord, _reason: &str) {}
}

fn main() {
    if common::listing() {
        return;
    }
    let ticks: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(common::iterations(50, 3));
    let (signals, job_count) = (common::iterations(10_000, 200), common::iterations(10_000, 200));
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("suzumio-bench-sched-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let toolpacks = repo.join("toolpacks");
    std::fs::write(
        dir.join("suzumio.yaml"),
        format!(
            r#"name: bench
task: Benchmark the scheduler.
tools:
  toolpacks:
    - core
    - {{path: {}, id: scheduler}}
    - {{path: {}, id: plan}}
agents:
  pm: {{tools: [messages.send, schedule.*, plan.*]}}
  worker: {{count: 99, tools: [messages.send]}}
backend:
  runner:
    model: main
    models:
      providers: {{local: {{type: scripted}}}}
      presets: {{main: {{provider: local}}}}
"#,
            toolpacks.join("scheduler").display(),
            toolpacks.join("plan").display()
        ),
    )
    .unwrap();
    let project = Arc::new(Project::load(&dir, &ProcessEnv).unwrap_or_else(|e| panic!("{e}")));
    let store = Store::open(&project.config, Arc::new(SystemClock)).unwrap();
    store.set_project_status(ProjectStatus::Running).unwrap();

    // 10 000 jobs, all due in the future (a day out, spread over a week).
    let now = store.now();
    let jobs: Vec<_> = (0..job_count as i64)
        .map(|i| {
            let next = now + chrono::Duration::minutes(24 * 60 + i);
            json!({
                "id": format!("sch_bench_{i:05}"), "type": "recurring", "status": "active",
                "createdAt": iso(now), "nextAt": iso(next), "sentCount": 0,
                "sender": "scheduler", "recipient": format!("worker-{}", i % 99 + 1), "priority": "P3",
                "waitForQuiet": false, "body": format!("Routine check {i}"),
                "schedule": {"mode": "interval", "everyMs": 3_600_000},
            })
        })
        .collect();
    let state = StateFiles::new(&dir);
    state.write("scheduler", "jobs.json", &json!({"version": 1, "jobs": jobs})).unwrap();

    // 10 000 pending signals over 100 agents.
    let ids: Vec<String> = project.config.agents.iter().map(|a| a.id.clone()).collect();
    let fill = Instant::now();
    for i in 0..signals {
        store
            .send_message(SendMessage {
                sender: "user".into(),
                recipient: Some(ids[i % ids.len()].clone()),
                priority: Some(if i % 2 == 0 { "P2" } else { "P3" }.into()),
                body: format!("work item {i}"),
                ..Default::default()
            })
            .unwrap();
    }
    eprintln!("setup: {signals} messages in {:.1} s", fill.elapsed().as_secs_f64());

    let host = ToolHost::new(project.clone(), store.clone(), state);
    let launcher = Arc::new(NoopLauncher::default());
    let scheduler = Scheduler::new(host.clone(), launcher.clone());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();

    let start = Instant::now();
    let first = rt.block_on(scheduler.tick());
    let first_tick = start.elapsed();
    let all_handed = *launcher.handed.lock().unwrap().last().expect("activations handed over") - start;
    assert_eq!(first.started.len(), 100, "{:?}", first.errors);
    assert!(first.errors.is_empty(), "{:?}", first.errors);

    let mut busy = Vec::new();
    for _ in 0..ticks {
        let start = Instant::now();
        let report = rt.block_on(scheduler.tick());
        busy.push(start.elapsed());
        assert!(report.started.is_empty() && report.errors.is_empty(), "{:?}", report.errors);
    }

    println!("100 agents, {signals} pending signals, {job_count} scheduled jobs; {ticks} ticks");
    println!("{:<52} {:>10} {:>10}", "case", "median", "p99");
    println!(
        "{:<52} {:>8.2}ms {:>10}",
        "first tick: 100 activations started and handed over",
        all_handed.as_secs_f64() * 1e3,
        "-"
    );
    println!(
        "{:<52} {:>8.2}ms {:>10}",
        "first tick, whole (with the packs' first hook runs)",
        first_tick.as_secs_f64() * 1e3,
        "-"
    );
    println!(
        "{:<52} {:>8.2}ms {:>8.2}ms",
        "steady tick (every agent busy, nothing due)",
        percentile(&busy, 0.5).as_secs_f64() * 1e3,
        percentile(&busy, 0.99).as_secs_f64() * 1e3
    );
    let _ = std::fs::remove_dir_all(&dir);
}
