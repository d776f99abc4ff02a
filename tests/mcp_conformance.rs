//! What any MCP client may expect of Suzumio's MCP server, on both transports (`suzumio mcp`
//! over stdio, `/mcp/<agent>` of a real `suzumio run` over Streamable HTTP), each through two
//! client libraries — the official Python SDK (`mcp`) and fastmcp (PyPI), both in the venvs
//! scripts/setup.sh makes — on the session protocol (2025-11-25, `initialize`) and the
//! stateless one (2026-07-28, `server/discover`): `ping` is answered, `serverInfo` names
//! Suzumio and its version, the client is logged by the name it gives, resources carry their
//! `mimeType`, and an MCP toolpack's `outputSchema` reaches the client as its own server
//! declared it (and the client accepts the result against it).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use support::mcp_client::VENV_PYTHON;
use support::{Controller, repo_root, text};

/// The venv of fastmcp that scripts/setup.sh makes.
const FASTMCP_PYTHON: &str = "/opt/suzumio-fastmcp-venv/bin/python";

/// What the client that names itself this way is logged as.
const SDK_CLIENT: (&str, &str) = ("conformance-sdk", "1.2.3");

/// The steps every client runs, per target (`{"stdio": [command, args…]}` or `{"http": url}`)
/// and protocol mode (`legacy`: `initialize`; `auto`: the stateless protocol): printed as one
/// object per run with the negotiated protocol, `serverInfo`, the ping's outcome, each tool's
/// `outputSchema`, the listed resources, each read resource's type and a call's structured
/// result. Shared by both libraries: `connect(target, mode, log)` and the calls differ.
const STEPS: &str = r#"
import asyncio, json, os, sys

def dump(value):
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value

async def run(client, protocol, server_info, ping, list_tools, list_resources, read, call):
    out = {"protocol": protocol, "serverInfo": dump(server_info)}
    try:
        await ping()
        out["ping"] = "answered"
    except Exception as e:
        out["ping"] = f"error: {e!r}"
    out["outputSchemas"] = {t.name: dump(t).get("outputSchema") for t in await list_tools()}
    out["resources"] = [dump(r) for r in await list_resources()]
    out["read"] = {r["uri"]: [dump(c).get("mimeType") for c in await read(r["uri"])] for r in out["resources"]}
    result = await call("tally.add", {"a": 2, "b": 3})
    result = dump(result)
    out["call"] = {"isError": result.get("isError", False), "structuredContent": result.get("structuredContent")}
    return out

async def main(connect):
    targets, log = json.loads(sys.argv[1]), sys.argv[2]
    runs = []
    with open(log, "a") as errlog:
        for target in targets:
            for mode in ("legacy", "auto"):
                runs.append(await connect(target, mode, errlog))
    print(json.dumps(runs))
"#;

/// The official SDK's high-level `Client`.
const SDK_CLIENT_SCRIPT: &str = r#"
from mcp import Client, StdioServerParameters, types
from mcp.client.stdio import stdio_client

async def connect(target, mode, errlog):
    info = types.Implementation(name="conformance-sdk", version="1.2.3")
    if "stdio" in target:
        command, *args = target["stdio"]
        params = StdioServerParameters(command=command, args=args, env={**os.environ, "SUZUMIO_LOG": "info"})
        server = stdio_client(params, errlog=errlog)
    else:
        server = target["http"]
    async with Client(server, mode=mode, client_info=info) as c:
        async def list_tools():
            return (await c.list_tools()).tools
        async def list_resources():
            return (await c.list_resources()).resources
        async def read(uri):
            return (await c.read_resource(uri)).contents
        return await run(c, c.protocol_version, c.server_info, c.send_ping, list_tools, list_resources, read, c.call_tool)

asyncio.run(main(connect))
"#;

/// fastmcp's `Client`, with the name and version it gives by itself.
const FASTMCP_CLIENT_SCRIPT: &str = r#"
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

async def connect(target, mode, errlog):
    if "stdio" in target:
        command, *args = target["stdio"]
        server = StdioTransport(command=command, args=args, env={**os.environ, "SUZUMIO_LOG": "info"}, log_file=errlog)
    else:
        server = target["http"]
    async with Client(server, mode=mode) as c:
        async def call(name, args):
            return await c.call_tool_mcp(name, args)
        return await run(c, c.protocol_version, c.server_info, c.ping, c.list_tools, c.list_resources, c.read_resource, call)

asyncio.run(main(connect))
"#;

/// The `add` tool of the fixture server as the server itself lists it, asked directly.
const TALLY_LISTING: &str = r#"
import asyncio, json, sys
from mcp import Client, StdioServerParameters

async def main():
    async with Client(StdioServerParameters(command=sys.executable, args=[sys.argv[1]]), mode="legacy") as c:
        tools = (await c.list_tools()).tools
        print(json.dumps({t.name: t.model_dump(mode="json", by_alias=True).get("outputSchema") for t in tools}))

asyncio.run(main())
"#;

/// An agent that may read files and use the fixture server `tally` (an MCP toolpack), with a
/// Markdown note, a JSON file and a PNG image among its artifacts.
fn project() -> tempfile::TempDir {
    let tmp = tempfile::Builder::new().prefix("suzumio-mcp-conformance-").tempdir().expect("temp dir");
    let dir = tmp.path();
    let yaml = format!(
        r#"name: conformance
task: Serve an agent's tools to any MCP client.
tools:
  toolpacks:
    - core
    - mcp: {{id: tally, command: {VENV_PYTHON}, args: ["{tally}"]}}
agents:
  writer:
    tools: [file.read, tally.add, coordination.wait_for_signal]
backend:
  runner:
    model: main
    models:
      providers: {{local: {{type: scripted}}}}
      presets: {{main: {{provider: local}}}}
"#,
        tally = tally_script().display()
    );
    std::fs::write(dir.join("suzumio.yaml"), yaml).expect("write the project");
    let artifacts = dir.join("artifacts/writer");
    std::fs::create_dir_all(artifacts.join("charts")).expect("artifacts");
    std::fs::write(artifacts.join("notes.md"), "# Notes\n").expect("a note");
    std::fs::write(artifacts.join("data.json"), "{\"n\": 1}\n").expect("a JSON file");
    // The PNG signature and an IHDR chunk's start: not text, an image by its name.
    std::fs::write(artifacts.join("charts/one.png"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").expect("an image");
    tmp
}

fn tally_script() -> PathBuf {
    repo_root().join("tests/fixtures/mcp/tally.py")
}

/// Runs `script` (with [`STEPS`] before it) under `python`: the runs it printed, and the log of
/// the stdio servers it started.
fn client(dir: &Path, python: &str, name: &str, script: &str, targets: &Value) -> (Vec<Value>, String) {
    assert!(Path::new(python).exists(), "{python} is missing: run scripts/setup.sh (it makes the MCP client venvs)");
    let path = dir.join(format!("{name}_client.py"));
    std::fs::write(&path, format!("{STEPS}\n{script}")).expect("write the client");
    let log = dir.join(format!("{name}.log"));
    let out = Command::new(python)
        .arg(&path)
        .arg(targets.to_string())
        .arg(&log)
        .current_dir(dir)
        .env("NO_PROXY", "*")
        .output()
        .unwrap_or_else(|e| panic!("{python} runs: {e}"));
    assert!(out.status.success(), "{name} failed:\n{}\n{}", text(&out.stdout), text(&out.stderr));
    let runs = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    (runs, std::fs::read_to_string(&log).unwrap_or_default())
}

/// The pinned version of a package in a requirements file of tests/fixtures/mcp.
fn pinned(file: &str, package: &str) -> String {
    let list = std::fs::read_to_string(repo_root().join("tests/fixtures/mcp").join(file)).expect("requirements");
    let prefix = format!("{package}==");
    list.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("{package} in {file}")).to_string()
}

/// What every run must show, whatever the library, transport and protocol.
fn check_run(run: &Value, add_schema: &Value, what: &str) {
    assert_eq!(run["ping"], "answered", "{what}: {run}");
    assert_eq!(run["serverInfo"]["name"], "suzumio", "{what}: {run}");
    assert_eq!(run["serverInfo"]["version"], env!("CARGO_PKG_VERSION"), "{what}: {run}");
    assert_eq!(run["outputSchemas"]["tally.add"], *add_schema, "{what}: as the pack's server declares it: {run}");
    assert_eq!(run["outputSchemas"]["file.read"], Value::Null, "{what}: a tool without one has none: {run}");
    let listed: Vec<(&str, &str)> = run["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: resources: {run}"))
        .iter()
        .map(|r| (r["uri"].as_str().unwrap_or_default(), r["mimeType"].as_str().unwrap_or("(none)")))
        .collect();
    let expected = [
        ("suzumio://artifacts/writer/charts/one.png", "image/png"),
        ("suzumio://artifacts/writer/data.json", "application/json"),
        ("suzumio://artifacts/writer/notes.md", "text/markdown"),
    ];
    assert_eq!(listed, expected, "{what}: {run}");
    for (uri, mime) in expected {
        assert_eq!(run["read"][uri], json!([mime]), "{what}: read as listed: {run}");
    }
    assert_eq!(run["call"]["isError"], false, "{what}: the client took the result against the schema: {run}");
    assert_eq!(run["call"]["structuredContent"], json!({"result": 5}), "{what}: {run}");
}

#[test]
fn two_client_libraries_get_ping_server_info_mime_types_and_output_schemas_on_both_transports() {
    let tmp = project();
    let dir = tmp.path();
    let check = support::suzumio(dir, &["check", dir.to_str().expect("utf-8 path")]);
    assert_eq!(check.status.code(), Some(0), "{}{}", text(&check.stdout), text(&check.stderr));
    let listing = Command::new(VENV_PYTHON).arg("-c").arg(TALLY_LISTING).arg(tally_script()).output().expect("python");
    assert!(listing.status.success(), "{}", text(&listing.stderr));
    let listing: Value = serde_json::from_slice(&listing.stdout).expect("the server's own listing");
    let add_schema = &listing["add"];
    assert!(add_schema.is_object(), "the fixture server declares an outputSchema for add: {listing}");

    let controller = Controller::start(dir, &[]);
    let suzumio = env!("CARGO_BIN_EXE_suzumio");
    let stdio = json!({"stdio": [suzumio, "mcp", dir, "--agent", "writer", "--backend", "process"]});
    let targets = json!([stdio, {"http": controller.url("/mcp/writer")}]);
    let fastmcp = (FASTMCP_PYTHON, "fastmcp", FASTMCP_CLIENT_SCRIPT);
    let sdk = (VENV_PYTHON, "sdk", SDK_CLIENT_SCRIPT);
    let mut stdio_logs = String::new();
    for (python, name, script) in [sdk, fastmcp] {
        let (runs, log) = client(dir, python, name, script, &targets);
        let protocols: Vec<&str> = runs.iter().map(|r| r["protocol"].as_str().unwrap_or_default()).collect();
        assert_eq!(protocols, ["2025-11-25", "2026-07-28", "2025-11-25", "2026-07-28"], "{name}: {runs:?}");
        for (run, what) in runs.iter().zip(["stdio, session", "stdio, stateless", "http, session", "http, stateless"]) {
            check_run(run, add_schema, &format!("{name}, {what}"));
        }
        stdio_logs.push_str(&log);
    }
    let http_logs = controller.stderr();
    assert_eq!(controller.stop(), Some(0));

    // Each client is logged as it names itself, on both protocols and transports; never as rmcp.
    let fastmcp_version = pinned("fastmcp-requirements.txt", "fastmcp");
    for (logs, transport) in [(&stdio_logs, "stdio"), (&http_logs, "http")] {
        for protocol in ["2025-11-25", "2026-07-28"] {
            for (client, version) in [SDK_CLIENT, ("fastmcp", fastmcp_version.as_str())] {
                let line = format!("MCP client {client} {version} connected (protocol {protocol})");
                assert!(logs.contains(&line), "{transport}: {line:?} in\n{logs}");
            }
        }
        assert!(!logs.contains("\"rmcp\""), "{transport}: no client is logged as rmcp:\n{logs}");
    }
}

/// Regression: fastmcp's `ping` over Streamable HTTP on the stateless protocol got "method not
/// found" (rmcp refuses it there), and so did a ping outside a session; a ping to an agent
/// that does not exist is still that agent's 404, not an answer.
#[test]
fn a_ping_outside_a_session_is_answered_and_only_for_a_served_agent() {
    let tmp = project();
    let dir = tmp.path();
    let controller = Controller::start(dir, &[]);
    let accept = ("Accept", "application/json, text/event-stream");
    let ping = json!({"jsonrpc": "2.0", "id": "p-1", "method": "ping"}).to_string();
    let answered = support::http("POST", &controller.url("/mcp/writer"), &[accept], Some(&ping));
    assert_eq!(answered.status, 200, "{}", answered.body);
    assert_eq!(answered.json(), json!({"jsonrpc": "2.0", "id": "p-1", "result": {}}));
    let unknown = support::http("POST", &controller.url("/mcp/nobody"), &[accept], Some(&ping));
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    // Anything else still reaches the MCP service: an unknown method is its error, not an answer.
    let other = json!({"jsonrpc": "2.0", "id": 2, "method": "no/such"}).to_string();
    let refused = support::http("POST", &controller.url("/mcp/writer"), &[accept], Some(&other));
    assert!(!refused.body.contains(r#""result":{}"#), "{}", refused.body);
    assert_eq!(controller.stop(), Some(0));
}
