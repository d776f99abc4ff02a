//! The controller-side runtimes of local toolpacks: one [`JsHost`] per pack with a controller
//! module, started on first use and kept warm. A pack whose module fails to load is not cached,
//! so fixing the file on disk and retrying works without a restart.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use crate::js::{CONTROLLER_GLUE, HostOps, JsError, JsHost, JsLimits, ModuleSpec};
use crate::toolpack::{PackSource, Toolpack};

pub struct PackRuntimes {
    ops: Arc<dyn HostOps>,
    hosts: Mutex<HashMap<String, JsHost>>,
}

impl PackRuntimes {
    pub fn new(ops: Arc<dyn HostOps>) -> Self {
        PackRuntimes { ops, hosts: Mutex::new(HashMap::new()) }
    }

    /// The runtime of a local pack's controller module (started if needed). `None` for built-in packs.
    pub async fn controller(&self, pack: &Toolpack) -> Option<Result<JsHost, JsError>> {
        let PackSource::Local { root, controller_module, limits, .. } = &pack.source else { return None };
        let mut hosts = self.hosts.lock().await;
        if let Some(host) = hosts.get(&pack.id) {
            return Some(Ok(host.clone()));
        }
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
        let started = JsHost::spawn(spec, self.ops.clone()).await;
        if let Ok(host) = &started {
            hosts.insert(pack.id.clone(), host.clone());
        }
        Some(started)
    }
}
