//! Deferred tools end to end: `suzumio run` against a local OpenAI-compatible server that plays
//! a model. An agent with `toolLoading: deferred` starts with the tools that cannot be deferred
//! plus `tool_search`; listing shows what it may activate (never a tool outside its allowlist);
//! a deferred tool called before activation is answered, not run; once activated it is sent
//! from the next request on, at the end of the tool list, and runs. The catalog (`tools --json`)
//! and `tools --agent` say what is deferred and what that saves.

#[path = "support/model_stream.rs"]
mod model_stream;
mod support;

use std::process::Command;

use model_stream::{StreamServer, call, tool_names, tool_result};
use serde_json::{Value, json};
use support::TempProject;

fn project(model_url: &str) -> TempProject {
    let project = TempProject::copy_of("review");
    std::fs::write(
        project.dir.join("suzumio.yaml"),
        format!(
            r#"name: deferred
task: Write a note.
tools:
  toolpacks: [core, shell, web]
agents:
  writer:
    toolLoading: deferred
    tools: [file.write, file.read, web.fetch, coordination.wait_for_signal, messages.send]
  other:
    deferredTools: [web.fetch]
    tools: [shell.exec, web.fetch, coordination.wait_for_signal]
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

#[tokio::test(flavor = "multi_thread")]
async fn a_deferred_tool_is_activated_by_tool_search_and_called_in_the_next_step() {
    let server = StreamServer::start(vec![
        call("c1", "tool_search", json!({})),
        call("c2", "file_write", json!({"path": "early.txt", "content": "too soon"})),
        call("c3", "tool_search", json!({"mode": "activate", "names": ["shell.exec"]})),
        call("c4", "tool_search", json!({"mode": "activate", "query": "write file"})),
        call("c5", "file_write", json!({"path": "note.txt", "content": "activated"})),
        call("c6", "coordination_wait_for_signal", json!({"reason": "done"})),
    ])
    .await;
    let project = project(&server.url);
    let dir = project.dir.to_str().unwrap().to_string();
    let sent = support::suzumio(&project.dir, &["send", &dir, "writer", "Write the note."]);
    assert_eq!(sent.status.code(), Some(0), "{}", support::text(&sent.stderr));
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_suzumio"))
            .args(["run", &dir, "--port", "0", "--backend", "process", "--until-idle"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", support::text(&out.stderr));

    let requests = server.requests();
    assert_eq!(requests.len(), 6, "one request per step: {requests:#?}");
    let first = tool_names(&requests[0]);
    assert_eq!(first, ["messages_send", "coordination_wait_for_signal", "tool_search"], "only what cannot be deferred");

    let listing = tool_result(&requests[1], "c1");
    assert!(listing.contains("Available to activate (3):"), "{listing}");
    // Each tool by the name the model calls it, next to its own.
    for (safe, tool) in [("file_write", "file.write"), ("file_read", "file.read"), ("web_fetch", "web.fetch")] {
        assert!(listing.contains(&format!("- {safe} ({tool}): ")), "{tool} in {listing}");
    }
    assert!(!listing.contains("shell.exec"), "a tool outside the allowlist is never listed: {listing}");

    let early = tool_result(&requests[2], "c2");
    assert!(early.contains("file.write is not loaded yet: activate it with tool_search"), "{early}");
    assert!(!project.dir.join("workspaces/writer/early.txt").exists(), "not run before activation");

    let refused = tool_result(&requests[3], "c3");
    assert!(refused.starts_with("Unknown tool: shell.exec"), "as if it did not exist: {refused}");
    assert_eq!(tool_names(&requests[3]), first, "nothing activated yet");

    let activated = tool_result(&requests[4], "c4");
    assert!(
        activated.contains("Activated 1 tool(s)") && activated.contains("- file_write (file.write): "),
        "{activated}"
    );
    let after = tool_names(&requests[4]);
    assert_eq!(after[..first.len()], first[..], "the list grows at its end only");
    assert_eq!(after[first.len()..], ["file_write"]);

    assert!(tool_result(&requests[5], "c5").contains("note.txt"), "the activated tool ran");
    assert_eq!(std::fs::read_to_string(project.dir.join("workspaces/writer/note.txt")).unwrap(), "activated");
    // The event log says what was activated, for whom, under both names.
    let tools = suzumio::controller::open(&project.dir).unwrap();
    let activated: Vec<_> =
        tools.store.events_of_kind("tool.activated", 10).unwrap().into_iter().map(|e| e.event).collect();
    assert!(
        matches!(&activated[..], [suzumio::store::Event::ToolActivated { agent_id, tools, model_names, activation_id: Some(_) }]
            if agent_id == "writer" && tools == &["file.write"] && model_names == &["file_write"]),
        "{activated:?}"
    );

    // The catalog and `tools --agent` say what is deferred for whom.
    let json = support::suzumio(&project.dir, &["tools", project.dir.to_str().unwrap(), "--json"]);
    let catalog: Vec<Value> = serde_json::from_slice(&json.stdout).unwrap();
    let entry = |name: &str| catalog.iter().find(|e| e["name"] == name).unwrap_or_else(|| panic!("{name}"));
    assert_eq!(entry("web.fetch")["deferredFor"], json!(["writer", "other"]));
    assert_eq!(entry("file.write")["deferredFor"], json!(["writer"]));
    assert_eq!(entry("messages.send")["deferrable"], json!(false));
    assert_eq!(entry("tool_search")["allowedAgents"], json!(["writer", "other"]));
    assert_eq!(entry("file.write")["displayName"], json!("Write file"));
    let table = support::suzumio(&project.dir, &["tools", project.dir.to_str().unwrap(), "--agent", "writer"]);
    let table = support::text(&table.stdout);
    assert!(table.contains("3 of writer's 5 tools are deferred (loaded through tool_search): about "), "{table}");
}
