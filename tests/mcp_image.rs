//! The MCP test image (`support::mcp_image`): both of its real MCP servers start inside an
//! agent's hardened container (no network, read-only root, uid 65534) with the documented
//! command and environment, and answer a real stdio session (`initialize`,
//! `notifications/initialized`, `tools/list`, `tools/call`) piped to them through `shell.exec`.

mod support;

use serde_json::{Value, json};
use support::containers::{self, ContainerProject};
use support::mcp_image::{self, mcp_image};

/// What a server wrote to stdout, one JSON-RPC message a line, and its exit status.
struct Session {
    messages: Vec<Value>,
    exit: i32,
    transcript: String,
}

impl Session {
    /// The response to request `id`.
    fn response(&self, id: u64) -> &Value {
        self.messages
            .iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("no response to request {id}:\n{}", self.transcript))
    }

    fn tool_names(&self, id: u64) -> Vec<&str> {
        let tools = self.response(id)["result"]["tools"].as_array();
        tools
            .unwrap_or_else(|| panic!("request {id} is no tools/list answer:\n{}", self.transcript))
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect()
    }

    /// The text of the first content block of the `tools/call` answer to request `id`.
    fn call_text(&self, id: u64) -> &str {
        self.response(id)["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("request {id} has no text result:\n{}", self.transcript))
    }
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "suzumio-test", "version": "0"}}})
}

fn initialized() -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
}

fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    request(id, "tools/call", json!({"name": tool, "arguments": arguments}))
}

/// Run `command args` with `env` in agent `a`'s container and write each phase of `phases` to
/// its stdin once the answer to the previous phase's last request arrived (the SDKs answer
/// requests concurrently), then close stdin and wait for the server to exit. A server that
/// exits early ends the session. The driver is a script written with `file.write` and run by a
/// plain `bash <file>`: its heredocs and loops would make the permission engine ask.
async fn session(
    project: &ContainerProject,
    (command, args, env): (&str, &[&str], &[(&str, &str)]),
    phases: &[&[Value]],
) -> Session {
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}='{v}'")).collect();
    let mut script = format!(
        "d=$(mktemp -d) && mkfifo \"$d/in\" || exit 1\n\
         env {} {command} {} < \"$d/in\" > \"$d/out\" 2> \"$d/err\" &\nserver=$!\nexec 3> \"$d/in\"\n",
        env.join(" "),
        args.join(" ")
    );
    for phase in phases {
        let lines: Vec<String> = phase.iter().map(Value::to_string).collect();
        script += &format!("cat >&3 <<'REQUESTS'\n{}\nREQUESTS\n", lines.join("\n"));
        if let Some(last) = phase.iter().rev().find_map(|m| m["id"].as_u64()) {
            script += &format!(
                "for _ in $(seq 600); do grep -q '\"id\":{last}[,}}]' \"$d/out\" && break; \
                 kill -0 $server 2>/dev/null || break; sleep 0.05; done\n"
            );
        }
    }
    script +=
        "exec 3>&-\nwait $server\necho \"server exit $?\"\ncat \"$d/out\"\necho 'server stderr:'\ncat \"$d/err\"\n";
    project
        .call("a", "file.write", json!({"path": "/workspace/mcp-session.sh", "content": script}))
        .await
        .unwrap_or_else(|e| panic!("file.write: {e}"));
    let out = project
        .call(
            "a",
            "shell.exec",
            json!({"command": "bash /workspace/mcp-session.sh", "timeoutMs": 60_000, "maxOutputBytes": 200_000}),
        )
        .await
        .unwrap_or_else(|e| panic!("shell.exec: {e}"));
    let exit = out
        .lines()
        .find_map(|l| l.strip_prefix("server exit "))
        .and_then(|code| code.trim().parse().ok())
        .unwrap_or_else(|| panic!("no exit status in:\n{out}"));
    let messages = out.lines().filter(|l| l.starts_with('{')).filter_map(|l| serde_json::from_str(l).ok()).collect();
    Session { messages, exit, transcript: out }
}

const EVERYTHING: (&str, &[&str], &[(&str, &str)]) =
    (mcp_image::EVERYTHING_COMMAND, mcp_image::EVERYTHING_ARGS, mcp_image::EVERYTHING_ENV);
const TALLY: (&str, &[&str], &[(&str, &str)]) = (mcp_image::TALLY_COMMAND, mcp_image::TALLY_ARGS, mcp_image::TALLY_ENV);

#[tokio::test(flavor = "multi_thread")]
async fn server_everything_answers_a_real_session_in_a_hardened_container() {
    let project = containers::start_with_image("mcpe", mcp_image()).await;
    let hardening = project.sh("a", "id -u; touch /opt/x 2>&1; ls /sys/class/net").await;
    assert!(hardening.contains("65534") && hardening.contains("Read-only file system"), "{hardening}");
    assert!(hardening.contains("lo") && !hardening.contains("eth"), "a network besides lo: {hardening}");

    let messages = [
        initialize(),
        initialized(),
        request(2, "tools/list", json!({})),
        call(3, "echo", json!({"message": "hello from the container"})),
        call(4, "get-sum", json!({"a": 2, "b": 3})),
    ];
    let s = session(&project, EVERYTHING, &[&messages]).await;

    let init = &s.response(1)["result"];
    assert_eq!(init["serverInfo"]["name"], "mcp-servers/everything", "{}", s.transcript);
    assert_eq!(init["capabilities"]["tools"]["listChanged"], true, "{}", s.transcript);
    let tools = s.tool_names(2);
    for tool in ["echo", "get-sum", "trigger-long-running-operation"] {
        assert!(tools.contains(&tool), "{tool} missing from {tools:?}");
    }
    let echo = &s.response(2)["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "echo").unwrap();
    assert_eq!(echo["annotations"]["readOnlyHint"], true, "{echo}");
    assert_eq!(s.call_text(3), "Echo: hello from the container");
    assert!(s.call_text(4).contains(" is 5"), "{}", s.transcript);
    assert_eq!(s.exit, 0, "server-everything exits when its stdin closes:\n{}", s.transcript);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_server_answers_grows_and_crashes_in_a_hardened_container() {
    let project = containers::start_with_image("mcpp", mcp_image()).await;

    let messages =
        [initialize(), initialized(), request(2, "tools/list", json!({})), call(3, "echo", json!({"message": "hi"}))];
    let s = session(&project, TALLY, &[&messages]).await;
    let init = &s.response(1)["result"];
    assert_eq!(init["serverInfo"]["name"], mcp_image::TALLY_NAME, "{}", s.transcript);
    assert_eq!(init["serverInfo"]["version"], mcp_image::TALLY_VERSION, "{}", s.transcript);
    assert_eq!(init["capabilities"]["tools"]["listChanged"], true, "{}", s.transcript);
    let mut tools = s.tool_names(2);
    tools.sort();
    assert_eq!(tools, ["add", "crash", "echo", "grow", "pid"], "{}", s.transcript);
    assert_eq!(s.call_text(3), "Echo: hi");
    assert_eq!(s.exit, 0, "{}", s.transcript);

    // `grow` announces the new tool, which the next tools/list has; `pid` is the server's own.
    let grow = [initialize(), initialized(), call(2, "pid", json!({})), call(3, "grow", json!({}))];
    let s = session(&project, TALLY, &[&grow, &[request(4, "tools/list", json!({}))]]).await;
    assert!(
        s.messages.iter().any(|m| m["method"] == "notifications/tools/list_changed"),
        "no list_changed notification:\n{}",
        s.transcript
    );
    let pid: u32 = s.call_text(2).parse().unwrap_or_else(|_| panic!("pid is no number:\n{}", s.transcript));
    assert!(pid > 1, "{pid}");
    assert!(s.tool_names(4).contains(&"grown"), "{}", s.transcript);

    // `crash` ends the process mid-call: no answer, exit status 3.
    let s = session(&project, TALLY, &[&[initialize(), initialized(), call(2, "crash", json!({}))]]).await;
    assert_eq!(s.exit, 3, "{}", s.transcript);
    assert!(!s.messages.iter().any(|m| m["id"] == json!(2)), "{}", s.transcript);
}
