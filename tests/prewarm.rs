//! `backend.docker.prewarm`: runners started before the first tool call needs them, through a
//! real `suzumio run` (process backend) read back from its `/metrics`:
//! - at `run`, the runners of the agents with pending signals (`pending`, the default) or of
//!   every agent that has a runner-side tool (`all`), while no activation runs;
//! - as an activation starts: its runner is up while the model's first call is still parked on
//!   an approval, and the tool call that follows uses that runner (one start, not two);
//! - `off`: a parked activation has started no runner;
//! - a runner that may still resume (its controller was killed) is left to resume on its own
//!   (tests/approvals.rs restarts a controller under a parked activation).

mod support;

use std::path::Path;

use prometheus_parse::{Scrape, Value as Metric};
use serde_json::Value;
use support::{Controller, TempProject, http, repo_root, suzumio, text, wait_for};

/// The reviewer's first call is `messages.send`, which asks (so the activation parks before any
/// runner-side call); once allowed, it writes a file in its runner.
const SCRIPT: &str = r#"
activations:
  - agent: reviewer
    steps:
      - call: [{tool: messages.send, input: {recipient: pm, body: "starting"}}]
      - call: [{tool: file.write, input: {path: "/workspace/notes.md", content: "LGTM"}}]
      - say: "Done."
"#;

/// The review fixture with `prewarm` set (or left to its default), the reviewer's
/// `messages.send` an `ask`, and pm given a runner-side tool of its own.
fn project(prewarm: Option<&str>) -> TempProject {
    let docker = prewarm.map(|p| format!("  docker: {{prewarm: {p}}}\n")).unwrap_or_default();
    TempProject::scripted(
        "review",
        SCRIPT,
        &[
            (
                "tools: [messages.send, coordination.wait_for_signal, completion.submit]",
                "tools: [messages.send, coordination.wait_for_signal, completion.submit, file.read]",
            ),
            (
                "review.summarize, file.*, shell.exec]",
                "review.summarize, file.*, shell.exec]\n    permissions:\n      rules:\n        - {tool: messages.send, decision: ask}",
            ),
            ("backend:\n", &format!("backend:\n{docker}")),
        ],
    )
}

fn cli(dir: &Path, args: &[&str]) -> String {
    let out = suzumio(&repo_root(), args);
    assert_eq!(out.status.code(), Some(0), "suzumio {args:?} in {}: {}", dir.display(), text(&out.stderr));
    text(&out.stdout)
}

fn json(dir: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&cli(dir, args)).expect("JSON output")
}

fn serve(project: &TempProject) -> Controller {
    Controller::start_with_env(&project.dir, &[], &[("SUZUMIO_RUNNER_BIN", support::runner_binary().to_str().unwrap())])
}

/// How many runners the controller started for `agent` (`suzumio_runner_starts_total`).
fn runner_starts(c: &Controller, agent: &str) -> u64 {
    let r = http("GET", &c.url("/metrics"), &[], None);
    assert_eq!(r.status, 200, "{}", r.body);
    let scrape = Scrape::parse(r.body.lines().map(|l| Ok(l.to_string()))).expect("the Prometheus text format");
    scrape
        .samples
        .iter()
        .find(|s| s.metric == "suzumio_runner_starts_total" && s.labels.get("agent") == Some(agent))
        .map_or(0, |s| match s.value {
            Metric::Counter(v) | Metric::Untyped(v) => v as u64,
            ref other => panic!("not a counter: {other:?}"),
        })
}

fn activations(dir: &Path) -> u64 {
    json(dir, &["status", dir.to_str().unwrap(), "--json"])["activations"]["total"].as_u64().expect("a count")
}

/// A message waits for the reviewer while the project is stopped, then `run` serves it.
fn served_with_a_pending_message(prewarm: Option<&str>) -> (TempProject, Controller) {
    let p = project(prewarm);
    let dir = p.dir.to_str().unwrap().to_string();
    cli(&p.dir, &["send", &dir, "reviewer", "Review PR 7"]);
    cli(&p.dir, &["stop", &dir]);
    let c = serve(&p);
    (p, c)
}

#[test]
fn run_starts_the_runners_of_agents_with_pending_signals_before_anything_runs() {
    let (p, c) = served_with_a_pending_message(None);
    wait_for("the reviewer's runner, prewarmed", Some(&c), || (runner_starts(&c, "reviewer") == 1).then_some(()));
    assert_eq!(activations(&p.dir), 0, "nothing ran: the project is stopped");
    // pm has a runner-side tool but nothing pending: its runner waits for its first call.
    assert_eq!(runner_starts(&c, "pm"), 0);
    assert_eq!(c.stop(), Some(0));
    // A clean stop stopped the runner (it cannot resume): the next run prewarms it again.
    let c = serve(&p);
    wait_for("the reviewer's runner, prewarmed again", Some(&c), || (runner_starts(&c, "reviewer") == 1).then_some(()));
    assert_eq!(c.stop(), Some(0));
}

#[test]
fn prewarm_all_starts_every_runner_an_agent_has_a_tool_for() {
    let (p, c) = served_with_a_pending_message(Some("all"));
    wait_for("both runners, prewarmed", Some(&c), || {
        (runner_starts(&c, "reviewer") == 1 && runner_starts(&c, "pm") == 1).then_some(())
    });
    assert_eq!(activations(&p.dir), 0);
    assert_eq!(c.stop(), Some(0));
}

/// The reviewer's parked approval request, once there is one.
fn parked_request(p: &TempProject, c: &Controller) -> String {
    let dir = p.dir.to_str().unwrap();
    wait_for("the reviewer's approval request", Some(c), || {
        let pending = json(&p.dir, &["approvals", "list", dir, "--json"]);
        pending.as_array().and_then(|a| a.first()).and_then(|r| r["id"].as_str().map(str::to_string))
    })
}

#[test]
fn an_activation_that_starts_gets_its_runner_while_the_model_is_still_busy() {
    let p = project(None);
    let dir = p.dir.to_str().unwrap().to_string();
    let c = serve(&p);
    cli(&p.dir, &["send", &dir, "reviewer", "Review PR 7"]);
    let request = parked_request(&p, &c);
    // No runner-side call has been made (the first call waits for its approval), yet the
    // runner is up.
    wait_for("the reviewer's runner, prewarmed", Some(&c), || (runner_starts(&c, "reviewer") == 1).then_some(()));
    cli(&p.dir, &["approvals", "allow", &dir, &request]);
    let written = p.dir.join("workspaces/reviewer/notes.md");
    wait_for("the file the runner writes", Some(&c), || written.is_file().then_some(()));
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "LGTM");
    assert_eq!(runner_starts(&c, "reviewer"), 1, "the call used the prewarmed runner");
    assert_eq!(c.stop(), Some(0));
}

#[test]
fn prewarm_off_leaves_the_runner_to_the_first_runner_side_call() {
    let p = project(Some("off"));
    let dir = p.dir.to_str().unwrap().to_string();
    let c = serve(&p);
    cli(&p.dir, &["send", &dir, "reviewer", "Review PR 7"]);
    let request = parked_request(&p, &c);
    assert_eq!(runner_starts(&c, "reviewer"), 0, "parked before any runner-side call");
    cli(&p.dir, &["approvals", "allow", &dir, &request]);
    let written = p.dir.join("workspaces/reviewer/notes.md");
    wait_for("the file the runner writes", Some(&c), || written.is_file().then_some(()));
    assert_eq!(runner_starts(&c, "reviewer"), 1);
    assert_eq!(c.stop(), Some(0));
}
