//! The controller-side core tools (reference §4.2–§4.4 and §10 items 1, 2, 5): the communication
//! policy, default priorities, waiting, submitting — on a real store.

mod support;

use std::sync::Arc;

use serde_json::{Value, json};
use suzumio::clock::SystemClock;
use suzumio::config::load::ProcessEnv;
use suzumio::project::Project;
use suzumio::store::{MessageQuery, SignalQuery, StateFiles, Store};
use suzumio::support::ToolHost;
use suzumio::support::builtin_tools::{self, Caller};
use suzumio::toolpack::ToolError;

/// `GET tool-status` as the API serves it.
fn tool_status(host: &ToolHost) -> Vec<serde_json::Value> {
    let views = suzumio::web::views::tool_status(host).unwrap();
    views.iter().map(|t| serde_json::to_value(t).unwrap()).collect()
}

fn host(restrict: bool) -> (support::TempProject, Arc<ToolHost>) {
    let project = support::TempProject::copy_of("review");
    if restrict {
        let path = project.dir.join("suzumio.yaml");
        let yaml = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, format!("{yaml}communication:\n  restrictNonCoordinatorToCoordinator: true\n")).unwrap();
    }
    let loaded = Arc::new(Project::load(&project.dir, &ProcessEnv).unwrap_or_else(|e| panic!("{e}")));
    let store = Store::open(&loaded.config, Arc::new(SystemClock)).unwrap();
    let host = ToolHost::new(loaded, store, StateFiles::new(&project.dir));
    (project, host)
}

fn caller(host: &ToolHost, agent: &str) -> Caller {
    let activation = host.store.start_activation(agent, "test", &[]).unwrap();
    Caller { agent_id: agent.into(), activation_id: activation.id }
}

/// One controller-side built-in call, driven to its end.
fn call(
    host: &ToolHost,
    caller: &Caller,
    tool: &str,
    input: &Value,
) -> Result<suzumio::support::ToolOutput, ToolError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(builtin_tools::call(host, caller, tool, input))
}

fn error(r: Result<suzumio::support::ToolOutput, ToolError>) -> String {
    r.err().map(|e| e.to_string()).unwrap_or_else(|| "ok".into())
}

/// §10 item 1.
#[test]
fn communication_policy_limits_non_coordinators() {
    let (_p, host) = host(true);
    let reviewer = caller(&host, "reviewer");
    let cases: [(Value, &str); 5] = [
        (json!({"recipient": "pm", "body": "x", "priority": "P2"}), "ok"),
        (
            json!({"recipient": "reviewer", "body": "x"}),
            "Communication policy allows non-coordinator agents to message only pm.",
        ),
        (
            json!({"recipient": "user", "body": "x"}),
            "Communication policy allows non-coordinator agents to message only pm.",
        ),
        (
            json!({"channel": "#project", "body": "x"}),
            "Communication policy allows non-coordinator agents to send direct messages only to pm; channels are not allowed.",
        ),
        (
            json!({"recipient": "pm", "body": "x", "priority": "P0"}),
            "Communication policy allows non-coordinator priorities P2 or lower; P0 is not allowed.",
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(error(call(&host, &reviewer, "messages.send", &input)), expected, "{input}");
    }
    let pm = caller(&host, "pm");
    assert_eq!(
        error(call(
            &host,
            &pm,
            "messages.send",
            &json!({"channel": "#project", "body": "all hands", "priority": "P1"})
        )),
        "ok"
    );
}

/// §10 item 2, and the message's useful effect is attributed to the activation.
#[test]
fn messages_send_defaults_to_p3_and_counts_as_a_useful_effect() {
    let (_p, host) = host(false);
    let pm = caller(&host, "pm");
    let out = call(&host, &pm, "messages.send", &json!({"recipient": "reviewer", "body": "review please"})).unwrap();
    let id = out.metadata.as_ref().unwrap()["messageId"].as_str().unwrap().to_string();
    assert_eq!(out.output, format!("Message sent and delivered: {id}"));
    assert_eq!(host.store.message(&id).unwrap().unwrap().priority.as_str(), "P3");
    assert_eq!(host.store.count_activation_useful_effects(&pm.activation_id).unwrap(), 1);
    assert_eq!(
        error(call(&host, &pm, "messages.send", &json!({"recipient": "ghost", "body": "x"}))),
        "Unknown agent: ghost"
    );
}

#[test]
fn waiting_notifies_the_coordinator_at_p2_and_records_the_wait() {
    let (_p, host) = host(false);
    let reviewer = caller(&host, "reviewer");
    let out = call(&host, &reviewer, "coordination.wait_for_signal", &json!({"reason": "need the diff"})).unwrap();
    assert!(out.output.starts_with("Wait state recorded; notified pm with msg_"), "{}", out.output);
    let q =
        MessageQuery { participant_a: Some("reviewer".into()), participant_b: Some("pm".into()), ..Default::default() };
    let sent = host.store.list_messages(&q).unwrap();
    assert_eq!(
        (sent[0].priority.as_str(), sent[0].body.as_str()),
        ("P2", "Waiting for future signals.\n\nReason: need the diff")
    );
    let waits = host
        .store
        .list_signals(&SignalQuery { kind: Some("coordination.wait_for_signal".into()), ..Default::default() })
        .unwrap();
    assert_eq!((waits[0].status.as_str(), waits[0].useful_effect), ("closed", true));

    let pm = caller(&host, "pm");
    let out = call(&host, &pm, "coordination.wait_for_signal", &json!({})).unwrap();
    assert_eq!(
        out.output, "Wait state recorded. Future signals will wake the agent.",
        "the coordinator does not notify itself"
    );
}

/// §10 item 5 (the report path in tool status) and §4.4.
#[test]
fn submit_writes_the_report_and_marks_the_project_submitted() {
    let (project, host) = host(false);
    let pm = caller(&host, "pm");
    let out = call(&host, &pm, "completion.submit", &json!({"report": "  # Done\n\nAll reviewed.  "})).unwrap();
    let path = project.dir.canonicalize().unwrap().join("final-report.md");
    assert_eq!(out.output, format!("Project submitted for user approval. Report: {}", path.display()));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "# Done\n\nAll reviewed.\n");
    assert_eq!(host.store.project().unwrap().status.as_str(), "submitted");
    let status = tool_status(&host);
    let submit = status.iter().find(|t| t["tool"] == "completion.submit").unwrap();
    assert_eq!(submit["submittedReportPath"], json!(path.display().to_string()));
}
