//! The embedded JavaScript host against real pack modules on disk: export shapes, confined
//! imports, deadlines, memory limits, errors with stacks, and host operations. The operations
//! are the controller's own (`ControllerOps`, what `ToolHost` gives every pack) on a real
//! SQLite store in a temporary project, so what a pack reads or records is checked in the store.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use suzumio::clock::SystemClock;
use suzumio::config::load::ProcessEnv;
use suzumio::js::{CONTROLLER_GLUE, CallScope, JsCall, JsError, JsHost, JsLimits, ModuleSpec};
use suzumio::project::Project;
use suzumio::store::{Event, MessageQuery, SendMessage, SignalRequest, StateFiles, Store};
use suzumio::support::ops::ControllerOps;

/// Guards a wait against hanging; never what decides a result.
const DEADLINE: Duration = Duration::from_secs(60);

/// A project for the host operations to act on: pm (the coordinator) and worker, under the
/// communication policy, a store, and a running activation of each, for the scope of support
/// calls.
struct World {
    dir: PathBuf,
    store: Store,
    ops: Arc<ControllerOps>,
    pm_activation: String,
    worker_activation: String,
    _tmp: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let tmp = tempfile::Builder::new().prefix("suzumio-js-project-").tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        std::fs::write(
            dir.join("suzumio.yaml"),
            "name: p\ntask: Host operations.\ncommunication: {restrictNonCoordinatorToCoordinator: true}\nagents:\n  pm: {tools: [messages.send]}\n  worker: {tools: [messages.send]}\n\
             backend:\n  runner:\n    model: main\n    models:\n      providers: {local: {type: scripted}}\n      presets: {main: {provider: local}}\n",
        )
        .unwrap();
        let project = Arc::new(Project::load(&dir, &ProcessEnv).unwrap_or_else(|e| panic!("{e}")));
        let store = Store::open(&project.config, Arc::new(SystemClock)).unwrap();
        let pm_activation = store.start_activation("pm", "host operations", &[]).unwrap().id;
        let worker_activation = store.start_activation("worker", "host operations", &[]).unwrap().id;
        let ops = Arc::new(ControllerOps::new(project, store.clone(), StateFiles::new(&dir)));
        World { dir, store, ops, pm_activation, worker_activation, _tmp: tmp }
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

/// The pack's runtime, with the controller's operations on a fresh project.
async fn host(pack: &Pack, limits: JsLimits) -> (JsHost, World) {
    let world = World::new();
    let host = JsHost::spawn(pack.spec("controller.mjs", limits), world.ops.clone()).await.expect("module loads");
    (host, world)
}

/// A support call as `agent` makes it from its running activation.
async fn support_as(host: &JsHost, world: &World, agent: &str, tool: &str, input: Value) -> Result<Value, JsError> {
    let activation = if agent == "pm" { &world.pm_activation } else { &world.worker_activation };
    let base = json!({"project": "p", "agent": {"id": agent}, "activationId": activation, "toolpackId": "test-pack"});
    let scope = CallScope { agent_id: Some(agent.into()), activation_id: Some(activation.clone()) };
    let call = JsCall { export: "support", args: vec![base.to_string(), tool.into(), input.to_string()], scope };
    within(host.call(call)).await
}

async fn support(host: &JsHost, world: &World, tool: &str, input: Value) -> Result<Value, JsError> {
    support_as(host, world, "pm", tool, input).await
}

async fn webui(host: &JsHost, entry: &str, input: Value) -> Result<Value, JsError> {
    let base = json!({"project": "p", "toolpackId": "test-pack"}).to_string();
    within(host.call(JsCall {
        export: "webui",
        args: vec![base, entry.into(), input.to_string()],
        scope: CallScope::default(),
    }))
    .await
}

async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, future).await.unwrap_or_else(|_| panic!("no answer within {DEADLINE:?}"))
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
        let (host, world) = host(&pack, fast()).await;
        let out = support(&host, &world, "x.run", json!({"n": 7})).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(out, json!({"output": "x.run:7"}), "{name}");
    }
}

#[tokio::test]
async fn missing_handler_and_missing_factory_are_errors() {
    let pack = Pack::new(
        "missing",
        &[("controller.mjs", "export function createControllerToolpack() { return { tools: {} }; }")],
    );
    let (h, world) = host(&pack, fast()).await;
    assert_eq!(
        message(&support(&h, &world, "x.nope", json!({})).await.unwrap_err()),
        "Controller side for test-pack did not handle x.nope"
    );
    assert_eq!(
        message(&webui(&h, "x.stats", json!({})).await.unwrap_err()),
        "WebUI side for test-pack did not handle x.stats"
    );

    let pack = Pack::new("nofactory", &[("controller.mjs", "export const x = 1;")]);
    let (h, world) = host(&pack, fast()).await;
    assert_eq!(
        message(&support(&h, &world, "x.run", json!({})).await.unwrap_err()),
        "Controller module for test-pack must export createControllerToolpack"
    );
}

/// WebUI export shapes of reference §3.8 reach the handler with the entry's input.
#[tokio::test]
async fn webui_export_shapes() {
    let shapes = [
        "export const webui = { 'r.echo': (input) => ({ output: `r.echo:${input.n}` }) };",
        "export default (entry, input) => ({ output: `${entry}:${input.n}` });",
        "export function createWebuiToolpack(context) { return { webui: { 'r.echo': (input) => ({ output: `r.echo:${input.n}` }) } }; }",
    ];
    for source in shapes {
        let pack = Pack::new("webui", &[("controller.mjs", source)]);
        let (h, _world) = host(&pack, fast()).await;
        let out = webui(&h, "r.echo", json!({"n": 7})).await.unwrap_or_else(|e| panic!("{source}: {e}"));
        assert_eq!(out, json!({"output": "r.echo:7"}), "{source}");
    }
}

/// The seed's `context.store.projectStats()`: a synchronous call answered from the store.
#[tokio::test]
async fn sync_store_calls_read_the_store() {
    let source = "export function createWebuiToolpack(context) { return { webui: { 'r.stats': async () => { const stats = context.store.projectStats(); return { output: JSON.stringify(stats), metadata: { stats } }; } } }; }";
    let pack = Pack::new("webui", &[("controller.mjs", source)]);
    let (h, world) = host(&pack, fast()).await;
    for body in ["one", "two", "three"] {
        let message = SendMessage {
            sender: "user".into(),
            recipient: Some("pm".into()),
            body: body.into(),
            ..Default::default()
        };
        world.store.send_message(message).unwrap();
    }
    let out = webui(&h, "r.stats", json!({})).await.unwrap();
    assert_eq!(out["metadata"]["stats"]["messages"], 3);
    assert_eq!(out["metadata"]["stats"], serde_json::to_value(world.store.project_stats().unwrap()).unwrap());
}

#[tokio::test]
async fn host_errors_become_js_errors_and_scope_comes_from_rust() {
    let source = r#"
      export function createControllerToolpack(context) {
        return {
          async support(tool, input) {
            let caught = "";
            try { context.state.read("../jobs.json"); } catch (e) { caught = `${e instanceof Error}:${e.message}`; }
            context.state.write("jobs.json", { jobs: [input.job] });
            const back = context.state.read("jobs.json");
            const signals = context.recordSignal({ kind: "review.ready", targetAgent: "pm" });
            const slept = await context.time.sleep(5);
            return { output: caught, metadata: { back, signals, slept, activationId: context.activationId } };
          },
        };
      }"#;
    let pack = Pack::new("ops", &[("controller.mjs", source)]);
    let (h, world) = host(&pack, fast()).await;
    let out = support(&h, &world, "x.run", json!({"job": "j1"})).await.unwrap();
    let caught = out["output"].as_str().unwrap();
    assert!(caught.starts_with("true:invalid toolpack state file name `../jobs.json`"), "{caught}");
    assert_eq!(out["metadata"]["back"], json!({"jobs": ["j1"]}));
    let on_disk = std::fs::read_to_string(world.dir.join("toolpack-state/test-pack/jobs.json")).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&on_disk).unwrap(), json!({"jobs": ["j1"]}), "the pack's state file");
    assert_eq!(out["metadata"]["slept"], Value::Null, "the host's sleep resolved");
    assert_eq!(out["metadata"]["activationId"], json!(world.pm_activation));
    let id = out["metadata"]["signals"][0]["id"].as_str().expect("the recorded signal");
    let signal = world.store.signal(id).unwrap().expect("in the store");
    assert_eq!(signal.kind, "review.ready");
    assert_eq!(
        (signal.source_agent.as_deref(), signal.source_activation.as_deref()),
        (Some("pm"), Some(world.pm_activation.as_str())),
        "the caller is the scope Rust set, not an argument"
    );
}

/// A host refusal by a rule is an `Error` named `RejectedError` that pack code may catch; one it
/// lets escape ends the call as `JsError::Rejected`, not as the pack's own failure. Here the
/// communication policy refuses a P0 from a non-coordinator, and nothing is sent.
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
    let (h, world) = host(&pack, fast()).await;
    let refusal = "Communication policy allows non-coordinator priorities P2 or lower; P0 is not allowed.";
    let caught = support_as(&h, &world, "worker", "x.catch", json!({})).await.unwrap();
    assert_eq!(caught["output"], format!("RejectedError: {refusal}"));
    assert_eq!(
        support_as(&h, &world, "worker", "x.escape", json!({})).await.unwrap_err(),
        JsError::Rejected { pack: "test-pack".into(), message: refusal.into() }
    );
    assert!(world.store.list_messages(&MessageQuery::default()).unwrap().is_empty(), "nothing was sent");
}

/// The host functions are gone from `globalThis` before the pack's module is evaluated, and the
/// glue cannot be imported: pack code has only the context of each call.
#[tokio::test]
async fn pack_code_cannot_capture_the_host_functions() {
    let source = r#"
      const seen = Object.getOwnPropertyNames(globalThis).filter((name) => name.startsWith("__suzumio"));
      export function createControllerToolpack() { return { "x.seen": () => ({ output: JSON.stringify(seen) }) }; }"#;
    let pack = Pack::new("capture", &[("controller.mjs", source)]);
    let (h, world) = host(&pack, fast()).await;
    assert_eq!(support(&h, &world, "x.seen", json!({})).await.unwrap(), json!({"output": "[]"}));

    let pack = Pack::new("glue", &[("controller.mjs", "import * as glue from 'suzumio:glue'; export default glue;")]);
    let err = JsHost::spawn(pack.spec("controller.mjs", fast()), World::new().ops).await.err();
    let Some(JsError::Load { message, .. }) = err else { panic!("expected a load error, got {err:?}") };
    assert!(message.contains("suzumio: modules are internal to the host and cannot be imported"), "{message}");
}

/// A top-level `await` that never settles fails the load at the deadline instead of hanging it.
#[tokio::test]
async fn a_module_that_never_finishes_loading_fails_at_the_deadline() {
    let pack = Pack::new("tla", &[("controller.mjs", "await new Promise(() => {});\nexport default {};")]);
    let err = within(JsHost::spawn(pack.spec("controller.mjs", fast()), World::new().ops)).await.err();
    let Some(JsError::Load { message, .. }) = err else { panic!("expected a load error, got {err:?}") };
    assert_eq!(message, "module evaluation did not finish within 300 ms");
}

#[tokio::test]
async fn exceptions_keep_message_and_stack() {
    let source = "function deep() { throw new TypeError('bad input shape'); }\nexport function createControllerToolpack() { return { 'x.run': () => deep() }; }";
    let pack = Pack::new("throws", &[("controller.mjs", source)]);
    let (h, world) = host(&pack, fast()).await;
    match support(&h, &world, "x.run", json!({})).await.unwrap_err() {
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
    let (h, world) = host(&pack, fast()).await;
    let err = support(&h, &world, "x.loop", json!({})).await.unwrap_err();
    assert_eq!(err, JsError::Timeout { pack: "test-pack".into(), ms: 300 });
    assert_eq!(support(&h, &world, "x.ok", json!({})).await.unwrap(), json!({"output": "fine"}));
}

#[tokio::test]
async fn a_promise_that_never_settles_times_out() {
    let source = "export function createControllerToolpack() { return { 'x.hang': () => new Promise(() => {}) }; }";
    let pack = Pack::new("hang", &[("controller.mjs", source)]);
    let (h, world) = host(&pack, fast()).await;
    assert!(matches!(support(&h, &world, "x.hang", json!({})).await, Err(JsError::Timeout { .. })));
}

#[tokio::test]
async fn runaway_allocation_hits_the_memory_limit_and_the_pack_recovers() {
    let source = "export function createControllerToolpack() { return { 'x.grow': () => { const a = []; while (true) a.push(new Array(100000).fill(1)); }, 'x.ok': () => ({ output: 'fine' }) }; }";
    let pack = Pack::new("oom", &[("controller.mjs", source)]);
    let limits = JsLimits { call_timeout: Duration::from_secs(20), memory_bytes: 16 << 20 };
    let (h, world) = host(&pack, limits).await;
    assert_eq!(
        support(&h, &world, "x.grow", json!({})).await.unwrap_err(),
        JsError::OutOfMemory { pack: "test-pack".into(), mib: 16 }
    );
    assert_eq!(support(&h, &world, "x.ok", json!({})).await.unwrap(), json!({"output": "fine"}));
}

/// A pack spinning on its thread (here until the test records a signal it polls for) does not
/// hold up another pack's call: that one answers while the first still spins.
#[tokio::test]
async fn one_looping_pack_does_not_block_another() {
    let spinning = r#"export function createControllerToolpack(context) { return { 'x.spin': () => {
        context.recordSignal({ kind: "busy.spinning", targetAgent: "pm" });
        while (context.store.listSignals({ kind: "busy.release" }).length === 0) {}
        return { output: "released" };
    } }; }"#;
    let looping = Pack::new("busy", &[("controller.mjs", spinning)]);
    let healthy = Pack::new(
        "healthy",
        &[(
            "controller.mjs",
            "export function createControllerToolpack() { return { 'x.ok': () => ({ output: 'ok' }) }; }",
        )],
    );
    let world = World::new();
    let patient = JsLimits { call_timeout: DEADLINE, memory_bytes: 16 << 20 };
    let busy = JsHost::spawn(looping.spec("controller.mjs", patient), world.ops.clone()).await.unwrap();
    let fine = JsHost::spawn(healthy.spec("controller.mjs", fast()), world.ops.clone()).await.unwrap();
    let mut events = world.store.subscribe();
    let world = Arc::new(world);
    let stuck = tokio::spawn({
        let world = world.clone();
        async move { support(&busy, &world, "x.spin", json!({})).await }
    });
    within(async {
        loop {
            if let Event::SignalCreated { kind, .. } = events.recv().await.unwrap().event
                && kind == "busy.spinning"
            {
                return;
            }
        }
    })
    .await;
    assert_eq!(support(&fine, &world, "x.ok", json!({})).await.unwrap(), json!({"output": "ok"}));
    assert!(!stuck.is_finished(), "the healthy pack answered while the other still spun");
    let release = SignalRequest { kind: "busy.release".into(), target_agent: Some("pm".into()), ..Default::default() };
    world.store.record_signal(release).unwrap();
    assert_eq!(stuck.await.unwrap().unwrap(), json!({"output": "released"}));
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
    let (h, world) = host(&pack, fast()).await;
    assert_eq!(support(&h, &world, "x.run", json!({"n": 21})).await.unwrap(), json!({"output": "42"}));
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
        let err =
            JsHost::spawn(pack.spec("pack/controller.mjs", fast()), World::new().ops).await.err().expect("load fails");
        let JsError::Load { message, .. } = &err else { panic!("{import}: expected a load error, got {err:?}") };
        assert!(message.contains(expected), "{import}: {message}");
    }
}

#[tokio::test]
async fn syntax_errors_fail_the_load_with_a_position() {
    let pack = Pack::new("syntax", &[("controller.mjs", "export function createControllerToolpack( {\n")]);
    let err = JsHost::spawn(pack.spec("controller.mjs", fast()), World::new().ops).await.err().expect("fails");
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
    let (h, world) = host(&pack, fast()).await;
    let err = support(&h, &world, "x.run", json!({})).await.unwrap_err();
    assert!(message(&err).contains("BigInt"), "{err}");
}

/// Regression: a call stopped while it awaited a host future must not leave the runtime
/// unusable (or crash the process when the runtime is rebuilt, or when it is torn down).
#[tokio::test]
async fn deadline_while_awaiting_a_host_future() {
    let source = "export function createControllerToolpack(context) { return { 'x.wait': async () => { await context.time.sleep(5000); return { output: 'late' }; }, 'x.ok': () => ({ output: 'fine' }) }; }";
    let pack = Pack::new("await", &[("controller.mjs", source)]);
    let (h, world) = host(&pack, fast()).await;
    assert!(matches!(support(&h, &world, "x.wait", json!({})).await, Err(JsError::Timeout { .. })));
    assert_eq!(support(&h, &world, "x.ok", json!({})).await.unwrap(), json!({"output": "fine"}));
    drop(h);
    // The pack's thread drops its runtime, then the operations it holds: once only this test
    // holds them, the teardown is over.
    within(async {
        while Arc::strong_count(&world.ops) > 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}
