//! Packs are isolated from each other: with a misbehaving pack loaded beside a healthy one, the
//! real `suzumio run` (process backend) still answers the healthy pack's WebUI entry and starts
//! an idle agent's activation. Each bad pack is one way the tester stalled every agent: a module
//! that loops at top level, a `schedulerTick` that loops, one that awaits a 10-minute sleep, a
//! WebUI promise that never resolves (kept in flight the whole time). How fast the healthy side
//! answers is measured by the benchmark in `benches/controller.rs`, not asserted here: a test
//! only waits (with a deadline against hanging) for what must happen.

mod support;

use std::thread;

use serde_json::json;
use support::{Controller, http, wait_for};

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

/// The newest activation of `pm`: (id, still running).
fn newest_activation(c: &Controller) -> Option<(String, bool)> {
    let page = http("GET", &c.url(&format!("{P}/activations?agent=pm&limit=1")), &[], None).json();
    let a = page["items"].get(0)?;
    Some((a["id"].as_str()?.to_string(), a["endedAt"].is_null()))
}

/// Send a message to `pm` once it is idle, and wait for the activation it starts.
fn message_to_activation(c: &Controller, n: usize) {
    wait_for("pm to be idle", Some(c), || (!newest_activation(c).is_some_and(|(_, running)| running)).then_some(()));
    let before = newest_activation(c).map(|(id, _)| id);
    let r =
        http("POST", &c.url(&format!("{P}/messages")), &[], Some(&format!(r#"{{"recipient": "pm", "body": "m{n}"}}"#)));
    assert_eq!(r.status, 201, "{}", r.body);
    wait_for(&format!("an activation for message {n}"), Some(c), || {
        (newest_activation(c).map(|(id, _)| id) != before).then_some(())
    });
}

fn webui_ping(c: &Controller) {
    let r = http("POST", &c.url(&format!("{P}/tool-ui/good/good.ping")), &[], Some("{}"));
    assert_eq!((r.status, r.json()["output"].clone()), (200, json!("pong")), "{}", r.body);
}

/// A running controller and its project directory (fields drop in order: the process first).
struct Running {
    c: Controller,
    _dir: tempfile::TempDir,
}

/// Starts the controller with the bad pack; once it misbehaves (`misbehaving` holds on the
/// controller's log), the healthy side answers and starts activations.
fn healthy_beside(bad_module: &str, misbehaving: impl Fn(&str) -> bool) -> Running {
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
    wait_for("the bad pack to misbehave", Some(&c), || misbehaving(&c.stderr()).then_some(()));
    for _ in 0..3 {
        webui_ping(&c);
    }
    for n in 0..3 {
        message_to_activation(&c, n);
    }
    Running { c, _dir: dir }
}

/// The bad pack's misbehaviour is not on the log (a sleeping hook, a call that never settles):
/// the first activation shows that ticks ran, and each later one came while the bad call or
/// hook was still pending (it never ends within the test).
fn from_the_start(_: &str) -> bool {
    true
}

fn lines_with(stderr: &str, needles: &[&str]) -> usize {
    stderr.lines().filter(|l| needles.iter().all(|n| l.contains(n))).count()
}

const LOAD_FAILED: [&str; 2] = ["scheduler hook", "module evaluation did not finish within 2000 ms"];

#[test]
fn a_module_that_loops_at_top_level_slows_nobody_and_is_reported_once() {
    let Running { c, _dir } = healthy_beside(TOP_LEVEL_LOOP, |log| lines_with(log, &LOAD_FAILED) > 0);
    // The remembered error answers, and it is the load's.
    let r = http("POST", &c.url(&format!("{P}/tool-ui/bad/bad.hang")), &[], Some("{}"));
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.json()["error"].as_str().unwrap().contains("module evaluation did not finish"), "{}", r.body);
    // A changed file is loaded again at once (no backoff): this call makes that load, which
    // fails the same way, so the error is not new and not reported again.
    std::fs::write(_dir.path().join("toolpacks/bad/controller.mjs"), format!("{TOP_LEVEL_LOOP}// touched\n")).unwrap();
    let r = http("POST", &c.url(&format!("{P}/tool-ui/bad/bad.hang")), &[], Some("{}"));
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.json()["error"].as_str().unwrap().contains("module evaluation did not finish"), "{}", r.body);
    // Ticks after that retry: an activation needs one, and a tick reports what its hooks met.
    message_to_activation(&c, 10);
    message_to_activation(&c, 11);
    let stderr = c.stderr();
    assert_eq!(
        lines_with(&stderr, &LOAD_FAILED),
        1,
        "the failed load is reported once, not on every tick or retry:\n{stderr}"
    );
}

#[test]
fn a_scheduler_hook_that_loops_slows_nobody() {
    let needles = ["toolpack=bad", "did not return within 1000 ms (scheduler.hookTimeoutMs)"];
    let Running { c, _dir } = healthy_beside(LOOPING_HOOK, |log| lines_with(log, &needles) > 0);
    let stderr = c.stderr();
    assert!(lines_with(&stderr, &needles) >= 1, "{stderr}");
}

#[test]
fn a_scheduler_hook_that_sleeps_ten_minutes_slows_nobody() {
    let _running = healthy_beside(SLEEPING_HOOK, from_the_start);
}

#[test]
fn a_webui_promise_that_never_settles_occupies_only_its_pack() {
    let Running { c, _dir } = healthy_beside(NEVER_SETTLES, from_the_start);
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

    let first = host.invoke_webui("bad", "bad.hang", json!({})).await.unwrap_err().to_string();
    assert!(first.contains("module evaluation did not finish within 300 ms"), "{first}");
    // Within the 1 s backoff the error is the remembered one (how much faster that answers than
    // a load is the bench's question).
    let again = host.invoke_webui("bad", "bad.hang", json!({})).await.unwrap_err().to_string();
    assert_eq!(again, first);

    std::fs::write(
        dir.path().join("toolpacks/bad/controller.mjs"),
        NEVER_SETTLES.replace("new Promise(() => {})", "({ output: \"fixed\" })"),
    )
    .unwrap();
    let fixed = host.invoke_webui("bad", "bad.hang", json!({})).await.expect("loads once its file changed");
    assert_eq!(fixed.output, "fixed");
}
