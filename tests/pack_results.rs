//! Pack errors and rich results through the real path (issue [L] items 3–5): `suzumio tool call`
//! on the process backend runs the fixture project `rich` (a `notes` pack and a `broken` pack
//! whose runner module throws at load) with the real runner, store and support broker; and
//! `suzumio run --until-idle` sends an image result to local Anthropic-style and
//! OpenAI-compatible servers.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use support::{TempProject, text};

fn tool_call(dir: &str, tool: &str, input: Value) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["tool", "call", dir, "--agent", "pm", "--backend", "process", "--json", tool, &input.to_string()])
        .env("SUZUMIO_RUNNER_BIN", support::runner_binary())
        .output()
        .expect("suzumio runs")
}

/// In a container the runner sees the pack at `/toolpacks/notes`: the error names the
/// project's file instead, and a broken pack still leaves `file.write` working there.
#[test]
fn in_a_container_the_stack_names_the_projects_files() {
    let (project, dir) = project();
    let yaml = std::fs::read_to_string(project.dir.join("suzumio.yaml")).unwrap();
    let unique = project.dir.file_name().unwrap().to_string_lossy().rsplit('-').next().unwrap().to_string();
    std::fs::write(project.dir.join("suzumio.yaml"), yaml.replace("name: rich", &format!("name: rich-{unique}")))
        .unwrap();
    let docker = |tool: &str, input: Value| {
        std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
            .args(["tool", "call", &dir, "--agent", "pm", "--backend", "docker", tool, &input.to_string()])
            .env("SUZUMIO_RUNNER_BIN", support::static_runner())
            .output()
            .expect("suzumio runs")
    };
    let out = docker("notes.throw", json!({}));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("toolpack notes, tool notes.throw: boom: no notes"), "{stderr}");
    assert!(stderr.contains("(toolpacks/notes/runner.mjs:7:"), "{stderr}");
    assert!(!stderr.contains("/toolpacks/notes/"), "no container path is left: {stderr}");
    let out = docker("file.write", json!({"path": "/workspace/in-docker.txt", "content": "ok"}));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let _ = std::process::Command::new("docker").args(["rm", "-f", &format!("suzumio-rich-{unique}-pm")]).output();
}

/// The output of a call that must succeed.
fn ok(dir: &str, tool: &str, input: Value) -> Value {
    let out = tool_call(dir, tool, input);
    assert_eq!(out.status.code(), Some(0), "{tool}: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

/// The error of a call that must fail (exit 1, ran and failed), with its record's error.
fn failed(dir: &str, tool: &str, input: Value) -> (String, String) {
    let out = tool_call(dir, tool, input);
    assert_eq!(out.status.code(), Some(1), "{tool}: {}\n{}", text(&out.stdout), text(&out.stderr));
    (text(&out.stderr), recorded_error(dir, tool))
}

/// The error recorded with the last call of `tool`, which must be `failed`.
fn recorded_error(dir: &str, tool: &str) -> String {
    let host = suzumio::controller::open_read_only(std::path::Path::new(dir)).expect("store opens");
    let calls = host.store.list_tool_calls(Some(tool), None, None, 10).expect("tool calls");
    let last = calls.first().expect("the call was recorded");
    assert_eq!(last.status.as_str(), "failed", "{last:?}");
    last.error.clone().unwrap_or_default()
}

fn project() -> (TempProject, String) {
    let project = TempProject::copy_of("rich");
    let dir = project.dir.to_str().expect("utf-8 path").to_string();
    (project, dir)
}

#[test]
fn a_runtime_throw_is_recorded_with_pack_tool_and_a_host_stack_line() {
    let (_project, dir) = project();
    let (stderr, error) = failed(&dir, "notes.throw", json!({}));
    for shown in [&stderr, &error] {
        assert!(shown.contains("toolpack notes, tool notes.throw: boom: no notes"), "{shown}");
        // `explode` throws on line 7 of the fixture's runner.mjs, named by its path in the project.
        assert!(shown.contains("toolpacks/notes/runner.mjs:7:"), "{shown}");
        assert!(!shown.contains("suzumio:glue"), "the host's own frames are left out: {shown}");
    }
}

#[test]
fn a_pack_that_throws_at_load_disables_only_its_own_tools() {
    let (project, dir) = project();
    let (_, error) = failed(&dir, "broken.use", json!({}));
    assert!(error.starts_with("toolpack broken could not be loaded:"), "{error}");
    assert!(error.contains("broken at load"), "{error}");
    assert!(error.contains("toolpacks/broken/runner.mjs:2:"), "the load error is located: {error}");
    let wrote = ok(&dir, "file.write", json!({"path": "/workspace/hello.txt", "content": "hi"}));
    assert!(wrote["output"].as_str().unwrap().starts_with("Wrote 2 chars"), "{wrote}");
    assert_eq!(std::fs::read_to_string(project.dir.join("workspaces/pm/hello.txt")).unwrap(), "hi");
    assert_eq!(ok(&dir, "notes.add", json!({"text": "two words"}))["output"], "notes.add: two words (2 words)");
}

#[test]
fn call_support_input_is_checked_against_support_input_schema() {
    let (_project, dir) = project();
    // Derived data (`words`) the public inputSchema would refuse is what supportInputSchema allows.
    assert_eq!(ok(&dir, "notes.add", json!({"text": "a b c"}))["output"], "notes.add: a b c (3 words)");
    let (_, error) = failed(&dir, "notes.add_wrong", json!({"text": "a"}));
    assert!(
        error.contains(
            r#"callSupport("notes.add") from runner.mjs: the input does not match the supportInputSchema of notes.add: /words:"#
        ),
        "{error}"
    );
    // A tool without supportInputSchema: the runner's input is not schema-checked.
    assert_eq!(ok(&dir, "notes.count", json!({"text": "x y"}))["output"], "notes.count: x y (2 words)");
}

#[test]
fn is_error_is_a_failed_call_and_output_schema_is_enforced() {
    let (_project, dir) = project();
    let (_, error) = failed(&dir, "notes.fail", json!({}));
    assert_eq!(error, "no such note");
    let (_, error) = failed(&dir, "notes.stats", json!({}));
    assert!(
        error.starts_with("notes.stats returned structuredContent that does not match its outputSchema: /count:"),
        "{error}"
    );
    let stats = ok(&dir, "notes.stats_ok", json!({}));
    assert_eq!(stats["structuredContent"], json!({"count": 3}));
    assert_eq!(stats["output"], "3 notes");
}

#[test]
fn an_image_result_is_kept_and_saved_under_the_agents_artifacts() {
    let (project, dir) = project();
    let snap = ok(&dir, "notes.snap", json!({}));
    assert_eq!(snap["content"][1]["type"], "image");
    assert_eq!(snap["output"], "a red pixel\n[image image/png, 70 bytes]\n[notes.md](file:///workspace/notes.md)");
    let saved = snap["metadata"]["imageArtifacts"][0].as_str().expect("saved path").to_string();
    assert!(saved.starts_with("artifacts/pm/tool-images/") && saved.ends_with(".png"), "{saved}");
    let bytes = std::fs::read(project.dir.join(&saved)).unwrap();
    assert_eq!(&bytes[1..4], b"PNG");
}

// ---------------------------------------------------------------------------------------------
// The image reaches the model.

#[derive(Clone, Copy)]
enum Format {
    Anthropic,
    OpenAi,
}

async fn model_server(format: Format) -> (String, Arc<Mutex<Vec<Value>>>) {
    let requests: Arc<Mutex<Vec<Value>>> = Arc::default();
    let log = requests.clone();
    let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
        let log = log.clone();
        async move {
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let n = {
                let mut log = log.lock().unwrap();
                log.push(body);
                log.len()
            };
            // The snapshot, then a report to the user (a useful effect), then waiting.
            let (id, tool, input) = match n {
                1 => ("snap-1", "notes_snap", json!({})),
                2 => ("send-2", "messages_send", json!({"recipient": "user", "body": "A red pixel."})),
                _ => ("wait-3", "coordination_wait_for_signal", json!({"reason": "done"})),
            };
            axum::Json(match format {
                Format::Anthropic => json!({"type": "message", "role": "assistant", "stop_reason": "tool_use",
                    "content": [{"type": "tool_use", "id": id, "name": tool, "input": input}],
                    "usage": {"input_tokens": 10, "output_tokens": 5}}),
                Format::OpenAi => json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": tool, "arguments": input.to_string()}}]},
                    "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 10, "completion_tokens": 5}}),
            })
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, requests)
}

/// One activation of `pm` against the server: it calls `notes.snap`, reports, waits. Returns the
/// requests the server got.
async fn snap_activation(format: Format) -> Vec<Value> {
    let (url, requests) = model_server(format).await;
    let (project, dir) = project();
    let provider = match format {
        Format::Anthropic => format!("{{ type: anthropic, baseURL: '{url}', apiKey: sk-test }}"),
        Format::OpenAi => format!("{{ type: openai-compatible, baseURL: '{url}/v1' }}"),
    };
    let yaml = std::fs::read_to_string(project.dir.join("suzumio.yaml")).unwrap();
    let yaml =
        yaml.replace("{ type: scripted }", &provider).replace("{ provider: local }", "{ provider: local, model: m }");
    std::fs::write(project.dir.join("suzumio.yaml"), yaml).unwrap();
    let cli = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
                .args(args)
                .env("SUZUMIO_RUNNER_BIN", support::runner_binary())
                .output()
                .expect("suzumio runs")
        })
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let started = cli(args(&["start", &dir])).await.unwrap();
    assert_eq!(started.status.code(), Some(0), "{}", text(&started.stderr));
    assert_eq!(cli(args(&["send", &dir, "pm", "Take a picture."])).await.unwrap().status.code(), Some(0));
    let run = cli(args(&["run", &dir, "--port", "0", "--backend", "process", "--until-idle"]));
    let out = tokio::time::timeout(Duration::from_secs(60), run).await.expect("run ends").unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 3, "the snapshot, the report, the wait: {requests:?}");
    requests
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_result_reaches_an_anthropic_server_as_an_image_block_in_tool_result() {
    let requests = snap_activation(Format::Anthropic).await;
    let last = requests[1]["messages"].as_array().unwrap().last().unwrap().clone();
    let result = last["content"].as_array().unwrap().iter().find(|b| b["type"] == "tool_result").unwrap().clone();
    assert_eq!(result["tool_use_id"], "snap-1");
    let blocks = result["content"].as_array().expect("content blocks");
    assert_eq!(blocks[0]["type"], "text");
    assert!(blocks[0]["text"].as_str().unwrap().starts_with("a red pixel"), "{result}");
    assert_eq!(blocks[1]["type"], "image");
    assert_eq!(blocks[1]["source"]["type"], "base64");
    assert_eq!(blocks[1]["source"]["media_type"], "image/png");
    assert!(blocks[1]["source"]["data"].as_str().unwrap().starts_with("iVBORw0KGgo"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_result_reaches_an_openai_server_as_an_image_url_user_message() {
    let requests = snap_activation(Format::OpenAi).await;
    let messages = requests[1]["messages"].as_array().unwrap();
    let at = messages.iter().position(|m| m["role"] == "tool").expect("the tool result");
    assert_eq!(messages[at]["tool_call_id"], "snap-1");
    let next = &messages[at + 1];
    assert_eq!(next["role"], "user", "the images follow the results: {next}");
    let parts = next["content"].as_array().unwrap();
    assert_eq!(parts[0]["type"], "text");
    assert_eq!(parts[1]["type"], "image_url");
    assert!(parts[1]["image_url"]["url"].as_str().unwrap().starts_with("data:image/png;base64,iVBORw0KGgo"));
}
