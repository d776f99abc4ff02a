//! Durable approvals end to end: the real `suzumio run` on Docker with the scripted model (or a
//! local OpenAI-compatible server when the model's next request must be read), the real CLI
//! deciding from another process, and a real SQLite store shared by both. The `approvals`
//! fixture's `danger.remove` needs approval and counts each real run on the controller side,
//! so "ran exactly once" and "never ran" are read from what happened, not from a record.

#[path = "support/model_stream.rs"]
mod model_stream;
mod support;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use model_stream::{Reply, StreamServer, Turn, openai_json};
use serde_json::{Value, json};
use support::{Controller, TempProject, cli, suzumio, text, wait_for};
use suzumio::calls::execute_tool;
use suzumio::clock::ManualClock;
use suzumio::config::BackendKind;
use suzumio::config::load::ProcessEnv;
use suzumio::permissions::approvals::PendingCall;
use suzumio::permissions::{AskPolicy, Behavior, Decision, OnAsk, ReasonCode, Risk};
use suzumio::project::Project;
use suzumio::store::{ActivationStatus, ApprovalRecord, ApprovalStatus, StateFiles, Store};
use suzumio::support::ToolHost;

const WAIT: Duration = Duration::from_secs(90);

/// The fixture under a name of its own (its containers are named after it), with `script`.
fn project(script: &str) -> TempProject {
    let project = TempProject::copy_of("approvals");
    let unique = project.dir.file_name().unwrap().to_string_lossy().rsplit('-').next().unwrap().to_string();
    let path = project.dir.join("suzumio.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap().replace("name: approvals", &format!("name: apr-{unique}"));
    std::fs::write(&path, yaml).unwrap();
    std::fs::write(project.dir.join("script.yaml"), script).unwrap();
    project
}

fn say(dir: &Path, to: &str, priority: &str, body: &str) {
    cli(dir, &["send", &dir.to_string_lossy(), to, "--priority", priority, body]);
}

fn run_on_docker(dir: &Path) -> Controller {
    // The Docker backend mounts the static runner; fail here, with how to build it.
    support::static_runner();
    Controller::start(dir, &["--backend", "docker"])
}

/// A read-only look at the project's store (the controller, another process, writes it).
fn store(dir: &Path) -> Arc<ToolHost> {
    suzumio::controller::open_read_only(dir).unwrap_or_else(|e| panic!("{e}"))
}

/// The pending approval request of `host`'s store, once there is one.
async fn wait_for_async_request(host: &ToolHost) -> ApprovalRecord {
    support::wait_for_async("the approval request", async || host.store.approvals(true, 10).unwrap().pop()).await
}

fn pending(dir: &Path, n: usize, ctl: &Controller) -> Vec<ApprovalRecord> {
    wait_for(&format!("{n} pending approval request(s)"), Some(ctl), || {
        let p = store(dir).store.approvals(true, 100).unwrap();
        (p.len() == n).then_some(p)
    })
}

fn activation_ended(dir: &Path, id: &str, ctl: &Controller) -> suzumio::store::ActivationRecord {
    wait_for(&format!("activation {id} to end"), Some(ctl), || {
        store(dir).store.activation(id).unwrap().filter(|a| a.ended_at.is_some())
    })
}

/// How many times `danger.remove` really ran, and on which paths.
fn runs(dir: &Path) -> (u64, Vec<Value>) {
    let state = store(dir).state.read("danger", "runs.json").unwrap();
    state.map_or((0, Vec::new()), |v| (v["runs"].as_u64().unwrap(), v["paths"].as_array().unwrap().clone()))
}

/// The tool results of an activation, as its history recorded them (what replay sends).
fn results(dir: &Path, activation: &str) -> Vec<Value> {
    let host = store(dir);
    host.store
        .activation_history(activation)
        .unwrap()
        .iter()
        .filter(|h| h.kind() == "tool_result")
        .map(|h| h.content())
        .collect()
}

fn assistant_turns(dir: &Path, activation: &str) -> usize {
    store(dir).store.activation_history(activation).unwrap().iter().filter(|h| h.kind() == "assistant_output").count()
}

const REMOVE_THEN_WAIT: &str = r#"
activations:
  - agent: writer
    steps:
      - call: [{tool: danger.remove, input: {path: old.txt}}]
      - say: "Cleaned up."
        call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;

#[test]
fn a_call_that_needs_approval_parks_its_activation_and_runs_once_when_allowed() {
    let p = project(REMOVE_THEN_WAIT);
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Clean up.");
    let ctl = run_on_docker(&p.dir);
    let request = pending(&p.dir, 1, &ctl).remove(0);
    assert_eq!((request.tool.as_str(), &request.input), ("danger.remove", &json!({"path": "old.txt"})));
    assert_eq!((request.agent_id.as_str(), request.reason()), ("writer", "danger.remove is marked requiresApproval"));

    // Parked: waiting_approval, and no model call while it waits.
    let act = request.activation_id.clone();
    wait_for("waiting_approval", Some(&ctl), || {
        let a = store(&p.dir).store.activation(&act).unwrap().unwrap();
        (a.status == ActivationStatus::WaitingApproval).then_some(())
    });
    // Parked with its first turn recorded; a model call while it waits would show at the end as a
    // third turn (the script has two).
    assert_eq!(assistant_turns(&p.dir, &act), 1);
    assert_eq!(runs(&p.dir).0, 0, "nothing ran before the decision");
    let status = cli(&p.dir, &["status", &dir]);
    assert!(status.contains(&format!("writer: waiting for approval of danger.remove (#{})", request.id)), "{status}");
    // Parked, not running: the agent's line and the counts say so.
    assert!(status.contains(&format!("writer           waiting for approval ({act})")), "{status}");
    assert!(status.contains("activations 1 (0 running, 1 waiting for approval, 0 failed)"), "{status}");
    let listed = cli(&p.dir, &["approvals", "list", &dir]);
    assert!(listed.contains(&request.id) && listed.contains(r#"{"path":"old.txt"}"#), "{listed}");

    let allowed = cli(&p.dir, &["approvals", "allow", &dir, &request.id]);
    assert!(allowed.contains(&format!("allowed {}", request.id)), "{allowed}");
    let ended = activation_ended(&p.dir, &act, &ctl);
    assert_eq!((ended.status, ended.text.as_deref()), (ActivationStatus::Completed, Some("Cleaned up.")));
    let results = results(&p.dir, &act);
    assert_eq!(results[0]["content"], "removed old.txt (run 1)", "{results:?}");
    assert_eq!(runs(&p.dir), (1, vec![json!("old.txt")]));
    assert_eq!(assistant_turns(&p.dir, &act), 2, "no new model turn for the approved call");
    let decided = store(&p.dir).store.approval(&request.id).unwrap().unwrap();
    assert_eq!((decided.status, decided.consumed_at.is_some()), (ApprovalStatus::Allowed, true));
    let types: Vec<String> =
        store(&p.dir).store.events_after(0, 1000).unwrap().iter().map(|e| e.kind()).collect::<Vec<_>>();
    for kind in ["permission.decided", "approval.requested", "approval.resolved"] {
        assert!(types.iter().any(|t| t == kind), "{kind} in {types:?}");
    }
    assert_eq!(ctl.stop(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_denied_call_gives_the_model_the_reason_and_the_feedback() {
    let server = StreamServer::start(vec![
        Reply::Json(openai_json(&Turn::new(&[]).call("c1", "danger_remove", &[r#"{"path":"old.txt"}"#]))),
        Reply::Json(openai_json(&Turn::new(&["Archived instead."]).call(
            "c2",
            "coordination_wait_for_signal",
            &[r#"{"reason":"done","notifyPm":false}"#],
        ))),
    ])
    .await;
    let p = project("activations: []\n");
    let path = p.dir.join("suzumio.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap().replace(
        "providers: {local: {type: scripted, script: ./script.yaml}}",
        &format!("providers: {{local: {{type: openai-compatible, baseURL: '{}/v1'}}}}", server.url),
    );
    std::fs::write(
        &path,
        yaml.replace(
            "presets: {main: {provider: local}}",
            "presets: {main: {provider: local, model: m, stream: false}}",
        ),
    )
    .unwrap();
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Clean up.");
    let ctl = tokio::task::block_in_place(|| run_on_docker(&p.dir));
    let request = tokio::task::block_in_place(|| pending(&p.dir, 1, &ctl)).remove(0);
    tokio::task::block_in_place(|| {
        cli(&p.dir, &["approvals", "deny", &dir, &request.id, "--feedback", "keep it, archive it instead"])
    });
    let ended = tokio::task::block_in_place(|| activation_ended(&p.dir, &request.activation_id, &ctl));
    assert_eq!((ended.status, ended.text.as_deref()), (ActivationStatus::Completed, Some("Archived instead.")));
    assert_eq!(runs(&p.dir).0, 0, "a denied call never runs");
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let messages = requests[1]["messages"].as_array().unwrap();
    let tool = messages.iter().find(|m| m["role"] == "tool").expect("the denial goes back as the call's result");
    let said = tool["content"].as_str().unwrap();
    assert!(
        said.contains("Permission denied for danger.remove")
            && said.contains("danger.remove is marked requiresApproval")
            && said.contains("Feedback: keep it, archive it instead"),
        "{said}"
    );
    let decided = store(&p.dir).store.approval(&request.id).unwrap().unwrap();
    assert_eq!(
        (decided.status, decided.feedback.as_deref()),
        (ApprovalStatus::Denied, Some("keep it, archive it instead"))
    );
    assert_eq!(tokio::task::block_in_place(|| ctl.stop()), Some(0));
    // The audit has the ask and its resolution: who denied it, and the feedback.
    let audit = tokio::task::block_in_place(|| cli(&p.dir, &["audit", &dir, "--json"]));
    let lines: Vec<Value> = audit.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let ask = lines.iter().find(|l| l["kind"] == "decision" && l["decision"] == "ask").expect("the ask is audited");
    assert_eq!(ask["tool"], "danger.remove");
    let resolved = lines.iter().find(|l| l["kind"] == "resolution").expect("the resolution is audited");
    assert_eq!(
        (&resolved["decision"], &resolved["userAction"], &resolved["feedback"]),
        (&json!("deny"), &json!("deny"), &json!("keep it, archive it instead"))
    );
    assert!(resolved["source"].as_str().unwrap().contains(&request.id), "{resolved}");
}

#[test]
fn remember_agent_lets_the_next_call_run_without_asking_until_the_rule_is_forgotten() {
    let script = r#"
activations:
  - agent: writer
    steps:
      - call: [{tool: danger.remove, input: {path: a.txt}}]
      - call: [{tool: danger.remove, input: {path: b.txt}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;
    let p = project(script);
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Clean up.");
    let ctl = run_on_docker(&p.dir);
    let first = pending(&p.dir, 1, &ctl).remove(0);
    let out = cli(&p.dir, &["approvals", "allow", &dir, &first.id, "--remember", "agent"]);
    assert!(out.contains("remembered perm_") && out.contains("allow danger.remove for agent"), "{out}");
    activation_ended(&p.dir, &first.activation_id, &ctl);
    assert_eq!(runs(&p.dir), (2, vec![json!("a.txt"), json!("b.txt")]));
    assert_eq!(store(&p.dir).store.approvals(false, 100).unwrap().len(), 1, "the second call was not asked");

    let rules: Value = serde_json::from_str(&cli(&p.dir, &["approvals", "rules", &dir, "--json"])).unwrap();
    let rule = &rules[0];
    assert_eq!(
        (&rule["tool"], &rule["decision"], &rule["scope"], &rule["agentId"], &rule["requestId"]),
        (&json!("danger.remove"), &json!("allow"), &json!("agent"), &json!("writer"), &json!(first.id))
    );
    assert!(rule["createdBy"].as_str().unwrap().starts_with("cli ("), "{rule}");
    let source = store(&p.dir)
        .store
        .events_after(0, 1000)
        .unwrap()
        .into_iter()
        .find_map(|e| match e.event {
            suzumio::store::Event::PermissionDecided { behavior, source, .. } if behavior == "allow" => Some(source),
            _ => None,
        })
        .expect("the remembered allow is a recorded decision");
    assert!(source.contains(rule["id"].as_str().unwrap()) && source.contains(&first.id), "{source}");
    let forgot = cli(&p.dir, &["approvals", "forget", &dir, rule["id"].as_str().unwrap()]);
    assert!(forgot.starts_with("forgot perm_"), "{forgot}");
    assert!(store(&p.dir).store.remembered_rules(None).unwrap().is_empty());
    assert_eq!(ctl.stop(), Some(0));
}

#[test]
fn calls_of_one_turn_wait_together_and_can_be_allowed_at_once() {
    let script = r#"
activations:
  - agent: writer
    steps:
      - call:
          - {tool: danger.remove, input: {path: a.txt}}
          - {tool: danger.remove, input: {path: b.txt}}
      - call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;
    let p = project(script);
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Clean up.");
    let ctl = run_on_docker(&p.dir);
    let both = pending(&p.dir, 2, &ctl);
    assert_eq!(both.iter().map(|r| r.input["path"].clone()).collect::<Vec<_>>(), [json!("a.txt"), json!("b.txt")]);
    let out = cli(&p.dir, &["approvals", "allow", &dir, &both[0].id, "--all-of-activation"]);
    assert!(out.contains(&both[0].id) && out.contains(&both[1].id), "{out}");
    let ended = activation_ended(&p.dir, &both[0].activation_id, &ctl);
    assert_eq!(ended.status, ActivationStatus::Completed);
    assert_eq!(runs(&p.dir), (2, vec![json!("a.txt"), json!("b.txt")]));
    assert_eq!(ctl.stop(), Some(0));
}

#[test]
fn a_pending_request_survives_kill_9_and_approving_it_after_the_restart_runs_the_call_once() {
    let p = project(REMOVE_THEN_WAIT);
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Clean up.");
    let mut ctl = run_on_docker(&p.dir);
    let request = pending(&p.dir, 1, &ctl).remove(0);
    let act = request.activation_id.clone();
    wait_for("waiting_approval", Some(&ctl), || {
        (store(&p.dir).store.activation(&act).unwrap().unwrap().status == ActivationStatus::WaitingApproval)
            .then_some(())
    });
    ctl.child.kill().unwrap();
    ctl.child.wait().unwrap();
    drop(ctl);

    // Nothing ran, the request and the parked activation are still there.
    let host = store(&p.dir);
    assert_eq!(host.store.approval(&request.id).unwrap().unwrap().status, ApprovalStatus::Pending);
    assert_eq!(host.store.activation(&act).unwrap().unwrap().status, ActivationStatus::WaitingApproval);
    drop(host);

    let ctl = run_on_docker(&p.dir);
    assert_eq!(store(&p.dir).store.approvals(true, 10).unwrap().len(), 1, "the request is still the one pending");
    cli(&p.dir, &["approvals", "allow", &dir, &request.id]);
    let ended = activation_ended(&p.dir, &act, &ctl);
    assert_eq!(
        (ended.status, ended.text.as_deref()),
        (ActivationStatus::Completed, Some("Cleaned up.")),
        "{}",
        ctl.stderr()
    );
    assert_eq!(runs(&p.dir), (1, vec![json!("old.txt")]));
    let results = results(&p.dir, &act);
    assert_eq!(results.len(), 2, "the approved call's result, then the next turn's: {results:?}");
    assert_eq!(results[0]["content"], "removed old.txt (run 1)", "{results:?}");
    assert_eq!(assistant_turns(&p.dir, &act), 2);
    assert_eq!(ctl.stop(), Some(0));
    let all = store(&p.dir).store.approvals(false, 10).unwrap();
    assert_eq!(all.len(), 1, "the restarted controller adopted the request instead of asking again: {all:?}");
}

#[test]
fn a_clean_stop_leaves_the_activation_parked_and_a_decision_made_while_stopped_is_applied_by_the_next_run() {
    let p = project(REMOVE_THEN_WAIT);
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Clean up.");
    let ctl = run_on_docker(&p.dir);
    let request = pending(&p.dir, 1, &ctl).remove(0);
    let act = request.activation_id.clone();
    wait_for("waiting_approval", Some(&ctl), || {
        (store(&p.dir).store.activation(&act).unwrap().unwrap().status == ActivationStatus::WaitingApproval)
            .then_some(())
    });
    assert_eq!(ctl.stop(), Some(0));
    assert_eq!(store(&p.dir).store.activation(&act).unwrap().unwrap().status, ActivationStatus::WaitingApproval);

    cli(&p.dir, &["approvals", "deny", &dir, &request.id, "--feedback", "not today"]);
    let ctl = run_on_docker(&p.dir);
    let ended = activation_ended(&p.dir, &act, &ctl);
    assert_eq!((ended.status, ended.text.as_deref()), (ActivationStatus::Completed, Some("Cleaned up.")));
    let results = results(&p.dir, &act);
    let said = results[0]["content"].as_str().unwrap();
    assert!(said.contains("Permission denied for danger.remove") && said.contains("Feedback: not today"), "{said}");
    assert_eq!(runs(&p.dir).0, 0);
    assert_eq!(ctl.stop(), Some(0));
}

/// The name the OS gives the user running these tests (`id -un`): what `cli (<user>)` must say.
fn os_user() -> String {
    let out = std::process::Command::new("id").arg("-un").output().expect("id runs");
    assert!(out.status.success(), "id -un: {}", text(&out.stderr));
    text(&out.stdout).trim().to_string()
}

/// `approvals allow|deny` take any unique prefix of a request's id, with or without `apr_`, as
/// `show` takes an activation's; an ambiguous prefix names the requests it matches, an unknown
/// id says where ids are listed; and the decision is recorded as the OS user's, whatever
/// `$USER` says.
#[test]
fn approvals_allow_and_deny_take_a_unique_prefix_and_record_the_os_user() {
    let p = project("activations: []\n");
    let dir = p.dir.to_string_lossy().to_string();
    let host = suzumio::controller::open(&p.dir).unwrap_or_else(|e| panic!("{e}"));
    let act = host.store.start_activation("writer", "Clean up.", &[]).unwrap().id;
    // Two calls of one turn, asked together (as `announce_turn` does).
    let ask = |key: &str, path: &str| {
        let input = json!({"path": path});
        let new = suzumio::store::NewApproval {
            agent_id: "writer",
            activation_id: &act,
            tool_call_id: None,
            call_key: Some(key),
            tool: "danger.remove",
            input: &input,
            decision: json!({"behavior": "ask", "source": "requiresApproval", "reason": "r", "risk": "high"}),
            expires_at: "2099-01-01T00:00:00.000Z".into(),
        };
        host.store.request_approval(new).unwrap().id
    };
    let (first, second) = (ask("c1", "a.txt"), ask("c2", "b.txt"));
    let shared = first.chars().zip(second.chars()).take_while(|(a, b)| a == b).count();

    let ambiguous = suzumio(&p.dir, &["approvals", "allow", &dir, &first[..shared]]);
    let said = text(&ambiguous.stderr);
    assert_eq!(ambiguous.status.code(), Some(2), "{said}");
    assert!(said.contains(&format!("Approval request id {} is ambiguous: it starts ", &first[..shared])), "{said}");
    assert!(said.contains(&first) && said.contains(&second), "it names both: {said}");

    let unknown = suzumio(&p.dir, &["approvals", "deny", &dir, "apr_0000"]);
    let said = text(&unknown.stderr);
    assert_eq!(unknown.status.code(), Some(2), "{said}");
    assert!(
        said.contains("Unknown approval request: apr_0000 (suzumio approvals list shows the pending ones"),
        "{said}"
    );
    let pending = host.store.approvals(true, 10).unwrap();
    assert_eq!(pending.len(), 2, "neither refused command decided anything: {pending:?}");

    // Unique once one more character is given; `apr_` may be left out.
    let allowed = cli(&p.dir, &["approvals", "allow", &dir, &first["apr_".len()..=shared]]);
    assert!(allowed.contains(&format!("allowed {first}: danger.remove of writer")), "{allowed}");
    let deny = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["approvals", "deny", &dir, &second[..=shared], "--feedback", "keep it"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("USER", "somebody-else")
        .output()
        .unwrap();
    assert!(deny.status.success(), "{}", text(&deny.stderr));
    assert!(text(&deny.stdout).contains(&format!("denied {second}")), "{}", text(&deny.stdout));

    let by = |id: &str| {
        let r = host.store.approval(id).unwrap().unwrap();
        (r.status, r.resolved_by.unwrap_or_default())
    };
    let me = format!("cli ({})", os_user());
    assert_eq!(by(&first), (ApprovalStatus::Allowed, me.clone()));
    assert_eq!(by(&second), (ApprovalStatus::Denied, me.clone()), "the OS user, not $USER");
    let listed = cli(&p.dir, &["approvals", "list", &dir, "--all"]);
    assert!(
        listed.contains(&format!("allowed by {me}")) && listed.contains(&format!("denied by {me}, feedback: keep it")),
        "{listed}"
    );
}

#[test]
fn the_api_lists_requests_decides_them_and_lists_and_deletes_remembered_rules() {
    use support::http;
    let p = project(REMOVE_THEN_WAIT);
    say(&p.dir, "writer", "P2", "Clean up.");
    let ctl = run_on_docker(&p.dir);
    let request = pending(&p.dir, 1, &ctl).remove(0);
    let name = store(&p.dir).project.config.name.clone();
    let api = |path: &str| ctl.url(&format!("/api/projects/{name}{path}"));

    let listed = http("GET", &api("/approvals"), &[], None);
    assert_eq!(listed.status, 200, "{}", listed.body);
    let first = &listed.json()["approvals"][0];
    assert_eq!(
        (&first["id"], &first["tool"], &first["input"]),
        (&json!(request.id), &json!("danger.remove"), &json!({"path": "old.txt"}))
    );
    assert_eq!((&first["decision"]["risk"], &first["status"]), (&json!("high"), &json!("pending")));

    let unknown = http("POST", &api("/approvals/apr_nope/allow"), &[], Some("{}"));
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    let allow = api(&format!("/approvals/{}/allow", request.id));
    let bad = http("POST", &allow, &[], Some(r#"{"remember": "forever"}"#));
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("/remember"), "{}", bad.body);
    let decided = http("POST", &allow, &[], Some(r#"{"remember": "activation", "feedback": "go ahead"}"#));
    assert_eq!(decided.status, 200, "{}", decided.body);
    let answer = decided.json();
    assert_eq!(
        (&answer["decided"][0]["status"], &answer["decided"][0]["resolvedBy"]),
        (&json!("allowed"), &json!("api"))
    );
    let rule = answer["rule"].clone();
    assert_eq!(
        (&rule["scope"], &rule["activationId"], &rule["requestId"]),
        (&json!("activation"), &json!(request.activation_id), &json!(request.id))
    );
    let again = http("POST", &allow, &[], Some("{}"));
    assert_eq!(again.status, 422, "{}", again.body);
    assert!(again.json()["error"].as_str().unwrap().contains("already allowed"), "{}", again.body);

    let ended = activation_ended(&p.dir, &request.activation_id, &ctl);
    assert_eq!(ended.status, ActivationStatus::Completed);
    assert_eq!(runs(&p.dir).0, 1);
    let rules = http("GET", &api("/permissions/rules"), &[], None).json();
    assert_eq!(rules["rules"].as_array().unwrap().len(), 1, "{rules}");
    let one = api(&format!("/permissions/rules/{}", rule["id"].as_str().unwrap()));
    assert_eq!(http("GET", &one, &[], None).json()["id"], rule["id"]);
    assert_eq!(http("DELETE", &one, &[], None).status, 200);
    assert_eq!(http("DELETE", &one, &[], None).status, 404);
    assert_eq!(ctl.stop(), Some(0));
}

#[test]
fn suzumio_tool_call_waits_for_approval_too_and_a_stopped_one_is_ended_by_the_next_run() {
    let p = project("activations: []\n");
    let dir = p.dir.to_string_lossy().to_string();
    support::static_runner();
    let mut caller = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["tool", "call", &dir, "--agent", "writer", "danger.remove", r#"{"path":"x"}"#, "--backend", "docker"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The CLI creates the store: until it has, there is nothing to read yet.
    let request = wait_for("the CLI's request", None, || {
        suzumio::controller::open_read_only(&p.dir).ok()?.store.approvals(true, 10).ok()?.pop()
    });
    wait_for("waiting_approval", None, || {
        (store(&p.dir).store.activation(&request.activation_id).unwrap().unwrap().status
            == ActivationStatus::WaitingApproval)
            .then_some(())
    });
    caller.kill().unwrap();
    caller.wait().unwrap();

    // Nothing of a model loop to continue: the next run ends it, and its request with it.
    let mut ctl = Controller::start(&p.dir, &["--backend", "docker", "--until-idle"]);
    let code = wait_for("the idle run to exit", None, || ctl.child.try_wait().unwrap().map(|s| s.code()));
    assert_eq!(code, Some(0), "{}", ctl.stderr());
    let ended = store(&p.dir).store.activation(&request.activation_id).unwrap().unwrap();
    assert_eq!(
        (ended.status, ended.error.as_deref()),
        (ActivationStatus::Cancelled, Some("its caller stopped while it waited for approval"))
    );
    let expired = store(&p.dir).store.approval(&request.id).unwrap().unwrap();
    assert_eq!(expired.status, ApprovalStatus::Expired, "{expired:?}");
    assert_eq!(runs(&p.dir).0, 0);
}

/// (g) A restart keeps one request per call. `writer`'s call belongs to a model loop, which
/// the next controller resumes: its request stays pending, is the one allowed, and the call runs
/// once. `pm`'s call came from `suzumio tool call`, which has no loop to resume: it ended with
/// the controller (kill -9, its caller gone with it), so its request is `expired` with the time
/// of the restart, and the CLI, the API and the WebUI refuse to decide it and say why.
#[tokio::test(flavor = "multi_thread")]
async fn a_restart_keeps_one_request_per_call_and_expires_the_ones_no_one_can_continue() {
    let p = project(REMOVE_THEN_WAIT);
    let yaml_path = p.dir.join("suzumio.yaml");
    let yaml = std::fs::read_to_string(&yaml_path).unwrap();
    let yaml = yaml.replace("pm: {tools: [messages.send,", "pm: {tools: [danger.remove, messages.send,");
    std::fs::write(&yaml_path, yaml).unwrap();
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Clean up.");
    let mut ctl = tokio::task::block_in_place(|| run_on_docker(&p.dir));
    let writers = tokio::task::block_in_place(|| pending(&p.dir, 1, &ctl)).remove(0);
    let mut caller = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["tool", "call", &dir, "--agent", "pm", "danger.remove", r#"{"path":"cli.txt"}"#, "--backend", "docker"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let requests = tokio::task::block_in_place(|| pending(&p.dir, 2, &ctl));
    let cli_request = requests.iter().find(|r| r.agent_id == "pm").unwrap().clone();
    tokio::task::block_in_place(|| {
        for act in [&writers.activation_id, &cli_request.activation_id] {
            wait_for(&format!("{act} waiting_approval"), Some(&ctl), || {
                (store(&p.dir).store.activation(act).unwrap().unwrap().status == ActivationStatus::WaitingApproval)
                    .then_some(())
            });
        }
    });
    ctl.child.kill().unwrap();
    ctl.child.wait().unwrap();
    drop(ctl);
    // The call's own process goes too (whichever process held it, it ended with the stop).
    let _ = caller.kill();
    caller.wait().unwrap();

    let ctl = tokio::task::block_in_place(|| run_on_docker(&p.dir));
    let expired = tokio::task::block_in_place(|| {
        wait_for("pm's request to expire", Some(&ctl), || {
            store(&p.dir).store.approval(&cli_request.id).unwrap().filter(|r| r.status == ApprovalStatus::Expired)
        })
    });
    let at = suzumio::clock::iso(expired.resolved_at.expect("an expired request has the time of the restart"));
    let why =
        format!("request {} expired: the call it asked for ended with the controller's restart at {at}", expired.id);
    assert_eq!(
        expired.resolution_reason.as_deref(),
        Some(format!("the call it asked for ended with the controller's restart at {at}").as_str())
    );
    let all = store(&p.dir).store.approvals(false, 10).unwrap();
    assert_eq!(all.len(), 2, "one request per call, none asked again: {all:?}");
    let still = all.iter().find(|r| r.id == writers.id).unwrap();
    assert_eq!(still.status, ApprovalStatus::Pending, "the resumed loop waits on its own request: {still:?}");

    let refused = suzumio(&p.dir, &["approvals", "allow", &dir, &expired.id]);
    assert_eq!(refused.status.code(), Some(2), "{}{}", text(&refused.stdout), text(&refused.stderr));
    assert!(text(&refused.stderr).contains(&why), "{}", text(&refused.stderr));
    let name = store(&p.dir).project.config.name.clone();
    let api = ctl.url(&format!("/api/projects/{name}/approvals/{}/deny", expired.id));
    let conflict = tokio::task::block_in_place(|| support::http("POST", &api, &[], Some("{}")));
    assert_eq!(conflict.status, 409, "{}", conflict.body);
    assert!(conflict.json()["error"].as_str().unwrap().contains(&why), "{}", conflict.body);

    let b = webdriver::Browser::start().await.unwrap_or_else(|e| panic!("the browser tests need Chromium: {e}"));
    let shown = async {
        b.goto(&ctl.url("/#/approvals")).await?;
        b.wait_for_text(&format!(r#"article[data-approval="{}"]"#, writers.id), "danger.remove").await?;
        let (_, line) = b.wait_for_text_of(&format!(r#"[data-decided="{}"]"#, expired.id), "expired").await?;
        webdriver::Result::Ok(line)
    }
    .await;
    let line = shown.unwrap_or_else(|e| panic!("{e}\ncontroller:\n{}", ctl.stderr()));
    assert!(line.contains("ended with the controller's restart at"), "{line}");

    tokio::task::block_in_place(|| {
        cli(&p.dir, &["approvals", "allow", &dir, &writers.id]);
        let ended = activation_ended(&p.dir, &writers.activation_id, &ctl);
        assert_eq!((ended.status, ended.text.as_deref()), (ActivationStatus::Completed, Some("Cleaned up.")));
    });
    assert_eq!(runs(&p.dir), (1, vec![json!("old.txt")]), "the resumed call ran once, the expired one never");
    assert_eq!(store(&p.dir).store.approvals(false, 10).unwrap().len(), 2);
    assert_eq!(tokio::task::block_in_place(|| ctl.stop()), Some(0));
}

#[test]
fn a_p0_pre_empts_a_parked_activation_and_its_request_is_cancelled() {
    let script = r#"
activations:
  - agent: writer
    when: "Clean up"
    steps:
      - call: [{tool: danger.remove, input: {path: old.txt}}]
  - agent: writer
    when: "URGENT"
    steps:
      - say: "Handled the urgent thing."
        call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;
    let p = project(script);
    say(&p.dir, "writer", "P2", "Clean up.");
    let ctl = run_on_docker(&p.dir);
    let request = pending(&p.dir, 1, &ctl).remove(0);
    say(&p.dir, "writer", "P0", "URGENT: stop and look at this.");
    let parked = activation_ended(&p.dir, &request.activation_id, &ctl);
    assert_eq!(parked.status, ActivationStatus::Cancelled);
    assert!(parked.error.as_deref().unwrap().starts_with("Interrupted by P0 signal"), "{parked:?}");
    let cancelled = store(&p.dir).store.approval(&request.id).unwrap().unwrap();
    assert_eq!(cancelled.status, ApprovalStatus::Cancelled);
    let urgent = wait_for("the P0's activation to complete", Some(&ctl), || {
        let a = store(&p.dir).store.latest_activation("writer", None).unwrap()?;
        (a.id != request.activation_id && a.status == ActivationStatus::Completed).then_some(a)
    });
    assert_eq!(urgent.text.as_deref(), Some("Handled the urgent thing."));
    let out = suzumio(&p.dir, &["approvals", "allow", &p.dir.to_string_lossy(), &request.id]);
    assert_eq!(out.status.code(), Some(2), "a cancelled request cannot be allowed: {}", text(&out.stderr));
    assert_eq!(runs(&p.dir).0, 0);
    assert_eq!(ctl.stop(), Some(0));
}

/// A project on a clock the test moves, with its runners on Docker: the approval deadline is
/// checked against that clock.
async fn on_manual_clock(
    clock: Arc<ManualClock>,
) -> (TempProject, Arc<ToolHost>, Arc<suzumio::support::runners::AgentRunners>) {
    let p = project("activations: []\n");
    let loaded = Arc::new(Project::load(&p.dir, &ProcessEnv).unwrap_or_else(|e| panic!("{e}")));
    let store = Store::open(&loaded.config, clock).unwrap();
    let host = ToolHost::new(loaded, store, StateFiles::new(&p.dir));
    let runners = suzumio::controller::runners_with(&host, BackendKind::Docker, support::static_runner())
        .await
        .unwrap_or_else(|e| panic!("Docker backend (start it with scripts/setup.sh): {e}"));
    (p, host, runners)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_nobody_decides_is_denied_at_its_deadline_also_when_adopted_after_a_restart() {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let (p, host, runners) = on_manual_clock(clock.clone()).await;
    let act = host.store.start_activation("writer", "test", &[]).unwrap();
    let call = {
        let (host, runners, act) = (host.clone(), runners.clone(), act.id.clone());
        tokio::spawn(async move {
            execute_tool(&host, runners.as_ref(), "writer", &act, "danger.remove", json!({"path": "x"})).await
        })
    };
    let request = loop {
        let parked = host.store.activation(&act.id).unwrap().unwrap().status == ActivationStatus::WaitingApproval;
        if let Some(r) = host.store.approvals(true, 10).unwrap().pop().filter(|_| parked) {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The default approvalTimeout is 24 h.
    clock.advance(chrono::Duration::hours(24) + chrono::Duration::seconds(1));
    let denied = tokio::time::timeout(WAIT, call).await.expect("denied once its deadline passed").unwrap();
    let why = denied.unwrap_err().to_string();
    assert!(why.contains("nobody decided on its approval request within 24 h (permissions.approvalTimeout)"), "{why}");
    let expired = host.store.approval(&request.id).unwrap().unwrap();
    assert_eq!((expired.status, expired.resolved_by.as_deref()), (ApprovalStatus::Denied, Some("timeout")));
    assert_eq!(host.store.activation(&act.id).unwrap().unwrap().status, ActivationStatus::Running);

    // After a restart, a request whose deadline passed while nobody ran is denied as soon as its
    // call adopts it: the ask is abandoned (the controller died), time passes, the call asks again.
    let decision = Decision::new(
        Behavior::Ask,
        "requiresApproval",
        "danger.remove is marked requiresApproval",
        Risk::Medium,
        ReasonCode::Annotation,
    );
    let policy = AskPolicy { on_ask: OnAsk::Wait, timeout: Duration::from_secs(60) };
    let input = json!({"path": "y"});
    let ask = |call_id: String| {
        let (host, runners, act, input, decision) =
            (host.clone(), runners.clone(), act.id.clone(), input.clone(), decision.clone());
        async move {
            let pending = PendingCall {
                agent_id: "writer",
                activation_id: &act,
                call_id: &call_id,
                call_key: None,
                tool: "danger.remove",
                input: &input,
                decision: &decision,
                policy,
            };
            suzumio::calls::ask_and_run(&host, runners.as_ref(), pending).await
        }
    };
    let first = host.store.start_tool_call(&act.id, "writer", "danger.remove", Some("danger"), &input, None).unwrap();
    // The ask is abandoned while it waits (as when the controller dies): once its request is
    // recorded, and before anyone decides, the task is dropped.
    let asking = tokio::spawn(ask(first));
    let request = wait_for_async_request(&host).await;
    assert!(!asking.is_finished(), "the ask waits for a decision: {:?}", asking.await);
    asking.abort();
    let _ = asking.await;
    assert_eq!(host.store.approvals(true, 10).unwrap().len(), 1, "the request stays pending");
    // What the next controller does with the parked activation before it resumes it.
    host.store.reopen_parked(&act.id).unwrap();
    clock.advance(chrono::Duration::minutes(2));
    let again = host.store.start_tool_call(&act.id, "writer", "danger.remove", Some("danger"), &input, None).unwrap();
    let why = tokio::time::timeout(WAIT, ask(again)).await.expect("denied at once").unwrap_err().to_string();
    assert!(why.contains("within 1 min (permissions.approvalTimeout)"), "{why}");
    assert_eq!(host.store.approval(&request.id).unwrap().unwrap().status, ApprovalStatus::Denied);
    assert_eq!(host.store.approvals(false, 10).unwrap().len(), 2, "adopted, not asked again");
    assert!(host.state.read("danger", "runs.json").unwrap().is_none(), "nothing ran");
    drop(p);
}

#[tokio::test(flavor = "multi_thread")]
async fn on_ask_deny_refuses_at_once_with_a_reason_the_model_can_act_on() {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let (_p, host, runners) = on_manual_clock(clock).await;
    let act = host.store.start_activation("writer", "test", &[]).unwrap();
    let input = json!({"path": "x"});
    let call_id = host.store.start_tool_call(&act.id, "writer", "danger.remove", Some("danger"), &input, None).unwrap();
    let decision = Decision::new(
        Behavior::Ask,
        "requiresApproval",
        "danger.remove is marked requiresApproval",
        Risk::Medium,
        ReasonCode::Annotation,
    );
    let pending = PendingCall {
        agent_id: "writer",
        activation_id: &act.id,
        call_id: &call_id,
        call_key: None,
        tool: "danger.remove",
        input: &input,
        decision: &decision,
        policy: AskPolicy { on_ask: OnAsk::Deny, timeout: Duration::from_secs(60) },
    };
    // Had it asked, it would wait for a decision on a clock that never moves: the guard would fire.
    let why = tokio::time::timeout(WAIT, suzumio::calls::ask_and_run(&host, runners.as_ref(), pending))
        .await
        .expect("refused without waiting")
        .unwrap_err();
    assert_eq!(why.kind(), "denied");
    let text = why.to_string();
    assert!(
        text.contains("nobody is asked here (permissions.onAsk: deny)") && text.contains("Do the task without it"),
        "{text}"
    );
    assert!(host.store.approvals(false, 10).unwrap().is_empty(), "no request is left behind");
    assert_eq!(host.store.activation(&act.id).unwrap().unwrap().status, ActivationStatus::Running);
}

/// The WebUI flow in a real browser (Chromium through chromedriver): the agent card shows the
/// waiting call, the Approvals view shows the request (tool, agent, input, reason, risk), Allow
/// with "remember for writer" runs it, the activation continues to its end, and the remembered
/// rule is listed and deleted.
#[tokio::test(flavor = "multi_thread")]
async fn the_webui_shows_a_waiting_call_and_allowing_it_lets_the_activation_continue() {
    let p = project(REMOVE_THEN_WAIT);
    say(&p.dir, "writer", "P2", "Clean up.");
    let ctl = tokio::task::block_in_place(|| run_on_docker(&p.dir));
    let request = tokio::task::block_in_place(|| pending(&p.dir, 1, &ctl)).remove(0);
    let b = webdriver::Browser::start().await.unwrap_or_else(|e| panic!("the browser tests need Chromium: {e}"));
    let outcome = webui_scenario(&b, &ctl, &p.dir, &request).await;
    if let Err(e) = outcome {
        let html = b.source().await.unwrap_or_default();
        panic!("{e}\npage:\n{html}\ncontroller:\n{}", ctl.stderr());
    }
    assert_eq!(runs(&p.dir), (1, vec![json!("old.txt")]));
    assert_eq!(tokio::task::block_in_place(|| ctl.stop()), Some(0));
}

async fn webui_scenario(
    b: &webdriver::Browser,
    ctl: &Controller,
    dir: &Path,
    request: &ApprovalRecord,
) -> webdriver::Result<()> {
    b.goto(&ctl.url("/")).await?;
    b.wait_for_text(r#"[data-approvals-agent="writer"]"#, "1 awaiting approval").await?;
    b.wait_for_text("#approvals-count", "1").await?;
    b.goto(&ctl.url(&format!("/#/activations/{}", request.activation_id))).await?;
    b.wait_for_text(".page-head .pill", "waiting_approval").await?;

    b.click(&b.find(r#"a[data-view="approvals"]"#).await?).await?;
    let card_css = format!(r#"article[data-approval="{}"]"#, request.id);
    let card = b.wait_for_text(&card_css, "danger.remove").await?;
    let shown = card.text().await?;
    for needle in ["writer", "old.txt", "danger.remove is marked requiresApproval", "risk high"] {
        assert!(shown.contains(needle), "{needle:?} on the card:\n{shown}");
    }
    let remember = b.find_in(&card, r#"select[name="remember"]"#).await?;
    b.execute(
        "arguments[0].value = 'agent'; arguments[0].dispatchEvent(new Event('change', { bubbles: true }));",
        vec![webdriver::arg(&remember)],
    )
    .await?;
    b.click(&b.find_in(&card, r#"button[data-action="allow"]"#).await?).await?;
    // Recently decided: who (the WebUI) and when, as a time element (it was once the text
    // `[object HTMLTimeElement]`).
    let decided_css = format!(r#"[data-decided="{}"]"#, request.id);
    let (_, decided) = b.wait_for_text_of(&decided_css, "allowed").await?;
    assert!(decided.contains("danger.remove of writer by webui"), "{decided}");
    assert!(!decided.contains("[object"), "{decided}");
    let resolved_at = b
        .execute(
            &format!("return document.querySelector('{decided_css} time')?.getAttribute('datetime') ?? null;"),
            vec![],
        )
        .await?;
    let stored = store(dir).store.approval(&request.id).unwrap().unwrap();
    assert_eq!(stored.resolved_by.as_deref(), Some("webui"));
    let stored_at = stored.resolved_at.map(suzumio::clock::iso);
    assert_eq!(resolved_at.as_str(), stored_at.as_deref(), "the decided item shows when it was decided");
    b.wait_until(&format!("!document.querySelector('{card_css}')")).await?;
    let rule = b.wait_for_text("tr[data-rule]", "danger.remove").await?;
    let rule_text = rule.text().await?;
    assert!(rule_text.contains("agent writer") && rule_text.contains(&request.id), "{rule_text}");

    let act = request.activation_id.clone();
    let owned = dir.to_path_buf();
    tokio::task::block_in_place(|| activation_ended(&owned, &act, ctl));
    b.goto(&ctl.url(&format!("/#/activations/{act}"))).await?;
    b.wait_for_text(".page-head .pill", "completed").await?;
    // The timeline: the approval, decided by the WebUI, just before the call it gated.
    let (_, approval) =
        b.wait_for_text_of(&format!(r#"ol.timeline li[data-approval="{}"]"#, request.id), "webui").await?;
    assert!(approval.contains("allowed by webui"), "{approval}");
    let steps = b
        .execute(
            "return [...document.querySelectorAll('ol.timeline > li')].map((li) => li.dataset.approval ? 'approval' : li.dataset.kind === 'tool_call' ? `call ${li.dataset.tool}` : li.dataset.kind);",
            vec![],
        )
        .await?;
    let steps: Vec<&str> = steps.as_array().map(|s| s.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let gated = steps.iter().position(|s| *s == "call danger.remove");
    let asked = steps.iter().position(|s| *s == "approval");
    assert_eq!(asked.map(|a| a + 1), gated, "the approval stands right before its call: {steps:?}");
    b.goto(&ctl.url("/#/approvals")).await?;
    b.click(&b.find("button[data-delete-rule]").await?).await?;
    b.find(r#"[data-empty="rules"]"#).await?;
    assert!(store(dir).store.remembered_rules(None).unwrap().is_empty());

    // The audit trail on the same page: the ask and its resolution (allowed, remembered for
    // the agent); filtering by decision leaves only what matches.
    let resolution = b.wait_for_text(r#"[data-audit-entry][data-kind="resolution"]"#, "danger.remove").await?;
    let text = resolution.text().await?;
    assert!(text.contains("allow") && text.contains("remember agent") && text.contains(&request.id), "{text}");
    b.wait_for_text(r#"[data-audit-entry][data-kind="decision"][data-decision="ask"]"#, "danger.remove").await?;
    let decision = b.find(r#"[data-audit] select[name="decision"]"#).await?;
    b.execute(
        "arguments[0].value = 'ask'; arguments[0].dispatchEvent(new Event('change', { bubbles: true }));",
        vec![webdriver::arg(&decision)],
    )
    .await?;
    b.wait_until("document.querySelectorAll('[data-audit-entry]').length > 0 && [...document.querySelectorAll('[data-audit-entry]')].every((r) => r.dataset.decision === 'ask')").await?;
    Ok(())
}

/// Nobody watching: `suzumio run --until-idle` does not hang on a prompt. Once the only work
/// left waits for a person, the run ends (exit 0) with the request still pending; the next run
/// picks the decision up and the activation completes.
#[test]
fn an_unattended_run_until_idle_ends_while_a_request_waits_and_the_next_run_continues() {
    let p = project(REMOVE_THEN_WAIT);
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Clean up.");
    support::static_runner();
    // A run that waited for the approval would never end: the guard is the tests' usual WAIT.
    let until_idle = || {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
            .args(["run", &dir, "--port", "0", "--backend", "docker", "--until-idle"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > WAIT {
                let _ = child.kill();
                panic!("`run --until-idle` kept waiting for the approval instead of ending");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        child.wait_with_output().unwrap()
    };
    let first = until_idle();
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let waiting = store(&p.dir).store.approvals(true, 10).unwrap();
    assert_eq!(waiting.len(), 1, "the request is still pending");
    assert_eq!(runs(&p.dir).0, 0);
    cli(&p.dir, &["approvals", "allow", &dir, &waiting[0].id]);
    let second = until_idle();
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    assert_eq!(runs(&p.dir), (1, vec![json!("old.txt")]), "allowed once, run once");
    let act = store(&p.dir).store.activation(&waiting[0].activation_id).unwrap().unwrap();
    assert_eq!(act.status, ActivationStatus::Completed);
}

/// (g) The other call that no one can continue: a turn's calls are announced together, and the
/// controller dies (kill -9) while the activation runs the one allowed between them. The
/// restart ends that activation (it was running, so it is recovered, not resumed), and the
/// request announced for the turn's later call expires with the time of the restart instead of
/// staying pending for a call that will never run.
#[test]
fn a_crash_while_a_turn_runs_expires_the_requests_announced_for_its_later_calls() {
    let script = r#"
activations:
  - agent: writer
    steps:
      - call:
          - {tool: danger.remove, input: {path: a.txt}}
          - {tool: shell.exec, input: {command: "sleep 120"}}
          - {tool: danger.remove, input: {path: b.txt}}
      - say: "Cleaned up."
"#;
    let p = project(script);
    let yaml_path = p.dir.join("suzumio.yaml");
    let yaml = std::fs::read_to_string(&yaml_path).unwrap();
    let yaml = yaml
        .replace("    - core\n", "    - core\n    - shell\n")
        .replace("writer: {tools: [danger.remove,", "writer: {tools: [shell.exec, danger.remove,");
    std::fs::write(&yaml_path, yaml).unwrap();
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Clean up.");
    let mut ctl = run_on_docker(&p.dir);
    let both = pending(&p.dir, 2, &ctl);
    let (first, later) = (both[0].clone(), both[1].clone());
    assert_eq!((&first.input["path"], &later.input["path"]), (&json!("a.txt"), &json!("b.txt")));
    cli(&p.dir, &["approvals", "allow", &dir, &first.id]);
    wait_for("the sleep between the two removals", Some(&ctl), || {
        let calls = store(&p.dir).store.activation_tool_calls(&first.activation_id).unwrap();
        calls
            .iter()
            .any(|c| c.tool == "shell.exec" && c.status == suzumio::store::ToolCallStatus::Running)
            .then_some(())
    });
    ctl.child.kill().unwrap();
    ctl.child.wait().unwrap();
    drop(ctl);

    let ctl = run_on_docker(&p.dir);
    let expired = wait_for("the later call's request to expire", Some(&ctl), || {
        store(&p.dir).store.approval(&later.id).unwrap().filter(|r| r.status == ApprovalStatus::Expired)
    });
    let at = suzumio::clock::iso(expired.resolved_at.unwrap());
    let ended = store(&p.dir).store.activation(&first.activation_id).unwrap().unwrap();
    assert_eq!((ended.status, ended.error.as_deref()), (ActivationStatus::Failed, Some("controller restarted")));
    let refused = suzumio(&p.dir, &["approvals", "deny", &dir, &later.id]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    let why =
        format!("request {} expired: the call it asked for ended with the controller's restart at {at}", later.id);
    assert!(text(&refused.stderr).contains(&why), "{}", text(&refused.stderr));
    // The turn's signal goes back to pending (work is at least once), so a new activation may
    // ask again for its own calls; the ended activation's requests are the two it had.
    let all = store(&p.dir).store.approvals(false, 10).unwrap();
    let of_the_first = all.iter().filter(|r| r.activation_id == first.activation_id);
    assert_eq!(
        of_the_first.map(|r| (r.id.as_str(), r.status)).collect::<Vec<_>>(),
        [(first.id.as_str(), ApprovalStatus::Allowed), (later.id.as_str(), ApprovalStatus::Expired)]
    );
    assert_eq!(runs(&p.dir), (1, vec![json!("a.txt")]));
    assert_eq!(ctl.stop(), Some(0));
}

/// (g) Requests are keyed by the call, not by what it asks: two identical calls of one turn
/// get a request each, and after kill -9 the resumed activation finds both again (no third);
/// each allow runs its own call once.
#[test]
fn identical_calls_of_one_turn_keep_a_request_each_across_a_restart() {
    let script = r#"
activations:
  - agent: writer
    steps:
      - call:
          - {tool: danger.remove, input: {path: same.txt}}
          - {tool: danger.remove, input: {path: same.txt}}
      - say: "Cleaned up."
"#;
    let p = project(script);
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Clean up.");
    let mut ctl = run_on_docker(&p.dir);
    let both = pending(&p.dir, 2, &ctl);
    let act = both[0].activation_id.clone();
    assert_ne!(both[0].call_key, both[1].call_key, "{both:?}");
    wait_for("waiting_approval", Some(&ctl), || {
        (store(&p.dir).store.activation(&act).unwrap().unwrap().status == ActivationStatus::WaitingApproval)
            .then_some(())
    });
    ctl.child.kill().unwrap();
    ctl.child.wait().unwrap();
    drop(ctl);

    let ctl = run_on_docker(&p.dir);
    cli(&p.dir, &["approvals", "allow", &dir, &both[0].id]);
    wait_for("the first call to run", Some(&ctl), || (runs(&p.dir).0 == 1).then_some(()));
    cli(&p.dir, &["approvals", "allow", &dir, &both[1].id]);
    let ended = activation_ended(&p.dir, &act, &ctl);
    assert_eq!((ended.status, ended.text.as_deref()), (ActivationStatus::Completed, Some("Cleaned up.")));
    assert_eq!(runs(&p.dir), (2, vec![json!("same.txt"), json!("same.txt")]));
    let all = store(&p.dir).store.approvals(false, 10).unwrap();
    assert_eq!(all.iter().map(|r| &r.id).collect::<Vec<_>>(), [&both[0].id, &both[1].id], "no request asked again");
    assert_eq!(ctl.stop(), Some(0));
}

/// Regression: after a restart, `show` put the resumed call's record at the very end (after the
/// model's last turn) and the record the restart closed under the call's result. Now the
/// interrupted try stands where it happened, then the try whose result the model got, and the
/// steps are in time order.
#[test]
fn show_lists_a_call_interrupted_by_a_restart_in_time_order() {
    let p = project(REMOVE_THEN_WAIT);
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Clean up.");
    let ctl = Controller::start(&p.dir, &[]);
    let request = pending(&p.dir, 1, &ctl).remove(0);
    let act = request.activation_id.clone();
    wait_for("waiting_approval", Some(&ctl), || {
        (store(&p.dir).store.activation(&act).unwrap().unwrap().status == ActivationStatus::WaitingApproval)
            .then_some(())
    });
    assert_eq!(ctl.stop(), Some(0));
    cli(&p.dir, &["approvals", "allow", &dir, &request.id]);
    let ctl = Controller::start(&p.dir, &[]);
    let ended = activation_ended(&p.dir, &act, &ctl);
    assert_eq!(ended.status, ActivationStatus::Completed, "{}", ctl.stderr());
    assert_eq!(ctl.stop(), Some(0));

    let timeline: Value = serde_json::from_str(&cli(&p.dir, &["show", &dir, &act, "--json"])).unwrap();
    let items = timeline["items"].as_array().unwrap();
    let steps: Vec<String> = items
        .iter()
        .filter(|i| i["kind"] != "approval")
        .map(|i| match i["kind"].as_str().unwrap() {
            "tool_call" => format!("{} {}", i["tool"].as_str().unwrap(), i["status"].as_str().unwrap()),
            kind => kind.to_string(),
        })
        .collect();
    assert_eq!(
        steps,
        [
            "prompt",
            "model_turn",
            "danger.remove failed",
            "danger.remove completed",
            "model_turn",
            "coordination.wait_for_signal completed",
            "ended"
        ],
        "{timeline:#}"
    );
    let calls: Vec<&Value> = items.iter().filter(|i| i["kind"] == "tool_call").collect();
    assert!(
        calls[0]["error"].as_str().unwrap().contains("the controller stopped while this call waited"),
        "{timeline:#}"
    );
    assert_eq!(calls[1]["output"]["output"], "removed old.txt (run 1)", "{timeline:#}");
    let times: Vec<&str> =
        items.iter().filter(|i| i["kind"] != "approval").map(|i| i["at"].as_str().unwrap()).collect();
    let mut sorted = times.clone();
    sorted.sort();
    assert_eq!(times, sorted, "steps in the order they happened: {timeline:#}");
}

/// A tool switched off while a call of it waits for approval: allowing the request afterwards
/// does not bring it back, the call is refused with who switched it off, and it never runs.
#[test]
fn a_call_switched_off_while_it_waits_for_approval_does_not_run_when_allowed() {
    let p = project(REMOVE_THEN_WAIT);
    let dir = p.dir.to_string_lossy().to_string();
    say(&p.dir, "writer", "P2", "Clean up.");
    let ctl = Controller::start(&p.dir, &[]);
    let request = pending(&p.dir, 1, &ctl).remove(0);
    let switched = cli(&p.dir, &["tools", "off", &dir, "writer", "danger.remove"]);
    assert!(switched.contains("switched off for writer by cli ("), "{switched}");
    cli(&p.dir, &["approvals", "allow", &dir, &request.id]);
    let ended = activation_ended(&p.dir, &request.activation_id, &ctl);
    assert_eq!(ended.status, ActivationStatus::Completed, "{:?}", ended.error);
    let results = results(&p.dir, &request.activation_id);
    let refused = results[0]["content"].as_str().unwrap_or_default();
    assert!(refused.contains("danger.remove is switched off for writer by cli ("), "{results:?}");
    assert_eq!(runs(&p.dir).0, 0, "a switched-off tool never runs");
    assert_eq!(ctl.stop(), Some(0));
}
