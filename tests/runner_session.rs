//! The real `suzumio-runner` against the real controller end (`AgentRunners`, process backend:
//! the agent's socket, its one-time token in the file next to it, the hello, the `load` from the
//! config, the support broker and the store): what a `runner.mjs` tool learns of its call, what
//! `callSupport` and `recordSignal` reach in the controller, and a runner with the wrong token.
//! Roots are the project's directories, as the process backend maps them. No Docker.

mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use support::TempProject;
use suzumio::config::BackendKind;
use suzumio::support::runners::AgentRunners;
use suzumio::support::{ToolHost, ToolOutput};
use suzumio::toolpack::ToolError;

/// Guards every wait against hanging; never what decides a result.
const DEADLINE: Duration = Duration::from_secs(60);

const RUNNER_PACK: &str = r#"
export function createRunnerToolpack(context) {
  return {
    tools: {
      "demo.echo": async (input) => ({
        output: `echo ${JSON.stringify(input)}`,
        title: "echo",
        metadata: { project: context.project, agentId: context.agentId, activationId: context.activationId, toolpackId: context.toolpackId },
      }),
      "demo.support": async (input) => {
        const answer = await context.callSupport("demo.lookup", { q: input.q });
        return { output: `support said: ${answer.output}` };
      },
      "demo.denied": async () => {
        await context.callSupport("demo.secret", {});
        return { output: "unreachable" };
      },
      "demo.signal": async () => {
        const recorded = await context.recordSignal({ kind: "demo.done", targetAgent: "qa", priority: "P1" });
        return { output: JSON.stringify(recorded) };
      },
      "demo.badSignal": async () => {
        await context.recordSignal({ kind: "demo.done", status: "closed" });
        return { output: "unreachable" };
      },
      // Every tool of the pack the agent may use is the runner's; this one also has a
      // controller side, which is what `demo.support` calls.
      "demo.lookup": async (input) => context.callSupport("demo.lookup", input),
    },
  };
}
"#;

/// The controller side: says who asked, from what the broker gives it.
const CONTROLLER_PACK: &str = r#"
export function createControllerToolpack(context) {
  return {
    "demo.lookup": (input) => ({ output: `answer to ${input.q} for ${context.agent.id} in ${context.activationId} of ${context.toolpackId}` }),
    "demo.secret": () => ({ output: "the secret" }),
  };
}
"#;

fn tool(name: &str) -> Value {
    json!({"name": name, "description": name, "inputSchema": {"type": "object"}})
}

struct Session {
    project: TempProject,
    tools: Arc<ToolHost>,
    runners: Arc<AgentRunners>,
    activation: String,
}

/// A project whose agent `pm` may use the demo pack's runner tools and `demo.lookup`, not
/// `demo.secret`; its runners are local processes of this build's runner.
async fn session() -> Session {
    let project = TempProject::copy_of("bench");
    let dir = &project.dir;
    let pack = dir.join("toolpacks/demo");
    std::fs::create_dir_all(&pack).unwrap();
    let names =
        ["demo.echo", "demo.support", "demo.denied", "demo.signal", "demo.badSignal", "demo.lookup", "demo.secret"];
    let manifest = json!({"id": "demo", "tools": names.iter().map(|n| tool(n)).collect::<Vec<_>>()});
    std::fs::write(pack.join("suzumio.toolpack.json"), manifest.to_string()).unwrap();
    std::fs::write(pack.join("runner.mjs"), RUNNER_PACK).unwrap();
    std::fs::write(pack.join("controller.mjs"), CONTROLLER_PACK).unwrap();
    let unique = dir.file_name().unwrap().to_string_lossy().rsplit('-').next().unwrap().to_string();
    std::fs::write(
        dir.join("suzumio.yaml"),
        format!(
            "name: session-{unique}\ntask: Talk to the runner.\ntools:\n  toolpacks:\n    - core\n    - {{path: ./toolpacks/demo, id: demo}}\n\
             agents:\n  pm: {{tools: [demo.echo, demo.support, demo.denied, demo.signal, demo.badSignal, demo.lookup]}}\n  qa: {{tools: [messages.send]}}\n\
             backend:\n  runner:\n    model: main\n    models:\n      providers: {{local: {{type: scripted}}}}\n      presets: {{main: {{provider: local}}}}\n"
        ),
    )
    .unwrap();
    let tools = suzumio::controller::open(dir).unwrap_or_else(|e| panic!("{e}"));
    let runners = suzumio::controller::runners_with(&tools, BackendKind::Process, support::runner_binary())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let activation = tools.store.start_activation("pm", "runner session", &[]).unwrap().id;
    Session { project, tools, runners, activation }
}

impl Session {
    async fn invoke(&self, tool: &str, input: Value) -> Result<ToolOutput, ToolError> {
        let call = self.runners.invoke("pm", &self.activation, tool, input);
        tokio::time::timeout(DEADLINE, call).await.unwrap_or_else(|_| panic!("{tool}: no answer within {DEADLINE:?}"))
    }

    async fn error(&self, tool: &str) -> String {
        self.invoke(tool, json!({})).await.expect_err("the call fails").to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_handler_output_comes_back_with_its_context() {
    let s = session().await;
    let out = s.invoke("demo.echo", json!({"x": 1})).await.unwrap();
    assert_eq!(out.output, r#"echo {"x":1}"#);
    assert_eq!(out.title.as_deref(), Some("echo"));
    let name = s.tools.project.config.name.clone();
    assert_eq!(
        Value::Object(out.metadata.unwrap()),
        json!({"project": name, "agentId": "pm", "activationId": s.activation, "toolpackId": "demo"}),
        "the project and agent the controller's hello named, the activation of the call"
    );
    s.runners.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_support_reaches_the_controller_for_the_right_activation_and_pack() {
    let s = session().await;
    let out = s.invoke("demo.support", json!({"q": "weather"})).await.unwrap();
    assert_eq!(out.output, format!("support said: answer to weather for pm in {} of demo", s.activation));
    s.runners.shutdown().await;
}

/// The broker refuses a support call for a tool the agent may not use; the handler gets it as
/// a JavaScript error saying which call of which tool of which pack it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_refusal_reaches_the_handler_as_a_js_error_with_its_message() {
    let s = session().await;
    let error = s.error("demo.denied").await;
    let expected = r#"toolpack demo, tool demo.denied: callSupport("demo.secret") from runner.mjs: Tool not allowed for pm: demo.secret"#;
    assert!(error.contains(expected), "{error}");
    s.runners.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_signal_reaches_the_store_for_the_calling_activation() {
    let s = session().await;
    let out = s.invoke("demo.signal", json!({})).await.unwrap();
    let recorded: Value = serde_json::from_str(&out.output).unwrap();
    let id = recorded[0]["id"].as_str().expect("the recorded signal's id");
    let signal = s.tools.store.signal(id).unwrap().expect("in the store");
    assert_eq!(
        (signal.kind.as_str(), signal.target_agent.as_deref(), signal.priority.as_str()),
        ("demo.done", Some("qa"), "P1")
    );
    assert_eq!(
        (signal.source_agent.as_deref(), signal.source_activation.as_deref()),
        (Some("pm"), Some(s.activation.as_str())),
        "attributed by the socket it came from, not by anything the pack said"
    );
    // A field the protocol does not have is refused in the runner, before the controller.
    let error = s.error("demo.badSignal").await;
    assert!(error.contains("tool demo.badSignal: recordSignal(signal): unknown field `status`"), "{error}");
    s.runners.shutdown().await;
}

/// A runner started by hand on the agent's socket with a token the controller never issued:
/// the controller refuses its hello and the runner exits, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_refused_and_the_runner_exits() {
    let s = session().await;
    let root = &s.project.dir;
    let socket = root.join(".suzumio/run/pm/control.sock");
    let workspace = root.join("workspaces/pm");
    std::fs::create_dir_all(&workspace).unwrap();
    let child = Command::new(support::runner_binary())
        .env_clear()
        .env("SUZUMIO_TOKEN", "not-a-token-the-controller-issued")
        .env("SUZUMIO_SOCKET", &socket)
        .env("SUZUMIO_WORKSPACE", &workspace)
        .env("SUZUMIO_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(DEADLINE, tokio::task::spawn_blocking(move || child.wait_with_output()))
        .await
        .expect("the runner exits")
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the controller refused the hello: Invalid agent token"), "{stderr}");
    // The real agent's runner is unaffected: it starts and serves.
    assert_eq!(s.invoke("demo.echo", json!({})).await.unwrap().output, "echo {}");
    s.runners.shutdown().await;
}
