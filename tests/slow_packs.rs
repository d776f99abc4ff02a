//! Packs are isolated in time: with a misbehaving pack loaded beside a healthy one, the real
//! `suzumio run` (process backend) still answers the healthy pack's WebUI entry and starts an
//! idle agent's activation at once. Each bad pack is one way the tester slowed every agent: a
//! module that loops at top level, a `schedulerTick` that loops, one that awaits a 10-minute
//! sleep, a WebUI promise that never resolves (kept in flight the whole time). The latencies are
//! asserted loosely and printed (the benchmark in `benches/controller.rs` measures them).

mod support;

use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{Controller, http};

const P: &str = "/api/projects/slow-demo";

const GOOD: &str = r#"export const webui = { "good.ping": () => ({ output: "pong" }) };
export function schedulerTick() { return null; }
"#;

const TOP_LEVEL_LOOP: &str = "while (true) {}\nexport const webui = {};\n";
const LOOPING_HOOK: &str = "export const webui = {};\nexport function schedulerTick() { while (true) {} }\n";
const SLEEPING_HOOK: &str =
    "export const webui = {};\nexport async function schedulerTick(context) { await context.time.sleep(600000); }\n";
const NEVER_SETTLES: &str = r#"export const webui = { "bad.hang": () => new Promise(() => {}) };
"#;

/// A project with the healthy pack `good`, the bad pack `bad` (its controller module given), and
/// one agent on the scripted model.
fn project(bad_module: &str) -> tempfile::TempDir {
    let root = tempfile::Builder::new().prefix("suzumio-test-slow-packs-").tempdir().expect("temp dir");
    let write = |path: &str, text: &str| {
        let path = root.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "suzumio.yaml",
        "name: slow-demo\ntask: Stay responsive.\nscheduler: {tickIntervalMs: 200}\ntools:\n  toolpacks:\n    - core\n    - {path: ./toolpacks/good, id: good}\n    - {path: ./toolpacks/bad, id: bad, timeoutMs: 2000}\nagents:\n  pm:\n    role: project-manager\n    tools: [messages.send, completion.submit]\nbackend:\n  runner:\n    model: main\n    models:\n      providers:\n        local: { type: scripted }\n      presets:\n        main: { provider: local }\n",
    );
    let manifest = |id: &str, entry: &str| {
        json!({ "id": id, "webui": [{ "id": entry, "title": entry, "kind": "action" }], "tools": [] }).to_string()
    };
    write("toolpacks/good/suzumio.toolpack.json", &manifest("good", "good.ping"));
    write("toolpacks/good/controller.mjs", GOOD);
    write("toolpacks/bad/suzumio.toolpack.json", &manifest("bad", "bad.hang"));
    write("toolpacks/bad/controller.mjs", bad_module);
    root
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The newest activation of `pm`: (id, still running).
fn newest_activation(c: &Controller) -> Option<(String, bool)> {
    let page = http("GET", &c.url(&format!("{P}/activations?agent=pm&limit=1")), &[], None).json();
    let a = page["items"].get(0)?;
    Some((a["id"].as_str()?.to_string(), a["endedAt"].is_null()))
}

/// Send a message to `pm` once it is idle; the time until its activation is recorded.
fn message_to_activation(c: &Controller, n: usize) -> Duration {
    let idle_by = Instant::now() + Duration::from_secs(20);
    while newest_activation(c).is_some_and(|(_, running)| running) {
        assert!(Instant::now() < idle_by, "pm never became idle");
        thread::sleep(Duration::from_millis(10));
    }
    let before = newest_activation(c).map(|(id, _)| id);
    let sent = Instant::now();
    let r =
        http("POST", &c.url(&format!("{P}/messages")), &[], Some(&format!(r#"{{"recipient": "pm", "body": "m{n}"}}"#)));
    assert_eq!(r.status, 201, "{}", r.body);
    loop {
        if newest_activation(c).map(|(id, _)| id) != before {
            return sent.elapsed();
        }
        assert!(sent.elapsed() < Duration::from_secs(20), "no activation for message {n}");
        thread::sleep(Duration::from_millis(2));
    }
}

fn webui_ping(c: &Controller) -> Duration {
    let start = Instant::now();
    let r = http("POST", &c.url(&format!("{P}/tool-ui/good/good.ping")), &[], Some("{}"));
    assert_eq!((r.status, r.json()["output"].clone()), (200, json!("pong")), "{}", r.body);
    start.elapsed()
}

/// A running controller and its project directory (fields drop in order: the process first).
struct Running {
    c: Controller,
    _dir: tempfile::TempDir,
}

/// Starts the controller with the bad pack, lets it misbehave, then measures the healthy side.
fn healthy_beside(name: &str, bad_module: &str) -> Running {
    let dir = project(bad_module);
    let c = Controller::start(dir.path(), &[]);
    let r = http("POST", &c.url(&format!("{P}/start")), &[], Some("{}"));
    assert_eq!(r.status, 200, "{}", r.body);
    if bad_module == NEVER_SETTLES {
        // Keep a call that never settles in flight for the whole test.
        let url = c.url(&format!("{P}/tool-ui/bad/bad.hang"));
        thread::spawn(move || {
            // Ends when the controller does (the request fails then).
            while support::client().post(&url).body("{}").header("Content-Type", "application/json").send().is_ok() {}
        });
    }
    // Let the first ticks start the bad load or hook.
    thread::sleep(Duration::from_millis(500));
    let mut webui: Vec<Duration> = (0..10).map(|_| webui_ping(&c)).collect();
    let mut messages: Vec<Duration> = (0..5).map(|n| message_to_activation(&c, n)).collect();
    let (w, m) = (median(&mut webui), median(&mut messages));
    println!(
        "{name}: healthy WebUI median {w:?} (max {:?}); message -> activation median {m:?} (max {:?})",
        webui.last().unwrap(),
        messages.last().unwrap()
    );
    assert!(w < Duration::from_secs(1) && *webui.last().unwrap() < Duration::from_secs(1), "{name}: {webui:?}");
    assert!(m < Duration::from_secs(1) && *messages.last().unwrap() < Duration::from_secs(1), "{name}: {messages:?}");
    Running { c, _dir: dir }
}

fn lines_with(stderr: &str, needles: &[&str]) -> usize {
    stderr.lines().filter(|l| needles.iter().all(|n| l.contains(n))).count()
}

#[test]
fn a_module_that_loops_at_top_level_slows_nobody_and_is_reported_once() {
    let Running { c, _dir } = healthy_beside("top-level loop", TOP_LEVEL_LOOP);
    // 2 s per load, retried after 1 s, then 2 s: by 8 s, ~40 ticks and at least two loads.
    thread::sleep(Duration::from_secs(8).saturating_sub(Duration::from_millis(500)));
    let stderr = c.stderr();
    let reported = lines_with(&stderr, &["scheduler hook", "module evaluation did not finish within 2000 ms"]);
    assert_eq!(reported, 1, "the failed load is reported once, not on every tick or retry:\n{stderr}");
    // The remembered error answers at once, without another 2 s load.
    let start = Instant::now();
    let r = http("POST", &c.url(&format!("{P}/tool-ui/bad/bad.hang")), &[], Some("{}"));
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.json()["error"].as_str().unwrap().contains("module evaluation did not finish"), "{}", r.body);
    println!("top-level loop: the bad pack's remembered load error answered in {:?}", start.elapsed());
    assert!(start.elapsed() < Duration::from_secs(1), "not after another load: {:?}", start.elapsed());
}

#[test]
fn a_scheduler_hook_that_loops_slows_nobody() {
    let Running { c, _dir } = healthy_beside("looping schedulerTick", LOOPING_HOOK);
    let needles = ["toolpack=bad", "did not return within 1000 ms (scheduler.hookTimeoutMs)"];
    let by = Instant::now() + Duration::from_secs(5);
    while lines_with(&c.stderr(), &needles) == 0 && Instant::now() < by {
        thread::sleep(Duration::from_millis(50));
    }
    let stderr = c.stderr();
    assert!(lines_with(&stderr, &needles) >= 1, "{stderr}");
}

#[test]
fn a_scheduler_hook_that_sleeps_ten_minutes_slows_nobody() {
    let _running = healthy_beside("schedulerTick awaiting a 10-minute sleep", SLEEPING_HOOK);
}

#[test]
fn a_webui_promise_that_never_settles_occupies_only_its_pack() {
    let Running { c, _dir } = healthy_beside("WebUI promise that never resolves", NEVER_SETTLES);
    let r = http("POST", &c.url(&format!("{P}/tool-ui/bad/bad.hang")), &[], Some("{}"));
    assert_eq!(r.status, 422, "the bad pack's own call still ends at its deadline: {}", r.body);
    assert!(r.json()["error"].as_str().unwrap().contains("did not finish within 2000 ms"), "{}", r.body);
}

/// A module that does not load is remembered: the next call gets its error at once instead of
/// another load, and fixing the file on disk retries at once (before the backoff ends).
#[tokio::test]
async fn a_failed_load_is_remembered_and_retried_when_the_files_change() {
    use suzumio::clock::SystemClock;
    use suzumio::config::load::ProcessEnv;
    use suzumio::project::Project;
    use suzumio::store::{StateFiles, Store};
    use suzumio::support::ToolHost;

    let dir = project(TOP_LEVEL_LOOP);
    let yaml = dir.path().join("suzumio.yaml");
    let text = std::fs::read_to_string(&yaml).unwrap().replace("timeoutMs: 2000", "timeoutMs: 300");
    std::fs::write(&yaml, text).unwrap();
    let project = std::sync::Arc::new(Project::load(dir.path(), &ProcessEnv).expect("project loads"));
    let store = Store::open(&project.config, std::sync::Arc::new(SystemClock)).unwrap();
    let host = ToolHost::new(project, store, StateFiles::new(dir.path()));

    let start = Instant::now();
    let first = host.invoke_webui("bad", "bad.hang", json!({})).await.unwrap_err().to_string();
    let loading = start.elapsed();
    assert!(first.contains("module evaluation did not finish within 300 ms"), "{first}");
    let start = Instant::now();
    let again = host.invoke_webui("bad", "bad.hang", json!({})).await.unwrap_err().to_string();
    let remembered = start.elapsed();
    println!("a load that loops: {loading:?}; the remembered error: {remembered:?}");
    assert_eq!(again, first);
    assert!(loading >= Duration::from_millis(300) && remembered < Duration::from_millis(100), "{remembered:?}");

    std::fs::write(
        dir.path().join("toolpacks/bad/controller.mjs"),
        NEVER_SETTLES.replace("new Promise(() => {})", "({ output: \"fixed\" })"),
    )
    .unwrap();
    let fixed = host.invoke_webui("bad", "bad.hang", json!({})).await.expect("loads once its file changed");
    assert_eq!(fixed.output, "fixed");
}
