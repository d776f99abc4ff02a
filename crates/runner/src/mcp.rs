//! The agent's stdio MCP servers (its MCP toolpacks), run here inside its container: each is a
//! child process in its own process group with a clean environment (what the pack's `env`
//! says, a `PATH` and a `HOME` in `/tmp`; nothing of the runner's), started at `load`, listed
//! for the controller, and called for `<id>.<tool>`. A server that exits is not hidden: the
//! call in flight fails saying so (with the end of its stderr), and the next call starts it
//! again. A result over the size limit fails its call with its size (`mcp_stdio.rs`), and the
//! server stays up. `notifications/tools/list_changed` makes the runner list the server again and send
//! the new list to the controller (`mcpToolsChanged`), which uses it from the next activation.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use process_wrap::tokio::{CommandWrap, ProcessGroup};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;
use tokio::sync::watch;

use crate::mcp_stdio::ChildTransport;
use crate::paths::{ARTIFACTS, Roots, WORKSPACE};
use crate::service::Session;
use suzumio_core::rpc::{Empty, ToolOutput, method};
use suzumio_core::toolpack::ToolError;
use suzumio_core::toolpack::mcp::{McpListing, McpServerSpec};
use suzumio_core::toolpack::mcp_session::{CallError, McpSession, McpSlot};

/// Starting a server and listing its tools at `load` waits at most this long (whatever the
/// pack's `timeoutMs`), so a server that hangs cannot hold the agent's runner back.
const START_CAP: Duration = Duration::from_secs(20);
/// How much of a server's stderr is kept for the message of a call it did not survive.
const STDERR_TAIL: usize = 2048;
/// How long the controller may take to take a changed list.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) struct McpServers {
    roots: Roots,
    session: watch::Receiver<Option<Session>>,
    servers: Mutex<BTreeMap<String, Arc<Server>>>,
    /// Ids of servers whose list changed, for the task that lists them again (a channel, so that
    /// starting a server does not depend on the future that lists it).
    changed: tokio::sync::mpsc::UnboundedSender<String>,
    changed_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<String>>>,
}

struct Server {
    spec: McpServerSpec,
    live: McpSlot,
    stderr: Arc<Mutex<VecDeque<u8>>>,
}

impl McpServers {
    pub fn new(roots: Roots, session: watch::Receiver<Option<Session>>) -> Arc<McpServers> {
        let (changed, changed_rx) = tokio::sync::mpsc::unbounded_channel();
        Arc::new(McpServers {
            roots,
            session,
            servers: Mutex::new(BTreeMap::new()),
            changed,
            changed_rx: Mutex::new(Some(changed_rx)),
        })
    }

    /// Make the running servers those of `specs` (a server whose spec is unchanged keeps
    /// running), start the new ones and list every one of them.
    pub async fn load(self: &Arc<Self>, specs: &[McpServerSpec]) -> Vec<McpListing> {
        let receiver = self.changed_rx.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut receiver) = receiver {
            let this = Arc::downgrade(self);
            tokio::spawn(async move {
                while let Some(id) = receiver.recv().await {
                    let Some(servers) = this.upgrade() else { return };
                    servers.list_changed(&id).await;
                }
            });
        }
        let (keep, gone) = {
            let mut servers = self.lock();
            let old = std::mem::take(&mut *servers);
            let mut gone = Vec::new();
            for (id, server) in old {
                if specs.iter().any(|s| *s == server.spec) {
                    servers.insert(id, server);
                } else {
                    gone.push(server);
                }
            }
            for spec in specs {
                servers.entry(spec.id.clone()).or_insert_with(|| {
                    Arc::new(Server {
                        spec: spec.clone(),
                        live: McpSlot::default(),
                        stderr: Arc::new(Mutex::new(VecDeque::new())),
                    })
                });
            }
            (servers.values().cloned().collect::<Vec<_>>(), gone)
        };
        for server in gone {
            server.live.close().await;
        }
        let listings = keep.iter().map(|server| {
            let this = self.clone();
            let server = server.clone();
            async move {
                let cap = START_CAP.min(Duration::from_millis(server.spec.timeout_ms));
                match tokio::time::timeout(cap, this.list(&server)).await {
                    Ok(listing) => listing,
                    Err(_) => McpListing::failed(
                        &server.spec.id,
                        format!(
                            "the MCP server {} did not start and list its tools within {} ms",
                            server.spec.id,
                            cap.as_millis()
                        ),
                    ),
                }
            }
        });
        futures_util::future::join_all(listings).await
    }

    /// Whether `tool` belongs to one of the servers (`<id>.<tool>`).
    pub fn owns(&self, tool: &str) -> bool {
        self.split(tool).is_some()
    }

    /// Call `<id>.<tool>`. A server that is not running is started first.
    pub async fn call(self: &Arc<Self>, tool: &str, input: Value) -> Result<ToolOutput, ToolError> {
        let (server, name) = self.split(tool).ok_or_else(|| ToolError::Rejected(format!("Unknown tool: {tool}")))?;
        let session = self.session_of(&server).await?;
        // In the container's log: which server a call went to (and that it was sent to a live one).
        tracing::info!(tool, "calling {name} on the MCP server {}", server.spec.id);
        match server.live.call(&session, &name, input).await {
            Ok(out) => Ok(out.into()),
            Err(CallError::Tool(e)) => Err(e),
            Err(CallError::Gone(why)) => {
                // Its last words reach the pipe a moment after the exit.
                tokio::time::sleep(Duration::from_millis(50)).await;
                let tail = stderr_tail(&server.stderr);
                let said = if tail.is_empty() { String::new() } else { format!("; its stderr ended with: {tail}") };
                Err(ToolError::Failed(format!(
                    "{why}: the call did not complete{said}. The server is started again at the next call."
                )))
            }
        }
    }

    /// Stop every server (runner shutdown).
    pub async fn shutdown(&self) {
        let servers: Vec<Arc<Server>> = std::mem::take(&mut *self.lock()).into_values().collect();
        for server in servers {
            server.live.close().await;
        }
    }

    fn split(&self, tool: &str) -> Option<(Arc<Server>, String)> {
        let servers = self.lock();
        // Pack ids may contain dots: the longest id that prefixes the name wins.
        let mut best: Option<(&String, &Arc<Server>)> = None;
        for (candidate, server) in servers.iter() {
            if tool.len() > candidate.len() + 1
                && tool.starts_with(candidate.as_str())
                && tool.as_bytes()[candidate.len()] == b'.'
                && best.is_none_or(|(b, _)| candidate.len() > b.len())
            {
                best = Some((candidate, server));
            }
        }
        best.map(|(id, server)| (server.clone(), tool[id.len() + 1..].to_string()))
    }

    async fn list(self: &Arc<Self>, server: &Arc<Server>) -> McpListing {
        let session = match self.session_of(server).await {
            Ok(s) => s,
            Err(e) => return McpListing::failed(&server.spec.id, e),
        };
        session.list().await.unwrap_or_else(|e| McpListing::failed(&server.spec.id, e))
    }

    /// The live session of `server`, started if there is none.
    async fn session_of(self: &Arc<Self>, server: &Arc<Server>) -> Result<Arc<McpSession>, ToolError> {
        server.live.get_or_start(|| self.start(server)).await
    }

    async fn start(self: &Arc<Self>, server: &Arc<Server>) -> Result<McpSession, ToolError> {
        let spec = &server.spec;
        let mut command = tokio::process::Command::new(&spec.command);
        command
            .args(&spec.args)
            .env_clear()
            .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            .env("HOME", "/tmp")
            .env("LANG", "C.UTF-8")
            .envs(&spec.env)
            .current_dir(self.cwd(spec.cwd.as_deref()));
        crate::quota::limit_command(&mut command);
        let mut wrapped = CommandWrap::from(command);
        wrapped.wrap(ProcessGroup::leader());
        let (transport, stderr) = ChildTransport::spawn(wrapped).map_err(|e| {
            ToolError::Failed(format!("the MCP server {} could not be started (`{}`): {e}", spec.id, spec.command))
        })?;
        server.stderr.lock().unwrap_or_else(|p| p.into_inner()).clear();
        if let Some(stderr) = stderr {
            let tail = server.stderr.clone();
            let id = spec.id.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(mcp = %id, "{line}");
                    let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
                    tail.extend(line.bytes().chain(std::iter::once(b'\n')));
                    let excess = tail.len().saturating_sub(STDERR_TAIL);
                    tail.drain(..excess);
                }
            });
        }
        let notify = {
            let changed = self.changed.clone();
            let id = spec.id.clone();
            Arc::new(move || {
                let _ = changed.send(id.clone());
            })
        };
        let timeout = Duration::from_millis(spec.timeout_ms);
        let started = McpSession::start(&spec.id, transport, timeout.min(START_CAP), notify).await;
        let mut session = started.map_err(|e| {
            let tail = stderr_tail(&server.stderr);
            if tail.is_empty() { e } else { e.map_message(|m| format!("{m}; its stderr ended with: {tail}")) }
        })?;
        session.set_timeout(timeout);
        tracing::info!(mcp = %spec.id, "MCP server started");
        Ok(session)
    }

    /// The server said its tools changed: list it again and tell the controller.
    async fn list_changed(self: &Arc<Self>, id: &str) {
        let server = self.lock().get(id).cloned();
        let Some(server) = server else { return };
        let listing = self.list(&server).await;
        let current = self.session.borrow().clone();
        let Some(current) = current else { return };
        let sent = tokio::time::timeout(
            NOTIFY_TIMEOUT,
            current.connection.call::<_, Empty>(method::MCP_TOOLS_CHANGED, &listing),
        )
        .await;
        match sent {
            Ok(Ok(_)) => tracing::info!(mcp = %id, tools = listing.tools.len(), "sent the changed tool list"),
            Ok(Err(e)) => tracing::warn!(mcp = %id, "cannot send the changed tool list: {e}"),
            Err(_) => tracing::warn!(mcp = %id, "the controller did not take the changed tool list"),
        }
    }

    /// A configured `cwd` is a container path; `/workspace` and `/artifacts` map through the
    /// roots (they differ for a runner that is a local process).
    fn cwd(&self, configured: Option<&str>) -> PathBuf {
        let Some(path) = configured else { return self.roots.workspace.clone() };
        for (prefix, root) in [(WORKSPACE, &self.roots.workspace), (ARTIFACTS, &self.roots.artifacts)] {
            if let Some(rest) = path.strip_prefix(prefix)
                && (rest.is_empty() || rest.starts_with('/'))
            {
                return root.join(rest.trim_start_matches('/'));
            }
        }
        PathBuf::from(path)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Server>>> {
        self.servers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn stderr_tail(tail: &Mutex<VecDeque<u8>>) -> String {
    let tail = tail.lock().unwrap_or_else(|p| p.into_inner());
    let bytes: Vec<u8> = tail.iter().copied().collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}
