//! `suzumio mcp` against the official Python MCP SDK (`mcp`, installed into
//! /opt/suzumio-mcp-venv by scripts/setup.sh): the client launches the real binary over stdio
//! (the process backend), lists the agent's tools, calls them through the permission engine, and
//! reads the agent's artifacts as resources; an `ask` is put to a client with elicitation.

mod support;

use serde_json::{Value, json};
use support::mcp_client::{self, WRITER_PROJECT as PROJECT, texts};
use support::text;

/// Runs each `[method, args]` step in one session and prints `{"results", "asked"}`: the
/// results (a step the server answers with a protocol error gives `{"error": ...}`) and the
/// elicitations the server sent, answered per `answer` (`accept`, `decline`, or `none`: no
/// elicitation support declared). `call_approved` calls a tool and, while the call waits,
/// allows its approval request with the real CLI.
const CLIENT: &str = r#"
import asyncio, json, subprocess, sys
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

async def main():
    suzumio, project, agent, steps = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    answer = sys.argv[5]
    asked = []
    async def elicit(context, params):
        asked.append(params.model_dump(mode="json", by_alias=True, exclude_none=True))
        if answer == "accept":
            return types.ElicitResult(action="accept", content={"allow": True})
        return types.ElicitResult(action="decline")
    params = StdioServerParameters(command=suzumio, args=["mcp", project, "--agent", agent, "--backend", "process"])
    out = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, elicitation_callback=None if answer == "none" else elicit,
                                 client_info=types.Implementation(name="approvals-stdio", version="1.0")) as session:
            await session.initialize()
            for method, args in steps:
                try:
                    if method == "list_tools":
                        result = await session.list_tools()
                    elif method == "call_tool":
                        result = await session.call_tool(args[0], args[1])
                    elif method == "call_approved":
                        call = asyncio.create_task(session.call_tool(args[0], args[1]))
                        pending = []
                        while not pending:
                            await asyncio.sleep(0.2)
                            listed = subprocess.run([suzumio, "approvals", "list", project, "--json"],
                                                    capture_output=True, text=True, check=True)
                            pending = json.loads(listed.stdout)
                        subprocess.run([suzumio, "approvals", "allow", project, pending[0]["id"]],
                                       capture_output=True, check=True)
                        result = await call
                    elif method == "list_resources":
                        result = await session.list_resources()
                    else:
                        result = await session.read_resource(args[0])
                    out.append(result.model_dump(mode="json", by_alias=True, exclude_none=True))
                except Exception as e:
                    out.append({"error": str(e)})
    print(json.dumps({"results": out, "asked": asked}))

asyncio.run(main())
"#;

fn session(project: &std::path::Path, agent: &str, steps: Value) -> Vec<Value> {
    session_answering(project, agent, "none", steps).0
}

/// [`session`] with a client that answers elicitations (`accept` or `decline`): the results,
/// and the elicitations it was sent.
fn session_answering(project: &std::path::Path, agent: &str, answer: &str, steps: Value) -> (Vec<Value>, Vec<Value>) {
    let suzumio = env!("CARGO_BIN_EXE_suzumio");
    let printed = mcp_client::run(
        project,
        "client.py",
        CLIENT,
        &[suzumio, &project.to_string_lossy(), agent, &steps.to_string(), answer],
    );
    (mcp_client::list(&printed, "results"), mcp_client::list(&printed, "asked"))
}

#[test]
fn an_mcp_client_lists_calls_and_reads_through_the_permission_engine() {
    let tmp = tempfile::Builder::new().prefix("suzumio-mcp-").tempdir().expect("temp dir");
    let dir = tmp.path();
    std::fs::write(dir.join("suzumio.yaml"), PROJECT).expect("write the project");
    let artifacts = dir.join("artifacts/writer");
    std::fs::create_dir_all(artifacts.join("drafts")).expect("artifacts dir");
    std::fs::write(artifacts.join("drafts/one.md"), "# Draft one\n").expect("an artifact");
    std::fs::write(dir.join("secret.txt"), "not for clients").expect("a file outside");
    std::os::unix::fs::symlink(dir.join("secret.txt"), artifacts.join("link.txt")).expect("a link out");

    let results = session(
        dir,
        "writer",
        json!([
            ["list_tools", []],
            ["call_tool", ["file.write", {"path": "notes.md", "content": "hello from mcp"}]],
            ["call_tool", ["file.read", {"path": "notes.md"}]],
            ["call_tool", ["file.write", {"path": "notes.md"}]],
            ["call_tool", ["file.delete", {"path": "notes.md"}]],
            ["call_tool", ["file.edit", {"path": "notes.md"}]],
            ["call_approved", ["file.list", {"path": "."}]],
            ["list_resources", []],
            ["read_resource", ["suzumio://artifacts/writer/drafts/one.md"]],
            ["read_resource", ["suzumio://artifacts/writer/../../secret.txt"]],
            ["read_resource", ["suzumio://artifacts/writer/link.txt"]],
            ["read_resource", ["suzumio://artifacts/editor/anything.md"]],
        ]),
    );
    let [tools, write, read, bad_input, denied, outside, asked, resources, artifact, dotdot, link, other_agent] =
        <[Value; 12]>::try_from(results).expect("one result per step");

    let tools = tools["tools"].as_array().expect("tools");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(
        names,
        ["messages.send", "file.read", "file.write", "file.list", "file.delete"],
        "exactly the allowlist"
    );
    let file_write = tools.iter().find(|t| t["name"] == "file.write").expect("file.write");
    assert_eq!(file_write["inputSchema"]["required"], json!(["path", "content"]));
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(support::repo_root().join("crates/core/src/toolpack/builtin/core.json"))
            .expect("core"),
    )
    .expect("core.json");
    let declared = manifest["tools"].as_array().expect("tools").iter().find(|t| t["name"] == "file.write");
    let declared = declared.expect("file.write is declared");
    assert_eq!(file_write["title"], declared["presentation"]["label"], "the title is presentation.label");
    assert_eq!(file_write["annotations"]["destructiveHint"], declared["annotations"]["destructiveHint"]);
    assert!(file_write["annotations"].is_object(), "{file_write}");

    assert_ne!(write["isError"], true, "{write}");
    assert_eq!(std::fs::read_to_string(dir.join("workspaces/writer/notes.md")).expect("written"), "hello from mcp");
    assert_ne!(read["isError"], true, "{read}");
    assert!(texts(&read).contains("hello from mcp"), "{read}");

    assert_eq!(bad_input["isError"], true, "a schema error is a tool error: {bad_input}");
    assert!(texts(&bad_input).contains("content"), "it names the field: {bad_input}");
    assert_eq!(denied["isError"], true, "{denied}");
    assert!(texts(&denied).contains("Permission denied"), "{denied}");
    assert!(texts(&denied).contains("writers keep their drafts"), "{denied}");
    assert!(dir.join("workspaces/writer/notes.md").exists(), "the denied delete did not run");
    assert_eq!(outside["isError"], true, "{outside}");
    assert!(texts(&outside).contains("Tool not allowed for writer: file.edit"), "{outside}");
    assert_ne!(asked["isError"], true, "an `ask` waits for the person, then runs: {asked}");
    assert!(texts(&asked).contains("notes.md"), "{asked}");

    let uris: Vec<&str> =
        resources["resources"].as_array().expect("resources").iter().filter_map(|r| r["uri"].as_str()).collect();
    assert_eq!(uris, ["suzumio://artifacts/writer/drafts/one.md"], "links are not listed");
    assert_eq!(artifact["contents"][0]["text"], "# Draft one\n", "{artifact}");
    for refused in [&dotdot, &link, &other_agent] {
        let error = refused["error"].as_str().unwrap_or_else(|| panic!("refused: {refused}"));
        assert!(error.contains("No such artifact of writer"), "{error}");
    }

    // The calls were decided and audited as the agent's, like every other call.
    let dir_arg = dir.to_str().expect("utf-8 path");
    let audit = support::suzumio(dir, &["audit", dir_arg, "--json", "--agent", "writer"]);
    assert_eq!(audit.status.code(), Some(0), "{}", text(&audit.stderr));
    let decisions: Vec<(String, String)> = text(&audit.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .filter(|e| e["kind"] == "decision")
        .map(|e| (e["tool"].as_str().unwrap_or("").to_string(), e["decision"].as_str().unwrap_or("").to_string()))
        .collect();
    assert!(decisions.contains(&("file.write".into(), "allow".into())), "{decisions:?}");
    assert!(decisions.contains(&("file.delete".into(), "deny".into())), "{decisions:?}");
    assert!(decisions.contains(&("file.list".into(), "ask".into())), "{decisions:?}");
    let status = support::suzumio(dir, &["status", dir_arg, "--json"]);
    let status: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    // Five calls reached `execute_tool`, each in its own activation; the one outside the
    // allowlist was refused before any.
    assert_eq!(status["toolCalls"], 5, "the calls are recorded: {status}");
    assert_eq!(status["activations"]["total"], 5, "{status}");
    assert_eq!(status["activations"]["failed"], 0, "a failing call does not fail the agent: {status}");
}

#[test]
fn rich_results_keep_their_blocks_and_saved_images_are_blob_resources() {
    let project = support::TempProject::copy_of("rich");
    let dir = &project.dir;
    let results = session(
        dir,
        "pm",
        json!([
            ["call_tool", ["notes.snap", {}]],
            ["call_tool", ["notes.fail", {}]],
            ["call_tool", ["notes.stats_ok", {}]],
            ["list_resources", []],
        ]),
    );
    let [snap, fail, stats, resources] = <[Value; 4]>::try_from(results).expect("one result per step");
    let kinds: Vec<&str> =
        snap["content"].as_array().expect("blocks").iter().filter_map(|b| b["type"].as_str()).collect();
    assert_eq!(kinds, ["text", "image", "resource_link"], "{snap}");
    assert_eq!(snap["content"][1]["mimeType"], "image/png");
    assert_eq!(fail["isError"], true, "a pack's own error result stays one: {fail}");
    assert!(texts(&fail).contains("no such note"), "{fail}");
    assert_eq!(stats["structuredContent"], json!({"count": 3}), "{stats}");

    // The image the snapshot saved is one of pm's artifacts, read back as the same bytes.
    let uri = resources["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|r| r["uri"].as_str())
        .find(|u| u.starts_with("suzumio://artifacts/pm/tool-images/") && u.ends_with(".png"))
        .unwrap_or_else(|| panic!("the saved image is listed: {resources}"))
        .to_string();
    let [read] = <[Value; 1]>::try_from(session(dir, "pm", json!([["read_resource", [uri.clone()]]]))).expect("one");
    assert_eq!(read["contents"][0]["mimeType"], "image/png", "{read}");
    let image = read["contents"][0]["blob"].as_str().unwrap_or_else(|| panic!("a blob: {read}"));
    assert_eq!(image, snap["content"][1]["data"], "the saved image is the one returned");
}

#[test]
fn an_ask_is_put_to_a_stdio_client_that_supports_elicitation() {
    let tmp = tempfile::Builder::new().prefix("suzumio-mcp-").tempdir().expect("temp dir");
    let dir = tmp.path();
    std::fs::write(dir.join("suzumio.yaml"), PROJECT).expect("write the project");
    std::fs::create_dir_all(dir.join("workspaces/writer")).expect("workspace");
    std::fs::write(dir.join("workspaces/writer/draft.md"), "x").expect("a file to list");

    let (accepted, asked) =
        session_answering(dir, "writer", "accept", json!([["call_tool", ["file.list", {"path": "."}]]]));
    assert_eq!(asked.len(), 1, "{asked:?}");
    let message = asked[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("file.list") && message.contains("listing is looked at first"), "{message}");
    assert_ne!(accepted[0]["isError"], true, "{}", accepted[0]);
    assert!(texts(&accepted[0]).contains("draft.md"), "{}", accepted[0]);

    let (declined, _) =
        session_answering(dir, "writer", "decline", json!([["call_tool", ["file.list", {"path": "."}]]]));
    assert_eq!(declined[0]["isError"], true, "{}", declined[0]);
    assert!(texts(&declined[0]).contains("declined in the MCP client"), "{}", declined[0]);

    let dir_arg = dir.to_str().expect("utf-8 path");
    let audit = support::suzumio(dir, &["audit", dir_arg, "--json", "--agent", "writer"]);
    let resolutions: Vec<(String, String)> = text(&audit.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .filter(|e| e["kind"] == "resolution")
        .map(|e| (e["userAction"].as_str().unwrap_or("").to_string(), e["source"].as_str().unwrap_or("").to_string()))
        .collect();
    assert_eq!(resolutions.len(), 2, "{resolutions:?}");
    assert_eq!((resolutions[0].0.as_str(), resolutions[1].0.as_str()), ("allow", "deny"), "{resolutions:?}");
    // Decided by the client, as it named itself at `initialize`.
    assert!(resolutions.iter().all(|(_, source)| source.ends_with("by mcp:approvals-stdio")), "{resolutions:?}");
}

/// A tool switched off for the agent (here by the CLI, with no `run` serving the project: the
/// store is what both read) is not listed to an MCP client, and a client that calls it anyway
/// gets the refusal saying who switched it off and how to switch it on; it never runs.
#[test]
fn a_switched_off_tool_is_not_listed_to_an_mcp_client_and_refused_when_called() {
    let tmp = tempfile::Builder::new().prefix("suzumio-mcp-").tempdir().expect("temp dir");
    let dir = tmp.path();
    std::fs::write(dir.join("suzumio.yaml"), PROJECT).expect("write the project");
    let off = support::suzumio(dir, &["tools", "off", &dir.to_string_lossy(), "writer", "file.write"]);
    assert_eq!(off.status.code(), Some(0), "{}", text(&off.stderr));

    let results = session(
        dir,
        "writer",
        json!([
            ["list_tools", []],
            ["call_tool", ["file.write", {"path": "notes.md", "content": "hello"}]],
        ]),
    );
    let [tools, write] = <[Value; 2]>::try_from(results).expect("one result per step");
    let names: Vec<&str> =
        tools["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["messages.send", "file.read", "file.list", "file.delete"], "all but the switched-off tool");
    assert_eq!(write["isError"], json!(true), "{write}");
    let why = texts(&write);
    assert!(why.contains("file.write is switched off for writer by cli ("), "{why}");
    assert!(why.contains("suzumio tools on <project> writer file.write"), "{why}");
    assert!(!dir.join("workspaces/writer/notes.md").exists(), "it did not run");
}
