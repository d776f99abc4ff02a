//! A runner pack doing real work in its container, against the real `suzumio-runner` binary
//! (roots in temporary directories, as the process backend has them): `context.fs` and
//! `node:fs` confined like the `file.*` tools (`../` and symlink escapes refused), `context.exec`
//! and `node:child_process` (output, stdin, timeout killing the process group, cancel firing
//! `context.signal`, no agent token in the environment), the Node-compatible modules (digests
//! checked against the system's `sha256sum`/`sha1sum`/`md5sum`), and the refusal of modules
//! that are not there.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use suzumio_core::rpc::{
    Connection, HandlerFuture, HelloParams, HelloResult, InvokeParams, LoadParams, PROTOCOL_VERSION, PackSpec,
    RequestHandler, RpcError, ToolOutput, method, parse_params,
};
use tokio::net::UnixListener;

const RUNNER: &str = env!("CARGO_BIN_EXE_suzumio-runner");
const TOKEN: &str = "tok-context-1";

const PACK: &str = r#"
import path from "node:path";
import { createHash, randomUUID, randomBytes } from "node:crypto";
import { readFileSync, writeFileSync, existsSync, mkdirSync } from "fs";
import { readFile as readFileP } from "node:fs/promises";
import { execFileSync, spawnSync, execFile } from "node:child_process";
import { promisify, format } from "node:util";
import { EventEmitter } from "node:events";
import { Buffer } from "node:buffer";
import os from "node:os";

export function createRunnerToolpack(context) {
  return {
    tools: {
      "ctx.write": async ({ path: file, text }) => {
        await context.fs.writeFile(file, text, { createDirs: true });
        const back = await context.fs.readFile(file);
        const bytes = await context.fs.readFile(file, { encoding: null });
        const stat = await context.fs.stat(file);
        const names = await context.fs.readdir(path.dirname(file));
        return { output: JSON.stringify({ back, bytes: bytes instanceof Uint8Array ? bytes.length : "not bytes", size: stat.size, isFile: stat.isFile(), names }) };
      },
      "ctx.read": async ({ path: file }) => ({ output: await context.fs.readFile(file) }),
      "ctx.writeOnly": async ({ path: file }) => { await context.fs.writeFile(file, "x"); return { output: "written" }; },
      "ctx.error": async ({ op, args }) => {
        try {
          await context.fs[op](...args);
          return { output: "no error" };
        } catch (error) {
          return { output: error.message.startsWith(`${error.code}: `) ? error.message : `bad code ${error.code}: ${error.message}` };
        }
      },
      "ctx.tree": async () => {
        await context.fs.mkdir("tree/a/b", { recursive: true });
        await context.fs.writeFile("tree/a/b/f.txt", "f");
        await context.fs.rename("tree/a/b/f.txt", "tree/a/g.txt");
        const afterRename = await context.fs.readdir("tree/a");
        await context.fs.rm("tree", { recursive: true });
        return { output: JSON.stringify({ afterRename, gone: !(await context.fs.exists("tree")) }) };
      },
      "ctx.exec": async ({ script, input, timeoutMs, maxOutputBytes }) => {
        const result = await context.exec("sh", ["-c", script], { input, timeoutMs, maxOutputBytes, env: { EXTRA: "from-call" } });
        return { output: JSON.stringify(result) };
      },
      "ctx.env": async () => ({ output: JSON.stringify(context.env) }),
      "ctx.waitCancel": async ({ script }) => {
        const aborted = new Promise((resolve) => context.signal.addEventListener("abort", () => resolve(context.signal.reason.name)));
        let exec;
        try {
          exec = await context.exec("sh", ["-c", script], { timeoutMs: 20000 });
        } catch (error) {
          exec = `${error.code}`;
        }
        return { output: JSON.stringify({ reason: await aborted, aborted: context.signal.aborted, exec }) };
      },
      "node.digest": async ({ text }) => ({
        output: JSON.stringify({
          sha256: createHash("sha256").update(text).digest("hex"),
          sha256b64: createHash("sha256").update(Buffer.from(text)).digest("base64"),
          sha1: createHash("sha1").update(text.slice(0, 3)).update(text.slice(3)).digest("hex"),
          md5: createHash("md5").update(text, "utf8").digest("hex"),
          uuid: randomUUID(),
          random: randomBytes(8).toString("hex").length,
        }),
      }),
      "node.modules": async () => {
        mkdirSync("node", { recursive: true });
        writeFileSync("/workspace/node/sync.txt", "sync");
        const text = readFileSync(path.join(context.workspace, "node", "sync.txt"), "utf8");
        const viaPromises = await readFileP(path.join(context.workspace, "node/sync.txt"));
        const out = execFileSync("sh", ["-c", "printf hi"], { encoding: "utf8" });
        const spawned = spawnSync("sh", ["-c", "echo err >&2; exit 3"]);
        const viaPromisify = await promisify(execFile)("sh", ["-c", "printf p"]);
        const emitter = new EventEmitter();
        let got = 0;
        emitter.once("x", (n) => { got += n; });
        emitter.emit("x", 2);
        emitter.emit("x", 5);
        const url = new URL("../b/c?q=1#h", "https://example.com/a/x");
        return {
          output: JSON.stringify({
            text, viaPromises: viaPromises.toString(), isBuffer: Buffer.isBuffer(viaPromises), exists: existsSync("node/sync.txt"),
            out, status: spawned.status, stderr: spawned.stderr.toString(), viaPromisify: viaPromisify.stdout,
            got, formatted: format("%s=%d %j", "n", 4, { a: 1 }),
            resolved: path.resolve("rel/x"), eol: os.EOL === "\n", platform: os.platform(),
            url: url.href, param: url.searchParams.get("q"),
            encoded: new TextDecoder().decode(new TextEncoder().encode("héllo")),
            cloned: structuredClone({ d: new Date(0), m: new Map([[1, 2]]) }).m.get(1),
            b64: btoa("hi"), hex: Buffer.from("hi").toString("hex"), back: Buffer.from("aGk=", "base64").toString(),
            timer: await new Promise((resolve) => setTimeout(() => resolve("fired"), 5)),
            hidden: [typeof globalThis.__suzumio_native, typeof globalThis.__suzumio_host, typeof globalThis.__suzumio_host_async].join(),
          }),
        };
      },
    },
  };
}
"#;

const TOOLS: [&str; 10] = [
    "ctx.write",
    "ctx.read",
    "ctx.writeOnly",
    "ctx.error",
    "ctx.tree",
    "ctx.exec",
    "ctx.env",
    "ctx.waitCancel",
    "node.digest",
    "node.modules",
];

/// The peer the test drives the runner from: it answers the runner's hello and nothing else
/// (these packs never call the controller), so every answer checked here is the runner's. The
/// runner against the real controller end: the controller's `tests/runner_session.rs`.
struct HelloOnly;

impl RequestHandler for HelloOnly {
    fn handle(&self, name: String, params: Value) -> HandlerFuture {
        let answer = match name.as_str() {
            method::HELLO => parse_params::<HelloParams>(&name, params).map(|_| {
                json!(HelloResult {
                    project: "demo".into(),
                    agent_id: "pm".into(),
                    protocol: PROTOCOL_VERSION,
                    resume: None
                })
            }),
            other => Err(RpcError::method_not_found(other)),
        };
        Box::pin(async move { answer })
    }
}

struct Runner {
    dir: PathBuf,
    child: Child,
    conn: Connection,
    _tmp: tempfile::TempDir,
}

impl Runner {
    /// A runner serving agent `pm` with the test pack (module `source`) loaded.
    async fn start(source: &str) -> Result<Runner, RpcError> {
        let tmp = tempfile::Builder::new().prefix("suzumio-pack-context-").tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        for sub in ["run", "ws", "artifacts/pm", "artifacts/qa", "mnt", "packs/demo", "outside"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        std::fs::write(dir.join("packs/demo/runner.mjs"), source).unwrap();
        std::fs::write(dir.join("outside/secret.txt"), "outside the roots").unwrap();
        let listener = UnixListener::bind(dir.join("run/control.sock")).unwrap();
        let child = Command::new(RUNNER)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("AGENT_SETTING", "configured")
            .env("SUZUMIO_TOKEN", TOKEN)
            .env("SUZUMIO_SOCKET", dir.join("run/control.sock"))
            .env("SUZUMIO_WORKSPACE", dir.join("ws"))
            .env("SUZUMIO_ARTIFACTS", dir.join("artifacts"))
            .env("SUZUMIO_MNT", dir.join("mnt"))
            .env("SUZUMIO_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let (stream, _) = within(listener.accept()).await.unwrap();
        let (conn, _) = Connection::spawn(stream, Arc::new(HelloOnly));
        within(conn.request(method::PING, Value::Null)).await.unwrap();
        let runner = Runner { dir, child, conn, _tmp: tmp };
        let pack = PackSpec {
            id: "demo".into(),
            root: runner.dir.join("packs/demo").to_string_lossy().into_owned(),
            module: "runner.mjs".into(),
            tools: TOOLS.iter().map(|t| t.to_string()).collect(),
            timeout_ms: 10_000,
            memory_mb: 64,
        };
        let params = LoadParams {
            project: "demo".into(),
            agent_id: "pm".into(),
            packs: vec![pack],
            builtin_tools: vec![],
            artifacts_dir: None,
            mcp: Vec::new(),
            disk_quota_bytes: None,
        };
        within(runner.conn.call::<_, Value>(method::LOAD, &params)).await?;
        Ok(runner)
    }

    async fn invoke_as(&self, call_id: &str, tool: &str, input: Value) -> Result<ToolOutput, RpcError> {
        let params = InvokeParams {
            activation_id: "act_1".into(),
            tool: tool.into(),
            input: Some(input),
            call_id: call_id.into(),
            path_rules: Vec::new(),
        };
        within(self.conn.call(method::INVOKE, &params)).await
    }

    async fn output(&self, tool: &str, input: Value) -> String {
        self.invoke_as("call_1", tool, input).await.unwrap_or_else(|e| panic!("{tool}: {}", e.message)).output
    }

    async fn json(&self, tool: &str, input: Value) -> Value {
        let output = self.output(tool, input).await;
        serde_json::from_str(&output).unwrap_or_else(|e| panic!("{tool}: {e}: {output}"))
    }

    fn ws(&self) -> PathBuf {
        self.dir.join("ws")
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), future).await.expect("timed out")
}

async fn runner() -> Runner {
    Runner::start(PACK).await.unwrap_or_else(|e| panic!("load: {}", e.message))
}

/// The digest the system's own tool computes for `text`.
fn system_digest(tool: &str, text: &str) -> String {
    use std::io::Write;
    let mut child = Command::new(tool).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_string()
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

#[tokio::test]
async fn context_fs_writes_reads_and_lists_files_in_the_workspace() {
    let r = runner().await;
    let result = r.json("ctx.write", json!({"path": "notes/today.md", "text": "héllo"})).await;
    assert_eq!(result, json!({"back": "héllo", "bytes": 6, "size": 6, "isFile": true, "names": ["today.md"]}));
    assert_eq!(std::fs::read_to_string(r.ws().join("notes/today.md")).unwrap(), "héllo");
    let tree = r.json("ctx.tree", json!({})).await;
    assert_eq!(tree, json!({"afterRename": ["b", "g.txt"], "gone": true}));
    // Its own artifacts directory is writable, another agent's is not.
    assert_eq!(r.output("ctx.writeOnly", json!({"path": "/artifacts/pm/out.txt"})).await, "written");
    assert_eq!(std::fs::read_to_string(r.dir.join("artifacts/pm/out.txt")).unwrap(), "x");
    let refused = r.output("ctx.error", json!({"op": "writeFile", "args": ["/artifacts/qa/x.txt", "x"]})).await;
    assert_eq!(refused, "EACCES: Write path must be under /workspace or /artifacts/pm: /artifacts/qa/x.txt");
}

#[tokio::test]
async fn context_fs_refuses_dot_dot_escapes() {
    let r = runner().await;
    let outside = r.dir.join("outside/secret.txt");
    let relative = format!("../{}", "../".repeat(r.ws().components().count()));
    let cases = [
        ("readFile", json!([format!("{relative}{}", outside.display())]), "Read path must be under"),
        (
            "readFile",
            json!(["/workspace/../../etc/passwd"]),
            "Read path must be under /workspace, /artifacts, or /mnt: /etc/passwd",
        ),
        (
            "writeFile",
            json!(["../escape.txt", "x"]),
            "Write path must be under /workspace or /artifacts/pm: /escape.txt",
        ),
        ("readFile", json!(["missing.txt"]), "ENOENT: No such file or directory: /workspace/missing.txt"),
    ];
    for (op, args, expected) in cases {
        let said = r.output("ctx.error", json!({"op": op, "args": args})).await;
        assert!(said.contains(expected), "{op} {args}: {said}");
    }
    assert!(!r.dir.join("escape.txt").exists());
}

#[tokio::test]
async fn context_fs_refuses_symlink_escapes() {
    let r = runner().await;
    std::os::unix::fs::symlink(r.dir.join("outside"), r.ws().join("link")).unwrap();
    std::os::unix::fs::symlink(r.dir.join("outside/secret.txt"), r.ws().join("file-link")).unwrap();
    for (op, args) in [
        ("readFile", json!(["link/secret.txt"])),
        ("readFile", json!(["file-link"])),
        ("writeFile", json!(["link/planted.txt", "x"])),
        ("writeFile", json!(["file-link", "overwritten"])),
        ("rm", json!(["link/secret.txt"])),
        ("readdir", json!(["link"])),
    ] {
        let said = r.output("ctx.error", json!({"op": op, "args": args})).await;
        assert!(said.starts_with("EACCES: "), "{op} {args}: {said}");
    }
    assert_eq!(std::fs::read_to_string(r.dir.join("outside/secret.txt")).unwrap(), "outside the roots");
    assert!(!r.dir.join("outside/planted.txt").exists());
}

#[tokio::test]
async fn context_exec_runs_a_program_with_input_and_the_agents_environment() {
    let r = runner().await;
    let script = "cat; echo \" $EXTRA $AGENT_SETTING token=${SUZUMIO_TOKEN:-none}\"; pwd; echo oops >&2; exit 4";
    let result = r.json("ctx.exec", json!({"script": script, "input": "from stdin"})).await;
    let ws = r.ws().display().to_string();
    assert_eq!(result["exitCode"], 4);
    assert_eq!(result["stdout"], format!("from stdin from-call configured token=none\n{ws}\n"));
    assert_eq!(result["stderr"], "oops\n");
    assert_eq!(result["timedOut"], false);
    let capped = r.json("ctx.exec", json!({"script": "printf '%0100d' 0", "maxOutputBytes": 10})).await;
    assert_eq!((&capped["stdout"], &capped["truncated"]), (&json!("0".repeat(10)), &json!(true)));
    let env = r.json("ctx.env", json!({})).await;
    assert_eq!(env["AGENT_SETTING"], "configured");
    assert!(env.get("SUZUMIO_TOKEN").is_none() && env.get("SUZUMIO_SOCKET").is_none(), "{env}");
}

/// A timeout stops the whole process group: the child a command left sleeping is gone too.
#[tokio::test]
async fn context_exec_timeout_kills_the_process_group() {
    let r = runner().await;
    let result = r.json("ctx.exec", json!({"script": "sleep 30 & echo $!; wait", "timeoutMs": 300})).await;
    assert_eq!(result["timedOut"], true, "{result}");
    let pid: i32 = result["stdout"].as_str().unwrap().trim().parse().unwrap();
    // The group is killed at the timeout; the deadline only guards against hanging.
    let deadline = Instant::now() + Duration::from_secs(60);
    while alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!alive(pid), "the background sleep {pid} outlived the timeout");
}

/// A cancel fires `context.signal` and stops the running process.
#[tokio::test]
async fn cancel_fires_context_signal_and_stops_the_process() {
    let r = runner().await;
    let pid_file = r.ws().join("pid");
    let script = format!("echo $$ > {}; sleep 30", pid_file.display());
    let call = r.invoke_as("call_cancel", "ctx.waitCancel", json!({"script": script}));
    let cancel = async {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !pid_file.exists() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let answer: Value = r.conn.call(method::CANCEL, &json!({"callId": "call_cancel"})).await.unwrap();
        assert_eq!(answer, json!({"cancelled": true}));
    };
    let (result, ()) = tokio::join!(call, cancel);
    let result: Value = serde_json::from_str(&result.unwrap().output).unwrap();
    assert_eq!(result, json!({"reason": "AbortError", "aborted": true, "exec": "ABORT_ERR"}));
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert!(!alive(pid), "the cancelled command {pid} still runs");
}

#[tokio::test]
async fn node_crypto_digests_match_the_system_tools() {
    let r = runner().await;
    let text = "The quick brown fox jumps over the lazy dög";
    let result = r.json("node.digest", json!({"text": text})).await;
    assert_eq!(result["sha256"], system_digest("sha256sum", text));
    assert_eq!(result["sha1"], system_digest("sha1sum", text));
    assert_eq!(result["md5"], system_digest("md5sum", text));
    let base64 = Command::new("sh")
        .args(["-c", &format!("printf '%s' '{text}' | sha256sum | cut -d' ' -f1 | xxd -r -p | base64")])
        .output()
        .unwrap();
    assert_eq!(result["sha256b64"], String::from_utf8_lossy(&base64.stdout).trim());
    let uuid = result["uuid"].as_str().unwrap();
    assert!(uuid.len() == 36 && uuid.as_bytes()[14] == b'4', "{uuid}");
    assert_eq!(result["random"], 16);
}

#[tokio::test]
async fn node_modules_work_in_the_runner() {
    let r = runner().await;
    let ws = r.ws().display().to_string();
    let result = r.json("node.modules", json!({})).await;
    let expected = json!({
        "text": "sync", "viaPromises": "sync", "isBuffer": true, "exists": true,
        "out": "hi", "status": 3, "stderr": "err\n", "viaPromisify": "p",
        "got": 2, "formatted": "n=4 {\"a\":1}",
        "resolved": "/workspace/rel/x", "eol": true, "platform": "linux",
        "url": "https://example.com/b/c?q=1#h", "param": "1",
        "encoded": "héllo", "cloned": 2, "b64": "aGk=", "hex": "6869", "back": "hi", "timer": "fired",
        "hidden": "undefined,undefined,undefined",
    });
    assert_eq!(result, expected, "workspace {ws}");
}

#[tokio::test]
async fn unsupported_modules_fail_the_load_naming_the_module_and_what_is_supported() {
    for (import, module) in [("import net from 'node:net';", "node:net"), ("import _ from 'lodash';", "lodash")] {
        let source = format!("{import}\nexport function createRunnerToolpack() {{ return {{}}; }}");
        // The load itself succeeds (a broken pack disables only its own tools); each of the
        // pack's tools then answers with why it could not be loaded.
        let runner = Runner::start(&source).await.unwrap_or_else(|e| panic!("the runner's load: {}", e.message));
        let Err(error) = runner.invoke_as("c1", TOOLS[0], json!({})).await else { panic!("{import} loaded") };
        let message = error.message;
        assert!(message.starts_with("toolpack demo could not be loaded: "), "{message}");
        assert!(message.contains(&format!("module '{module}' is not available in toolpacks")), "{message}");
        for supported in ["node:path", "node:crypto", "node:fs/promises", "node:child_process", "node:util"] {
            assert!(message.contains(supported), "{message}");
        }
    }
}
