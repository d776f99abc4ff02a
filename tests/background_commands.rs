//! Background commands (`shell.start`/`check`/`stop`/`list`) on the real Docker engine: a
//! command that ends by itself sends its agent exactly one `shell.command_finished` signal (and
//! wakes it), one whose end `shell.check` read sends none that is delivered, a stopped one sends
//! none and leaves no process behind, its output is kept as a bounded tail, the API lists and
//! stops them, and a command outlives a `kill -9` of the controller: the next controller takes
//! the runner over and the finish still arrives once. Needs a Docker engine
//! (scripts/setup.sh) and the static runner (scripts/test.sh builds it).

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use support::{Controller, TempProject, static_runner, text};
use suzumio::config::BackendKind;
use suzumio::store::{COMMAND_FINISHED_KIND, SignalQuery, SignalRecord, SignalStatus};

type Setup = support::containers::ContainerProject;

async fn setup(prefix: &str) -> Setup {
    support::containers::start(prefix, None, BackendKind::Docker).await
}

impl Setup {
    async fn bg(&self, tool: &str, input: Value) -> String {
        self.call("b", tool, input).await.unwrap_or_else(|e| panic!("{tool}: {e}"))
    }

    fn finish_signals(&self) -> Vec<SignalRecord> {
        let query = SignalQuery {
            target_agent: Some("b".into()),
            kind: Some(COMMAND_FINISHED_KIND.into()),
            ..Default::default()
        };
        self.tools.store.list_signals(&query).unwrap()
    }

    /// The finish signal of the command named `name`, once it is recorded.
    async fn finish_signal_of(&self, name: &str) -> SignalRecord {
        support::wait_for_async(&format!("the finish signal of {name}"), async || {
            self.finish_signals().into_iter().find(|s| s.payload["name"] == name)
        })
        .await
    }

    /// Starts a command that ends unread and waits for its finish signal. The runner reports
    /// ends from one loop, oldest command first (ids are time-ordered), and the controller has
    /// recorded each before it answers: so once this returns, every end that was waiting to be
    /// reported when it began has been recorded; a signal not there now never comes.
    async fn reports_flushed(&self) -> SignalRecord {
        self.bg("shell.start", json!({"command": "true", "name": "flush"})).await;
        self.finish_signal_of("flush").await
    }
}

#[tokio::test]
async fn a_command_that_ends_unread_signals_its_agent_once_with_its_exit_code_and_output() {
    let s = setup("bgend").await;
    let started =
        s.bg("shell.start", json!({"command": "echo hello-from-bg; echo oops >&2; exit 3", "name": "three"})).await;
    assert!(started.contains("Started background command cmd_"), "{started}");
    let first = s.finish_signal_of("three").await;
    // A second report of the same end (a lost answer, a new session) finds this one: the
    // store keys the signal by the command id, so it cannot be recorded twice.
    let command_id = first.payload["commandId"].as_str().unwrap().to_string();
    let (again, recorded) = s.tools.store.record_command_finished("b", &command_id, json!({"again": true})).unwrap();
    assert_eq!((again.id.as_str(), recorded), (first.id.as_str(), false), "a repeated end is not a new signal");
    let signals = s.finish_signals();
    assert_eq!(signals.len(), 1, "{signals:?}");
    let signal = &signals[0];
    assert_eq!(signal.status, SignalStatus::Pending);
    assert_eq!(signal.priority.as_str(), "P2");
    assert_eq!(signal.payload["exitCode"], 3);
    assert_eq!(signal.payload["status"], "exited");
    assert_eq!(signal.payload["name"], "three");
    let output = signal.payload["output"].as_str().unwrap();
    assert!(output.contains("hello-from-bg") && output.contains("oops"), "{output}");
}

#[tokio::test]
async fn a_command_whose_end_was_read_by_check_sends_no_signal() {
    let s = setup("bgcheck").await;
    // Checked while it runs, waiting for the end: no signal is ever recorded.
    s.bg("shell.start", json!({"command": "sleep 2; echo checked-end", "name": "waited"})).await;
    let checked = s.bg("shell.check", json!({"id": "waited", "waitMs": 20000})).await;
    assert!(checked.contains("exited with code 0") && checked.contains("checked-end"), "{checked}");
    // Read after its end was already reported: the pending signal is withdrawn.
    s.bg("shell.start", json!({"command": "echo quick", "name": "quick"})).await;
    let reported = s.finish_signal_of("quick").await;
    assert_eq!(reported.status, SignalStatus::Pending);
    let late = s.bg("shell.check", json!({"id": "quick"})).await;
    assert!(late.contains("exited with code 0") && late.contains("quick"), "{late}");
    let flush = s.reports_flushed().await;
    let signals = s.finish_signals();
    let names: Vec<&str> = signals.iter().map(|s| s.payload["name"].as_str().unwrap()).collect();
    assert_eq!(names.iter().filter(|n| **n == "waited").count(), 0, "the waited-for end sent none: {signals:?}");
    assert_eq!(names.iter().filter(|n| **n == "quick").count(), 1, "{signals:?}");
    assert_eq!(signals.len(), 2, "quick's and the flush's: {signals:?}");
    let quick = signals.iter().find(|s| s.id == reported.id).unwrap();
    assert_eq!(quick.status, SignalStatus::Closed, "nothing is left to deliver: {quick:?}");
    assert_eq!(flush.status, SignalStatus::Pending, "an end nobody read stays to be delivered");
    // A later check shows nothing new.
    let again = s.bg("shell.check", json!({"id": "waited"})).await;
    assert!(again.contains("(no new output)"), "{again}");
}

#[tokio::test]
async fn a_stopped_command_sends_no_signal_and_its_process_tree_is_gone() {
    let s = setup("bgstop").await;
    let started = s
        .bg(
            "shell.start",
            json!({"command": "sleep 300 & echo $! > /workspace/child.pid; echo started; sleep 300", "name": "tree"}),
        )
        .await;
    assert!(started.contains("pid"), "{started}");
    let workspace = s.tools.project.config.root.join("workspaces").join("b");
    support::wait_for_async("the command to start its child", async || {
        std::fs::read_to_string(workspace.join("child.pid")).ok().filter(|pid| pid.ends_with('\n')).map(drop)
    })
    .await;
    let stopped = s.bg("shell.stop", json!({"id": "tree"})).await;
    assert!(stopped.contains("stopped") && stopped.contains("started"), "{stopped}");
    let child = std::fs::read_to_string(workspace.join("child.pid")).unwrap().trim().to_string();
    let alive = s.sh("b", &format!("kill -0 {child} 2>/dev/null && echo alive || echo gone")).await;
    assert!(alive.contains("gone"), "the background child of the stopped command still runs: {alive}");
    let sleeps = s.sh("b", "ps -o comm | grep -c '^sleep' || true").await;
    assert!(sleeps.contains("\n0"), "no sleep is left: {sleeps}");
    let flush = s.reports_flushed().await;
    let signals = s.finish_signals();
    assert_eq!(signals.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), [flush.id.as_str()], "{signals:?}");
    let list = s.bg("shell.list", json!({})).await;
    assert!(list.contains("(tree) stopped"), "{list}");
}

#[tokio::test]
async fn a_command_printing_10_mb_keeps_only_the_last_mebibyte_and_check_says_so() {
    let s = setup("bgring").await;
    s.bg(
        "shell.start",
        json!({"command": "head -c 10485760 /dev/zero | tr '\\0' x; echo; echo tail-marker", "name": "big"}),
    )
    .await;
    let checked = s.bg("shell.check", json!({"id": "big", "waitMs": 60000})).await;
    let written: u64 = 10_485_760 + 1 + "tail-marker\n".len() as u64;
    let kept: u64 = 1 << 20;
    assert!(checked.contains("exited with code 0"), "{}", &checked[..checked.len().min(400)]);
    assert!(
        checked.contains(&format!("[{} bytes of output were dropped before they were read", written - kept)),
        "{}",
        &checked[..400]
    );
    assert!(
        checked.contains(&format!("[{} bytes skipped: only the last 40000 bytes", kept - 40_000)),
        "{}",
        &checked[..400]
    );
    assert!(checked.trim_end().ends_with("tail-marker"), "the tail is kept");
    let list = s.bg("shell.list", json!({})).await;
    assert!(list.contains(&format!("{written} bytes of output")), "{list}");
}

// --- the controller: waking the agent, the API, and a restart ------------------------------

/// A `review` project named `name` (container names follow it, so tests running at once need
/// their own) with a `worker` that may use the background tools, playing `script`.
fn project(name: &str, script: &str) -> TempProject {
    let named = format!("name: {name}");
    let project = TempProject::scripted("review", script, &[("name: review-demo", &named), support::BACKGROUND_WORKER]);
    let dir = project.dir.to_str().unwrap().to_string();
    assert_eq!(support::suzumio(&project.dir, &["start", &dir]).status.code(), Some(0));
    let sent = support::suzumio(&project.dir, &["send", &dir, "worker", "start the jobs"]);
    assert_eq!(sent.status.code(), Some(0), "{}", text(&sent.stderr));
    project
}

fn controller(dir: &Path) -> Controller {
    let runner = static_runner();
    Controller::start_with_env(dir, &["--backend", "docker"], &[("SUZUMIO_RUNNER_BIN", runner.to_str().unwrap())])
}

/// The URL of `path` under the one project `c` serves.
fn api(c: &Controller, path: &str) -> String {
    let projects = support::http("GET", &c.url("/api/projects"), &[], None).json();
    let name = projects[0]["name"].as_str().unwrap_or_else(|| panic!("no project: {projects}")).to_string();
    c.url(&format!("/api/projects/{name}{path}"))
}

fn get(c: &Controller, path: &str) -> Value {
    let response = support::http("GET", &api(c, path), &[], None);
    assert_eq!(response.status, 200, "{path}: {}", response.body);
    response.json()
}

fn finish_signals(c: &Controller) -> Vec<Value> {
    let signals = get(c, "/signals?agent=worker&limit=200");
    signals["items"].as_array().unwrap().iter().filter(|s| s["kind"] == COMMAND_FINISHED_KIND).cloned().collect()
}

fn worker_activations(c: &Controller) -> Vec<Value> {
    get(c, "/activations?agent=worker&limit=50")["items"].as_array().unwrap().clone()
}

/// Wait until `done` holds, failing with the controller's log.
fn wait_for(c: &Controller, what: &str, mut done: impl FnMut() -> bool) {
    support::wait_for(what, Some(c), || done().then_some(()))
}

/// What the store holds for the worker once its controller has stopped: with the controller
/// and its runner gone nothing more can arrive, so these are final. The finish signals, and
/// how many of the worker's signals are still to be delivered (each would be a new activation).
fn final_state(dir: &Path) -> (Vec<SignalRecord>, usize) {
    let tools = suzumio::controller::open_read_only(dir).unwrap_or_else(|e| panic!("{e}"));
    let pending =
        SignalQuery { target_agent: Some("worker".into()), status: Some(SignalStatus::Pending), ..Default::default() };
    (finish_signals_in_store(dir), tools.store.list_signals(&pending).unwrap().len())
}

/// Removes the project's containers, whatever the test left.
struct Containers<'a>(&'a Path);

impl Drop for Containers<'_> {
    fn drop(&mut self) {
        let out = Command::new("docker")
            .args(["ps", "-aq", "--filter"])
            .arg(format!("label=io.suzumio.root={}", self.0.display()))
            .output();
        if let Ok(out) = out {
            for id in text(&out.stdout).split_whitespace() {
                let _ = Command::new("docker").args(["rm", "-f", id]).output();
            }
        }
    }
}

/// The worker starts a 3 s job and one that would run for 5 minutes, then waits; it is woken by
/// the job's signal alone.
const WAKE_SCRIPT: &str = r#"
activations:
  - agent: worker
    when: finished-marker
    steps:
      - call: [{tool: coordination.wait_for_signal, input: {reason: "the job is done"}}]
  - agent: worker
    steps:
      - call:
          - {tool: shell.start, input: {command: "sleep 3; echo finished-marker", name: job}}
          - {tool: shell.start, input: {command: "sleep 300", name: forever}}
      - call: [{tool: coordination.wait_for_signal, input: {reason: "waiting for the job"}}]
"#;

#[test]
fn a_finished_command_wakes_the_idle_agent_with_exactly_one_signal_and_the_api_lists_and_stops_them() {
    let project = project("bg-wake", WAKE_SCRIPT);
    let _cleanup = Containers(&project.dir);
    let c = controller(&project.dir);

    // The API lists both while they run.
    let mut listed = Value::Null;
    wait_for(&c, "two running commands", || {
        listed = get(&c, "/agents/worker/commands");
        listed["items"].as_array().is_some_and(|i| i.len() == 2 && i.iter().all(|c| c["status"] == "running"))
    });
    assert_eq!(listed["runner"], "connected");
    let forever = listed["items"].as_array().unwrap().iter().find(|c| c["name"] == "forever").unwrap().clone();
    assert_eq!(forever["command"], "sleep 300");
    assert_eq!(forever["cwd"], "/workspace");
    let id = forever["id"].as_str().unwrap();
    let stopped = support::http("POST", &api(&c, &format!("/agents/worker/commands/{id}/stop")), &[], Some("{}"));
    assert_eq!(stopped.status, 200, "{}", stopped.body);
    assert_eq!(stopped.json()["status"], "stopped");
    let unknown = support::http("POST", &api(&c, "/agents/worker/commands/cmd_nope/stop"), &[], Some("{}"));
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert_eq!(support::http("GET", &api(&c, "/agents/nobody/commands"), &[], None).status, 404);

    // The job ends: one signal, delivered to a second activation of the (idle) worker, which
    // waits again and so ends.
    wait_for(&c, "the worker woken by the job's end", || {
        let activations = worker_activations(&c);
        activations.len() >= 2
            && activations.iter().all(|a| a["status"] == "completed")
            && finish_signals(&c).iter().any(|s| s["status"] == "delivered")
    });
    let listed = get(&c, "/agents/worker/commands");
    let statuses: Vec<&str> =
        listed["items"].as_array().unwrap().iter().map(|c| c["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["stopped", "exited"], "newest first: {listed}");
    assert!(listed["items"][1]["recentOutput"].as_str().unwrap().contains("finished-marker"));
    assert_eq!(worker_activations(&c).len(), 2, "woken once");
    assert_eq!(c.stop(), Some(0));

    let (signals, pending) = final_state(&project.dir);
    assert_eq!(signals.len(), 1, "exactly one signal, none for the stopped command: {signals:?}");
    assert_eq!(signals[0].status, SignalStatus::Delivered);
    assert_eq!(signals[0].payload["name"], "job");
    assert_eq!(signals[0].payload["exitCode"], 0);
    assert!(signals[0].payload["output"].as_str().unwrap().contains("finished-marker"));
    assert_eq!(pending, 0, "nothing is left to wake the worker again");
}

/// `--until-idle` waits for a background command: its end is work to come.
#[test]
fn until_idle_waits_for_a_running_background_command_and_the_agent_it_wakes() {
    let project = project("bg-idle", ONE_JOB_SCRIPT);
    let _cleanup = Containers(&project.dir);
    let runner = static_runner();
    let out = Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["run", project.dir.to_str().unwrap(), "--port", "0", "--backend", "docker", "--until-idle"])
        .env("SUZUMIO_RUNNER_BIN", runner.to_str().unwrap())
        .env_remove("SUZUMIO_API_TOKEN")
        .output()
        .expect("suzumio run");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let signals = finish_signals_in_store(&project.dir);
    assert_eq!(signals.len(), 1, "{signals:?}");
    assert_eq!(signals[0].status, SignalStatus::Delivered, "the worker was woken before the run ended");
}

/// One 3 s job, and a wait; woken by its end.
const ONE_JOB_SCRIPT: &str = r#"
activations:
  - agent: worker
    when: finished-marker
    steps:
      - call: [{tool: coordination.wait_for_signal, input: {reason: "the job is done"}}]
  - agent: worker
    steps:
      - call: [{tool: shell.start, input: {command: "sleep 3; echo finished-marker", name: job}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "waiting for the job"}}]
"#;

/// The worker starts a job that outlives the first controller.
const RESTART_SCRIPT: &str = r#"
activations:
  - agent: worker
    when: after-restart
    steps:
      - call: [{tool: coordination.wait_for_signal, input: {reason: "the job is done"}}]
  - agent: worker
    steps:
      - call: [{tool: shell.start, input: {command: "sleep 10; echo after-restart", name: long}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "waiting for the job"}}]
"#;

#[test]
fn a_command_outlives_a_killed_controller_and_its_finish_arrives_once_after_the_restart() {
    let project = project("bg-restart", RESTART_SCRIPT);
    let _cleanup = Containers(&project.dir);
    let mut first = controller(&project.dir);
    wait_for(&first, "the command running and the worker idle", || {
        let listed = get(&first, "/agents/worker/commands");
        let running = listed["items"].as_array().is_some_and(|i| i.len() == 1 && i[0]["status"] == "running");
        let activations = worker_activations(&first);
        running && !activations.is_empty() && activations.iter().all(|a| a["status"] == "completed")
    });
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert!(finish_signals_in_store(&project.dir).is_empty());

    let second = controller(&project.dir);
    // The runner resumed its session with the new controller and still has the command.
    wait_for(&second, "the resumed runner listing the command", || {
        let listed = get(&second, "/agents/worker/commands");
        listed["items"].as_array().is_some_and(|i| i.len() == 1 && i[0]["name"] == "long")
    });
    wait_for(&second, "the finish signal delivered and the woken activation ended", || {
        let delivered = finish_signals(&second).iter().any(|s| s["status"] == "delivered");
        delivered && worker_activations(&second).iter().all(|a| a["status"] != "running")
    });
    assert!(second.stderr().contains("resumes its session"), "{}", second.stderr());
    assert_eq!(second.stop(), Some(0));
    let (signals, pending) = final_state(&project.dir);
    assert_eq!(signals.len(), 1, "{signals:?}");
    assert_eq!(signals[0].status, SignalStatus::Delivered);
    assert!(signals[0].payload["output"].as_str().unwrap().contains("after-restart"));
    assert_eq!(pending, 0, "{signals:?}");
}

/// The store of the stopped controller, read directly.
fn finish_signals_in_store(dir: &Path) -> Vec<SignalRecord> {
    let tools = suzumio::controller::open_read_only(dir).unwrap_or_else(|e| panic!("{e}"));
    let query = SignalQuery { kind: Some(COMMAND_FINISHED_KIND.into()), ..Default::default() };
    tools.store.list_signals(&query).unwrap()
}

// --- a runner that dies: its commands are lost, signalled once -------------------------------

/// The worker starts a 30 s job and waits; woken by the job's `lost` signal, it lists its
/// commands (which starts a new runner) and waits again.
const LOST_SCRIPT: &str = r#"
activations:
  - agent: worker
    when: '"status": "lost"'
    steps:
      - call: [{tool: shell.list, input: {}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "the job was lost"}}]
  - agent: worker
    steps:
      - call: [{tool: shell.start, input: {command: "sleep 300", name: job}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "waiting for the job"}}]
"#;

/// The id of the worker's one running command, once the API lists it and the worker is idle.
fn running_job(c: &Controller) -> String {
    let mut id = String::new();
    wait_for(c, "the job running and the worker idle", || {
        let listed = get(c, "/agents/worker/commands");
        let Some([job]) = listed["items"].as_array().map(Vec::as_slice) else { return false };
        let activations = worker_activations(c);
        id = job["id"].as_str().unwrap_or_default().to_string();
        job["status"] == "running" && !activations.is_empty() && activations.iter().all(|a| a["status"] == "completed")
    });
    id
}

/// The worker's container (the one `docker` shows for its agent label in this project).
fn worker_container(dir: &Path) -> String {
    let out = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=io.suzumio.root={}", dir.display()))
        .args(["--filter", "label=io.suzumio.agent=worker"])
        .output()
        .expect("docker ps");
    let ids: Vec<String> = text(&out.stdout).split_whitespace().map(str::to_string).collect();
    assert_eq!(ids.len(), 1, "one worker container: {ids:?}");
    ids[0].clone()
}

fn docker(args: &[&str]) {
    let out = Command::new("docker").args(args).output().expect("docker");
    assert!(out.status.success(), "docker {args:?}: {}", text(&out.stderr));
}

/// Once the lost job woke the worker and it ran on a new runner (its second activation listed
/// its commands and ended, and the new runner is connected): the finish signals and the listing.
fn after_the_new_runner(c: &Controller) -> (Vec<Value>, Value) {
    wait_for(c, "the worker woken by the lost job, on a new runner", || {
        let activations = worker_activations(c);
        activations.len() >= 2
            && activations.iter().all(|a| a["status"] == "completed")
            && get(c, "/agents/worker/commands")["runner"] == "connected"
    });
    (finish_signals(c), get(c, "/agents/worker/commands"))
}

/// The one `lost` signal, and the listing showing the job lost, both with `cause`.
fn assert_lost_once(id: &str, cause: &str, signals: &[Value], listed: &Value) {
    assert_lost_once_ran(id, cause, "sleep 300", signals, listed)
}

fn assert_lost_once_ran(id: &str, cause: &str, command: &str, signals: &[Value], listed: &Value) {
    assert_eq!(signals.len(), 1, "exactly one signal: {signals:?}");
    let payload = &signals[0]["payload"];
    assert_eq!(payload["commandId"], id, "{payload}");
    assert_eq!(payload["status"], "lost", "{payload}");
    assert_eq!(payload["cause"], cause, "{payload}");
    assert_eq!(payload["name"], "job", "{payload}");
    assert_eq!(payload["command"], command, "{payload}");
    assert_eq!(signals[0]["status"], "delivered", "it woke the worker: {:?}", signals[0]);
    let items = listed["items"].as_array().unwrap();
    let job = items.iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("the lost job is listed: {listed}"));
    assert_eq!(job["status"], "lost", "{job}");
    assert_eq!(job["cause"], cause, "{job}");
    assert!(job["reason"].as_str().is_some_and(|r| !r.is_empty()), "{job}");
    assert_eq!(job["name"], "job");
    assert_eq!(items.len(), 1, "the new runner runs nothing: {listed}");
}

/// Regression: a container killed under a running command left the command unlisted and its
/// agent waiting forever.
#[test]
fn a_killed_container_loses_its_command_with_exactly_one_signal_and_the_api_lists_it_lost() {
    let project = project("bg-lost", LOST_SCRIPT);
    let _cleanup = Containers(&project.dir);
    let c = controller(&project.dir);
    let id = running_job(&c);
    let killed = worker_container(&project.dir);
    docker(&["kill", &killed]);

    wait_for(&c, "the lost signal", || finish_signals(&c).iter().any(|s| s["payload"]["status"] == "lost"));
    let (signals, listed) = after_the_new_runner(&c);
    assert_ne!(worker_container(&project.dir), killed, "the worker runs in a new container");
    assert_lost_once(&id, "killed", &signals, &listed);
    let reason = listed["items"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("137"), "the exit code the engine reported: {reason}");
    assert_eq!(c.stop(), Some(0));

    let (signals, pending) = final_state(&project.dir);
    assert_eq!(signals.len(), 1, "{signals:?}");
    assert_eq!(pending, 0, "nothing is left to wake the worker again");
}

/// `docker <action>` of the worker's container while no controller runs (the first was killed
/// with -9, leaving its runner and the job running): the next controller finds the job lost
/// with `cause`, signals it once, and a third controller signals nothing more.
fn lost_while_no_controller_runs(name: &str, action: &[&str], cause: &str) {
    let project = project(name, LOST_SCRIPT);
    let _cleanup = Containers(&project.dir);
    let mut first = controller(&project.dir);
    let id = running_job(&first);
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let container = worker_container(&project.dir);
    let mut args = action.to_vec();
    args.push(&container);
    docker(&args);
    assert!(finish_signals_in_store(&project.dir).is_empty(), "nothing ran to notice it yet");

    let second = controller(&project.dir);
    let (signals, listed) = after_the_new_runner(&second);
    assert_lost_once(&id, cause, &signals, &listed);
    assert_eq!(second.stop(), Some(0));

    let third = controller(&project.dir);
    let signals = finish_signals(&third);
    let listed = get(&third, "/agents/worker/commands");
    assert_eq!(signals.len(), 1, "a restart signals nothing again: {signals:?}");
    assert!(listed["items"].as_array().unwrap().iter().any(|c| c["id"] == id && c["status"] == "lost"), "{listed}");
    assert_eq!(third.stop(), Some(0));
    let (signals, pending) = final_state(&project.dir);
    assert_eq!(signals.len(), 1, "{signals:?}");
    assert_eq!(pending, 0, "{signals:?}");
}

#[test]
fn a_container_killed_while_no_controller_runs_is_found_lost_at_the_next_start_and_signalled_once() {
    lost_while_no_controller_runs("bg-lost-killed", &["kill"], "killed");
}

#[test]
fn a_container_removed_while_no_controller_runs_is_found_lost_at_the_next_start_and_signalled_once() {
    lost_while_no_controller_runs("bg-lost-removed", &["rm", "-f"], "removed");
}

/// A controller that stops (Ctrl-C) stops its runners, and their commands with them: each is
/// lost (`stopped`), and the agent is told once, by the next controller.
#[test]
fn a_command_ended_by_the_controllers_stop_is_lost_and_signalled_once_at_the_next_run() {
    let project = project("bg-lost-stopped", LOST_SCRIPT);
    let _cleanup = Containers(&project.dir);
    let first = controller(&project.dir);
    let id = running_job(&first);
    assert_eq!(first.stop(), Some(0));
    let (signals, pending) = final_state(&project.dir);
    assert_eq!(signals.len(), 1, "{signals:?}");
    assert_eq!(
        (signals[0].payload["status"].as_str(), signals[0].payload["cause"].as_str()),
        (Some("lost"), Some("stopped"))
    );
    assert_eq!((signals[0].status, pending), (SignalStatus::Pending, 1), "for the next run to deliver");

    let second = controller(&project.dir);
    let (signals, listed) = after_the_new_runner(&second);
    assert_lost_once(&id, "stopped", &signals, &listed);
    assert_eq!(second.stop(), Some(0));
    let (signals, pending) = final_state(&project.dir);
    assert_eq!((signals.len(), pending), (1, 0), "{signals:?}");
}

/// The job of [`LOST_SCRIPT`], telling its pid (a local runner's command outlives its runner's
/// SIGKILL: the test ends it).
const LOST_LOCAL_SCRIPT: &str = r#"
activations:
  - agent: worker
    when: '"status": "lost"'
    steps:
      - call: [{tool: shell.list, input: {}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "the job was lost"}}]
  - agent: worker
    steps:
      - call: [{tool: shell.start, input: {command: "echo $$ > job.pid; exec sleep 300", name: job}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "waiting for the job"}}]
"#;

/// The pid of the one `suzumio-runner` child of the controller `c` (a local runner).
fn local_runner(c: &Controller) -> i32 {
    let parent = c.child.id().to_string();
    let runners: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            // `pid (comm) state ppid …`: the comm may hold spaces, so fields count after its `)`.
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let comm = stat.split_once(" (").and_then(|(_, rest)| rest.rsplit_once(") "));
            comm.is_some_and(|(comm, rest)| comm == "suzumio-runner" && rest.split(' ').nth(1) == Some(&parent))
        })
        .collect();
    assert_eq!(runners.len(), 1, "one runner: {runners:?}");
    runners[0]
}

/// Ends the process group whose leader's pid is in `0` (the command a killed runner left).
struct Orphan(std::path::PathBuf);

impl Drop for Orphan {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let _ = Command::new("kill").args(["-9", "--", &format!("-{}", pid.trim())]).status();
        }
    }
}

/// The process backend: `kill -9` of the worker's local runner during its job.
#[test]
fn a_killed_local_runner_loses_its_command_with_exactly_one_signal_and_the_api_lists_it_lost() {
    let project = project("bg-lost-local", LOST_LOCAL_SCRIPT);
    let c = Controller::start(&project.dir, &[]);
    let id = running_job(&c);
    let _orphan = Orphan(project.dir.join("workspaces/worker/job.pid"));
    let runner = local_runner(&c);
    assert!(Command::new("kill").args(["-9", &runner.to_string()]).status().unwrap().success());

    wait_for(&c, "the lost signal", || finish_signals(&c).iter().any(|s| s["payload"]["status"] == "lost"));
    let (signals, listed) = after_the_new_runner(&c);
    assert_ne!(local_runner(&c), runner, "the worker has a new runner");
    assert_lost_once_ran(&id, "killed", "echo $$ > job.pid; exec sleep 300", &signals, &listed);
    assert_eq!(c.stop(), Some(0));
    let (signals, pending) = final_state(&project.dir);
    assert_eq!((signals.len(), pending), (1, 0), "{signals:?}");
}
