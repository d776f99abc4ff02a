//! The real `suzumio-runner` binary driven over its socket by this test (a Unix listener and an
//! `rpc::Connection` that answers only the hello, see [`HelloOnly`]): load a runner.mjs pack
//! from a temporary directory, invoke its tools and the built-in ones, cancel, shut down, and
//! refuse what the protocol does not have. Roots point at temporary directories, as the process
//! backend does. The runner against the real controller end: the controller's
//! `tests/runner_session.rs`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use suzumio_core::rpc::{
    Connection, HandlerFuture, HelloParams, HelloResult, InvokeParams, LoadParams, LoadResult, PROTOCOL_VERSION,
    PackSpec, RequestHandler, RpcError, ToolOutput, codes, method, parse_params,
};
use tokio::net::UnixListener;

const RUNNER: &str = env!("CARGO_BIN_EXE_suzumio-runner");
const TOKEN: &str = "tok-123";

const PACK: &str = r#"
export function createRunnerToolpack(context) {
  return {
    tools: {
      "demo.echo": async (input) => ({
        output: `echo ${JSON.stringify(input)}`,
        title: "echo",
        metadata: {
          project: context.project, agentId: context.agentId, activationId: context.activationId,
          workspace: context.workspace, toolpackId: context.toolpackId,
        },
      }),
      "demo.throw": async () => { throw new Error("boom from handler"); },
      "demo.loop": async () => { for (;;) {} },
      "demo.shape": async () => ({ result: 1 }),
      "demo.noop": async () => ({ output: "ok" }),
    },
  };
}
"#;

const ALL_TOOLS: [&str; 5] = ["demo.echo", "demo.throw", "demo.loop", "demo.shape", "demo.noop"];

/// The peer this file drives the runner from, where the controller would be: it answers the
/// runner's hello (for [`TOKEN`] only) and nothing else, so every request here is the test's and
/// every answer the runner's. What the real controller end answers (hello, load, callSupport,
/// recordSignal, a wrong token, the token file) is tested against it in the controller's
/// `tests/runner_session.rs`.
struct HelloOnly;

impl RequestHandler for HelloOnly {
    fn handle(&self, name: String, params: Value) -> HandlerFuture {
        let answer = match name.as_str() {
            method::HELLO => parse_params::<HelloParams>(&name, params).and_then(|hello| {
                if hello.token != TOKEN {
                    return Err(RpcError::application("Invalid agent token"));
                }
                Ok(json!(HelloResult {
                    project: "demo".into(),
                    agent_id: "pm".into(),
                    protocol: PROTOCOL_VERSION,
                    resume: None
                }))
            }),
            other => Err(RpcError::method_not_found(other)),
        };
        Box::pin(async move { answer })
    }
}

struct Harness {
    dir: PathBuf,
    child: Child,
    conn: Connection,
    _tmp: tempfile::TempDir,
}

impl Harness {
    /// Start a runner and wait for its hello.
    async fn start() -> Harness {
        let tmp = tempfile::Builder::new().prefix("suzumio-runner-").tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        for sub in ["run", "ws", "artifacts/pm", "artifacts/qa", "mnt", "packs/demo"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let dir = dir.canonicalize().unwrap();
        std::fs::write(dir.join("packs/demo/runner.mjs"), PACK).unwrap();
        let socket = dir.join("run/control.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let child = spawn_runner(&dir, TOKEN);
        let (stream, _) = within("accept", listener.accept()).await.unwrap();
        let (conn, _) = Connection::spawn(stream, Arc::new(HelloOnly));
        let harness = Harness { dir, child, conn, _tmp: tmp };
        // The runner is serving once it answers.
        within("ping", harness.conn.request(method::PING, Value::Null)).await.unwrap();
        harness
    }

    fn pack(&self, tools: &[&str]) -> PackSpec {
        PackSpec {
            id: "demo".into(),
            root: self.dir.join("packs/demo").to_string_lossy().into_owned(),
            module: "runner.mjs".into(),
            tools: tools.iter().map(|t| t.to_string()).collect(),
            timeout_ms: 500,
            memory_mb: 32,
        }
    }

    async fn load(&self, packs: Vec<PackSpec>, builtins: &[&str]) -> Result<LoadResult, RpcError> {
        let params = LoadParams {
            project: "demo".into(),
            agent_id: "pm".into(),
            packs,
            builtin_tools: builtins.iter().map(|t| t.to_string()).collect(),
            artifacts_dir: None,
            mcp: Vec::new(),
            disk_quota_bytes: None,
        };
        within("load", self.conn.call(method::LOAD, &params)).await
    }

    async fn load_demo(&self) {
        let loaded = self.load(vec![self.pack(&ALL_TOOLS)], &["file.read", "file.write", "shell.exec"]).await.unwrap();
        assert_eq!(loaded.tools.len(), ALL_TOOLS.len() + 3);
    }

    async fn invoke(&self, tool: &str, input: Value) -> Result<ToolOutput, RpcError> {
        self.invoke_as("act_1", "call_1", tool, input).await
    }

    async fn invoke_as(&self, activation: &str, call: &str, tool: &str, input: Value) -> Result<ToolOutput, RpcError> {
        let params = InvokeParams {
            activation_id: activation.into(),
            tool: tool.into(),
            input: Some(input),
            call_id: call.into(),
            path_rules: Vec::new(),
        };
        within("invoke", self.conn.call(method::INVOKE, &params)).await
    }

    /// The error message of a failing invoke (checked to be an application error).
    async fn invoke_error(&self, tool: &str, input: Value) -> String {
        let error = self.invoke(tool, input).await.unwrap_err();
        assert_eq!(error.code, codes::APPLICATION, "{error:?}");
        error.message
    }

    /// Wait for the runner to exit; its exit code and stderr.
    fn wait(mut self) -> (Option<i32>, String) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut stderr = String::new();
                if let Some(mut pipe) = self.child.stderr.take() {
                    std::io::Read::read_to_string(&mut pipe, &mut stderr).unwrap();
                }
                return (status.code(), stderr);
            }
            assert!(Instant::now() < deadline, "the runner did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The runner under test; `SUZUMIO_RUNNER_BIN` can name another build (e.g. the static release
/// binary, to measure it).
fn runner_bin() -> String {
    std::env::var("SUZUMIO_RUNNER_BIN").unwrap_or_else(|_| RUNNER.to_string())
}

fn spawn_runner(dir: &Path, token: &str) -> Child {
    Command::new(runner_bin())
        .env("SUZUMIO_TOKEN", token)
        .env("SUZUMIO_SOCKET", dir.join("run/control.sock"))
        .env("SUZUMIO_WORKSPACE", dir.join("ws"))
        .env("SUZUMIO_ARTIFACTS", dir.join("artifacts"))
        .env("SUZUMIO_MNT", dir.join("mnt"))
        .env("SUZUMIO_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(15), future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

#[test]
fn version_flag_prints_the_version() {
    let out = Command::new(RUNNER).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("suzumio-runner {}\n", suzumio_core::VERSION));
}

#[test]
fn a_missing_token_is_a_usage_error() {
    let out = Command::new(RUNNER).env_remove("SUZUMIO_TOKEN").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SUZUMIO_TOKEN is not set"));
}

#[test]
fn no_socket_fails_after_retrying() {
    let tmp = tempfile::Builder::new().prefix("suzumio-runner-nosock-").tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("run")).unwrap();
    // The runner retries for about 10 s (this test accepts that wait once), each try logged.
    let out = Command::new(RUNNER)
        .env("SUZUMIO_TOKEN", TOKEN)
        .env("SUZUMIO_SOCKET", dir.join("run/control.sock"))
        .env("SUZUMIO_LOG", "debug")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tries = stderr.matches("socket does not answer yet").count();
    assert!(tries >= 10, "it gave up after {tries} tries:\n{stderr}");
    assert!(stderr.contains("cannot connect to the controller"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_waits_for_a_socket_that_appears_later() {
    let tmp = tempfile::Builder::new().prefix("suzumio-runner-late-").tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join("run")).unwrap();
    let mut child = Command::new(runner_bin())
        .env("SUZUMIO_TOKEN", TOKEN)
        .env("SUZUMIO_SOCKET", dir.join("run/control.sock"))
        .env("SUZUMIO_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The socket appears only after the runner has found it missing (its first retry is logged).
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let retried = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut line = String::new();
        while stderr.read_line(&mut line).is_ok_and(|n| n > 0) {
            if line.contains("socket does not answer yet") {
                return Some(stderr);
            }
            line.clear();
        }
        None
    });
    let stderr =
        within("the runner's first retry", retried).await.unwrap().expect("a logged retry before the runner gave up");
    let listener = UnixListener::bind(dir.join("run/control.sock")).unwrap();
    let (stream, _) = within("late accept", listener.accept()).await.unwrap();
    let (conn, _) = Connection::spawn(stream, Arc::new(HelloOnly));
    within("ping", conn.request(method::PING, Value::Null)).await.unwrap();
    let _ = child.kill();
    let _ = child.wait();
    drop(stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_handler_output_comes_back_with_its_context() {
    let h = Harness::start().await;
    h.load_demo().await;
    let out = h.invoke_as("act_7", "c1", "demo.echo", json!({"x": 1})).await.unwrap();
    assert_eq!(out.output, r#"echo {"x":1}"#);
    assert_eq!(out.title.as_deref(), Some("echo"));
    assert_eq!(
        Value::Object(out.metadata.unwrap()),
        json!({"project": "demo", "agentId": "pm", "activationId": "act_7", "workspace": "/workspace", "toolpackId": "demo"})
    );
    // No input reaches the handler as {}.
    let params = json!({"activationId": "act_7", "tool": "demo.echo", "callId": "c2"});
    let out: ToolOutput = serde_json::from_value(h.conn.request(method::INVOKE, params).await.unwrap()).unwrap();
    assert_eq!(out.output, "echo {}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throwing_handler_returns_its_message() {
    let h = Harness::start().await;
    h.load_demo().await;
    let thrown = h.invoke_error("demo.throw", json!({})).await;
    assert!(thrown.starts_with("toolpack demo, tool demo.throw: boom from handler\n    at "), "{thrown}");
    assert!(thrown.contains("packs/demo/runner.mjs:"), "the stack names the module: {thrown}");
    assert_eq!(
        h.invoke_error("demo.shape", json!({})).await,
        "Runner tool demo.shape of toolpack demo returned an object without `output` or `content` (expected {output, title?, metadata?} or {content, isError?, structuredContent?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_handler_is_stopped_at_the_pack_deadline_and_the_runner_keeps_serving() {
    let h = Harness::start().await;
    h.load_demo().await;
    let error = h.invoke_error("demo.loop", json!({})).await;
    assert!(error.contains("did not finish within 500 ms"), "{error}");
    assert_eq!(h.invoke("demo.noop", json!({})).await.unwrap().output, "ok");
    within("ping", h.conn.request(method::PING, Value::Null)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_errors_are_the_reference_texts_and_a_broken_pack_disables_only_its_tools() {
    let h = Harness::start().await;
    h.load(vec![h.pack(&["demo.noop"])], &[]).await.unwrap();

    // The load's own errors (the controller's request is wrong) refuse the load and change nothing.
    let mut other = h.pack(&["demo.noop"]);
    other.id = "other".into();
    let error = h.load(vec![h.pack(&["demo.noop"]), other], &[]).await.unwrap_err();
    assert_eq!(error.message, "Duplicate runner tool: demo.noop");
    let error = h.load(vec![], &["file.read", "file.read"]).await.unwrap_err();
    assert_eq!(error.message, "Duplicate runner tool: file.read");
    let error = h.load(vec![], &["web.fetch"]).await.unwrap_err();
    assert!(error.message.starts_with("Unknown built-in runner tool: web.fetch"), "{}", error.message);
    assert_eq!(h.invoke("demo.noop", json!({})).await.unwrap().output, "ok");

    // A pack that does not load: its tools answer with its error, the built-ins work.
    h.load(vec![h.pack(&["demo.noop", "demo.missing"])], &["file.read"]).await.unwrap();
    assert_eq!(
        h.invoke_error("demo.noop", json!({})).await,
        "toolpack demo could not be loaded: Runner module for demo did not register demo.missing"
    );
    assert!(h.invoke("file.read", json!({"path": "."})).await.is_ok());

    std::fs::write(h.dir.join("packs/demo/bad.mjs"), "export const tools = {};").unwrap();
    let mut bad = h.pack(&["demo.noop"]);
    bad.module = "bad.mjs".into();
    h.load(vec![bad], &[]).await.unwrap();
    assert_eq!(
        h.invoke_error("demo.noop", json!({})).await,
        "toolpack demo could not be loaded: Runner module for demo must export createRunnerToolpack"
    );
    assert_eq!(h.invoke_error("demo.echo", json!({})).await, "Unknown tool: demo.echo");
    assert_eq!(h.invoke_error("file.read", json!({"path": "."})).await, "Unknown tool: file.read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_export_and_a_bare_handler_map_are_accepted() {
    let h = Harness::start().await;
    std::fs::write(
        h.dir.join("packs/demo/plain.mjs"),
        "export default async (context) => ({ 'demo.hi': async (input) => ({ output: `hi ${input.name} in ${context.toolpackId}` }) });",
    )
    .unwrap();
    let mut spec = h.pack(&["demo.hi"]);
    spec.module = "plain.mjs".into();
    h.load(vec![spec], &[]).await.unwrap();
    assert_eq!(h.invoke("demo.hi", json!({"name": "Ann"})).await.unwrap().output, "hi Ann in demo");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_tools_work_over_the_socket_on_the_mapped_roots() {
    let h = Harness::start().await;
    h.load_demo().await;
    std::fs::write(h.dir.join("ws/hello.txt"), "hi there\n").unwrap();
    assert_eq!(h.invoke("file.read", json!({"path": "hello.txt"})).await.unwrap().output, "1: hi there");
    let out = h.invoke("file.write", json!({"path": "/artifacts/pm/out.md", "content": "done"})).await.unwrap();
    assert_eq!(out.output, "Wrote 4 chars to /artifacts/pm/out.md");
    assert_eq!(std::fs::read_to_string(h.dir.join("artifacts/pm/out.md")).unwrap(), "done");
    assert_eq!(
        h.invoke_error("file.write", json!({"path": "/artifacts/qa/x", "content": ""})).await,
        "Write path must be under /workspace or /artifacts/pm: /artifacts/qa/x"
    );
    assert_eq!(h.invoke_error("file.patch", json!({"operations": []})).await, "Unknown tool: file.patch");
    // The agent token is not handed to commands.
    let out = h.invoke("shell.exec", json!({"command": "echo \"[$SUZUMIO_TOKEN]\""})).await.unwrap();
    assert!(out.output.ends_with("[stdout]\n[]"), "{}", out.output);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_running_command() {
    let h = Harness::start().await;
    h.load_demo().await;
    let command = "echo $$ > started; exec sleep 30";
    let marker = h.dir.join("ws/started");
    let running = h.invoke_as("act_1", "call_9", "shell.exec", json!({"command": command}));
    let cancel = async {
        // Once the command runs (it has written its pid), not after a guessed delay.
        within("the command starts", async {
            while !marker.exists() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        h.conn.request(method::CANCEL, json!({"callId": "call_9"})).await.unwrap()
    };
    let (result, cancelled) = tokio::join!(running, cancel);
    assert_eq!(cancelled, json!({"cancelled": true}));
    assert_eq!(result.unwrap_err().message, format!("shell.exec was cancelled: {command}"));
    let pid = std::fs::read_to_string(&marker).unwrap().trim().to_string();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(stat.rsplit_once(") ").is_none_or(|(_, rest)| rest.starts_with('Z')), "the command {pid} still runs");
    let unknown = h.conn.request(method::CANCEL, json!({"callId": "nope"})).await.unwrap();
    assert_eq!(unknown, json!({"cancelled": false}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_then_the_runner_exits_cleanly() {
    let h = Harness::start().await;
    h.load_demo().await;
    let answer = within("shutdown", h.conn.request(method::SHUTDOWN, Value::Null)).await.unwrap();
    assert_eq!(answer, json!({}));
    within("runner closes", h.conn.closed()).await;
    let (code, stderr) = tokio::task::spawn_blocking(move || h.wait()).await.unwrap();
    assert_eq!(code, Some(0), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_methods_are_refused() {
    let h = Harness::start().await;
    let error = h.conn.request("callSupport", json!({})).await.unwrap_err();
    assert_eq!(error.code, codes::METHOD_NOT_FOUND);
    let error = h.conn.request(method::INVOKE, json!({"tool": 1})).await.unwrap_err();
    assert_eq!(error.code, codes::INVALID_PARAMS);
    assert_eq!(h.invoke_error("anything", json!({})).await, "Unknown tool: anything");
}
