//! Packs isolated in time: with one misbehaving pack loaded beside a healthy one, in process
//! (the real `ToolHost`, `Scheduler::run` with `tickIntervalMs: 200`, SQLite on disk):
//! - a healthy pack's WebUI entry (`invoke_webui`), medians and p99;
//! - a message to an idle agent until its activation starts (the launcher's `start`), which
//!   then ends at once so the agent is idle for the next message.
//!
//! The bad packs are the tester's: a module that loops at top level, a `schedulerTick` that
//! loops, one that awaits a 10-minute sleep, a WebUI promise that never resolves (kept in flight
//! by a task calling it again and again). Every bad pack has `timeoutMs: 2000`.
//!
//! Run with `cargo bench --bench packs` (optionally `-- <messages>`; WebUI calls are 10×;
//! `SUZUMIO_BENCH_QUICK=1`: 3 messages).

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use suzumio::clock::SystemClock;
use suzumio::config::AgentConfig;
use suzumio::config::load::ProcessEnv;
use suzumio::project::Project;
use suzumio::scheduler::{ActivationLauncher, Scheduler};
use suzumio::store::{
    ActivationOutcome, ActivationRecord, ProjectStatus, SendMessage, SignalRecord, StateFiles, Store,
};
use suzumio::support::ToolHost;
use tokio::sync::mpsc;

const GOOD: &str = r#"export const webui = { "good.ping": () => ({ output: "pong" }) };
export function schedulerTick() { return null; }
"#;

/// (case, the bad pack's controller module, whether `bad.hang` is kept in flight).
const CASES: &[(&str, &str, bool)] = &[
    ("no bad pack (a second healthy one)", GOOD, false),
    ("module loops at top level", "while (true) {}\nexport const webui = {};\n", false),
    ("schedulerTick loops", "export const webui = {};\nexport function schedulerTick() { while (true) {} }\n", false),
    (
        "schedulerTick awaits a 10-minute sleep",
        "export const webui = {};\nexport async function schedulerTick(c) { await c.time.sleep(600000); }\n",
        false,
    ),
    ("WebUI promise never resolves", "export const webui = { \"bad.hang\": () => new Promise(() => {}) };\n", true),
];

/// Tells the bench when an activation starts (the bench then ends it).
struct Starts {
    started: mpsc::UnboundedSender<(Instant, String)>,
}

impl ActivationLauncher for Starts {
    fn prompt(&self, agent: &AgentConfig, _signals: &[SignalRecord]) -> String {
        format!("bench activation of {}", agent.id)
    }

    fn start(&self, activation: ActivationRecord, _signals: Vec<SignalRecord>) {
        let _ = self.started.send((Instant::now(), activation.id));
    }

    fn cancel(&self, _activation: &ActivationRecord, _reason: &str) {}
}

fn write_project(dir: &Path, bad: &str) {
    let write = |path: &str, text: &str| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "suzumio.yaml",
        "name: packs-bench\ntask: Stay responsive.\nscheduler: {tickIntervalMs: 200}\ntools:\n  toolpacks:\n    - core\n    - {path: ./toolpacks/good, id: good}\n    - {path: ./toolpacks/bad, id: bad, timeoutMs: 2000}\nagents:\n  pm:\n    role: project-manager\n    tools: [messages.send, completion.submit]\nbackend:\n  runner:\n    model: main\n    models:\n      providers:\n        local: { type: scripted }\n      presets:\n        main: { provider: local }\n",
    );
    let manifest = |id: &str, entry: &str| {
        json!({ "id": id, "webui": [{ "id": entry, "title": entry, "kind": "action" }], "tools": [] }).to_string()
    };
    write("toolpacks/good/suzumio.toolpack.json", &manifest("good", "good.ping"));
    write("toolpacks/good/controller.mjs", GOOD);
    write("toolpacks/bad/suzumio.toolpack.json", &manifest("bad", "bad.hang"));
    write("toolpacks/bad/controller.mjs", bad);
}

struct Row {
    case: &'static str,
    webui: Vec<Duration>,
    messages: Vec<Duration>,
}

fn run_case(rt: &tokio::runtime::Runtime, (case, bad, hangs): (&'static str, &str, bool), messages: usize) -> Row {
    let dir = std::env::temp_dir().join(format!("suzumio-bench-packs-{}-{}", std::process::id(), case.len()));
    let _ = std::fs::remove_dir_all(&dir);
    write_project(&dir, bad);
    let project = Arc::new(Project::load(&dir, &ProcessEnv).expect("bench project loads"));
    let store = Store::open(&project.config, Arc::new(SystemClock)).unwrap();
    store.set_project_status(ProjectStatus::Running).unwrap();
    let host = ToolHost::new(project, store.clone(), StateFiles::new(&dir));
    let (started, mut starts) = mpsc::unbounded_channel();
    let scheduler = Arc::new(Scheduler::new(host.clone(), Arc::new(Starts { started })));
    let stop = tokio_util::sync::CancellationToken::new();
    let running = rt.spawn(scheduler.run(stop.clone()));
    let hang = {
        let host = host.clone();
        let stop = stop.clone();
        rt.spawn(async move {
            while hangs && !stop.is_cancelled() {
                let _ = host.invoke_webui("bad", "bad.hang", json!({})).await;
            }
        })
    };
    // Let the first ticks start the bad load or hook.
    std::thread::sleep(Duration::from_millis(500));

    let webui = (0..messages * 10)
        .map(|_| {
            let start = Instant::now();
            let out = rt.block_on(host.invoke_webui("good", "good.ping", json!({})));
            assert!(out.is_ok(), "{out:?}");
            start.elapsed()
        })
        .collect();
    let messages = (0..messages)
        .map(|n| {
            let sent = Instant::now();
            let message = SendMessage {
                sender: "user".into(),
                recipient: Some("pm".into()),
                priority: Some("P2".into()),
                body: format!("m{n}"),
                ..SendMessage::default()
            };
            host.post_message(message).unwrap();
            let at = rt.block_on(async { tokio::time::timeout(Duration::from_secs(60), starts.recv()).await });
            let (at, activation) = at.expect("an activation started within 60 s").expect("launcher alive");
            store.finish_activation(&activation, ActivationOutcome::Completed, None, None).unwrap();
            // Leave a gap, so the next message finds the agent idle and the scheduler waiting.
            std::thread::sleep(Duration::from_millis(20));
            at - sent
        })
        .collect();
    stop.cancel();
    let _ = rt.block_on(running);
    hang.abort();
    let _ = std::fs::remove_dir_all(&dir);
    Row { case, webui, messages }
}

fn main() {
    if common::listing() {
        return;
    }
    let messages: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(common::iterations(100, 3));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let rows: Vec<Row> = CASES.iter().map(|&case| run_case(&rt, case, messages)).collect();
    println!("{} WebUI calls and {messages} messages per case", messages * 10);
    println!(
        "{:<40} {:>14} {:>14} {:>16} {:>16}",
        "bad pack", "WebUI median", "WebUI p99", "msg→act median", "msg→act p99"
    );
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    for r in &rows {
        println!(
            "{:<40} {:>14} {:>14} {:>16} {:>16}",
            r.case,
            ms(common::percentile(&r.webui, 0.5)),
            ms(common::percentile(&r.webui, 0.99)),
            ms(common::percentile(&r.messages, 0.5)),
            ms(common::percentile(&r.messages, 0.99)),
        );
    }
}
