//! The controller side of tools: running controller-side handlers (built-in Rust ones and the
//! `controller.mjs` of local packs) for WebUI entries and support calls, with the capabilities
//! packs get through [`ops::ControllerOps`]. The verification chain of runner `callSupport`
//! requests (issue [D]) sits in front of [`ToolHost::support`].
//!
//! It validates every input against its schema before a handler runs and every handler result
//! against the `{output, title?, metadata?}` shape after. It does not speak HTTP (see `web`).

pub mod broker;
pub mod builtin_tools;
pub mod builtin_webui;
pub mod control;
pub mod mcp_discovery;
pub mod mcp_http;
mod mcp_lists;
pub mod ops;
pub mod pack_files;
pub mod packs;
pub mod policy;
pub mod quota;
pub mod runner_tools;
pub mod runners;
pub mod serving;
pub mod start;
pub mod tool_results;
pub mod tool_search;
pub mod web_fetch;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::js::{CallScope, JsCall, JsError};
use crate::project::Project;
use crate::store::{MessageSent, SendMessage, StateFiles, Store, StoreError};
pub use crate::toolpack::output::{ToolOutput, parse_output};
use crate::toolpack::schema::InputError;
use crate::toolpack::{ToolError, Toolpack, WebuiEntry};

/// Why an invocation did not produce an output. Each variant maps to one HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    #[error("Unknown toolpack: {0}")]
    UnknownPack(String),
    #[error("Unknown WebUI tool entry {entry} in {pack}")]
    UnknownEntry { pack: String, entry: String },
    #[error("Unknown tool {tool} in toolpack {pack}")]
    UnknownTool { pack: String, tool: String },
    /// The input does not match the schema; every failing instance path is listed.
    #[error("input does not match the schema: {}", describe_input_errors(.0))]
    InvalidInput(Vec<InputError>),
    /// A request the user can fix (unknown agent, bad priority, ...).
    #[error("{0}")]
    Rejected(String),
    /// The handler (a pack or a built-in) failed; the message says which and why.
    #[error("{0}")]
    Handler(String),
    #[error("{0}")]
    Internal(String),
    /// The disk is full; nothing was recorded.
    #[error("{0}")]
    DiskFull(String),
}

pub use crate::toolpack::error::describe_input_errors;

impl From<InvokeError> for ToolError {
    fn from(e: InvokeError) -> Self {
        match e {
            InvokeError::Handler(m) => ToolError::Failed(m),
            InvokeError::Internal(m) | InvokeError::DiskFull(m) => ToolError::Internal(m),
            other => ToolError::Rejected(other.to_string()),
        }
    }
}

impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::DiskFull { .. } => ToolError::Internal(e.to_string()),
            StoreError::Database(_) | StoreError::Io(_) | StoreError::CreateDir { .. } | StoreError::ReadOnly => {
                ToolError::Internal(format!("the project store failed: {e}"))
            }
            other => ToolError::Rejected(other.to_string()),
        }
    }
}

impl From<StoreError> for InvokeError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::DiskFull { .. } => InvokeError::DiskFull(e.to_string()),
            StoreError::Database(_) | StoreError::Io(_) | StoreError::CreateDir { .. } | StoreError::ReadOnly => {
                InvokeError::Internal(e.to_string())
            }
            other => InvokeError::Rejected(other.to_string()),
        }
    }
}

impl From<JsError> for InvokeError {
    fn from(e: JsError) -> Self {
        if let JsError::Rejected { .. } = e {
            return InvokeError::Rejected(e.to_string());
        }
        tracing::warn!("{}", e.with_stack());
        InvokeError::Handler(e.to_string())
    }
}

/// Everything the controller needs to run controller-side handlers for one project.
pub struct ToolHost {
    /// The project served; replaced (for the next activation) when an MCP server's tools change.
    pub project: crate::project::LiveProject,
    pub store: Store,
    pub state: StateFiles,
    /// The permission audit every decision is recorded in.
    pub audit: crate::permissions::audit::Audit,
    /// The reviewer model (`permissions.reviewer`), once the model loop installed it, and its
    /// verdict cache.
    pub reviewer: crate::permissions::reviewer::Reviewer,
    packs: packs::PackRuntimes,
    /// The agents' runners, once they exist (the API asks them for background commands).
    runners: std::sync::OnceLock<std::sync::Weak<runners::AgentRunners>>,
    /// How many runners this process started, per agent (`/metrics`: a count above one is a
    /// restart).
    pub runner_starts: RunnerStarts,
    /// One MCP list change at a time (two runners may report the same server).
    mcp_updates: std::sync::Mutex<()>,
    /// What each MCP server listed last in this process (or why it could not).
    mcp_seen: std::sync::Mutex<std::collections::BTreeMap<String, crate::toolpack::mcp::McpListing>>,
    /// Sessions with the project's HTTP MCP servers.
    pub(crate) http_mcp: mcp_http::HttpMcp,
    /// This host, for tasks it starts that outlive a call.
    me: std::sync::Weak<ToolHost>,
}

/// Runner starts per agent, counted by `runners` when a backend really started one.
#[derive(Debug, Default)]
pub struct RunnerStarts(std::sync::Mutex<std::collections::BTreeMap<String, u64>>);

impl RunnerStarts {
    pub fn count(&self, agent: &str) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()).entry(agent.to_string()).or_default() += 1;
    }

    pub fn snapshot(&self) -> std::collections::BTreeMap<String, u64> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl ToolHost {
    pub fn new(project: Arc<Project>, store: Store, state: StateFiles) -> Arc<ToolHost> {
        let ops = Arc::new(ops::ControllerOps::new(project.clone(), store.clone(), state.clone()));
        let audit = crate::permissions::audit::Audit::for_project(&project.config);
        Arc::new_cyclic(|me| ToolHost {
            me: me.clone(),
            http_mcp: mcp_http::HttpMcp::default(),
            mcp_seen: std::sync::Mutex::default(),
            project: crate::project::LiveProject::new(project),
            store,
            state,
            audit,
            reviewer: crate::permissions::reviewer::Reviewer::default(),
            packs: packs::PackRuntimes::new(ops),
            runners: std::sync::OnceLock::new(),
            runner_starts: RunnerStarts::default(),
            mcp_updates: std::sync::Mutex::new(()),
        })
    }

    /// Called by [`runners::AgentRunners::new`]: the runners serving this project.
    pub(crate) fn link_runners(&self, runners: std::sync::Weak<runners::AgentRunners>) {
        let _ = self.runners.set(runners);
    }

    /// The agents' runners, when this process runs them (`suzumio run`, not `suzumio tool`).
    pub fn runners(&self) -> Option<Arc<runners::AgentRunners>> {
        self.runners.get().and_then(std::sync::Weak::upgrade)
    }

    /// This host as an `Arc` (it always lives in one).
    pub fn arc(&self) -> Option<Arc<ToolHost>> {
        self.me.upgrade()
    }

    pub fn name(&self) -> &str {
        &self.project.config.name
    }

    fn find_entry<'p>(
        project: &'p Project,
        pack_id: &str,
        entry_id: &str,
    ) -> Result<(&'p Toolpack, &'p WebuiEntry), InvokeError> {
        let pack = project.registry.pack(pack_id).ok_or_else(|| InvokeError::UnknownPack(pack_id.to_string()))?;
        let entry = pack
            .webui
            .iter()
            .find(|e| e.id == entry_id)
            .ok_or_else(|| InvokeError::UnknownEntry { pack: pack_id.to_string(), entry: entry_id.to_string() })?;
        Ok((pack, entry))
    }

    /// Run a WebUI entry: input checked against the entry's schema first, then the handler
    /// (built-in Rust or the pack's controller module), then the output shape.
    pub async fn invoke_webui(&self, pack_id: &str, entry_id: &str, input: Value) -> Result<ToolOutput, InvokeError> {
        let project = self.project.snapshot();
        let (pack, entry) = Self::find_entry(&project, pack_id, entry_id)?;
        let input = if input.is_null() { json!({}) } else { input };
        if !input.is_object() {
            return Err(InvokeError::InvalidInput(vec![InputError {
                pointer: String::new(),
                message: "the input must be a JSON object".into(),
            }]));
        }
        entry.check_input(&input).map_err(InvokeError::InvalidInput)?;
        let host = match self.packs.controller(pack).await {
            None => return builtin_webui::invoke(self, &pack.id, &entry.id, &input),
            Some(packs::Controller::Ready(host)) => host,
            Some(packs::Controller::Failed { error, .. }) => return Err(error.into()),
        };
        let base = json!({ "project": self.name(), "toolpackId": pack.id }).to_string();
        let call = JsCall {
            export: "webui",
            args: vec![base, entry.id.clone(), input.to_string()],
            scope: CallScope::default(),
        };
        let value = host.call(call).await?;
        parse_output(&format!("toolpack {} (WebUI entry {})", pack.id, entry.id), value).map_err(InvokeError::Handler)
    }

    /// A controller-side tool call for an agent's activation, after the support broker has
    /// verified the caller (issue [D]). Here: schema check, dispatch to the pack, output check.
    pub async fn support(
        &self,
        agent_id: &str,
        activation_id: &str,
        pack_id: &str,
        tool: &str,
        input: Value,
    ) -> Result<ToolOutput, InvokeError> {
        let project = self.project.snapshot();
        let pack = project.registry.pack(pack_id).ok_or_else(|| InvokeError::UnknownPack(pack_id.to_string()))?;
        if !pack.tools.iter().any(|t| t.name == tool) {
            return Err(InvokeError::UnknownTool { pack: pack_id.into(), tool: tool.into() });
        }
        // The runner module's own input: its `supportInputSchema` when the tool declares one
        // (the model's input was checked against `inputSchema` before the runner got it).
        project.registry.validate_support_input(tool, &input).map_err(|errors| {
            InvokeError::Rejected(format!(
                "the input does not match the supportInputSchema of {tool}: {}",
                describe_input_errors(&errors)
            ))
        })?;
        let agent =
            self.store.agent(agent_id)?.ok_or_else(|| InvokeError::Rejected(format!("Unknown agent: {agent_id}")))?;
        let base = json!({
            "project": self.name(),
            "agent": { "id": agent.id, "role": agent.role, "displayName": agent.display_name, "status": agent.status },
            "activationId": activation_id,
            "toolpackId": pack.id,
        })
        .to_string();
        let scope = CallScope { agent_id: Some(agent_id.to_string()), activation_id: Some(activation_id.to_string()) };
        let args = vec![base, tool.to_string(), input.to_string()];
        let value = self.call_controller(pack_id, "support", args, scope).await?;
        parse_output(&format!("toolpack {} (tool {tool})", pack.id), value).map_err(InvokeError::Handler)
    }

    /// Calls an export of a local pack's controller glue for a caller (support calls, the permission
    /// hooks).
    pub async fn call_controller(
        &self,
        pack_id: &str,
        export: &'static str,
        args: Vec<String>,
        scope: CallScope,
    ) -> Result<Value, InvokeError> {
        let project = self.project.snapshot();
        let pack = project.registry.pack(pack_id).ok_or_else(|| InvokeError::UnknownPack(pack_id.to_string()))?;
        let host = match self.packs.controller(pack).await {
            None => return Err(InvokeError::Handler(format!("built-in toolpack {pack_id} has no controller module"))),
            Some(packs::Controller::Ready(host)) => host,
            Some(packs::Controller::Failed { error, .. }) => return Err(error.into()),
        };
        let for_agent = scope.agent_id.is_some();
        let value = host.call(JsCall { export, args, scope }).await;
        if for_agent {
            // What an agent's call (a support call, a tool-call hook) wrote did not wait for the
            // disk (`ControllerOps::writer`): on disk before the caller hears of it, failed or not.
            self.store.make_durable()?;
        }
        Ok(value?)
    }

    /// `POST messages`: a message from the user (or another named sender) to an agent or channel.
    pub fn post_message(&self, message: SendMessage) -> Result<MessageSent, InvokeError> {
        builtin_webui::check_sender(self, &message.sender)?;
        Ok(self.store.send_message(message)?)
    }
}

fn logged(outcome: HookOutcome) -> HookOutcome {
    for e in &outcome.errors {
        tracing::warn!(toolpack = %outcome.pack, "scheduler hook: {e}");
    }
    outcome
}

/// What one pack's scheduler hook did in a tick.
#[derive(Debug, Clone, PartialEq)]
pub struct HookOutcome {
    pub pack: String,
    /// Ids of the signals recorded from what the hook returned.
    pub recorded: Vec<String>,
    /// When the hook asked to be called again (`{wakeAt}`), so the scheduler can sleep until then.
    pub wake_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Why the hook (or some of its requests) failed; logged with the pack id and skipped.
    pub errors: Vec<String>,
}

impl ToolHost {
    /// Run every local pack's scheduler hook once (reference §3.7) and wait for them. Each hook
    /// is isolated: one that throws, times out or returns garbage is logged and skipped; the
    /// others still run. Hooks run concurrently, each with `scheduler.hookTimeoutMs`, so this
    /// waits at most that long (plus, for a pack not loaded yet, its load: at most its timeoutMs).
    pub async fn run_scheduler_hooks(self: &Arc<Self>) -> Vec<HookOutcome> {
        let mut outcomes = Vec::new();
        for (_, running) in self.start_scheduler_hooks() {
            if let Ok(Some(outcome)) = running.await {
                outcomes.push(outcome);
            }
        }
        outcomes
    }

    /// Start the scheduler hook of every local pack whose previous hook has returned, each in
    /// its own task, and return at once: `(pack, outcome)` for each started hook. An outcome is
    /// `None` when there is nothing to report (its module's load error is already known). A hook past its deadline is reported then; its JavaScript runs on
    /// (until the pack's own timeout stops it) and its result is dropped.
    pub fn start_scheduler_hooks(self: &Arc<Self>) -> Vec<(String, oneshot::Receiver<Option<HookOutcome>>)> {
        let project = self.project.snapshot();
        let deadline = Duration::from_millis(self.project.config.scheduler.hook_timeout_ms);
        let mut started = Vec::new();
        for pack in project.registry.packs() {
            if !matches!(pack.source, crate::toolpack::PackSource::Local { .. }) {
                continue;
            }
            let slot = self.packs.slot(&pack.id);
            if !slot.begin_hook() {
                continue;
            }
            let (tx, rx) = oneshot::channel();
            let (tools, id) = (self.clone(), pack.id.clone());
            tokio::spawn(async move {
                let _ = tx.send(tools.run_hook(&id, slot, deadline).await);
            });
            started.push((pack.id.clone(), rx));
        }
        started
    }

    /// Load the pack if needed (a load has the pack's own deadline, and its error is reported
    /// only when it changes), then call its hook with the hook deadline.
    async fn run_hook(&self, pack_id: &str, slot: Arc<packs::PackSlot>, deadline: Duration) -> Option<HookOutcome> {
        let project = self.project.snapshot();
        let mut outcome =
            HookOutcome { pack: pack_id.to_string(), recorded: Vec::new(), wake_at: None, errors: Vec::new() };
        let loaded = match project.registry.pack(pack_id) {
            None => None,
            Some(pack) => self.packs.controller(pack).await.map(|c| (pack, c)),
        };
        let (pack, host) = match loaded {
            None | Some((_, packs::Controller::Failed { fresh: false, .. })) => {
                slot.end_hook();
                return None;
            }
            Some((_, packs::Controller::Failed { error, fresh: true })) => {
                slot.end_hook();
                outcome.errors.push(error.with_stack());
                return Some(logged(outcome));
            }
            Some((pack, packs::Controller::Ready(host))) => (pack, host),
        };
        let base = match self.hook_base(pack) {
            Ok(base) => base,
            Err(e) => {
                slot.end_hook();
                outcome.errors.push(e.to_string());
                return Some(logged(outcome));
            }
        };
        let call = JsCall { export: "schedulerTick", args: vec![base], scope: CallScope::default() };
        // The call runs on in its own task past the deadline, until the pack's JavaScript
        // returns (or its timeoutMs stops it); only then may the hook be called again.
        let mut running = tokio::spawn(async move {
            let result = host.call(call).await;
            slot.end_hook();
            result
        });
        match tokio::time::timeout(deadline, &mut running).await {
            Ok(Ok(Ok(value))) => self.record_hook_requests(pack_id, value, &mut outcome),
            Ok(Ok(Err(e))) => outcome.errors.push(e.with_stack()),
            Ok(Err(join)) => outcome.errors.push(format!("the scheduler hook's task failed: {join}")),
            Err(_) => outcome.errors.push(format!(
                "the scheduler hook did not return within {} ms (scheduler.hookTimeoutMs); it is not called again until it returns",
                deadline.as_millis()
            )),
        }
        Some(logged(outcome))
    }

    fn hook_base(&self, pack: &Toolpack) -> Result<String, InvokeError> {
        let agents: Vec<Value> = self
            .store
            .agents()?
            .into_iter()
            .filter(|a| self.project.config.agent(&a.id).is_some())
            .map(|a| ops::agent_json(&a))
            .collect();
        Ok(json!({
            "project": self.name(),
            "toolpackId": pack.id,
            "now": crate::clock::iso(self.store.now()),
            "agents": agents,
        })
        .to_string())
    }

    /// A hook returns nothing, an array of signal requests, or `{signals, wakeAt?}`.
    fn record_hook_requests(&self, pack: &str, value: Value, outcome: &mut HookOutcome) {
        let (requests, wake_at) = match value {
            Value::Null => (Vec::new(), None),
            Value::Array(items) => (items, None),
            Value::Object(mut map) if map.contains_key("signals") || map.contains_key("wakeAt") => {
                let signals = match map.remove("signals") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(items)) => items,
                    Some(_) => {
                        outcome.errors.push("returned `signals` that is not an array".into());
                        Vec::new()
                    }
                };
                (signals, map.remove("wakeAt"))
            }
            other => {
                outcome.errors.push(format!(
                    "returned {other}, expected an array of signal requests, {{signals, wakeAt?}}, or nothing"
                ));
                return;
            }
        };
        match wake_at {
            None | Some(Value::Null) => {}
            Some(Value::String(text)) => match crate::clock::parse_iso(&text) {
                Some(t) => outcome.wake_at = Some(t),
                None => outcome.errors.push(format!("returned an invalid wakeAt timestamp: {text}")),
            },
            Some(other) => outcome.errors.push(format!("returned wakeAt {other}, expected an ISO timestamp")),
        }
        let ops = ops::ControllerOps::new(self.project.snapshot(), self.store.clone(), self.state.clone());
        for (i, item) in requests.iter().enumerate() {
            let recorded = ops.signal_request(item, None).and_then(|request| {
                policy::check_pack_kind(&request.kind)?;
                self.store.record_signal(request).map_err(ops::failed)
            });
            match recorded {
                Ok(signals) => outcome.recorded.extend(signals.into_iter().map(|s| s.id)),
                Err(e) => outcome.errors.push(format!("signal request {i} from {pack}: {e}")),
            }
        }
    }
}
