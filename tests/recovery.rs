//! Crash recovery: `kill -9` the controller while an activation runs, start it again, and every
//! message sent before the kill is delivered exactly once to an activation that completes.

mod support;

use std::process::Command;

use serde_json::Value;
use support::text;

/// Each activation's tool call waits for a `go` file in the project directory: the first one
/// is surely in its call when the controller is killed, and the test lets the rest through.
const SCRIPT: &str = r#"
activations:
  - agent: worker
    repeat: true
    steps:
      - call: [{tool: shell.exec, input: {command: "until [ -e GO_FILE ]; do sleep 0.05; done; echo worked"}}]
      - call: [{tool: messages.send, input: {recipient: user, body: "done with {{activationId}}"}}]
"#;

fn suzumio(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_suzumio")).args(args).output().expect("suzumio runs")
}

fn signals(dir: &str) -> Vec<Value> {
    let out = suzumio(&["signals", dir, "--agent", "worker", "--json", "--limit", "500"]);
    serde_json::from_slice::<Vec<Value>>(&out.stdout)
        .expect("JSON")
        .into_iter()
        .filter(|s| s["kind"] == "message.created")
        .collect()
}

#[test]
fn messages_survive_a_kill_9_and_are_delivered_exactly_once() {
    let worker = ("reviewer:\n    tools:", "worker:\n    tools: [shell.exec, messages.send]\n  reviewer:\n    tools:");
    let project = support::TempProject::scripted("review", SCRIPT, &[worker]);
    let dir = project.dir.to_str().unwrap().to_string();
    let go = project.dir.join("go");
    let script = std::fs::read_to_string(project.dir.join("script.yaml")).unwrap();
    std::fs::write(project.dir.join("script.yaml"), script.replace("GO_FILE", go.to_str().unwrap())).unwrap();
    assert_eq!(suzumio(&["start", &dir]).status.code(), Some(0));
    let mut sent = Vec::new();
    for i in 0..3 {
        let out = suzumio(&["send", &dir, "worker", &format!("job {i}")]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        sent.push(text(&out.stdout).split_whitespace().nth(1).unwrap().to_string());
    }

    let mut first = Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["run", &dir, "--port", "0", "--backend", "process"])
        .env("SUZUMIO_RUNNER_BIN", support::runner_binary())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until an activation is in its tool call (which cannot end before `go` exists), then kill -9.
    support::wait_for("an activation in its shell.exec call", None, || {
        let host = suzumio::controller::open_read_only(&project.dir).ok()?;
        let calls = host.store.list_tool_calls(Some("shell.exec"), Some("worker"), None, 10).ok()?;
        calls.iter().any(|c| c.status == suzumio::store::ToolCallStatus::Running).then_some(())
    });
    Command::new("kill").args(["-9", &first.id().to_string()]).status().unwrap();
    let _ = first.wait();
    std::fs::write(&go, "").unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["run", &dir, "--port", "0", "--backend", "process", "--until-idle"])
        .env("SUZUMIO_RUNNER_BIN", support::runner_binary())
        .output()
        .unwrap();
    // The interrupted activation failed ("controller restarted") before this run began, so this
    // run itself has no failures.
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let status = text(&suzumio(&["status", &dir]).stdout);
    assert!(status.contains("1 failed"), "exactly one activation was interrupted: {status}");
    let signals = signals(&dir);
    assert_eq!(signals.len(), 3);
    let mut activations = Vec::new();
    for s in &signals {
        assert_eq!(s["status"], "delivered", "{s}");
        activations.push(s["deliveredActivationId"].as_str().unwrap().to_string());
    }
    activations.sort();
    activations.dedup();
    assert_eq!(activations.len(), 3, "each message went to its own activation, once");
    // Delivery is at least once, and says so: the interrupted message was delivered twice.
    let mut deliveries: Vec<u64> = signals.iter().map(|s| s["deliveries"].as_u64().unwrap_or(0)).collect();
    deliveries.sort();
    assert_eq!(deliveries, [1, 1, 2], "{signals:?}");
    let done =
        text(&suzumio(&["ui", &dir, "core/messages.conversation", r#"{"agentA": "worker", "agentB": "user"}"#]).stdout);
    for activation in &activations {
        assert!(
            done.contains(&format!("done with {activation}")),
            "activation {activation} completed its work: {done}"
        );
    }
}
