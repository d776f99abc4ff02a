//! The official Python MCP SDK as the client of Suzumio's MCP servers (`suzumio mcp` over stdio,
//! `/mcp/<agent>` over Streamable HTTP): the venv `scripts/setup.sh` makes, the project both
//! transports serve, and one run of a client script that prints one JSON value.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::text;

pub const VENV_PYTHON: &str = "/opt/suzumio-mcp-venv/bin/python";

/// `writer` may write, read, list (asked) and delete (denied); it holds a secret in its
/// environment. `editor` may only send messages.
pub const WRITER_PROJECT: &str = r#"name: mcp
task: Serve a writer's tools over MCP.
tools:
  toolpacks: [core]
agents:
  writer:
    tools: [messages.send, file.write, file.read, file.delete, file.list]
    env: {DEPLOY_KEY: "s3cr3t-deploy-value"}
    permissions:
      rules:
        - {tool: file.delete, decision: deny, reason: "writers keep their drafts"}
        - {tool: file.list, decision: ask, reason: "listing is looked at first"}
  editor:
    tools: [messages.send]
backend:
  runner:
    model: main
    models:
      providers:
        local: {type: scripted}
      presets:
        main: {provider: local}
"#;

/// Write `script` as `dir/file`, run it with `args` and return what it printed.
pub fn run(dir: &Path, file: &str, script: &str, args: &[&str]) -> Value {
    let path = dir.join(file);
    std::fs::write(&path, script).expect("write the client");
    let out = Command::new(VENV_PYTHON)
        .arg(&path)
        .args(args)
        .current_dir(dir)
        .env("NO_PROXY", "*")
        .output()
        .unwrap_or_else(|e| panic!("{VENV_PYTHON} runs (scripts/setup.sh installs it): {e}"));
    assert!(out.status.success(), "client failed:\n{}\n{}", text(&out.stdout), text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

/// The list under `key` of what a client printed.
pub fn list(printed: &Value, key: &str) -> Vec<Value> {
    printed[key].as_array().cloned().unwrap_or_else(|| panic!("{key}: {printed}"))
}

/// The text blocks of a tool result, joined.
pub fn texts(result: &Value) -> String {
    let blocks = result["content"].as_array().cloned().unwrap_or_default();
    blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n")
}
