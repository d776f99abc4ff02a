//! Embedded JavaScript host on rquickjs (QuickJS-ng).
//!
//! One runtime per toolpack module, each on its own OS thread, fed through a channel: a pack that
//! loops forever or allocates without bound only ever blocks its own thread, and is stopped by
//! the deadline (QuickJS' interrupt handler, plus a timer for promises that never settle) or the
//! memory limit. After such a failure the runtime is rebuilt, so the next call starts clean.
//!
//! The host knows nothing of the store or of toolpack semantics: the module a pack exports is
//! wrapped by a small glue module (e.g. `controller_glue.mjs`) and every capability the pack gets
//! goes through [`HostOps`], implemented by a higher layer. Values cross as JSON.

pub mod check;
mod engine;
mod loader;
mod node;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::toolpack::ToolError;

/// The glue that adapts a `controller.mjs` to the calls the controller makes
/// (`support`, `webui`, `schedulerTick`, `hasSchedulerHook`).
pub const CONTROLLER_GLUE: &str = include_str!("controller_glue.mjs");
pub const RUNNER_GLUE: &str = include_str!("runner_glue.mjs");

#[derive(Clone, Debug, PartialEq)]
pub struct JsLimits {
    /// Deadline of one call into the pack, including the promises it awaits.
    pub call_timeout: Duration,
    /// Heap limit of the pack's runtime.
    pub memory_bytes: usize,
}

impl Default for JsLimits {
    fn default() -> Self {
        JsLimits { call_timeout: Duration::from_secs(10), memory_bytes: 64 << 20 }
    }
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum JsError {
    /// The pack threw (or rejected); message and stack as JavaScript reported them.
    #[error("toolpack {pack}: {message}")]
    Exception { pack: String, message: String, stack: Option<String> },
    #[error(
        "toolpack {pack}: the call did not finish within {ms} ms and was stopped (raise the pack's timeoutMs in tools.toolpacks if it really needs longer)"
    )]
    Timeout { pack: String, ms: u64 },
    #[error(
        "toolpack {pack}: out of memory (the limit is {mib} MiB; raise the pack's memoryMb in tools.toolpacks if needed)"
    )]
    OutOfMemory { pack: String, mib: usize },
    #[error("toolpack {pack}: cannot load {module}: {message}")]
    Load { pack: String, module: String, message: String },
    #[error("toolpack {pack}: {message}")]
    BadResult { pack: String, message: String },
    /// A host operation refused what the pack asked for by a rule (a [`ToolError::Rejected`]) and the
    /// pack let that refusal end its call: nothing it asked for was done.
    #[error("toolpack {pack}: {message}")]
    Rejected { pack: String, message: String },
    #[error("toolpack {pack}: its JavaScript runtime is not running")]
    Gone { pack: String },
}

impl JsError {
    /// A short text for the log and API: message, then the stack when there is one.
    pub fn with_stack(&self) -> String {
        match self {
            JsError::Exception { stack: Some(stack), .. } if !stack.trim().is_empty() => {
                format!("{self}\n{}", stack.trim_end())
            }
            _ => self.to_string(),
        }
    }
}

/// Who a call is made for. Host operations read the caller from here (set by Rust for each
/// call), never from arguments the pack could forge.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallScope {
    pub agent_id: Option<String>,
    pub activation_id: Option<String>,
}

pub type HostFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>>;

/// The capabilities a pack's JavaScript can use (`context.store`, `context.state`, ...). `call`
/// runs on the pack's thread and may block briefly (store queries); `call_async` returns a
/// future awaited by JavaScript as a promise. Only the glue module can reach them: it takes the
/// host functions off `globalThis` before the pack module is evaluated, so a pack's own code
/// (top level or handlers) has only the `context` of the call it is in.
///
/// A [`ToolError::Rejected`] is a refusal by a rule (a policy, not a failure): pack code sees an
/// `Error` named `RejectedError` with its message, and a call that lets it escape ends as
/// [`JsError::Rejected`], so the caller can report a rejection. Any other error is a plain
/// `Error` with the message.
pub trait HostOps: Send + Sync + 'static {
    fn call(&self, pack_id: &str, scope: &CallScope, op: &str, args: Value) -> Result<Value, ToolError>;
    fn call_async(&self, pack_id: &str, scope: &CallScope, op: &str, args: Value) -> HostFuture;
}

/// What to load into a runtime.
#[derive(Clone, Debug)]
pub struct ModuleSpec {
    pub pack_id: String,
    /// Imports may not leave this directory.
    pub root: PathBuf,
    /// The pack's module (absolute).
    pub module: PathBuf,
    /// Glue source; `"__PACK_MODULE__"` and `__PACK_ID__` are replaced.
    pub glue: &'static str,
    pub limits: JsLimits,
}

/// One call: an export of the glue module with string arguments, for a caller.
#[derive(Clone, Debug)]
pub struct JsCall {
    pub export: &'static str,
    pub args: Vec<String>,
    pub scope: CallScope,
}

struct Job {
    call: JsCall,
    reply: oneshot::Sender<Result<Value, JsError>>,
}

/// Handle to a pack's runtime thread. Cheap to clone; the thread ends when the last handle goes.
#[derive(Clone)]
pub struct JsHost {
    pack_id: Arc<str>,
    jobs: mpsc::UnboundedSender<Job>,
}

impl JsHost {
    /// Start the runtime thread and load the module; fails if the module does not load.
    pub async fn spawn(spec: ModuleSpec, ops: Arc<dyn HostOps>) -> Result<JsHost, JsError> {
        let (jobs, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = oneshot::channel();
        let pack_id: Arc<str> = Arc::from(spec.pack_id.as_str());
        let gone = JsError::Gone { pack: spec.pack_id.clone() };
        std::thread::Builder::new()
            .name(format!("js-{}", spec.pack_id))
            .stack_size(16 << 20)
            .spawn(move || engine::run_thread(spec, ops, rx, ready_tx))
            .map_err(|_| gone.clone())?;
        ready_rx.await.map_err(|_| gone)??;
        Ok(JsHost { pack_id, jobs })
    }

    pub fn pack_id(&self) -> &str {
        &self.pack_id
    }

    /// Run one call. Calls to the same pack run one after another, in order.
    pub async fn call(&self, call: JsCall) -> Result<Value, JsError> {
        let (reply, rx) = oneshot::channel();
        let gone = || JsError::Gone { pack: self.pack_id.to_string() };
        self.jobs.send(Job { call, reply }).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}
