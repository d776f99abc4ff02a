//! Per-agent tool switches end to end (issue [V] #25, point 2): a real `suzumio run` against a
//! local OpenAI-compatible server that plays the model and records every request body as the
//! bytes it received. A group switched off from the CLI while the agent works leaves its next
//! request (the tools before it stay in place), the cached prefix is kept, a call of it by a
//! model that ignores its list is refused with who switched it and how to switch it on, and so
//! is one from `suzumio tool call`; switched on again from the API it joins the end of the list
//! and runs. The event log and the audit say who switched what. Names an agent does not have
//! are clear errors from the CLI (exit 2) and the API (4xx).

#[path = "support/model_stream.rs"]
mod model_stream;
mod support;

use model_stream::{Gate, Reply, StreamServer, Turn, call, tool_names, tool_result};
use serde_json::{Value, json};
use support::{Controller, TempProject};

/// The task: a project's specification, as large as real ones are next to a few tool
/// definitions (each request carries it in the system prompt).
fn specification() -> String {
    (0..1_500)
        .map(|i| format!("- Requirement {i}: the notes keep section {i} as written and link it from the index.\n"))
        .collect()
}

fn project(model_url: &str) -> TempProject {
    let project = TempProject::copy_of("review");
    std::fs::write(project.dir.join("spec.md"), specification()).unwrap();
    std::fs::write(
        project.dir.join("suzumio.yaml"),
        format!(
            r#"name: switches
task: "@import(spec.md)"
tools:
  toolpacks: [core, shell]
agents:
  writer:
    tools: [file.read, file.write, shell.exec]
  other:
    tools: [file.read, messages.send]
scheduler:
  noEffectNudge: {{enabled: false}}
backend:
  runner:
    model: main
    models:
      providers:
        local: {{type: openai-compatible, baseURL: '{model_url}/v1', apiKey: sk-test}}
      presets: {{main: {{provider: local, model: m, stream: false}}}}
"#
        ),
    )
    .unwrap();
    project
}

/// How many leading bytes two request bodies share.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The prefix share of a run's requests, as the server received them (the bodies' bytes): for
/// each request after the first, the bytes of the previous request that it starts with — what
/// a provider that cached the previous request's prompt can serve from its cache — summed over
/// the run and divided by the previous requests' bytes summed. 1.0: every request starts with
/// the whole previous one.
fn prefix_share(bodies: &[Vec<u8>]) -> f64 {
    let (shared, total) = bodies
        .windows(2)
        .fold((0usize, 0usize), |(s, t), pair| (s + common_prefix(&pair[0], &pair[1]), t + pair[0].len()));
    shared as f64 / total as f64
}

/// A command, from a test with or without a runtime (the model server's tasks keep running).
fn cli(project: &TempProject, args: &[&str]) -> std::process::Output {
    blocking(|| support::suzumio(&project.dir, args))
}

/// `f` on this thread, telling the runtime (if any) that it blocks.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => tokio::task::block_in_place(f),
        Err(_) => f(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_switched_off_mid_run_leaves_the_next_request_and_comes_back_at_its_end() {
    let (off, on) = (Gate::new(), Gate::new());
    let server = StreamServer::start(vec![
        call("c1", "file_write", json!({"path": "a.txt", "content": "first"})),
        call("c2", "shell_exec", json!({"command": "echo one"})),
        // Answered once the test switched the `files` group off.
        Reply::Gated(off.clone(), Box::new(call("c3", "shell_exec", json!({"command": "echo two"})))),
        // A model that ignores its list and calls the switched-off tool anyway.
        call("c4", "file_write", json!({"path": "stale.txt", "content": "must not be written"})),
        // Answered once the test switched the group back on.
        Reply::Gated(on.clone(), Box::new(call("c5", "shell_exec", json!({"command": "echo three"})))),
        call("c6", "file_write", json!({"path": "b.txt", "content": "back"})),
        Reply::Json(model_stream::openai_json(&Turn::new(&["Done."]))),
    ])
    .await;
    let project = project(&server.url);
    let dir = project.dir.to_str().unwrap().to_string();
    let sent = cli(&project, &["send", &dir, "writer", "Write the notes."]);
    assert_eq!(sent.status.code(), Some(0), "{}", support::text(&sent.stderr));
    let c = blocking(|| Controller::start(&project.dir, &[]));

    support::wait_for_async("the third request", async || (server.requests().len() >= 3).then_some(())).await;
    let switched = cli(&project, &["tools", "off", &dir, "writer", "group:files"]);
    assert_eq!(switched.status.code(), Some(0), "{}", support::text(&switched.stderr));
    let said = support::text(&switched.stdout);
    assert!(
        said.contains("switched off for writer by cli (") && said.contains("group:files (file.read, file.write)"),
        "{said}"
    );

    // Another caller that ignores the list: `suzumio tool call`, handed to the serving
    // controller. Only `writer` has the group off: `other`'s file.read is not refused for it.
    let other = cli(&project, &["tool", "call", &dir, "--agent", "other", "file.read", r#"{"path":"missing.txt"}"#]);
    assert!(!support::text(&other.stderr).contains("switched off"), "{}", support::text(&other.stderr));
    let put = |agent: &str, what: &str, body: &str| {
        let url = c.url(&format!("/api/projects/switches/agents/{agent}/{what}"));
        blocking(|| support::http("PUT", &url, &[], Some(body)))
    };
    let answer = put("other", "tools/file.read", r#"{"enabled": false}"#);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let refused = cli(&project, &["tool", "call", &dir, "--agent", "other", "file.read", r#"{"path":"a.txt"}"#]);
    let why = support::text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{why}");
    assert!(why.contains("file.read is switched off for other by api at "), "{why}");
    assert!(why.contains("suzumio tools on <project> other file.read"), "says how to switch it on: {why}");
    off.open();

    support::wait_for_async("the fifth request", async || (server.requests().len() >= 5).then_some(())).await;
    let answer = put("writer", "tool-groups/files", r#"{"enabled": true}"#);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["switched"][0]["changed"], json!(["file.read", "file.write"]), "{}", answer.body);
    on.open();

    blocking(|| {
        support::wait_for("the activation to end", Some(&c), || {
            let out = cli(&project, &["activations", &dir, "--agent", "writer", "--json"]);
            let list: Value = serde_json::from_slice(&out.stdout).ok()?;
            let first = list.as_array()?.last()?.clone();
            (first["status"] == "completed" || first["status"] == "failed").then_some(())
        })
    });

    let requests = server.requests();
    let steps: Vec<String> = requests
        .iter()
        .map(|r| {
            let last = r["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
            format!("{:?} <- {}", tool_names(r), last.to_string().chars().take(300).collect::<String>())
        })
        .collect();
    assert_eq!(requests.len(), 7, "one request per step:\n{}", steps.join("\n"));
    let all = ["file_read", "file_write", "shell_exec"];
    assert_eq!(tool_names(&requests[0]), all);
    assert_eq!(tool_names(&requests[2]), all, "built before the switch");
    // Gone from the next request; what stays keeps its order.
    assert_eq!(tool_names(&requests[3]), ["shell_exec"]);
    let stale = tool_result(&requests[4], "c4");
    assert!(stale.contains("file.write is switched off for writer by cli ("), "{stale}");
    assert!(stale.contains("suzumio tools on <project> writer group:files"), "{stale}");
    assert!(!project.dir.join("workspaces/writer/stale.txt").exists(), "a switched-off tool never runs");
    assert_eq!(tool_names(&requests[4]), ["shell_exec"]);
    // Back on: at the end of the list, so the list sent before is still its start.
    assert_eq!(tool_names(&requests[5]), ["shell_exec", "file_read", "file_write"]);
    assert!(tool_result(&requests[6], "c6").contains("b.txt"), "it runs again");
    assert_eq!(std::fs::read_to_string(project.dir.join("workspaces/writer/b.txt")).unwrap(), "back");

    // The system prompt (first in every request) is the same throughout: a switch does not
    // rewrite it, so the whole conversation stays cached.
    for (i, r) in requests.iter().enumerate() {
        assert_eq!(r["messages"][0], requests[0]["messages"][0], "request {i}'s system prompt");
    }
    let bodies = server.raw_requests();
    let share = prefix_share(&bodies);
    eprintln!("prefix share over {} requests: {share:.4}", bodies.len());
    assert!(share >= 0.95, "prefix share {share}");
    // Each request, the switched ones included, starts with all of the previous one's messages.
    for (i, pair) in bodies.windows(2).enumerate() {
        let before: Value = serde_json::from_slice(&pair[0]).unwrap();
        let messages = serde_json::to_vec(&before["messages"]).unwrap();
        let shared = common_prefix(&pair[0], &pair[1]);
        let start = pair[0].windows(12).position(|w| w == b"\"messages\":[").unwrap() + 12;
        assert!(shared >= start + messages.len() - 2, "request {} lost part of request {i}'s messages", i + 1);
    }

    // The event log and the audit say who switched what.
    let events = blocking(|| support::http("GET", &c.url("/api/projects/switches/events?limit=999"), &[], None)).json();
    let switches: Vec<Value> = events["items"]
        .as_array()
        .or(events.as_array())
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "tools.switched")
        .map(|e| e["data"].clone())
        .collect();
    assert_eq!(switches.len(), 3, "{switches:#?}");
    assert_eq!(switches[0]["agentId"], "writer");
    assert_eq!(switches[0]["enabled"], false);
    assert_eq!(switches[0]["group"], "files");
    assert!(switches[0]["by"].as_str().unwrap().starts_with("cli ("), "{switches:#?}");
    assert_eq!((&switches[1]["agentId"], &switches[1]["by"]), (&json!("other"), &json!("api")));
    assert_eq!((&switches[2]["enabled"], &switches[2]["by"]), (&json!(true), &json!("api")));
    blocking(|| c.stop());
    let audit = std::fs::read_to_string(project.dir.join(".suzumio/audit/permissions.jsonl")).unwrap();
    let lines: Vec<Value> =
        audit.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).filter(|e| e["kind"] == "switch").collect();
    assert_eq!(lines.len(), 3, "{audit}");
    assert_eq!(
        (&lines[0]["tool"], &lines[0]["decision"], &lines[0]["userAction"]),
        (&json!("group:files"), &json!("deny"), &json!("off"))
    );
    assert!(lines[0]["source"].as_str().unwrap().starts_with("cli ("), "{audit}");
    assert_eq!(lines[0]["arguments"]["tools"], json!(["file.read", "file.write"]));
    assert_eq!((&lines[2]["source"], &lines[2]["userAction"]), (&json!("api"), &json!("on")));

    // `tools` shows what is switched off now, with who did it.
    let table = support::text(&cli(&project, &["tools", &dir]).stdout);
    assert!(table.contains("switched off for other (1): file.read (by api at "), "{table}");
    assert!(!table.contains("switched off for writer"), "{table}");
    let json_out = cli(&project, &["tools", &dir, "--json"]);
    let catalog: Vec<Value> = serde_json::from_slice(&json_out.stdout).unwrap();
    let read = catalog.iter().find(|e| e["name"] == "file.read").unwrap();
    assert_eq!(read["switchedOffFor"]["other"]["by"], "api", "{read}");
    assert!(read["switchedOffFor"].get("writer").is_none(), "{read}");
}

/// Bad names: unknown tools and groups, tools outside the allowlist (switching on never adds
/// one), unknown agents — exit 2 from the CLI with what the agent does have, 4xx from the API.
#[test]
fn names_an_agent_does_not_have_are_refused_by_the_cli_and_the_api() {
    let project = project("http://127.0.0.1:9");
    let dir = project.dir.to_str().unwrap().to_string();
    let check = |args: &[&str], needle: &str| {
        let out = cli(&project, args);
        let err = support::text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    };
    check(&["tools", "off", &dir, "writer", "file.raed"], "Unknown tool: file.raed (did you mean `file.read`?)");
    check(&["tools", "on", &dir, "writer", "file.delete"], "file.delete is not in writer's allowlist");
    check(&["tools", "off", &dir, "writer", "messages.send"], "messages.send is not in writer's allowlist");
    check(
        &["tools", "off", &dir, "writer", "group:git"],
        "writer has no tool in group `git`: its groups are files, shell",
    );
    check(&["tools", "off", &dir, "writer", "files"], "(files is a group: write group:files)");
    check(&["tools", "off", &dir, "ghost", "file.read"], "Unknown agent: ghost");
    // Nothing was switched by the refused names, not even the good one before a bad one.
    check(&["tools", "off", &dir, "writer", "file.read", "nope"], "Unknown tool: nope");
    let table = support::text(&cli(&project, &["tools", &dir]).stdout);
    assert!(!table.contains("switched off"), "{table}");

    let c = Controller::start(&project.dir, &["--paused"]);
    let put = |path: &str, body: &str| {
        support::http("PUT", &c.url(&format!("/api/projects/switches/agents/{path}")), &[], Some(body))
    };
    let refused = |path: &str, body: &str, status: u16, needle: &str| {
        let answer = put(path, body);
        assert_eq!(answer.status, status, "{path}: {}", answer.body);
        let error = answer.json()["error"].as_str().unwrap_or_default().to_string();
        assert!(error.contains(needle), "{path}: {error}");
    };
    refused("writer/tools/file.delete", r#"{"enabled": true}"#, 404, "file.delete is not in writer's allowlist");
    refused("writer/tools/nope", r#"{"enabled": false}"#, 404, "Unknown tool: nope");
    refused("writer/tool-groups/git", r#"{"enabled": false}"#, 404, "writer has no tool in group `git`");
    refused("ghost/tools/file.read", r#"{"enabled": false}"#, 404, "Unknown agent: ghost");
    refused("writer/tools/file.read", r#"{}"#, 400, "/enabled");
    refused("writer/tools/file.read", r#"{"enabled": "no"}"#, 400, "enabled");
    let listed = support::http("GET", &c.url("/api/projects/switches/agents/writer/tools"), &[], None);
    assert_eq!(listed.status, 200, "{}", listed.body);
    let names: Vec<String> =
        listed.json().as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(names, ["file.read", "file.write", "shell.exec"], "the agent's own tools");
    c.stop();
}
