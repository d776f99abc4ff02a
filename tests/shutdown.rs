//! SIGTERM stops `suzumio run` as Ctrl-C does, on the real Docker engine: the running
//! activation is cancelled and says so ("cancelled by shutdown"), its message goes back to
//! pending (the next run delivers it), its open tool call is closed, no container is left, and
//! the process exits 0.

mod support;

use std::process::Command;

use serde_json::Value;
use support::{Controller, TempProject, static_runner, text};

const P: &str = "/api/projects/review-demo";

/// The worker's model runs a long command; the shutdown comes while it runs.
const SCRIPT: &str = r#"
activations:
  - agent: worker
    repeat: true
    steps:
      - call: [{tool: shell.exec, input: {command: "sleep 60; echo never"}}]
"#;

fn project() -> TempProject {
    let worker = ("reviewer:\n    tools:", "worker:\n    tools: [shell.exec, messages.send]\n  reviewer:\n    tools:");
    TempProject::scripted("review", SCRIPT, &[worker])
}

fn json(url: &str) -> Value {
    support::http("GET", url, &[], None).json()
}

fn containers_of(root: &std::path::Path) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-a", "--format", "{{.Names}} {{.Status}}", "--filter"])
        .arg(format!("label=io.suzumio.root={}", root.display()))
        .output()
        .expect("the docker CLI runs (scripts/setup.sh installs and starts the engine)");
    assert!(out.status.success(), "docker ps failed: {}", text(&out.stderr));
    text(&out.stdout).lines().map(str::to_string).collect()
}

/// Whether `needle` is in the command line of a process of the container `line` (from
/// [`containers_of`]) names; `docker top` reads the processes from the host.
fn runs_in(line: &str, needle: &str) -> bool {
    let name = line.split_whitespace().next().unwrap_or_default();
    let out = Command::new("docker").args(["top", name, "-o", "pid,args"]).output().expect("the docker CLI runs");
    text(&out.stdout).lines().any(|l| l.contains(needle))
}

#[test]
fn sigterm_cancels_the_running_activation_returns_its_signal_and_leaves_no_container() {
    let project = project();
    let dir = project.dir.to_str().unwrap().to_string();
    assert_eq!(support::suzumio(&project.dir, &["start", &dir]).status.code(), Some(0));
    let sent = support::suzumio(&project.dir, &["send", &dir, "worker", "a long job"]);
    assert_eq!(sent.status.code(), Some(0), "{}", text(&sent.stderr));

    let runner = static_runner();
    let mut c = Controller::start_with_env(
        &project.dir,
        &["--backend", "docker"],
        &[("SUZUMIO_RUNNER_BIN", runner.to_str().unwrap())],
    );
    // Wait until the command itself runs in the worker's container.
    support::wait_for("the shell.exec command running in a container", Some(&c), || {
        let calls = json(&c.url(&format!("{P}/tool-calls")));
        let running = calls["items"].as_array().is_some_and(|items| items.iter().any(|t| t["status"] == "running"));
        (running && containers_of(&project.dir).iter().any(|line| runs_in(line, "sleep 60"))).then_some(())
    });

    let code = c.terminate();
    assert_eq!(code, Some(0), "suzumio run exits cleanly on SIGTERM; stderr:\n{}", c.stderr());
    assert!(c.stderr().contains("terminated: shutting down"), "{}", c.stderr());
    assert_eq!(containers_of(&project.dir), Vec::<String>::new(), "no container is left behind");

    // The activation says why it ended; its message is pending again; no tool call still runs.
    let out = support::suzumio(&project.dir, &["signals", &dir, "--agent", "worker", "--json"]);
    let signals: Vec<Value> = serde_json::from_slice(&out.stdout).expect("signals as JSON");
    let message = signals.iter().find(|s| s["kind"] == "message.created").expect("the message's signal");
    assert_eq!(message["status"], "pending", "{message}");

    // A stopped project starts no activation, so what the API shows is what the shutdown left.
    assert_eq!(support::suzumio(&project.dir, &["stop", &dir]).status.code(), Some(0));
    let c = Controller::start(&project.dir, &[]);
    let activations = json(&c.url(&format!("{P}/activations?agent=worker")));
    let first = activations["items"].as_array().and_then(|a| a.last()).cloned().expect("an activation");
    assert_eq!((first["status"].as_str(), first["error"].as_str()), (Some("cancelled"), Some("cancelled by shutdown")));
    let calls = json(&c.url(&format!("{P}/tool-calls")));
    let call = calls["items"].as_array().and_then(|a| a.iter().find(|t| t["tool"] == "shell.exec")).cloned();
    let call = call.expect("the shell.exec call is recorded");
    assert_eq!((call["status"].as_str(), call["error"].as_str()), (Some("failed"), Some("cancelled by shutdown")));
    let events = json(&c.url(&format!("{P}/events?limit=1000")));
    let cancelled = events["items"]
        .as_array()
        .and_then(|items| items.iter().find(|e| e["type"] == "activation.cancelled").cloned())
        .expect("an activation.cancelled event");
    assert_eq!(cancelled["data"]["signalsReturned"], 1, "{cancelled}");
}
