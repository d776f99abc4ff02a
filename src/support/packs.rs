//! The controller-side runtimes of local toolpacks: one [`JsHost`] per pack with a controller
//! module, started on first use and kept warm.
//!
//! Each pack has its own slot and its own lock: loading one pack (which may take up to its
//! deadline, for a module that loops at top level) never holds up a call into another. A module
//! that fails to load is remembered with its error and retried with backoff (1 s, doubling, at
//! most 5 min) instead of on every use; a change to the pack's files on disk retries at once, so
//! fixing the file works without a restart. A changed load error is reported (logged) once, not
//! on every tick: the caller that sees `fresh` reports it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Mutex;

use crate::js::{CONTROLLER_GLUE, HostOps, JsError, JsHost, JsLimits, ModuleSpec};
use crate::toolpack::{PackSource, Toolpack};

const FIRST_RETRY: Duration = Duration::from_secs(1);
const MAX_RETRY: Duration = Duration::from_secs(300);

pub struct PackRuntimes {
    ops: Arc<dyn HostOps>,
    /// Held only to find or create a slot, never across a load or a call.
    slots: SyncMutex<HashMap<String, Arc<PackSlot>>>,
}

/// One pack's runtime and what is known about its last load.
#[derive(Default)]
pub struct PackSlot {
    state: Mutex<SlotState>,
    /// The last load error, readable while a retry holds `state`: callers get it at once
    /// instead of waiting for the retry.
    last_error: SyncMutex<Option<JsError>>,
    /// Set while a scheduler hook of this pack runs (its JavaScript may outlive the hook deadline).
    hook_running: AtomicBool,
}

#[derive(Default)]
enum SlotState {
    #[default]
    Empty,
    Ready(JsHost),
    Failed(FailedLoad),
}

struct FailedLoad {
    error: JsError,
    failures: u32,
    retry_at: Instant,
    /// The pack's files when the load failed; a change retries before `retry_at`.
    files: Option<FilesStamp>,
}

/// What a controller runtime lookup found.
pub enum Controller {
    Ready(JsHost),
    /// The module does not load. `fresh` is true when this lookup made the attempt and its error
    /// differs from the previous one (report it); false when the error was already known.
    Failed {
        error: JsError,
        fresh: bool,
    },
}

impl PackRuntimes {
    pub fn new(ops: Arc<dyn HostOps>) -> Self {
        PackRuntimes { ops, slots: SyncMutex::new(HashMap::new()) }
    }

    pub fn slot(&self, pack_id: &str) -> Arc<PackSlot> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.entry(pack_id.to_string()).or_default().clone()
    }

    /// The runtime of a local pack's controller module (started if needed, unless a failed
    /// load is still backing off). `None` for built-in packs.
    pub async fn controller(&self, pack: &Toolpack) -> Option<Controller> {
        let PackSource::Local { root, controller_module, limits, .. } = &pack.source else { return None };
        let slot = self.slot(&pack.id);
        let mut state = match slot.state.try_lock() {
            Ok(state) => state,
            Err(_) => match slot.last_error() {
                Some(error) => return Some(Controller::Failed { error, fresh: false }),
                None => slot.state.lock().await,
            },
        };
        let previous = match &*state {
            SlotState::Ready(host) => return Some(Controller::Ready(host.clone())),
            SlotState::Failed(failed) => {
                let changed = failed.files != files_stamp(root);
                if Instant::now() < failed.retry_at && !changed {
                    return Some(Controller::Failed { error: failed.error.clone(), fresh: false });
                }
                Some((failed.error.clone(), failed.failures))
            }
            SlotState::Empty => None,
        };
        let spec = ModuleSpec {
            pack_id: pack.id.clone(),
            root: root.clone(),
            module: controller_module.clone(),
            glue: CONTROLLER_GLUE,
            limits: JsLimits {
                call_timeout: Duration::from_millis(limits.timeout_ms),
                memory_bytes: (limits.memory_mb as usize) << 20,
            },
        };
        let files = files_stamp(root);
        match JsHost::spawn(spec, self.ops.clone()).await {
            Ok(host) => {
                if previous.is_some() {
                    tracing::info!(toolpack = %pack.id, "the controller module loads again");
                }
                *state = SlotState::Ready(host.clone());
                slot.set_last_error(None);
                Some(Controller::Ready(host))
            }
            Err(error) => {
                let (fresh, failures) = match previous {
                    Some((known, n)) => (known != error, n.saturating_add(1)),
                    None => (true, 1),
                };
                let backoff = FIRST_RETRY.saturating_mul(1 << (failures - 1).min(16)).min(MAX_RETRY);
                let retry_at = Instant::now() + backoff;
                slot.set_last_error(Some(error.clone()));
                *state = SlotState::Failed(FailedLoad { error: error.clone(), failures, retry_at, files });
                Some(Controller::Failed { error, fresh })
            }
        }
    }
}

impl PackSlot {
    fn last_error(&self) -> Option<JsError> {
        self.last_error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_last_error(&self, error: Option<JsError>) {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = error;
    }

    /// Marks this pack's hook as running; false when the previous one has not returned yet.
    pub fn begin_hook(&self) -> bool {
        !self.hook_running.swap(true, Ordering::AcqRel)
    }

    pub fn end_hook(&self) {
        self.hook_running.store(false, Ordering::Release);
    }
}

/// Newest modification time and file count of the pack's directory tree (packs are small).
#[derive(Clone, Debug, PartialEq)]
struct FilesStamp {
    newest: SystemTime,
    files: usize,
    bytes: u64,
}

fn files_stamp(root: &Path) -> Option<FilesStamp> {
    let mut stamp = FilesStamp { newest: SystemTime::UNIX_EPOCH, files: 0, bytes: 0 };
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                // Bounded: a pack with a huge tree is still stamped, just not entirely.
                if stamp.files < 10_000 {
                    dirs.push(entry.path());
                }
                continue;
            }
            stamp.files += 1;
            stamp.bytes += meta.len();
            if let Ok(modified) = meta.modified() {
                stamp.newest = stamp.newest.max(modified);
            }
        }
    }
    Some(stamp)
}
