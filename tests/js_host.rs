//! The embedded JavaScript host against real pack modules on disk: export shapes, confined
//! imports, deadlines, memory limits, errors with stacks, and host operations.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use suzumio::js::{CONTROLLER_GLUE, CallScope, HostFuture, HostOps, JsCall, JsError, JsHost, JsLimits, ModuleSpec};
use suzumio::toolpack::ToolError;

/// A host that answers a few operations and records what it was asked.
#[derive(Default)]
struct TestHost {
    calls: Mutex<Vec<(String, Option<String>, Value)>>,
}

impl HostOps for TestHost {
    fn call(&self, _pack: &str, scope: &CallScope, op: &str, args: Value) -> Result<Value, ToolError> {
        self.calls.lock().unwrap().push((op.to_string(), scope.agent_id.clone(), args.clone()));
        match op {
            "store.projectStats" => Ok(json!({"messages": 3})),
            "recordSignal" => Ok(json!([{"id": "sig_1", "kind": args["kind"]}])),
            "state.read" => Err(ToolError::Failed(format!("no state named {}", args["name"].as_str().unwrap_or("")))),
            "store.sendMessage" => {
                Err(ToolError::Rejected("Communication policy allows non-coordinator priorities P2 or lower".into()))
            }
            _ => Err(ToolError::Failed(format!("unknown op {op}"))),
        }
    }

    fn call_async(&self, _pack: &str, _scope: &CallScope, op: &str, args: Value) -> HostFuture {
        let op = op.to_string();
        Box::pin(async move {
            match op.as_str() {
                "time.sleep" => {
                    let ms = args["ms"].as_u64().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(json!(ms))
                }
                _ => Err(ToolError::Failed(format!("unknown async op {op}"))),
            }
        })
    }
}

struct Pack {
    dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Pack {
    fn new(name: &str, files: &[(&str, &str)]) -> Pack {
        let tmp = tempfile::Builder::new().prefix(&format!("suzumio-js-{name}-")).tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        for (path, text) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        Pack { dir, _tmp: tmp }
    }

    fn spec(&self, module: &str, limits: JsLimits) -> ModuleSpec {
        ModuleSpec {
            pack_id: "test-pack".into(),
            root: self.dir.join(Path::new(module).parent().unwrap_or(Path::new(""))),
            module: self.dir.join(module),
            glue: CONTROLLER_GLUE,
            limits,
        }
    }
}

fn fast() -> JsLimits {
    JsLimits { call_timeout: Duration::from_millis(300), memory_bytes: 16 << 20 }
}

async fn host(pack: &Pack, limits: JsLimits) -> (JsHost, Arc<TestHost>) {
    let ops = Arc::new(TestHost::default());
    let host = JsHost::spawn(pack.spec("controller.mjs", limits), ops.clone()).await.expect("module loads");
    (host, ops)
}

fn base() -> String {
    json!({"project": "p", "agent": {"id": "pm"}, "activationId": "act_1", "toolpackId": "test-pack"}).to_string()
}

async fn support(host: &JsHost, tool: &str, input: Value) -> Result<Value, JsError> {
    let scope = CallScope { agent_id: Some("pm".into()), activation_id: Some("act_1".into()) };
    host.call(JsCall { export: "support", args: vec![base(), tool.into(), input.to_string()], scope }).await
}

async fn webui(host: &JsHost, entry: &str, input: Value) -> Result<Value, JsError> {
    host.call(JsCall {
        export: "webui",
        args: vec![base(), entry.into(), input.to_string()],
        scope: CallScope::default(),
    })
    .await
}

fn message(e: &JsError) -> String {
    match e {
        JsError::Exception { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// Every export shape of reference §3.4 reaches the handler.
#[tokio::test]
async fn controller_export_shapes() {
    let shapes = [
        (
            "support method",
            "export function createControllerToolpack(ctx) { return { support: async (tool, input) => ({ output: `${tool}:${input.n}` }) }; }",
        ),
        (
            "tools map",
            "export function createControllerToolpack(ctx) { return { tools: { 'x.run': (input) => ({ output: `x.run:${input.n}` }) } }; }",
        ),
        (
            "handler map",
            "export async function createControllerToolpack(ctx) { return { 'x.run': async (input) => ({ output: `x.run:${input.n}` }) }; }",
        ),
        (
            "default factory",
            "export default function (ctx) { return { 'x.run': (input) => ({ output: `x.run:${input.n}` }) }; }",
        ),
    ];
    for (name, source) in shapes {
        let pack = Pack::new("shapes", &[("controller.mjs", source)]);
        let (host, _) = host(&pack, fast()).await;
        let out = support(&host, "x.run", json!({"n": 7})).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(out, json!({"output": "x.run:7"}), "{name}");
    }
}

#[tokio::test]
async fn missing_handler_and_missing_factory_are_errors() {
    let pack = Pack::new(
        "missing",
        &[("controller.mjs", "export function createControllerToolpack() { return { tools: {} }; }")],
    );
    let (h, _) = host(&pack, fast()).await;
    assert_eq!(
        message(&support(&h, "x.nope", json!({})).await.unwrap_err()),
        "Controller side for test-pack did not handle x.nope"
    );
    assert_eq!(
        message(&webui(&h, "x.stats", json!({})).await.unwrap_err()),
        "WebUI side for test-pack did not handle x.stats"
    );

    let pack = Pack::new("nofactory", &[("controller.mjs", "export const x = 1;")]);
    let (h, _) = host(&pack, fast()).await;
    assert_eq!(
        message(&support(&h, "x.run", json!({})).await.unwrap_err()),
        "Controller module for test-pack must export createControllerToolpack"
    );
}

/// WebUI export shapes of reference §3.8, and the seed's `context.store.projectStats()` call.
#[tokio::test]
async fn webui_export_shapes_and_sync_store_calls() {
    let shapes = [
        "export function createWebuiToolpack(context) { return { webui: { 'r.stats': async () => { const stats = context.store.projectStats(); return { output: JSON.stringify(stats), metadata: { stats } }; } } }; }",
        "export const webui = { 'r.stats': () => ({ output: JSON.stringify({ messages: 3 }), metadata: { stats: { messages: 3 } } }) };",
        "export default (entry, input) => ({ output: JSON.stringify({ messages: 3 }), metadata: { stats: { messages: 3 } } });",
    ];
    for source in shapes {
        let pack = Pack::new("webui", &[("controller.mjs", source)]);
        let (h, _) = host(&pack, fast()).await;
        let out = webui(&h, "r.stats", json!({})).await.unwrap_or_else(|e| panic!("{source}: {e}"));
        assert_eq!(out["metadata"]["stats"]["messages"], 3, "{source}");
    }
}

#[tokio::test]
async fn host_errors_become_js_errors_and_scope_comes_from_rust() {
    let source = r#"
      export function createControllerToolpack(context) {
        return {
          async support(tool, input) {
            let caught = "";
            try { context.state.read("jobs.json"); } catch (e) { caught = `${e instanceof Error}:${e.message}`; }
            const signals = context.recordSignal({ kind: "review.ready", targetAgent: "pm" });
            const slept = await context.time.sleep(5);
            return { output: caught, metadata: { signals, slept, activationId: context.activationId } };
          },
        };
      }"#;
    let pack = Pack::new("ops", &[("controller.mjs", source)]);
    let (h, ops) = host(&pack, fast()).await;
    let out = support(&h, "x.run", json!({})).await.unwrap();
    assert_eq!(out["output"], "true:no state named jobs.json");
    assert_eq!(out["metadata"]["signals"][0]["kind"], "review.ready");
    assert_eq!(out["metadata"]["slept"], 5);
    assert_eq!(out["metadata"]["activationId"], "act_1");
    let calls = ops.calls.lock().unwrap();
    let record = calls.iter().find(|c| c.0 == "recordSignal").expect("recordSignal reached the host");
    assert_eq!(record.1.as_deref(), Some("pm"), "the caller is the scope Rust set, not an argument");
}

/// A host refusal by a rule is an `Error` named `RejectedError` that pack code may catch; one it
/// lets escape ends the call as `JsError::Rejected`, not as the pack's own failure.
#[tokio::test]
async fn host_refusals_are_rejections() {
    let source = r#"
      export function createControllerToolpack(context) {
        const send = () => context.store.sendMessage({ recipient: "pm", priority: "P0", body: "x" });
        return {
          "x.catch": () => { try { send(); } catch (e) { return { output: `${e.name}: ${e.message}` }; } },
          "x.escape": () => { send(); return { output: "sent" }; },
        };
      }"#;
    let pack = Pack::new("refusals", &[("controller.mjs", source)]);
    let (h, _) = host(&pack, fast()).await;
    let caught = support(&h, "x.catch", json!({})).await.unwrap();
    assert_eq!(caught["output"], "RejectedError: Communication policy allows non-coordinator priorities P2 or lower");
    assert_eq!(
        support(&h, "x.escape", json!({})).await.unwrap_err(),
        JsError::Rejected {
            pack: "test-pack".into(),
            message: "Communication policy allows non-coordinator priorities P2 or lower".into()
        }
    );
}

/// The host functions are gone from `globalThis` before the pack's module is evaluated, and the
/// glue cannot be imported: pack code has only the context of each call.
#[tokio::test]
async fn pack_code_cannot_capture_the_host_functions() {
    let source = r#"
      const seen = Object.getOwnPropertyNames(globalThis).filter((name) => name.startsWith("__suzumio"));
      export function createControllerToolpack() { return { "x.seen": () => ({ output: JSON.stringify(seen) }) }; }"#;
    let pack = Pack::new("capture", &[("controller.mjs", source)]);
    let (h, _) = host(&pack, fast()).await;
    assert_eq!(support(&h, "x.seen", json!({})).await.unwrap(), json!({"output": "[]"}));

    let pack = Pack::new("glue", &[("controller.mjs", "import * as glue from 'suzumio:glue'; export default glue;")]);
    let err = JsHost::spawn(pack.spec("controller.mjs", fast()), Arc::new(TestHost::default())).await.err();
    let Some(JsError::Load { message, .. }) = err else { panic!("expected a load error, got {err:?}") };
    assert!(message.contains("suzumio: modules are internal to the host and cannot be imported"), "{message}");
}

/// A top-level `await` that never settles fails the load at the deadline instead of hanging it.
#[tokio::test]
async fn a_module_that_never_finishes_loading_fails_at_the_deadline() {
    let pack = Pack::new("tla", &[("controller.mjs", "await new Promise(() => {});\nexport default {};")]);
    let started = Instant::now();
    let err = JsHost::spawn(pack.spec("controller.mjs", fast()), Arc::new(TestHost::default())).await.err();
    let Some(JsError::Load { message, .. }) = err else { panic!("expected a load error, got {err:?}") };
    assert_eq!(message, "module evaluation did not finish within 300 ms");
    assert!(started.elapsed() < Duration::from_secs(5), "stopped at the deadline: {:?}", started.elapsed());
}

#[tokio::test]
async fn exceptions_keep_message_and_stack() {
    let source = "function deep() { throw new TypeError('bad input shape'); }\nexport function createControllerToolpack() { return { 'x.run': () => deep() }; }";
    let pack = Pack::new("throws", &[("controller.mjs", source)]);
    let (h, _) = host(&pack, fast()).await;
    match support(&h, "x.run", json!({})).await.unwrap_err() {
        JsError::Exception { message, stack, .. } => {
            assert_eq!(message, "TypeError: bad input shape");
            assert!(stack.unwrap_or_default().contains("deep"), "the stack names the function");
        }
        other => panic!("expected an exception, got {other:?}"),
    }
}

#[tokio::test]
async fn infinite_loop_is_stopped_at_the_deadline_and_the_pack_recovers() {
    let source = "let calls = 0;\nexport function createControllerToolpack() { return { 'x.loop': () => { while (true) {} }, 'x.ok': () => ({ output: 'fine' }) }; }";
    let pack = Pack::new("loop", &[("controller.mjs", source)]);
    let (h, _) = host(&pack, fast()).await;
    let started = Instant::now();
    let err = support(&h, "x.loop", json!({})).await.unwrap_err();
    assert_eq!(err, JsError::Timeout { pack: "test-pack".into(), ms: 300 });
    assert!(started.elapsed() < Duration::from_secs(5), "stopped promptly");
    assert_eq!(support(&h, "x.ok", json!({})).await.unwrap(), json!({"output": "fine"}));
}

#[tokio::test]
async fn a_promise_that_never_settles_times_out() {
    let source = "export function createControllerToolpack() { return { 'x.hang': () => new Promise(() => {}) }; }";
    let pack = Pack::new("hang", &[("controller.mjs", source)]);
    let (h, _) = host(&pack, fast()).await;
    assert!(matches!(support(&h, "x.hang", json!({})).await, Err(JsError::Timeout { .. })));
}

#[tokio::test]
async fn runaway_allocation_hits_the_memory_limit_and_the_pack_recovers() {
    let source = "export function createControllerToolpack() { return { 'x.grow': () => { const a = []; while (true) a.push(new Array(100000).fill(1)); }, 'x.ok': () => ({ output: 'fine' }) }; }";
    let pack = Pack::new("oom", &[("controller.mjs", source)]);
    let limits = JsLimits { call_timeout: Duration::from_secs(20), memory_bytes: 16 << 20 };
    let (h, _) = host(&pack, limits).await;
    assert_eq!(
        support(&h, "x.grow", json!({})).await.unwrap_err(),
        JsError::OutOfMemory { pack: "test-pack".into(), mib: 16 }
    );
    assert_eq!(support(&h, "x.ok", json!({})).await.unwrap(), json!({"output": "fine"}));
}

#[tokio::test]
async fn one_looping_pack_does_not_block_another() {
    let looping = Pack::new(
        "busy",
        &[(
            "controller.mjs",
            "export function createControllerToolpack() { return { 'x.loop': () => { while (true) {} } }; }",
        )],
    );
    let healthy = Pack::new(
        "healthy",
        &[(
            "controller.mjs",
            "export function createControllerToolpack() { return { 'x.ok': () => ({ output: 'ok' }) }; }",
        )],
    );
    let slow = JsLimits { call_timeout: Duration::from_secs(3), memory_bytes: 16 << 20 };
    let (busy, _) = host(&looping, slow).await;
    let (fine, _) = host(&healthy, fast()).await;
    let stuck = tokio::spawn(async move { support(&busy, "x.loop", json!({})).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    assert_eq!(support(&fine, "x.ok", json!({})).await.unwrap(), json!({"output": "ok"}));
    assert!(started.elapsed() < Duration::from_secs(2), "the healthy pack answered while the other looped");
    assert!(matches!(stuck.await.unwrap(), Err(JsError::Timeout { .. })));
}

#[tokio::test]
async fn relative_imports_inside_the_pack_work() {
    let pack = Pack::new(
        "imports",
        &[
            (
                "controller.mjs",
                "import { twice } from './lib/math.mjs';\nexport function createControllerToolpack() { return { 'x.run': (i) => ({ output: String(twice(i.n)) }) }; }",
            ),
            ("lib/math.mjs", "import { one } from '../one.js';\nexport const twice = (n) => n * 2 * one;"),
            ("one.js", "export const one = 1;"),
        ],
    );
    let (h, _) = host(&pack, fast()).await;
    assert_eq!(support(&h, "x.run", json!({"n": 21})).await.unwrap(), json!({"output": "42"}));
}

/// Imports that leave the pack, name packages or URLs, or load non-JS files fail the load.
#[tokio::test]
async fn imports_outside_the_pack_are_refused() {
    let cases = [
        ("import '../outside.mjs';", "imports must stay inside the toolpack directory"),
        ("import 'lodash';", "module 'lodash' is not available in toolpacks"),
        ("import 'https://example.com/x.mjs';", "URL imports are not allowed"),
        ("import '/etc/passwd.mjs';", "absolute imports are not allowed"),
        ("import './data.json';", "only .mjs and .js modules can be imported"),
    ];
    for (import, expected) in cases {
        let pack = Pack::new(
            "confined",
            &[("pack/controller.mjs", import), ("outside.mjs", "export const x = 1;"), ("pack/data.json", "{}")],
        );
        let ops = Arc::new(TestHost::default());
        let err = JsHost::spawn(pack.spec("pack/controller.mjs", fast()), ops).await.err().expect("load fails");
        let JsError::Load { message, .. } = &err else { panic!("{import}: expected a load error, got {err:?}") };
        assert!(message.contains(expected), "{import}: {message}");
    }
}

#[tokio::test]
async fn syntax_errors_fail_the_load_with_a_position() {
    let pack = Pack::new("syntax", &[("controller.mjs", "export function createControllerToolpack( {\n")]);
    let err =
        JsHost::spawn(pack.spec("controller.mjs", fast()), Arc::new(TestHost::default())).await.err().expect("fails");
    let JsError::Load { message, .. } = err else { panic!("expected a load error") };
    assert!(message.contains("SyntaxError"), "{message}");
}

#[tokio::test]
async fn non_json_results_are_refused() {
    let pack = Pack::new(
        "bigint",
        &[(
            "controller.mjs",
            "export function createControllerToolpack() { return { 'x.run': () => ({ output: 1n }) }; }",
        )],
    );
    let (h, _) = host(&pack, fast()).await;
    let err = support(&h, "x.run", json!({})).await.unwrap_err();
    assert!(message(&err).contains("BigInt"), "{err}");
}

/// Regression: a call stopped while it awaited a host future must not leave the runtime
/// unusable (or crash the process when the runtime is rebuilt).
#[tokio::test]
async fn deadline_while_awaiting_a_host_future() {
    let source = "export function createControllerToolpack(context) { return { 'x.wait': async () => { await context.time.sleep(5000); return { output: 'late' }; }, 'x.ok': () => ({ output: 'fine' }) }; }";
    let pack = Pack::new("await", &[("controller.mjs", source)]);
    let (h, _) = host(&pack, fast()).await;
    assert!(matches!(support(&h, "x.wait", json!({})).await, Err(JsError::Timeout { .. })));
    assert_eq!(support(&h, "x.ok", json!({})).await.unwrap(), json!({"output": "fine"}));
    drop(h);
    tokio::time::sleep(Duration::from_millis(100)).await;
}
