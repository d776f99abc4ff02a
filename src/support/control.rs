//! The serving controller's control endpoint, the client side and the protocol: a Unix socket
//! at `.suzumio/controller/control.sock` (directory 0700, socket 0600, and the peer's uid
//! checked at accept, see `controller::control`) through which another `suzumio` process of the
//! project's owner — `tool call`, `ui`, `mcp`, `check` — has the serving controller do what it
//! would otherwise do itself next to it: start a runner (which would take over the agent's
//! control socket and break the served agent), or run pack code whose state the serving
//! controller's packs hold.
//!
//! The protocol is the runner protocol's JSON-RPC framing (`crate::rpc`), methods in
//! [`method`]: `execute {agentId, activationId, tool, input}` runs a tool call through the
//! serving controller's pipeline (`calls::execute_tool`) in an activation the caller started
//! and ends, and answers its output or its error with its kind; `invokeWebui {pack, entry,
//! input}` runs a WebUI entry; `discoverMcp {}` answers the MCP lists the controller knows,
//! after listing the servers not listed yet.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::{UnixListener, UnixStream};

use super::InvokeError;
use super::serving::Holder;
use crate::rpc::{Connection, HandlerFuture, RequestHandler, RpcError};
use crate::toolpack::ToolError;
use crate::toolpack::mcp::McpListing;
use crate::toolpack::output::ToolOutput;

pub mod method {
    pub const EXECUTE: &str = "execute";
    pub const INVOKE_WEBUI: &str = "invokeWebui";
    pub const DISCOVER_MCP: &str = "discoverMcp";
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecuteParams {
    pub agent_id: String,
    pub activation_id: String,
    pub tool: String,
    #[serde(default)]
    pub input: Value,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InvokeWebuiParams {
    pub pack: String,
    pub entry: String,
    #[serde(default)]
    pub input: Value,
}

/// `data.kind` of an `invokeWebui` error: the user's to fix (exit 2), or a failure (exit 1).
pub const WEBUI_REFUSED: &str = "refused";
pub const WEBUI_FAILED: &str = "failed";

/// An `invokeWebui` error as the wire carries it.
pub fn webui_error(e: &InvokeError) -> RpcError {
    let kind = match e {
        InvokeError::Handler(_) | InvokeError::Internal(_) | InvokeError::DiskFull(_) => WEBUI_FAILED,
        _ => WEBUI_REFUSED,
    };
    let mut reply = RpcError::application(e.to_string());
    reply.data = Some(json!({ "kind": kind }));
    reply
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Discovered {
    /// Every MCP list the serving controller has, by pack id (failures carry their error).
    pub listings: BTreeMap<String, McpListing>,
}

/// Bind the control socket. Only the holder of the project's lock calls this, so a socket
/// found there is a dead run's and is removed.
pub fn listen(root: &Path) -> std::io::Result<(UnixListener, PathBuf)> {
    let socket = super::serving::control_socket(root);
    let dir = socket.parent().unwrap_or(root);
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    match std::fs::remove_file(&socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(&socket)?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
    Ok((listener, socket))
}

/// The client side answers no requests.
struct NoRequests;

impl RequestHandler for NoRequests {
    fn handle(&self, method: String, _params: Value) -> HandlerFuture {
        Box::pin(async move { Err(RpcError::method_not_found(&method)) })
    }
}

/// The serving controller's runners, reached through its control socket: what a `tool call` or
/// an `mcp` session uses instead of runners of its own while `run` serves the project.
pub struct Delegated {
    holder: Holder,
    socket: PathBuf,
    connection: tokio::sync::Mutex<Option<Connection>>,
}

impl Delegated {
    pub fn new(holder: Holder, socket: PathBuf) -> Arc<Delegated> {
        Arc::new(Delegated { holder, socket, connection: tokio::sync::Mutex::new(None) })
    }

    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    async fn connection(&self) -> Result<Connection, ToolError> {
        let mut slot = self.connection.lock().await;
        if let Some(conn) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(conn.clone());
        }
        let stream = UnixStream::connect(&self.socket).await.map_err(|e| {
            ToolError::RunnerLost(format!(
                "the project is served by {}, whose control socket {} cannot be reached: {e}",
                self.holder.describe(),
                self.socket.display()
            ))
        })?;
        let (conn, _task) = Connection::spawn(stream, Arc::new(NoRequests));
        *slot = Some(conn.clone());
        Ok(conn)
    }

    fn lost(&self, tool: &str) -> ToolError {
        ToolError::RunnerLost(format!("{} stopped during {tool}", self.holder.describe()))
    }

    /// One request. `Err(Ok(..))`: the serving controller could not be reached or went away
    /// during `what`; `Err(Err(..))`: it answered with an error.
    async fn request(&self, method: &str, params: Value, what: &str) -> Result<Value, Result<ToolError, RpcError>> {
        let conn = self.connection().await.map_err(Ok)?;
        match conn.request(method, params).await {
            Ok(value) => Ok(value),
            Err(e) if e.is_connection_closed() => Err(Ok(self.lost(what))),
            Err(e) => Err(Err(e)),
        }
    }

    /// [`Delegated::request`] for tool calls: an error answer keeps its kind.
    async fn call(&self, method: &str, params: Value, what: &str) -> Result<Value, ToolError> {
        self.request(method, params, what).await.map_err(|e| e.unwrap_or_else(ToolError::from_rpc))
    }

    /// Have the serving controller list what it can of the project's MCP servers.
    pub async fn discover_mcp(&self) -> Result<BTreeMap<String, McpListing>, ToolError> {
        let value = self.call(method::DISCOVER_MCP, json!({}), "the MCP discovery").await?;
        let discovered: Discovered = serde_json::from_value(value)
            .map_err(|e| ToolError::Internal(format!("the serving controller's MCP lists: {e}")))?;
        Ok(discovered.listings)
    }

    /// One tool call through the serving controller's pipeline, in `activation_id` (which
    /// the caller started and ends).
    pub async fn execute(
        &self,
        agent_id: &str,
        activation_id: &str,
        tool: &str,
        input: Value,
    ) -> Result<ToolOutput, ToolError> {
        let params = ExecuteParams {
            agent_id: agent_id.to_string(),
            activation_id: activation_id.to_string(),
            tool: tool.to_string(),
            input,
        };
        let params = serde_json::to_value(params).map_err(|e| ToolError::Internal(e.to_string()))?;
        let value = self.call(method::EXECUTE, params, tool).await?;
        serde_json::from_value(value)
            .map_err(|e| ToolError::Internal(format!("the serving controller's answer to {tool}: {e}")))
    }

    /// A WebUI entry run by the serving controller (whose packs hold the pack's state).
    pub async fn invoke_webui(&self, pack: &str, entry: &str, input: Value) -> Result<ToolOutput, InvokeError> {
        let params = json!({ "pack": pack, "entry": entry, "input": input });
        match self.request(method::INVOKE_WEBUI, params, &format!("{pack}/{entry}")).await {
            Ok(value) => serde_json::from_value(value)
                .map_err(|e| InvokeError::Internal(format!("the serving controller's answer to {pack}/{entry}: {e}"))),
            Err(Ok(unreachable)) => Err(InvokeError::Handler(unreachable.message().to_string())),
            Err(Err(e)) => {
                let kind = e.data.as_ref().and_then(|d| d.get("kind")).and_then(Value::as_str);
                Err(if kind == Some(WEBUI_REFUSED) {
                    InvokeError::Rejected(e.message)
                } else {
                    InvokeError::Handler(e.message)
                })
            }
        }
    }
}
