//! `/mcp/<agent>` of a real `suzumio run` (the process backend) against the official Python MCP
//! SDK (`mcp`, installed into /opt/suzumio-mcp-venv by scripts/setup.sh) over Streamable HTTP:
//! the agent's tools listed and called through the permission engine, the guard of the API in
//! front of it, and an `ask` put to a client that supports elicitation — by a request on the
//! session (protocol 2025-11-25) and as "input required" on the stateless 2026-07-28.

mod support;

use serde_json::{Value, json};
use support::mcp_client::{self, WRITER_PROJECT as PROJECT, texts};
use support::{Controller, http, text};

/// Runs each `[method, args]` step in one session at `url` and prints `{"results", "asked"}`:
/// one result per step (`{"error": ...}` for a protocol error) and every elicitation the
/// server sent. `answer` is how elicitations are answered: `accept`, `decline`, or `none`
/// (the client declares no elicitation support). `token`, when not empty, is sent as the bearer
/// token.
const CLIENT: &str = r#"
import asyncio, json, sys
import httpx2
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

async def main():
    url, answer, steps, token = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    asked = []
    async def elicit(context, params):
        asked.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        if answer == "accept":
            return types.ElicitResult(action="accept", content={"allow": True})
        return types.ElicitResult(action="decline")
    out = []
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http, \
            streamable_http_client(url, http_client=http) as (read, write):
        async with ClientSession(read, write, elicitation_callback=None if answer == "none" else elicit,
                                 client_info=types.Implementation(name="approvals-http", version="1.0")) as session:
            await session.initialize()
            for method, args in steps:
                try:
                    if method == "list_tools":
                        result = await session.list_tools()
                    elif method == "call_tool":
                        result = await session.call_tool(args[0], args[1])
                    else:
                        result = await session.list_resources()
                    out.append(result.model_dump(mode="json", by_alias=True, exclude_none=True))
                except Exception as e:
                    out.append({"error": str(e)})
    print(json.dumps({"results": out, "asked": asked}))

asyncio.run(main())
"#;

/// The SDK's high-level `Client`, which negotiates protocol 2026-07-28 (no session, no requests
/// to the client): runs each `[tool, args]` call, answering "input required" elicitations per
/// `answer`, and prints `{"version", "results", "asked"}`.
const MODERN_CLIENT: &str = r#"
import asyncio, json, sys
from mcp import Client, types

async def main():
    url, answer, calls = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    asked = []
    async def elicit(context, params):
        asked.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        if answer == "accept":
            return types.ElicitResult(action="accept", content={"allow": True})
        return types.ElicitResult(action="decline")
    out = []
    async with Client(url, elicitation_callback=elicit,
                      client_info=types.Implementation(name="approvals-modern", version="1.0")) as client:
        for tool, args in calls:
            result = await client.call_tool(tool, args)
            out.append(result.model_dump(mode="json", by_alias=True, exclude_none=True))
        version = client.protocol_version
    print(json.dumps({"version": version, "results": out, "asked": asked}))

asyncio.run(main())
"#;

/// One session of [`MODERN_CLIENT`]: the protocol version, the results and the elicitations.
fn modern_session(dir: &std::path::Path, url: &str, answer: &str, calls: Value) -> (String, Vec<Value>, Vec<Value>) {
    let printed = mcp_client::run(dir, "modern_client.py", MODERN_CLIENT, &[url, answer, &calls.to_string()]);
    let version = printed["version"].as_str().unwrap_or_default().to_string();
    (version, mcp_client::list(&printed, "results"), mcp_client::list(&printed, "asked"))
}

/// One client session against `url`: the step results and the elicitations it was sent.
fn session(dir: &std::path::Path, url: &str, answer: &str, steps: Value) -> (Vec<Value>, Vec<Value>) {
    session_with_token(dir, url, answer, "", steps)
}

fn session_with_token(
    dir: &std::path::Path,
    url: &str,
    answer: &str,
    token: &str,
    steps: Value,
) -> (Vec<Value>, Vec<Value>) {
    let printed = mcp_client::run(dir, "http_client.py", CLIENT, &[url, answer, &steps.to_string(), token]);
    (mcp_client::list(&printed, "results"), mcp_client::list(&printed, "asked"))
}

/// The status line of a POST of `size` bytes to `path`. The server answers before it has read
/// the whole body and closes, so the body is written from another thread while the answer is
/// read (an HTTP client that finishes sending first sees only the reset).
fn oversized_post(base: &str, path: &str, size: usize) -> String {
    use std::io::{BufRead, Write};
    let authority = base.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = std::net::TcpStream::connect(authority).expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {size}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).expect("send the head");
    let mut writer = stream.try_clone().expect("clone the socket");
    std::thread::spawn(move || {
        let chunk = vec![b' '; 64 << 10];
        for _ in 0..size.div_ceil(chunk.len()) {
            if writer.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let mut line = String::new();
    std::io::BufReader::new(stream).read_line(&mut line).expect("a status line");
    line
}

fn project() -> tempfile::TempDir {
    let tmp = tempfile::Builder::new().prefix("suzumio-mcp-http-").tempdir().expect("temp dir");
    std::fs::write(tmp.path().join("suzumio.yaml"), PROJECT).expect("write the project");
    tmp
}

/// The audit's entries for `tool`, from the real CLI.
fn audit(dir: &std::path::Path, tool: &str) -> Vec<Value> {
    let dir_arg = dir.to_str().expect("utf-8 path");
    let out = support::suzumio(dir, &["audit", dir_arg, "--json", "--agent", "writer"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .filter(|e| e["tool"] == tool)
        .collect()
}

#[test]
fn an_mcp_client_over_http_lists_and_calls_an_agents_tools_behind_the_apis_guard() {
    let tmp = project();
    let dir = tmp.path();
    let controller = Controller::start(dir, &[]);
    let url = controller.url("/mcp/writer");

    let (results, asked) = session(
        dir,
        &url,
        "none",
        json!([
            ["list_tools", []],
            ["call_tool", ["file.write", {"path": "notes.md", "content": "hello over http"}]],
            ["call_tool", ["file.read", {"path": "notes.md"}]],
            ["call_tool", ["file.write", {"path": "notes.md"}]],
            ["call_tool", ["file.delete", {"path": "notes.md"}]],
            ["call_tool", ["file.edit", {"path": "notes.md"}]],
        ]),
    );
    assert!(asked.is_empty(), "{asked:?}");
    let [tools, write, read, bad_input, denied, outside] = <[Value; 6]>::try_from(results).expect("one per step");
    let names: Vec<&str> =
        tools["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        ["messages.send", "file.read", "file.write", "file.list", "file.delete"],
        "exactly the allowlist"
    );
    assert_ne!(write["isError"], true, "{write}");
    assert_eq!(std::fs::read_to_string(dir.join("workspaces/writer/notes.md")).expect("written"), "hello over http");
    assert!(texts(&read).contains("hello over http"), "{read}");
    assert_eq!(bad_input["isError"], true, "a schema error is a tool error: {bad_input}");
    assert!(texts(&bad_input).contains("content"), "it names the field: {bad_input}");
    assert_eq!(denied["isError"], true, "{denied}");
    assert!(texts(&denied).contains("writers keep their drafts"), "{denied}");
    assert!(dir.join("workspaces/writer/notes.md").exists(), "the denied delete did not run");
    assert!(texts(&outside).contains("Tool not allowed for writer: file.edit"), "{outside}");

    // Another agent's endpoint serves that agent's tools only.
    let (results, _) = session(dir, &controller.url("/mcp/editor"), "none", json!([["list_tools", []]]));
    let names: Vec<&str> =
        results[0]["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["messages.send"]);

    // The calls ran in the controller's own activations, as the agent's.
    let status = support::suzumio(dir, &["status", dir.to_str().expect("utf-8"), "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    assert_eq!(status["toolCalls"], 4, "{status}");
    assert_eq!(status["activations"]["failed"], 0, "{status}");

    // The API's guard: an unknown agent, a forged Host (DNS rebinding), another site's page.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}})
    .to_string();
    let accept = ("Accept", "application/json, text/event-stream");
    let unknown = http("POST", &controller.url("/mcp/nobody"), &[accept], Some(&initialize));
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    let error = unknown.json()["error"].as_str().unwrap_or_default().to_string();
    assert!(error.contains("Unknown agent: nobody") && error.contains("writer, editor"), "{error}");
    let port = controller.base.rsplit(':').next().expect("a port").trim_end_matches('/').to_string();
    let forged = http("POST", &url, &[accept, ("Host", &format!("evil.example:{port}"))], Some(&initialize));
    assert_eq!(forged.status, 421, "{}", forged.body);
    let foreign = http("POST", &url, &[accept, ("Origin", "http://evil.example")], Some(&initialize));
    assert_eq!(foreign.status, 403, "{}", foreign.body);
    assert!(foreign.json()["error"].as_str().unwrap_or_default().contains("evil.example"), "{}", foreign.body);
    let status = oversized_post(&controller.base, "/mcp/writer", 3 << 20);
    assert!(status.starts_with("HTTP/1.1 413"), "the body is bounded: {status}");
    let ok = http("POST", &url, &[accept], Some(&initialize));
    assert_eq!(ok.status, 200, "the same request without them is served: {}", ok.body);

    assert_eq!(controller.stop(), Some(0));
}

#[test]
fn an_ask_is_put_to_a_client_that_supports_elicitation() {
    let tmp = project();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("workspaces/writer")).expect("workspace");
    std::fs::write(dir.join("workspaces/writer/s3cr3t-deploy-value.md"), "x").expect("a file to list");
    let controller = Controller::start(dir, &[]);
    let url = controller.url("/mcp/writer");

    // Accepted: the call runs once, decided by the elicitation.
    let (results, asked) = session(dir, &url, "accept", json!([["call_tool", ["file.list", {"path": "."}]]]));
    assert_eq!(asked.len(), 1, "asked once: {asked:?}");
    let message = asked[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("file.list") && message.contains("listing is looked at first"), "{message}");
    assert!(message.contains(r#"{"path":"."}"#), "it shows the arguments: {message}");
    assert_eq!(asked[0]["requestedSchema"]["properties"]["allow"]["type"], "boolean", "{}", asked[0]);
    assert_ne!(results[0]["isError"], true, "{}", results[0]);
    assert!(texts(&results[0]).contains("s3cr3t-deploy-value.md"), "{}", results[0]);

    // Declined: denied, with the decline as the feedback.
    let (results, asked) = session(dir, &url, "decline", json!([["call_tool", ["file.list", {"path": "sub"}]]]));
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(results[0]["isError"], true, "{}", results[0]);
    let denial = texts(&results[0]);
    assert!(denial.contains("Permission denied for file.list: mcp:approvals-http denied the call"), "{denial}");
    assert!(denial.contains("declined in the MCP client"), "{denial}");

    assert_eq!(controller.stop(), Some(0));
    let entries = audit(dir, "file.list");
    let resolutions: Vec<(&str, &str, &str)> = entries
        .iter()
        .filter(|e| e["kind"] == "resolution")
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default();
            (s("decision"), s("userAction"), s("feedback"))
        })
        .collect();
    assert_eq!(resolutions, [("allow", "allow", ""), ("deny", "deny", "declined in the MCP client")], "{entries:?}");
    for e in entries.iter().filter(|e| e["kind"] == "resolution") {
        assert!(e["source"].as_str().unwrap_or_default().ends_with("by mcp:approvals-http"), "{e}");
    }
    let listed = entries.iter().filter(|e| e["kind"] == "decision" && e["decision"] == "ask").count();
    assert_eq!(listed, 2, "each call was decided once: {entries:?}");
}

#[test]
fn the_elicitation_shows_arguments_as_the_audit_redacts_them() {
    let tmp = project();
    let dir = tmp.path();
    let controller = Controller::start(dir, &[]);
    let (results, asked) = session(
        dir,
        &controller.url("/mcp/writer"),
        "decline",
        json!([["call_tool", ["file.list", {"path": "s3cr3t-deploy-value"}]]]),
    );
    assert_eq!(results[0]["isError"], true, "{}", results[0]);
    let message = asked[0]["message"].as_str().unwrap_or_default();
    assert!(!message.contains("s3cr3t-deploy-value"), "the agent's secret is masked: {message}");
    assert!(message.contains(r#"{"path":"***"}"#), "{message}");
    assert_eq!(controller.stop(), Some(0));
}

#[test]
fn with_an_api_token_the_endpoint_needs_it_too() {
    let tmp = project();
    let dir = tmp.path();
    let controller = Controller::start(dir, &["--token", "mcp-t0ken-for-tests"]);
    let url = controller.url("/mcp/writer");
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}})
    .to_string();
    let accept = ("Accept", "application/json, text/event-stream");
    let refused = http("POST", &url, &[accept], Some(&initialize));
    assert_eq!(refused.status, 401, "{}", refused.body);
    let wrong = http("POST", &url, &[accept, ("Authorization", "Bearer nope")], Some(&initialize));
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    let (results, _) = session_with_token(dir, &url, "none", "mcp-t0ken-for-tests", json!([["list_tools", []]]));
    assert_eq!(results[0]["tools"].as_array().map(Vec::len), Some(5), "{}", results[0]);
    assert_eq!(controller.stop(), Some(0));
}

#[test]
fn a_client_on_the_stateless_protocol_is_asked_through_input_required() {
    let tmp = project();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("workspaces/writer")).expect("workspace");
    std::fs::write(dir.join("workspaces/writer/draft.md"), "x").expect("a file to list");
    let controller = Controller::start(dir, &[]);
    let url = controller.url("/mcp/writer");

    let (version, results, asked) = modern_session(
        dir,
        &url,
        "accept",
        json!([["file.write", {"path": "a.md", "content": "plain"}], ["file.list", {"path": "."}]]),
    );
    assert_eq!(version, "2026-07-28", "the client negotiated the stateless protocol");
    assert_ne!(results[0]["isError"], true, "a call that needs no approval just runs: {}", results[0]);
    assert_eq!(asked.len(), 1, "the ask came back as input required, once: {asked:?}");
    let message = asked[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("file.list") && message.contains("listing is looked at first"), "{message}");
    assert_ne!(results[1]["isError"], true, "{}", results[1]);
    assert!(texts(&results[1]).contains("draft.md"), "{}", results[1]);

    let (_, results, asked) = modern_session(dir, &url, "decline", json!([["file.list", {"path": "."}]]));
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(results[0]["isError"], true, "{}", results[0]);
    assert!(texts(&results[0]).contains("declined in the MCP client"), "{}", results[0]);

    assert_eq!(controller.stop(), Some(0));
    let resolutions: Vec<(String, String)> = audit(dir, "file.list")
        .iter()
        .filter(|e| e["kind"] == "resolution")
        .map(|e| (e["userAction"].as_str().unwrap_or("").to_string(), e["source"].as_str().unwrap_or("").to_string()))
        .collect();
    assert_eq!(resolutions.len(), 2, "{resolutions:?}");
    assert_eq!((resolutions[0].0.as_str(), resolutions[1].0.as_str()), ("allow", "deny"), "{resolutions:?}");
    assert!(resolutions.iter().all(|(_, source)| source.ends_with("by mcp:approvals-modern")), "{resolutions:?}");
}
