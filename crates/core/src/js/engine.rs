//! The per-pack runtime thread: builds a QuickJS runtime with limits, loads the glue and the
//! pack module, then serves calls one at a time until every [`JsHost`] handle is dropped.
//! A call that times out or runs out of memory gets the runtime rebuilt before the next call.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use rquickjs::function::{Async, Func, Rest};
use rquickjs::prelude::*;
use rquickjs::{
    AsyncContext, AsyncRuntime, CatchResultExt, CaughtError, Ctx, Exception, Function, Module, Object, Persistent,
    Promise,
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::loader::{PackLoader, PackResolver};
use super::{CallScope, HostOps, Job, JsError, ModuleSpec};
use crate::toolpack::ToolError;

const GLUE_MODULE: &str = "suzumio:glue";

const PRELUDE: &str = r#"
(() => {
  const log = globalThis.__suzumio_log;
  delete globalThis.__suzumio_log;
  const show = (v) => {
    if (typeof v === "string") return v;
    if (v instanceof Error) return v.stack ? `${v.message}\n${v.stack}` : String(v.message);
    try { return JSON.stringify(v); } catch { return String(v); }
  };
  const make = (level) => (...args) => log(level, args.map(show).join(" "));
  globalThis.console = Object.freeze({
    log: make("info"), info: make("info"), debug: make("debug"), warn: make("warn"), error: make("error"),
  });
})();
"#;

// Field order is drop order: JavaScript values first, then the context, then the runtime, or
// QuickJS finds live objects when the runtime is freed.
struct Engine {
    glue: Persistent<Object<'static>>,
    context: AsyncContext,
    runtime: AsyncRuntime,
    /// Nanoseconds after `epoch` at which the running call must stop (u64::MAX: no call running).
    deadline: Arc<AtomicU64>,
    interrupted: Arc<AtomicBool>,
    epoch: Instant,
    scope: Rc<RefCell<CallScope>>,
}

pub(super) fn run_thread(
    spec: ModuleSpec,
    ops: Arc<dyn HostOps>,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    ready: oneshot::Sender<Result<(), JsError>>,
) {
    let Ok(tokio_rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        let _ = ready.send(Err(JsError::Gone { pack: spec.pack_id.clone() }));
        return;
    };
    tokio_rt.block_on(async move {
        let mut engine = match Engine::start(&spec, &ops).await {
            Ok(engine) => {
                let _ = ready.send(Ok(()));
                Some(engine)
            }
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        while let Some(job) = jobs.recv().await {
            if engine.is_none() {
                engine = match Engine::start(&spec, &ops).await {
                    Ok(e) => Some(e),
                    Err(e) => {
                        let _ = job.reply.send(Err(e));
                        continue;
                    }
                };
            }
            let Some(current) = engine.as_ref() else { continue };
            let result = current.call(&spec, job.call).await;
            if matches!(result, Err(JsError::Timeout { .. } | JsError::OutOfMemory { .. })) {
                tracing::warn!(toolpack = %spec.pack_id, "restarting the pack's JavaScript runtime after: {}", result.as_ref().err().map(ToString::to_string).unwrap_or_default());
                engine = None;
            }
            let _ = job.reply.send(result);
        }
    });
}

impl Engine {
    async fn start(spec: &ModuleSpec, ops: &Arc<dyn HostOps>) -> Result<Engine, JsError> {
        let pack = spec.pack_id.clone();
        let load_error = |message: String| JsError::Load {
            pack: pack.clone(),
            module: crate::config::diag::display_path(&spec.module),
            message,
        };
        let runtime = AsyncRuntime::new().map_err(|e| load_error(e.to_string()))?;
        runtime.set_memory_limit(spec.limits.memory_bytes).await;
        runtime.set_max_stack_size(4 << 20).await;
        let epoch = Instant::now();
        let deadline = Arc::new(AtomicU64::new(u64::MAX));
        let interrupted = Arc::new(AtomicBool::new(false));
        {
            let deadline = deadline.clone();
            let interrupted = interrupted.clone();
            runtime
                .set_interrupt_handler(Some(Box::new(move || {
                    let stop = epoch.elapsed().as_nanos() as u64 > deadline.load(Ordering::Relaxed);
                    if stop {
                        interrupted.store(true, Ordering::Relaxed);
                    }
                    stop
                })))
                .await;
        }
        let glue_source = spec
            .glue
            .replace("\"__PACK_MODULE__\"", &json!(spec.module.to_string_lossy()).to_string())
            .replace("__PACK_ID__", &json!(spec.pack_id).to_string());
        let mut internal: HashMap<String, String> =
            super::node::sources().map(|(name, source)| (name.to_string(), source.to_string())).collect();
        internal.insert(GLUE_MODULE.to_string(), glue_source);
        let loader = PackLoader { internal };
        let resolver = PackResolver::new(spec.root.clone(), spec.pack_id.clone());
        let last_refusal = resolver.last_refusal();
        runtime.set_loader(resolver, loader).await;
        let context = AsyncContext::full(&runtime).await.map_err(|e| load_error(e.to_string()))?;
        let scope = Rc::new(RefCell::new(CallScope::default()));

        let limit_ms = spec.limits.call_timeout.as_millis() as u64;
        deadline.store(epoch.elapsed().as_nanos() as u64 + limit_ms * 1_000_000, Ordering::Relaxed);
        let loading = context.async_with(async |ctx| {
            let loaded = async {
                install_host_functions(&ctx, &spec.pack_id, ops.clone(), scope.clone())?;
                ctx.eval::<(), _>(PRELUDE)?;
                // Before the glue: it takes the native functions off `globalThis` and installs
                // the web globals, so both are settled before any pack code runs.
                let _: Object = Module::import(&ctx, super::node::RUNTIME_MODULE)?.into_future().await?;
                let namespace: Object = Module::import(&ctx, GLUE_MODULE)?.into_future().await?;
                Ok::<_, rquickjs::Error>(namespace)
            }
            .await
            .catch(&ctx);
            match loaded {
                Ok(namespace) => Ok(Persistent::save(&ctx, namespace)),
                // The stack says where (a syntax error's file, line and column; the import
                // that failed), which the message alone does not.
                Err(e) => {
                    let thrown = describe(e);
                    let frames = thrown.stack.as_deref().map(super::check::pack_frames).unwrap_or_default();
                    Err(if frames.is_empty() { thrown.message } else { format!("{}\n{frames}", thrown.message) })
                }
            }
        });
        // As for calls: the interrupt handler stops evaluation that computes, the timer a
        // top-level `await` that never settles.
        let timer = spec.limits.call_timeout + std::time::Duration::from_millis(50);
        // String: the load's message, made a `JsError` just below.
        let loaded: Option<Result<Persistent<Object<'static>>, String>> =
            tokio::time::timeout(timer, loading).await.ok();
        deadline.store(u64::MAX, Ordering::Relaxed);
        let too_slow = || load_error(format!("module evaluation did not finish within {limit_ms} ms"));
        let glue = match loaded {
            None => return Err(too_slow()),
            Some(Err(_)) if interrupted.load(Ordering::Relaxed) => return Err(too_slow()),
            Some(Err(message)) => return Err(load_error(super::loader::full_refusal(message, &last_refusal))),
            Some(Ok(glue)) => glue,
        };
        Ok(Engine { runtime, context, glue, deadline, interrupted, epoch, scope })
    }

    async fn call(&self, spec: &ModuleSpec, call: super::JsCall) -> Result<Value, JsError> {
        let pack = spec.pack_id.clone();
        let limit = spec.limits.call_timeout;
        *self.scope.borrow_mut() = call.scope.clone();
        self.interrupted.store(false, Ordering::Relaxed);
        self.deadline.store(self.epoch.elapsed().as_nanos() as u64 + limit.as_nanos() as u64, Ordering::Relaxed);
        let glue = self.glue.clone();
        let export = call.export;
        let args = call.args;
        let work = self.context.async_with(async |ctx| {
            let result = async {
                let glue = glue.restore(&ctx)?;
                let function: Function = glue.get(export)?;
                let returned: rquickjs::Value = function.call((Rest(args),))?;
                let text: String = match returned.as_promise() {
                    Some(promise) => promise.clone().into_future::<String>().await?,
                    None => String::from_js(&ctx, returned)?,
                };
                Ok::<_, rquickjs::Error>(text)
            }
            .await
            .catch(&ctx);
            result.map_err(describe)
        });
        // The interrupt handler stops JavaScript that computes; this timer stops a call that
        // waits on a promise which never settles.
        let outcome = tokio::time::timeout(limit + std::time::Duration::from_millis(50), work).await;
        self.deadline.store(u64::MAX, Ordering::Relaxed);
        *self.scope.borrow_mut() = CallScope::default();
        let timed_out = || JsError::Timeout { pack: pack.clone(), ms: limit.as_millis() as u64 };
        let text = match outcome {
            Err(_) => return Err(timed_out()),
            Ok(Err(_)) if self.interrupted.load(Ordering::Relaxed) => return Err(timed_out()),
            Ok(Err(thrown)) if is_out_of_memory(&thrown.message) => {
                return Err(JsError::OutOfMemory { pack, mib: spec.limits.memory_bytes >> 20 });
            }
            Ok(Err(Thrown { message, rejected: true, .. })) => return Err(JsError::Rejected { pack, message }),
            Ok(Err(Thrown { message, stack, .. })) => return Err(JsError::Exception { pack, message, stack }),
            Ok(Ok(text)) => text,
        };
        let _ = &self.runtime;
        serde_json::from_str(&text)
            .map_err(|e| JsError::BadResult { pack, message: format!("returned a value that is not JSON: {e}") })
    }
}

fn is_out_of_memory(message: &str) -> bool {
    message.contains("out of memory") || message.contains("Allocation failed")
}

/// The `name` the glue gives the `Error` of a host refusal (see [`super::rejected`]).
const REJECTED_NAME: &str = "RejectedError";

/// What was thrown: message, stack, and whether it is a host refusal that escaped.
struct Thrown {
    message: String,
    stack: Option<String>,
    rejected: bool,
}

/// Message and stack of whatever was thrown.
fn describe(error: CaughtError<'_>) -> Thrown {
    let plain = |message: String| Thrown { message, stack: None, rejected: false };
    match error {
        CaughtError::Exception(e) => {
            let message = e.message().unwrap_or_default();
            let name = e.get::<_, String>("name").unwrap_or_default();
            let rejected = name == REJECTED_NAME;
            let message =
                if name.is_empty() || name == "Error" || rejected { message } else { format!("{name}: {message}") };
            Thrown { message, stack: e.stack(), rejected }
        }
        CaughtError::Value(v) => {
            let shown = v
                .ctx()
                .json_stringify(v.clone())
                .ok()
                .flatten()
                .and_then(|s| s.to_string().ok())
                .unwrap_or_else(|| format!("{:?}", v.type_of()));
            plain(format!("threw a non-Error value: {shown}"))
        }
        CaughtError::Error(e) => plain(e.to_string()),
    }
}

/// What the glue's `unwrap` reads: `{ok}`, `{error}`, or `{error, rejected: true}` for a refusal.
fn reply(result: Result<Value, ToolError>) -> String {
    match result {
        Ok(v) => json!({ "ok": v }).to_string(),
        Err(ToolError::Rejected(message)) => json!({ "error": message, "rejected": true }).to_string(),
        Err(e) => json!({ "error": e.message() }).to_string(),
    }
}

fn install_host_functions<'js>(
    ctx: &Ctx<'js>,
    pack_id: &str,
    ops: Arc<dyn HostOps>,
    scope: Rc<RefCell<CallScope>>,
) -> rquickjs::Result<()> {
    let globals = ctx.globals();
    {
        let ops = ops.clone();
        let scope = scope.clone();
        let pack = pack_id.to_string();
        let host = move |op: String, args: String| -> String {
            let args = serde_json::from_str(&args).unwrap_or(Value::Null);
            let current = scope.borrow().clone();
            reply(ops.call(&pack, &current, &op, args))
        };
        globals.set("__suzumio_host", Func::from(host))?;
    }
    {
        let pack = pack_id.to_string();
        let host_async = move |op: String, args: String| {
            let args = serde_json::from_str(&args).unwrap_or(Value::Null);
            let current = scope.borrow().clone();
            let future = ops.call_async(&pack, &current, &op, args);
            async move { reply(future.await) }
        };
        globals.set("__suzumio_host_async", Func::from(Async(host_async)))?;
    }
    {
        let pack = pack_id.to_string();
        let log = move |level: String, text: String| match level.as_str() {
            "error" => tracing::error!(toolpack = %pack, "{text}"),
            "warn" => tracing::warn!(toolpack = %pack, "{text}"),
            "debug" => tracing::debug!(toolpack = %pack, "{text}"),
            _ => tracing::info!(toolpack = %pack, "{text}"),
        };
        globals.set("__suzumio_log", Func::from(log))?;
    }
    globals.set("__suzumio_native", native_functions(ctx)?)?;
    let _: Option<Promise> = None;
    Ok(())
}

/// What `suzumio:runtime` needs from Rust and cannot do in JavaScript: hashes, random bytes,
/// UTF-8 and timers. Bytes cross as hex strings (native on both sides).
fn native_functions<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Object<'js>> {
    let native = Object::new(ctx.clone())?;
    native.set(
        "hash",
        Func::from(|ctx: Ctx<'js>, algorithm: String, hex: String| -> rquickjs::Result<String> {
            let bytes = hex::decode(&hex).map_err(|e| Exception::throw_type(&ctx, &format!("hash: {e}")))?;
            digest(&algorithm, &bytes)
                .ok_or_else(|| Exception::throw_type(&ctx, &format!("Digest method not supported: {algorithm}")))
        }),
    )?;
    native.set(
        "random",
        Func::from(|ctx: Ctx<'js>, n: usize| -> rquickjs::Result<String> {
            let mut bytes = vec![0u8; n.min(1 << 24)];
            getrandom::fill(&mut bytes)
                .map_err(|e| Exception::throw_internal(&ctx, &format!("no random bytes: {e}")))?;
            Ok(hex::encode(bytes))
        }),
    )?;
    native.set("utf8Encode", Func::from(|text: String| hex::encode(text.as_bytes())))?;
    native.set(
        "utf8Decode",
        Func::from(|ctx: Ctx<'js>, hex: String, fatal: bool| -> rquickjs::Result<String> {
            let bytes = hex::decode(&hex).map_err(|e| Exception::throw_type(&ctx, &format!("decode: {e}")))?;
            match String::from_utf8(bytes) {
                Ok(text) => Ok(text),
                Err(e) if fatal => {
                    Err(Exception::throw_type(&ctx, &format!("The encoded data was not valid utf-8: {e}")))
                }
                Err(e) => Ok(String::from_utf8_lossy(e.as_bytes()).into_owned()),
            }
        }),
    )?;
    native.set(
        "sleep",
        Func::from(Async(|ms: f64| async move {
            let ms = if ms.is_finite() && ms > 0.0 { ms.min(24.0 * 3600.0 * 1000.0) } else { 0.0 };
            tokio::time::sleep(std::time::Duration::from_micros((ms * 1000.0) as u64)).await;
        })),
    )?;
    Ok(native)
}

/// The hex digest of `bytes` with a `node:crypto` algorithm name.
fn digest(algorithm: &str, bytes: &[u8]) -> Option<String> {
    use sha2::Digest;
    Some(match algorithm {
        "sha1" => hex::encode(sha1::Sha1::digest(bytes)),
        "sha256" => hex::encode(sha2::Sha256::digest(bytes)),
        "sha384" => hex::encode(sha2::Sha384::digest(bytes)),
        "sha512" => hex::encode(sha2::Sha512::digest(bytes)),
        "md5" => hex::encode(md5::Md5::digest(bytes)),
        _ => return None,
    })
}
