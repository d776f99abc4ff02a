//! MCP servers as toolpacks, end to end: a real stdio server written with the official Python
//! SDK (`tests/fixtures/mcp/tally.py`, run by the venv scripts/setup.sh makes), declared as
//! `- mcp: {...}` and started by the agent's runner; the scripted model calls its tools through
//! the model loop of the real `suzumio run`. What the tests read is what happened: the calls'
//! recorded results, the discovery cache, the permission decisions.

mod support;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::mcp_client::VENV_PYTHON;
use support::{Controller, TempProject, suzumio, text};
use suzumio::store::ToolCallStatus;

const WAIT: Duration = Duration::from_secs(60);

/// The fixture server `tests/fixtures/mcp/<name>.py`.
fn server_script(name: &str) -> PathBuf {
    support::repo_root().join(format!("tests/fixtures/mcp/{name}.py"))
}

/// A project whose agent `counter` may use every tool of the `tally` server.
fn project(extra_mcp: &str, agent_extra: &str, script: &str) -> TempProject {
    project_serving("tally", extra_mcp, agent_extra, script)
}

/// A project whose agent `counter` may use every tool of the fixture server `server`, declared
/// as the MCP pack of the same id.
fn project_serving(server: &str, extra_mcp: &str, agent_extra: &str, script: &str) -> TempProject {
    assert!(
        Path::new(VENV_PYTHON).exists(),
        "{VENV_PYTHON} is missing: run scripts/setup.sh (it installs the official MCP SDK into a venv)"
    );
    let p = TempProject::copy_of("mcp");
    let yaml = format!(
        r#"name: mcp-toolpacks
task: Count things.
tools:
  toolpacks:
    - core
    - mcp: {{id: {server}, command: {VENV_PYTHON}, args: ["{script}"]{extra_mcp}}}
agents:
  counter:
    tools: [{server}.*, coordination.wait_for_signal]
{agent_extra}backend:
  runner:
    model: main
    models:
      providers: {{local: {{type: scripted, script: ./script.yaml}}}}
      presets: {{main: {{provider: local}}}}
"#,
        script = server_script(server).display()
    );
    std::fs::write(p.dir.join("suzumio.yaml"), yaml).unwrap();
    std::fs::write(p.dir.join("script.yaml"), script).unwrap();
    p
}

fn cli(dir: &Path, args: &[&str]) -> String {
    let out = suzumio(dir, args);
    assert!(out.status.success(), "suzumio {args:?}: {}{}", text(&out.stdout), text(&out.stderr));
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

/// `suzumio run --until-idle` on the process backend, which must succeed: what it printed.
fn run_until_idle(p: &TempProject) -> String {
    let out = suzumio(&p.dir, &["run", &dir_arg(p), "--backend", "process", "--until-idle", "--port", "0"]);
    let log = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{log}");
    log
}

fn dir_arg(p: &TempProject) -> String {
    p.dir.to_string_lossy().to_string()
}

fn output_text(output: &Option<Value>) -> String {
    output.as_ref().and_then(|o| o.get("output")).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn wait_for<T>(what: &str, ctl: &Controller, probe: impl FnMut() -> Option<T>) -> T {
    support::wait_for(what, Some(ctl), probe)
}

#[test]
fn a_scripted_agent_calls_an_mcp_servers_tools_and_the_list_is_cached_for_check() {
    let script = r#"
activations:
  - agent: counter
    steps:
      - call: [{tool: tally.add, input: {a: 2, b: 3}}]
      - call: [{tool: tally.echo, input: {message: hi}}]
      - call: [{tool: tally.add, input: {a: "two"}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;
    let p = project(", trusted: true", "", script);
    let dir = dir_arg(&p);
    // `check` lists a server it does not know yet (here as a local process), and caches it.
    let first = cli(&p.dir, &["check", &dir, "--backend", "process"]);
    assert!(first.contains("tally.add") && !first.contains("has not listed"), "{first}");
    assert!(p.dir.join(".suzumio/mcp/tally.json").exists());
    cli(&p.dir, &["send", &dir, "counter", "Add two and three."]);
    let log = run_until_idle(&p);

    let adds = support::tool_calls(&p.dir, "tally.add");
    assert_eq!(adds.len(), 2, "{adds:?}\n{log}");
    assert_eq!(adds[0].0, ToolCallStatus::Completed, "{adds:?}");
    assert_eq!(output_text(&adds[0].1), "5");
    assert_eq!(adds[0].1.as_ref().unwrap()["structuredContent"], json!({"result": 5}));
    // The server's schema is checked before the call reaches it.
    assert_eq!(adds[1].0, ToolCallStatus::Failed, "{adds:?}");
    let schema_error = adds[1].2.as_deref().unwrap_or_default();
    assert!(schema_error.contains("/a") && schema_error.contains("integer"), "{schema_error}");
    let echoes = support::tool_calls(&p.dir, "tally.echo");
    assert_eq!(output_text(&echoes[0].1), "Echo: hi", "{echoes:?}");

    // The list is cached with the server's name and version, so check works offline.
    let cache: Value =
        serde_json::from_str(&std::fs::read_to_string(p.dir.join(".suzumio/mcp/tally.json")).unwrap()).unwrap();
    assert_eq!(
        (&cache["listing"]["serverName"], &cache["listing"]["serverVersion"]),
        (&json!("tally"), &json!("1.4.2"))
    );
    // From the cache: no runner, no Docker engine needed.
    let offline = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["check", &dir])
        .env("DOCKER_HOST", "unix:///nonexistent.sock")
        .output()
        .unwrap();
    let after = format!("{}{}", text(&offline.stdout), text(&offline.stderr));
    assert!(offline.status.success() && after.contains("tally.grow") && !after.contains("has not listed"), "{after}");
    let tools = cli(&p.dir, &["tools", &dir]);
    for tool in ["tally.add", "tally.echo", "tally.crash", "tally.grow"] {
        assert!(tools.contains(tool), "{tool} missing from:\n{tools}");
    }
}

/// Regression: the first `check` of a project with two servers warned that one "has not
/// listed its tools yet" while it was being listed (the warnings of the project as rebuilt
/// with the other's list), and printed the runner's own info lines. Now it prints the two
/// servers' tools, and no warning.
#[test]
fn the_first_check_of_two_servers_warns_about_neither_while_listing_them() {
    let p = project("", "", "activations: []\n");
    let path = p.dir.join("suzumio.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let entry = yaml.lines().find(|l| l.contains("- mcp: {id: tally")).unwrap().to_string();
    let yaml = yaml
        .replace(&entry, &format!("{entry}\n{}", entry.replace("id: tally", "id: second")))
        .replace("tools: [tally.*", "tools: [tally.*, second.*");
    std::fs::write(&path, yaml).unwrap();
    let out = suzumio(&p.dir, &["check", &dir_arg(&p), "--backend", "process"]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("tally (mcp, 5 tools)") && stdout.contains("second (mcp, 5 tools)"), "{stdout}");
    assert!(!stderr.contains("has not listed"), "{stderr}");
    assert!(!stderr.contains("connected to the controller"), "the runner is as quiet as the controller: {stderr}");
}

#[test]
fn a_server_that_cannot_start_is_named_by_check_with_why() {
    let p = project("", "", "activations: []\n");
    let yaml =
        std::fs::read_to_string(p.dir.join("suzumio.yaml")).unwrap().replace(VENV_PYTHON, "/nonexistent/python3");
    std::fs::write(p.dir.join("suzumio.yaml"), yaml).unwrap();
    let said = cli(&p.dir, &["check", &dir_arg(&p), "--backend", "process"]);
    assert!(
        said.contains("the MCP server tally has not listed its tools yet: the MCP server tally could not be started (`/nonexistent/python3`)"),
        "{said}"
    );
}

#[test]
fn an_untrusted_servers_read_only_claim_does_not_loosen_auto_mode_and_trusted_does() {
    let script = "activations: []\n";
    let auto = "    permissionMode: auto\n";
    let explain = |p: &TempProject| {
        cli(&p.dir, &["permissions", "explain", &dir_arg(p), "counter", "tally.add", r#"{"a": 1, "b": 2}"#])
    };
    let entry = |p: &TempProject, tool: &str| -> Value {
        let listed: Value = serde_json::from_str(&cli(&p.dir, &["tools", &dir_arg(p), "--json"])).unwrap();
        listed.as_array().unwrap().iter().find(|t| t["name"] == tool).cloned().unwrap_or_else(|| panic!("{listed}"))
    };
    for (trusted, expected) in [("", "ask"), (", trusted: true", "allow")] {
        let p = project(trusted, auto, script);
        // Discovery through a real run of the runner (no activation: nothing was sent).
        run_until_idle(&p);
        let said = explain(&p);
        let decision = said.lines().find(|l| l.trim_start().starts_with("decision")).unwrap_or_default();
        assert!(decision.contains(expected), "trusted={trusted:?}: {said}");
        let add = entry(&p, "tally.add");
        if trusted.is_empty() {
            // Why it asks, and how to trust the server.
            assert!(
                said.contains(
                    "tally.add claims to be read-only, but the claim comes from an MCP server that is not trusted"
                ),
                "{said}"
            );
            assert!(said.contains("add `trusted: true` to its `- mcp:` entry"), "{said}");
            // What the server claimed, shown as advisory; what counts has none of it.
            assert_eq!(add["annotations"], json!({}), "{add}");
            assert_eq!(add["serverAnnotations"], json!({"readOnlyHint": true, "destructiveHint": false}), "{add}");
            let note = add["serverAnnotationsNote"].as_str().unwrap_or_default();
            assert!(note.starts_with("advisory: claimed by the MCP server tally, which is not trusted"), "{add}");
        } else {
            assert_eq!(add["annotations"], json!({"readOnlyHint": true, "destructiveHint": false}), "{add}");
            assert!(add.get("serverAnnotations").is_none() && add.get("serverAnnotationsNote").is_none(), "{add}");
        }
    }
    // A rule still decides, whatever the server claims.
    let rule = "    permissionMode: full-access\n    permissions:\n      rules:\n        - {tool: tally.add, decision: deny, reason: no sums}\n";
    let p = project(", trusted: true", rule, script);
    run_until_idle(&p);
    let said = explain(&p);
    assert!(said.contains("deny") && said.contains("no sums"), "{said}");
}

/// The Tools page of a tool of an untrusted server, in a real browser: what the server claimed,
/// marked advisory (with why, as its title), beside the decision auto mode makes without it.
#[tokio::test(flavor = "multi_thread")]
async fn the_tools_page_shows_an_untrusted_servers_claims_as_advisory() {
    let p = project("", "    permissionMode: auto\n", "activations: []\n");
    let dir = dir_arg(&p);
    tokio::task::block_in_place(|| cli(&p.dir, &["check", &dir, "--backend", "process"]));
    let ctl = tokio::task::block_in_place(|| Controller::start(&p.dir, &[]));
    let b = webdriver::Browser::start().await.unwrap_or_else(|e| panic!("the browser tests need Chromium: {e}"));
    let outcome = async {
        b.goto(&ctl.url("/#/tools/tally.add")).await?;
        let (claims, said) = b.wait_for_text_of("[data-server-claims]", "advisory").await?;
        assert_eq!(said, "server says not destructive, read-only (advisory)");
        let why = claims.attr("title").await?.unwrap_or_default();
        assert!(why.contains("claimed by the MCP server tally, which is not trusted"), "{why}");
        let (_, access) = b.wait_for_text_of(r#"[data-tool-access] tr[data-agent="counter"]"#, "ask").await?;
        assert!(access.contains("mode auto"), "{access}");
        webdriver::Result::Ok(())
    }
    .await;
    if let Err(e) = outcome {
        let html = b.source().await.unwrap_or_default();
        panic!("{e}\npage:\n{html}\ncontroller:\n{}", ctl.stderr());
    }
    assert_eq!(tokio::task::block_in_place(|| ctl.stop()), Some(0));
}

#[test]
fn a_server_that_crashes_mid_call_gives_a_clear_error_and_the_next_call_restarts_it() {
    let script = r#"
activations:
  - agent: counter
    steps:
      - call: [{tool: tally.pid, input: {}}]
      - call: [{tool: tally.crash, input: {}}]
      - call: [{tool: tally.pid, input: {}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;
    let p = project(", trusted: true", "", script);
    let dir = dir_arg(&p);
    cli(&p.dir, &["send", &dir, "counter", "Crash it."]);
    run_until_idle(&p);
    let crash = support::tool_calls(&p.dir, "tally.crash");
    assert_eq!(crash[0].0, ToolCallStatus::Failed, "{crash:?}");
    let error = crash[0].2.as_deref().unwrap_or_default();
    assert!(
        error.contains("the MCP server tally went away during `crash`")
            && error.contains("started again at the next call"),
        "{error}"
    );
    let pids = support::tool_calls(&p.dir, "tally.pid");
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert!(pids.iter().all(|c| c.0 == ToolCallStatus::Completed), "{pids:?}");
    assert_ne!(output_text(&pids[0].1), output_text(&pids[1].1), "a new server process answered");
}

#[test]
fn a_list_changed_notification_brings_a_new_tool_to_the_next_activation() {
    let script = r#"
activations:
  - agent: counter
    steps:
      - call: [{tool: tally.grow, input: {}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: next}}]
  - agent: counter
    steps:
      - call: [{tool: tally.grown, input: {note: later}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;
    let p = project(", trusted: true", "", script);
    let dir = dir_arg(&p);
    cli(&p.dir, &["send", &dir, "counter", "Grow."]);
    let ctl = Controller::start(&p.dir, &[]);
    wait_for("the grow call", &ctl, || {
        support::tool_calls(&p.dir, "tally.grow").first().filter(|c| c.0 == ToolCallStatus::Completed).cloned()
    });
    wait_for("the new list in the cache", &ctl, || {
        let cache = std::fs::read_to_string(p.dir.join(".suzumio/mcp/tally.json")).ok()?;
        cache.contains("\"grown\"").then_some(())
    });
    cli(&p.dir, &["send", &dir, "counter", "Use the new tool."]);
    let grown = wait_for("the grown call", &ctl, || {
        support::tool_calls(&p.dir, "tally.grown").first().filter(|c| c.0 != ToolCallStatus::Running).cloned()
    });
    assert_eq!(grown.0, ToolCallStatus::Completed, "{grown:?}\n{}", ctl.stderr());
    assert_eq!(output_text(&grown.1), "grown: later");
    assert!(ctl.stderr().contains("changed its tools (new: grown)"), "{}", ctl.stderr());
    assert_eq!(ctl.stop(), Some(0));
}

/// The controller's resident memory now (`VmRSS` of `/proc/<pid>/status`), in KiB.
fn resident_kib(ctl: &Controller) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", ctl.child.id())).expect("the controller runs");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in {status}"))
}

/// Regression: every list change kept its project version for the life of the process (and
/// after 64 a change waited for a restart); a version is now freed with its last reader.
#[test]
fn five_hundred_list_changes_in_one_run_are_each_taken_and_memory_stays_flat() {
    const WARM_UP: u32 = 100;
    const CHANGES: u32 = 500;
    // A version kept costs about 240 KiB (400 kept ones grew it by 96 MiB), freed ones about
    // nothing (76 KiB over the 400); the limit is some 30 versions.
    const GROWTH_LIMIT_KIB: u64 = 8 * 1024;
    // Each change's list is read before the next is made (see changing.py).
    let script = format!(
        r#"
activations:
  - agent: counter
    steps:
      - call: [{{tool: changing.churn, input: {{count: {WARM_UP}}}}}]
      - call: [{{tool: coordination.wait_for_signal, input: {{reason: warm}}}}]
  - agent: counter
    steps:
      - call: [{{tool: changing.churn, input: {{count: {rest}}}}}]
      - call: [{{tool: coordination.wait_for_signal, input: {{reason: churned}}}}]
  - agent: counter
    steps:
      - call: [{{tool: changing.step_{CHANGES}, input: {{}}}}]
      - call: [{{tool: coordination.wait_for_signal, input: {{reason: done}}}}]
"#,
        rest = CHANGES - WARM_UP
    );
    let p = project_serving("changing", ", trusted: true, timeoutMs: 600000", "", &script);
    let dir = dir_arg(&p);
    let ctl = Controller::start(&p.dir, &[]);
    let taken = |n: u32| ctl.stderr().contains(&format!("changed its tools (new: step_{n}"));
    let churned = |count: u32| {
        wait_for("the churn call", &ctl, || {
            let all = support::tool_calls(&p.dir, "changing.churn");
            all.iter()
                .find(|c| c.0 == ToolCallStatus::Completed && output_text(&c.1).ends_with(&format!(" {count}")))
                .cloned()
        })
    };

    cli(&p.dir, &["send", &dir, "counter", "Warm up."]);
    churned(WARM_UP);
    wait_for("the warm-up's last list", &ctl, || taken(WARM_UP).then_some(()));
    let warm = resident_kib(&ctl);

    cli(&p.dir, &["send", &dir, "counter", "Churn."]);
    churned(CHANGES);
    wait_for("the last list", &ctl, || taken(CHANGES).then_some(()));
    let after = resident_kib(&ctl);

    let log = ctl.stderr();
    let missed: Vec<u32> = (1..=CHANGES)
        .filter(|n| {
            let gone = if *n == 1 { String::new() } else { format!("; gone: step_{}", n - 1) };
            !log.contains(&format!("changed its tools (new: step_{n}{gone})"))
        })
        .collect();
    assert!(missed.is_empty(), "list changes not taken: {missed:?}\n{log}");
    // The latest list serves the next activation.
    cli(&p.dir, &["send", &dir, "counter", "Use the last tool."]);
    let last = wait_for("the last step's call", &ctl, || {
        support::tool_calls(&p.dir, &format!("changing.step_{CHANGES}"))
            .first()
            .filter(|c| c.0 != ToolCallStatus::Running)
            .cloned()
    });
    assert_eq!(output_text(&last.1), format!("step {CHANGES}"), "{last:?}");
    let grown = after.saturating_sub(warm);
    eprintln!("controller RSS after {WARM_UP} list changes: {warm} KiB, after {CHANGES}: {after} KiB");
    assert!(grown < GROWTH_LIMIT_KIB, "the controller grew by {grown} KiB over {} list changes", CHANGES - WARM_UP);
    assert_eq!(ctl.stop(), Some(0));
}

/// The tally server over Streamable HTTP on a free loopback port, until dropped.
struct HttpServer {
    child: std::process::Child,
    url: String,
}

impl HttpServer {
    fn start() -> HttpServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new(VENV_PYTHON)
            .arg("-c")
            .arg(format!(
                "import runpy, sys; sys.argv = ['tally']; m = runpy.run_path({:?}); m['server'].run('streamable-http', host='127.0.0.1', port={port})",
                server_script("tally").display().to_string()
            ))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("python starts");
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(start.elapsed() < WAIT, "the HTTP MCP server did not listen on {port}");
            std::thread::sleep(Duration::from_millis(100));
        }
        HttpServer { child, url: format!("http://127.0.0.1:{port}/mcp") }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_http_mcp_server_is_reached_from_the_controller_under_the_egress_rules() {
    let server = HttpServer::start();
    let script = r#"
activations:
  - agent: counter
    steps:
      - call: [{tool: remote.add, input: {a: 20, b: 22}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;
    let write = |p: &TempProject, allow: bool| {
        let yaml = format!(
            r#"name: mcp-http
task: Count remotely.
tools:
  toolpacks:
    - core
    - mcp: {{id: remote, url: "{url}", headers: {{X-Team: blue}}, trusted: true}}
{web}agents:
  counter:
    tools: [remote.*, coordination.wait_for_signal]
backend:
  runner:
    model: main
    models:
      providers: {{local: {{type: scripted, script: ./script.yaml}}}}
      presets: {{main: {{provider: local}}}}
"#,
            url = server.url,
            web = if allow { "  webFetch: {allowPrivateAddresses: true}\n" } else { "" }
        );
        std::fs::write(p.dir.join("suzumio.yaml"), yaml).unwrap();
        std::fs::write(p.dir.join("script.yaml"), script).unwrap();
    };

    // Loopback is a private address: refused unless the project allows it.
    let refused = TempProject::copy_of("mcp");
    write(&refused, false);
    let log = run_until_idle(&refused);
    assert!(log.contains("the MCP server remote refuses 127.0.0.1") && log.contains("allowPrivateAddresses"), "{log}");
    assert!(!refused.dir.join(".suzumio/mcp/remote.json").exists());

    let allowed = TempProject::copy_of("mcp");
    write(&allowed, true);
    let dir = dir_arg(&allowed);
    cli(&allowed.dir, &["send", &dir, "counter", "Add."]);
    let log = run_until_idle(&allowed);
    let adds = support::tool_calls(&allowed.dir, "remote.add");
    assert_eq!(adds.len(), 1, "{log}");
    assert_eq!(output_text(&adds[0].1), "42", "{adds:?}");
    // The cache keeps the header's hash, not its value.
    let cache = std::fs::read_to_string(allowed.dir.join(".suzumio/mcp/remote.json")).unwrap();
    assert!(cache.contains("\"serverVersion\": \"1.4.2\"") && !cache.contains("blue"), "{cache}");
}

#[test]
fn a_pinned_list_is_used_and_a_server_listing_something_else_is_reported() {
    let script = r#"
activations:
  - agent: counter
    steps:
      - call: [{tool: tally.add, input: {a: 1, b: 1}}]
      - call: [{tool: tally.retired, input: {}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;
    let pin = r#", trusted: true, tools: [{name: add, inputSchema: {type: object, properties: {a: {type: integer}, b: {type: integer}}, required: [a, b]}}, retired]"#;
    let p = project(pin, "", script);
    let dir = dir_arg(&p);
    // Pinned: check needs no server at all.
    let pinned = cli(&p.dir, &["check", &dir]);
    assert!(pinned.contains("allowed tools (3): coordination.wait_for_signal, tally.add, tally.retired"), "{pinned}");
    cli(&p.dir, &["send", &dir, "counter", "Add."]);
    let log = run_until_idle(&p);
    assert!(
        log.contains("tally 1.4.2 lists other tools than the ones pinned in the config (new: crash, echo, grow, pid; gone: retired; changed: add); the pinned list is used"),
        "{log}"
    );
    assert_eq!(output_text(&support::tool_calls(&p.dir, "tally.add")[0].1), "2");
    // A pinned tool the server no longer has: the server's own answer, as a failed call.
    let retired = &support::tool_calls(&p.dir, "tally.retired")[0];
    assert_eq!(retired.0, ToolCallStatus::Failed, "{retired:?}");
    // And check reports it from what the run saw.
    let after = cli(&p.dir, &["check", &dir]);
    assert!(
        after.contains("listed other tools at ")
            && after.contains("(new: crash, echo, grow, pid; gone: retired; changed: add)"),
        "{after}"
    );
    assert!(after.contains("allowed tools (3)"), "{after}");
}

/// server-everything (npm, the MCP reference server) in the agent's hardened container, from
/// the test image: a scripted agent in `auto` mode sums through it (a rule allows `get-sum`),
/// its `echo` is asked although the server says it is read-only, and a server killed in the
/// middle of a long call fails that call clearly while the next call starts it again.
#[test]
fn server_everything_runs_in_the_agents_container_under_its_permissions() {
    let image = support::mcp_image::mcp_image();
    support::static_runner();
    let script = r#"
activations:
  - agent: counter
    steps:
      - call: [{tool: everything.get-sum, input: {a: 2, b: 3}}]
      - call: [{tool: everything.echo, input: {message: from the container}}]
      - call: [{tool: everything.trigger-long-running-operation, input: {duration: 60, steps: 6}}]
      - call: [{tool: everything.get-sum, input: {a: 40, b: 2}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;
    let p = TempProject::copy_of("mcp");
    let unique = p.dir.file_name().unwrap().to_string_lossy().rsplit('-').next().unwrap().to_lowercase();
    let name = format!("mcp-everything-{unique}");
    let args: Vec<String> = support::mcp_image::EVERYTHING_ARGS.iter().map(|a| format!("{a:?}")).collect();
    let yaml = format!(
        r#"name: {name}
task: Sum in the container.
tools:
  toolpacks:
    - core
    - mcp: {{id: everything, command: {command}, args: [{args}]}}
agents:
  counter:
    permissionMode: auto
    tools: [everything.*, coordination.wait_for_signal]
    permissions:
      rules:
        - {{tool: everything.get-sum, decision: allow, reason: sums are fine}}
        - {{tool: everything.trigger-long-running-operation, decision: allow, reason: waiting is fine}}
backend:
  image: {image}
  runner:
    model: main
    models:
      providers: {{local: {{type: scripted, script: ./script.yaml}}}}
      presets: {{main: {{provider: local}}}}
"#,
        command = support::mcp_image::EVERYTHING_COMMAND,
        args = args.join(", "),
    );
    std::fs::write(p.dir.join("suzumio.yaml"), yaml).unwrap();
    std::fs::write(p.dir.join("script.yaml"), script).unwrap();
    let dir = dir_arg(&p);
    cli(&p.dir, &["send", &dir, "counter", "Sum it up."]);
    let ctl = Controller::start(&p.dir, &["--backend", "docker"]);

    let sum = wait_for("the first sum", &ctl, || {
        support::tool_calls(&p.dir, "everything.get-sum").first().filter(|c| c.0 != ToolCallStatus::Running).cloned()
    });
    assert_eq!(sum.0, ToolCallStatus::Completed, "{sum:?}\n{}", ctl.stderr());
    assert!(output_text(&sum.1).contains('5'), "{sum:?}");

    // `echo` says it is read-only; the server is not trusted, so auto mode asks.
    let pending = wait_for("the echo approval request", &ctl, || {
        let listed = suzumio(&p.dir, &["approvals", "list", &dir, "--json"]);
        let list: Vec<Value> = serde_json::from_slice(&listed.stdout).ok()?;
        list.into_iter().find(|r| r["tool"] == "everything.echo")
    });
    let id = pending["id"].as_str().unwrap().to_string();
    cli(&p.dir, &["approvals", "allow", &dir, &id]);
    let echo = wait_for("the echo result", &ctl, || {
        support::tool_calls(&p.dir, "everything.echo").first().filter(|c| c.0 != ToolCallStatus::Running).cloned()
    });
    assert!(output_text(&echo.1).contains("from the container"), "{echo:?}");

    // Kill the server inside the container while the long call runs.
    wait_for("the long call to start", &ctl, || {
        support::tool_calls(&p.dir, "everything.trigger-long-running-operation").first().cloned()
    });
    // The runner logs each call it hands to a live server: kill the server only once this one
    // was handed over (killed before, it would be restarted for the call instead).
    let container = suzumio::backend::container_name(&name, "counter");
    wait_for("the runner to hand the long call to the server", &ctl, || {
        let logs = std::process::Command::new("docker").args(["logs", &container]).output().ok()?;
        let logs = format!("{}{}", text(&logs.stdout), text(&logs.stderr));
        logs.contains("calling trigger-long-running-operation on the MCP server everything").then_some(())
    });
    let killed = std::process::Command::new("docker")
        .args(["exec", &container, "sh", "-c", // `[t]`: the pattern does not match this script's own command line.
            "for p in /proc/[0-9]*; do grep -q 'server-everything/dis[t]' $p/cmdline 2>/dev/null && kill -9 ${p#/proc/}; done; echo killed"])
        .output()
        .expect("docker exec");
    assert!(
        text(&killed.stdout).contains("killed"),
        "docker exec {container}: {}{}",
        text(&killed.stdout),
        text(&killed.stderr)
    );
    let long = wait_for("the long call to fail", &ctl, || {
        support::tool_calls(&p.dir, "everything.trigger-long-running-operation")
            .first()
            .filter(|c| c.0 != ToolCallStatus::Running)
            .cloned()
    });
    assert_eq!(long.0, ToolCallStatus::Failed, "{long:?}");
    let error = long.2.as_deref().unwrap_or_default();
    assert!(
        error.contains("went away during `trigger-long-running-operation`")
            && error.contains("started again at the next call"),
        "{error}"
    );
    let sums = wait_for("the sum after the restart", &ctl, || {
        let all = support::tool_calls(&p.dir, "everything.get-sum");
        (all.len() == 2 && all[1].0 != ToolCallStatus::Running).then_some(all)
    });
    assert_eq!(sums[1].0, ToolCallStatus::Completed, "{sums:?}");
    assert!(output_text(&sums[1].1).contains("42"), "{sums:?}");
    assert_eq!(ctl.stop(), Some(0));
}
