//! One controller per project (issue [Q]), with real processes and the real Docker engine:
//! `suzumio run` holds `.suzumio/controller.lock`; a second `run` exits 1 naming the first;
//! `status` says who serves; `tool call` and an `mcp` stdio session on a served project run in
//! the agent's one container through the serving controller (each call recorded and audited
//! once) while another agent runs activations, and the served agent's own calls keep working;
//! after a kill -9 of the serving controller a `tool call` runs on its own; and the control
//! socket is closed to other users. Needs a Docker engine (scripts/setup.sh) and the static
//! runner (scripts/test.sh builds it).

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::{Value, json};
use support::mcp_client;
use support::{Controller, TempProject, static_runner, text, wait_for};

const SCRIPT: &str = r#"
activations:
  - agent: pm
    when: "tick"
    repeat: true
    steps:
      - call: [{tool: file.write, input: {path: "/workspace/pm.md", content: "{{activationId}}"}}]
      - say: "ticked"
  - agent: reviewer
    when: "work"
    repeat: true
    steps:
      - call: [{tool: file.write, input: {path: "/workspace/served.md", content: "{{activationId}}"}}]
      - say: "done"
"#;

/// The `review` fixture named `name` (container names follow it), whose pm may write files.
fn project(name: &str) -> TempProject {
    let unique = std::process::id();
    let named = format!("name: {name}-{unique}");
    let project = TempProject::scripted(
        "review",
        SCRIPT,
        &[
            ("name: review-demo", &named),
            (
                "tools: [messages.send, coordination.wait_for_signal, completion.submit]",
                "tools: [messages.send, coordination.wait_for_signal, completion.submit, file.write]",
            ),
        ],
    );
    ok(&project.dir, &["start"]);
    project
}

/// `suzumio <command> <dir> <rest…>`, which must exit 0; its stdout.
fn ok(dir: &Path, args: &[&str]) -> String {
    let out = cli(dir, args);
    assert_eq!(out.status.code(), Some(0), "{args:?}:\n{}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

fn cli(dir: &Path, args: &[&str]) -> std::process::Output {
    // The directory follows the command: `send <dir>`, `tool call <dir>`.
    let at = if ["tool", "approvals"].contains(&args[0]) { 2 } else { 1 };
    let mut full = args[..at].to_vec();
    full.push(dir.to_str().unwrap());
    full.extend_from_slice(&args[at..]);
    std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(&full)
        .env("SUZUMIO_RUNNER_BIN", static_runner())
        .env_remove("SUZUMIO_API_TOKEN")
        .output()
        .expect("suzumio runs")
}

fn docker_controller(dir: &Path) -> Controller {
    let runner = static_runner();
    Controller::start_with_env(dir, &["--backend", "docker"], &[("SUZUMIO_RUNNER_BIN", runner.to_str().unwrap())])
}

fn api(base: &str, path: &str) -> Value {
    let projects = support::http("GET", &format!("{base}/api/projects"), &[], None).json();
    let name = projects[0]["name"].as_str().unwrap_or_else(|| panic!("no project: {projects}")).to_string();
    let response = support::http("GET", &format!("{base}/api/projects/{name}{path}"), &[], None);
    assert_eq!(response.status, 200, "{path}: {}", response.body);
    response.json()
}

/// The agent's activations, newest first.
fn activations(base: &str, agent: &str) -> Vec<Value> {
    api(base, &format!("/activations?agent={agent}&limit=200"))["items"].as_array().unwrap().clone()
}

fn idle(base: &str, agent: &str) -> bool {
    let agents = api(base, "/agents");
    let list = agents.as_array().or_else(|| agents["items"].as_array()).cloned().unwrap_or_default();
    list.iter().any(|a| a["id"] == agent && a["activeActivationId"].is_null())
}

/// Send `agent` a message and wait for the activation it starts to complete; its id.
fn activation_for(c: &Controller, dir: &Path, agent: &str, body: &str) -> String {
    activation_at(&c.base, Some(c), dir, agent, body)
}

fn activation_at(base: &str, c: Option<&Controller>, dir: &Path, agent: &str, body: &str) -> String {
    let before = activations(base, agent).len();
    ok(dir, &["send", agent, body]);
    wait_for(&format!("{agent}'s activation for {body:?} to complete"), c, || {
        let list = activations(base, agent);
        (list.len() > before && list.iter().all(|a| a["status"] != "running") && idle(base, agent))
            .then(|| list[0]["id"].as_str().unwrap().to_string())
    })
}

/// The `file.write` calls of `agent` whose target is `target`.
fn calls_at(c: &Controller, agent: &str, target: &str) -> Vec<Value> {
    let calls = api(&c.base, &format!("/tool-calls?agent={agent}&tool=file.write&limit=499"));
    calls["items"].as_array().unwrap().iter().filter(|t| t["target"] == target).cloned().collect()
}

/// The audit's decision lines for `file.write` calls of `path`.
fn decisions_for(dir: &Path, path: &str) -> usize {
    let audit = std::fs::read_to_string(dir.join(".suzumio/audit/permissions.jsonl")).unwrap_or_default();
    audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["kind"] == "decision" && e["tool"] == "file.write" && e["arguments"]["path"] == path)
        .count()
}

/// Lists the agent's tools, reads a file, writes one, over `suzumio mcp` (stdio).
const MCP_CLIENT: &str = r#"
import asyncio, json, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    suzumio, project, agent = sys.argv[1], sys.argv[2], sys.argv[3]
    params = StdioServerParameters(command=suzumio, args=["mcp", project, "--agent", agent])
    out = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            out.append(sorted(t.name for t in tools.tools))
            for name, args in [("file.read", {"path": "/workspace/cli-7.md"}),
                               ("file.write", {"path": "/workspace/mcp.md", "content": "from mcp"})]:
                result = await session.call_tool(name, args)
                out.append(result.model_dump(mode="json", by_alias=True, exclude_none=True))
    print(json.dumps({"results": out}))

asyncio.run(main())
"#;

#[test]
fn tool_calls_and_an_mcp_session_on_a_served_project_run_in_its_runner_and_leave_it_working() {
    let project = project("onectl-a");
    let dir = project.dir.as_path();
    let c = docker_controller(dir);
    // The served agent's runner is up and its own calls work.
    activation_for(&c, dir, "reviewer", "work 0");

    // Meanwhile the pm runs activations, one after another.
    let stop = Arc::new(AtomicBool::new(false));
    let ticks = Arc::new(AtomicUsize::new(0));
    let pm = {
        let (stop, ticks, dir, base) = (stop.clone(), ticks.clone(), dir.to_path_buf(), c.base.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                activation_at(&base, None, &dir, "pm", "tick");
                ticks.fetch_add(1, Ordering::SeqCst);
            }
        })
    };

    for i in 0..50 {
        let input = json!({"path": format!("/workspace/cli-{i}.md"), "content": format!("{i}")}).to_string();
        let out = cli(dir, &["tool", "call", "--agent", "reviewer", "file.write", &input]);
        assert_eq!(out.status.code(), Some(0), "call {i}:\n{}{}", text(&out.stdout), text(&out.stderr));
    }
    let printed = mcp_client::run(
        dir,
        "client.py",
        MCP_CLIENT,
        &[env!("CARGO_BIN_EXE_suzumio"), dir.to_str().unwrap(), "reviewer"],
    );
    let results = mcp_client::list(&printed, "results");
    assert!(results[0].as_array().unwrap().iter().any(|t| t == "file.write"), "{}", results[0]);
    assert_eq!(
        mcp_client::texts(&results[1]).trim(),
        "1: 7",
        "the file a tool call wrote, read over MCP (numbered lines): {}",
        results[1]
    );
    assert_ne!(results[1]["isError"], true, "{}", results[1]);
    assert_ne!(results[2]["isError"], true, "{}", results[2]);

    stop.store(true, Ordering::SeqCst);
    pm.join().expect("the pm's activations ran");
    assert!(ticks.load(Ordering::SeqCst) > 0, "the pm ran activations during the calls");

    // The served agent's own calls still work: the repro broke every one after a `tool call`.
    let last = activation_for(&c, dir, "reviewer", "work 1");
    let served = std::fs::read_to_string(dir.join("workspaces/reviewer/served.md")).unwrap();
    assert_eq!(served, last, "the model's file.write of the last activation ran");

    // Every call ran in the one container, was recorded once and audited once.
    for i in 0..50 {
        let target = format!("/workspace/cli-{i}.md");
        let calls = calls_at(&c, "reviewer", &target);
        assert_eq!(calls.len(), 1, "{target}: {calls:?}");
        assert_eq!(calls[0]["status"], "completed", "{calls:?}");
        assert_eq!(decisions_for(dir, &target), 1, "{target}: one audit decision");
        let written = std::fs::read_to_string(dir.join(format!("workspaces/reviewer/cli-{i}.md"))).unwrap();
        assert_eq!(written, i.to_string());
    }
    assert_eq!(calls_at(&c, "reviewer", "/workspace/mcp.md").len(), 1);
    let metrics = support::http("GET", &c.url("/metrics"), &[], None).body;
    let starts: Vec<&str> = metrics.lines().filter(|l| l.starts_with("suzumio_runner_starts")).collect();
    assert!(
        starts.iter().any(|l| l.contains("agent=\"reviewer\"") && l.ends_with(" 1")),
        "the reviewer's runner started once and was never replaced: {starts:?}"
    );
    assert!(!c.stderr().contains("did not connect"), "{}", c.stderr());
}

#[test]
fn a_second_run_exits_1_naming_the_first_and_status_says_who_serves() {
    let project = project("onectl-b");
    let dir = project.dir.as_path();
    let status = ok(dir, &["status"]);
    assert!(status.contains("not served"), "{status}");

    let c = Controller::start(dir, &[]);
    let pid = c.child.id();
    let second = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["run", dir.to_str().unwrap(), "--port", "0", "--backend", "process"])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1), "{}", text(&second.stderr));
    let said = text(&second.stderr);
    assert!(said.contains(&format!("pid {pid}")) && said.contains(&c.base), "names the first run: {said}");
    assert!(text(&second.stdout).is_empty(), "the second run served nothing: {}", text(&second.stdout));

    let status = ok(dir, &["status"]);
    assert!(status.contains(&format!("served by suzumio run (pid {pid}, {}", c.base)), "{status}");
    let json: Value = serde_json::from_str(&ok(dir, &["status", "--json"])).unwrap();
    assert_eq!(json["servedBy"]["pid"], pid, "{json}");
    assert_eq!(json["servedBy"]["url"], c.base, "{json}");
    assert_eq!(json["servedBy"]["command"], "run", "{json}");

    // The first run was not disturbed: it still serves.
    assert_eq!(support::http("GET", &c.url("/health"), &[], None).status, 200);
    assert_eq!(c.stop(), Some(0));
    let status = ok(dir, &["status"]);
    assert!(status.contains("not served"), "{status}");
}

#[test]
fn after_a_kill_9_of_the_serving_controller_a_tool_call_runs_on_its_own_and_run_starts_again() {
    let project = project("onectl-c");
    let dir = project.dir.as_path();
    let mut c = docker_controller(dir);
    activation_for(&c, dir, "reviewer", "work 0");
    let _ = c.child.kill();
    let _ = c.child.wait();

    let status = ok(dir, &["status"]);
    assert!(status.contains("not served"), "the lock died with the process: {status}");
    let input = json!({"path": "/workspace/alone.md", "content": "on its own"}).to_string();
    ok(dir, &["tool", "call", "--agent", "reviewer", "--backend", "docker", "file.write", &input]);
    assert_eq!(std::fs::read_to_string(dir.join("workspaces/reviewer/alone.md")).unwrap(), "on its own");

    let c = docker_controller(dir);
    activation_for(&c, dir, "reviewer", "work 1");
    assert_eq!(c.stop(), Some(0));
}

#[test]
fn the_control_socket_is_closed_to_other_users() {
    let project = project("onectl-d");
    let dir = project.dir.as_path();
    let c = Controller::start(dir, &[]);
    let socket = dir.join(".suzumio/controller/control.sock");
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&socket), 0o600);
    assert_eq!(mode(socket.parent().unwrap()), 0o700);
    // `nobody` tries to connect: the directory keeps it out.
    let script = format!(
        "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({:?})\n    print('connected')\nexcept OSError as e:\n    print(type(e).__name__)\n",
        socket.to_str().unwrap()
    );
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", &script])
        .output()
        .expect("setpriv (util-linux) runs");
    assert_eq!(text(&out.stdout).trim(), "PermissionError", "{}", text(&out.stderr));
    assert_eq!(c.stop(), Some(0));
}

#[test]
fn an_ask_handed_to_the_serving_controller_is_decided_once_and_runs_in_its_runner() {
    let ask = (
        "review.summarize, file.*, shell.exec]",
        "review.summarize, file.*, shell.exec]\n    permissions:\n      rules:\n        - {tool: file.delete, decision: ask, reason: \"deleting is looked at first\"}",
    );
    let project = TempProject::scripted(
        "review",
        SCRIPT,
        &[("name: review-demo", &format!("name: onectl-e-{}", std::process::id())), ask],
    );
    let dir = project.dir.as_path();
    ok(dir, &["start"]);
    let c = docker_controller(dir);
    let input = json!({"path": "/workspace/doomed.md", "content": "bye"}).to_string();
    ok(dir, &["tool", "call", "--agent", "reviewer", "file.write", &input]);

    let input = json!({"path": "/workspace/doomed.md"}).to_string();
    let call = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["tool", "call", dir.to_str().unwrap(), "--agent", "reviewer", "file.delete", &input])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pending: Vec<Value> = wait_for("the delete's approval request", Some(&c), || {
        let listed: Value = serde_json::from_str(&ok(dir, &["approvals", "list", "--json"])).ok()?;
        let list = listed.as_array()?.clone();
        (!list.is_empty()).then_some(list)
    });
    assert_eq!(pending.len(), 1, "one request for the one call: {pending:?}");
    assert_eq!(pending[0]["tool"], "file.delete");
    ok(dir, &["approvals", "allow", pending[0]["id"].as_str().unwrap()]);
    let out = call.wait_with_output_checked();
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!dir.join("workspaces/reviewer/doomed.md").exists(), "the allowed delete ran in the agent's workspace");

    let audit = std::fs::read_to_string(dir.join(".suzumio/audit/permissions.jsonl")).unwrap();
    let lines: Vec<Value> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["tool"] == "file.delete")
        .collect();
    let kinds: Vec<&str> = lines.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["decision", "resolution"], "{lines:?}");
    let listed: Value = serde_json::from_str(&ok(dir, &["approvals", "list", "--json"])).unwrap();
    assert_eq!(listed, json!([]), "nothing left pending");
    assert_eq!(c.stop(), Some(0));
}

#[test]
fn webui_entries_from_the_cli_run_in_the_serving_controller_whose_pack_state_they_share() {
    let project = project("onectl-f");
    let dir = project.dir.as_path();
    let c = Controller::start(dir, &[]);
    let entry = format!("/api/projects/{}/tool-ui/review-tools/review.rebuild", api_name(&c));
    let clis: Vec<_> = (0..10)
        .map(|_| {
            std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
                .args(["ui", dir.to_str().unwrap(), "review-tools/review.rebuild", r#"{"scope":"all"}"#])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let pages: Vec<_> = (0..10)
        .map(|_| {
            let url = c.url(&entry);
            std::thread::spawn(move || {
                support::http("POST", &url, &[("content-type", "application/json")], Some(r#"{"scope":"all"}"#)).status
            })
        })
        .collect();
    for cli in clis {
        let out = cli.wait_with_output_checked();
        assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    }
    for page in pages {
        assert_eq!(page.join().unwrap(), 200);
    }
    let cache: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("toolpack-state/review-tools/cache.json")).unwrap())
            .unwrap();
    assert_eq!(cache["rebuilds"], 20, "every read-modify-write kept: {cache}");
    let logged = c.stderr().matches("review cache rebuilt").count();
    assert_eq!(logged, 20, "the CLI's entries ran in the serving controller:\n{}", c.stderr());
    assert_eq!(c.stop(), Some(0));
}

fn api_name(c: &Controller) -> String {
    let projects = support::http("GET", &c.url("/api/projects"), &[], None).json();
    projects[0]["name"].as_str().unwrap().to_string()
}

trait WaitChecked {
    fn wait_with_output_checked(self) -> std::process::Output;
}

impl WaitChecked for std::process::Child {
    fn wait_with_output_checked(self) -> std::process::Output {
        self.wait_with_output().expect("the command ends")
    }
}

/// Calls `file.delete` over `suzumio mcp` (stdio) with a client that accepts every elicitation;
/// prints the result and the elicitations it was sent.
const ELICITING_CLIENT: &str = r#"
import asyncio, json, sys
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

async def main():
    suzumio, project, agent, path = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    asked = []
    async def elicit(context, params):
        asked.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        return types.ElicitResult(action="accept", content={"allow": True})
    params = StdioServerParameters(command=suzumio, args=["mcp", project, "--agent", agent])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicit) as session:
            await session.initialize()
            result = await session.call_tool("file.delete", {"path": path})
    print(json.dumps({"result": result.model_dump(mode="json", by_alias=True, exclude_none=True), "asked": asked}))

asyncio.run(main())
"#;

#[test]
fn an_mcp_session_on_a_served_project_is_asked_about_the_approval_the_serving_controller_made() {
    let ask = (
        "review.summarize, file.*, shell.exec]",
        "review.summarize, file.*, shell.exec]\n    permissions:\n      rules:\n        - {tool: file.delete, decision: ask, reason: \"deleting is looked at first\"}",
    );
    let name = format!("name: onectl-g-{}", std::process::id());
    let project = TempProject::scripted("review", SCRIPT, &[("name: review-demo", &name), ask]);
    let dir = project.dir.as_path();
    ok(dir, &["start"]);
    let c = docker_controller(dir);
    let input = json!({"path": "/workspace/doomed.md", "content": "bye"}).to_string();
    ok(dir, &["tool", "call", "--agent", "reviewer", "file.write", &input]);

    let printed = mcp_client::run(
        dir,
        "eliciting.py",
        ELICITING_CLIENT,
        &[env!("CARGO_BIN_EXE_suzumio"), dir.to_str().unwrap(), "reviewer", "/workspace/doomed.md"],
    );
    let asked = mcp_client::list(&printed, "asked");
    assert_eq!(asked.len(), 1, "{printed}");
    assert!(asked[0]["message"].as_str().unwrap().contains("deleting is looked at first"), "{}", asked[0]);
    assert_ne!(printed["result"]["isError"], true, "{printed}");
    assert!(!dir.join("workspaces/reviewer/doomed.md").exists(), "the allowed delete ran in the agent's workspace");
    let resolution = std::fs::read_to_string(dir.join(".suzumio/audit/permissions.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["tool"] == "file.delete" && e["kind"] == "resolution")
        .count();
    assert_eq!(resolution, 1, "the elicitation's answer resolved the serving controller's request once");
    assert_eq!(c.stop(), Some(0));
}
