//! One session with an MCP server through the official Rust SDK (`rmcp`), whatever carries it:
//! the runner gives it a child process in the agent's container, the controller a Streamable
//! HTTP connection. Starting, listing and each call run under the pack's deadline; a session
//! whose server went away says so, so that its owner starts a new one for the next call. A
//! result over the size limit fails its call as `too_large`, with its size: the server answered.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::IntoTransport;
use rmcp::{ClientHandler, RoleClient, ServiceError, ServiceExt};
use serde_json::{Map, Value, json};

use crate::toolpack::ToolError;
use crate::toolpack::mcp::McpListing;
use crate::toolpack::output::{IMAGE_TYPES, MAX_CONTENT_BLOCKS, MAX_RESULT_BYTES, ToolOutput, parse_output, too_large};

/// Called when the server says its tool list changed (`notifications/tools/list_changed`).
pub type OnListChanged = Arc<dyn Fn() + Send + Sync>;

/// The client side of the session: who we are, and what to do when the list changes.
pub struct Watcher {
    on_list_changed: OnListChanged,
}

impl ClientHandler for Watcher {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        (self.on_list_changed)();
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("suzumio", env!("CARGO_PKG_VERSION")))
    }
}

pub struct McpSession {
    id: String,
    service: RunningService<RoleClient, Watcher>,
    timeout: Duration,
}

/// Why a call gave no result.
#[derive(Debug)]
pub enum CallError {
    /// The server went away (exited, closed its pipe); the next call needs a new session.
    Gone(String),
    /// Anything else: the message is for the model.
    Tool(ToolError),
}

impl McpSession {
    /// Connect and initialize within `timeout`.
    pub async fn start<T, E, A>(
        id: &str,
        transport: T,
        timeout: Duration,
        on_list_changed: OnListChanged,
    ) -> Result<McpSession, ToolError>
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let watcher = Watcher { on_list_changed };
        let service = match tokio::time::timeout(timeout, watcher.serve(transport)).await {
            Ok(Ok(service)) => service,
            Ok(Err(e)) => return Err(ToolError::Failed(format!("the MCP server {id} did not initialize: {e}"))),
            Err(_) => {
                return Err(ToolError::TimedOut(format!(
                    "the MCP server {id} did not answer `initialize` within {} ms",
                    timeout.as_millis()
                )));
            }
        };
        Ok(McpSession { id: id.to_string(), service, timeout })
    }

    /// The deadline of each later request (starting may have had a shorter one).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    pub fn is_closed(&self) -> bool {
        self.service.is_closed()
    }

    /// `tools/list` (every page), with who the server said it is.
    pub async fn list(&self) -> Result<McpListing, ToolError> {
        let tools = match tokio::time::timeout(self.timeout, self.service.peer().list_all_tools()).await {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => {
                return Err(ToolError::Failed(format!("the MCP server {} failed `tools/list`: {e}", self.id)));
            }
            Err(_) => {
                return Err(ToolError::TimedOut(format!(
                    "the MCP server {} did not list its tools within {} ms",
                    self.id,
                    self.timeout.as_millis()
                )));
            }
        };
        let info = self.service.peer().peer_info();
        let server = info.as_ref().and_then(|i| i.server_info.as_ref());
        Ok(McpListing {
            id: self.id.clone(),
            server_name: server.map(|s| s.name.clone()),
            server_version: server.map(|s| s.version.clone()),
            protocol_version: info.as_ref().map(|i| i.protocol_version.to_string()),
            tools: tools.iter().filter_map(|t| serde_json::to_value(t).ok()).collect(),
            error: None,
        })
    }

    /// `tools/call` of the server's own tool name. A result the server marks `isError` is a
    /// result (the model reads it); a JSON-RPC error is a failed call.
    pub async fn call(&self, tool: &str, input: Value) -> Result<ToolOutput, CallError> {
        let arguments = match input {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                return Err(CallError::Tool(ToolError::Rejected(format!(
                    "MCP tool input must be an object, got {other}"
                ))));
            }
        };
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = arguments;
        let result = match tokio::time::timeout(self.timeout, self.service.peer().call_tool(params)).await {
            Ok(Ok(result)) => result,
            // The transport measured the answer and found it over the limit (the runner's
            // `SizedLines`): a size, not a server that misbehaves.
            Ok(Err(ServiceError::McpError(e)))
                if e.data.as_ref().and_then(|d| d.get("kind")).and_then(Value::as_str) == Some("too_large") =>
            {
                return Err(CallError::Tool(ToolError::TooLarge(format!(
                    "MCP server {} tool {tool}: {}",
                    self.id, e.message
                ))));
            }
            Ok(Err(ServiceError::McpError(e))) => {
                return Err(CallError::Tool(ToolError::Failed(format!(
                    "the MCP server {} refused `{tool}`: {}",
                    self.id, e.message
                ))));
            }
            Ok(Err(ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                return Err(CallError::Gone(format!("the MCP server {} went away during `{tool}`", self.id)));
            }
            Ok(Err(e)) if self.is_closed() => {
                return Err(CallError::Gone(format!("the MCP server {} went away during `{tool}` ({e})", self.id)));
            }
            Ok(Err(e)) => {
                return Err(CallError::Tool(ToolError::Failed(format!(
                    "the MCP server {} failed `{tool}`: {e}",
                    self.id
                ))));
            }
            Err(_) => {
                return Err(CallError::Tool(ToolError::TimedOut(format!(
                    "the MCP server {} did not answer `{tool}` within {} ms (the pack's timeoutMs)",
                    self.id,
                    self.timeout.as_millis()
                ))));
            }
        };
        let value = serde_json::to_value(&result)
            .map_err(|e| CallError::Tool(ToolError::Internal(format!("reading the result of {tool}: {e}"))))?;
        output_of(&format!("MCP server {} tool {tool}", self.id), value).map_err(CallError::Tool)
    }

    /// End the session (for a child process: close its stdin, then signal it).
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

/// The live session with one server, for whoever runs it (the runner for a stdio server, the
/// controller for an HTTP one): started at the first use, and again after the server went away.
#[derive(Default)]
pub struct McpSlot {
    live: tokio::sync::Mutex<Option<Arc<McpSession>>>,
}

impl McpSlot {
    /// The live session, or a new one from `start` (one start at a time).
    pub async fn get_or_start<F, Fut>(&self, start: F) -> Result<Arc<McpSession>, ToolError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<McpSession, ToolError>>,
    {
        let mut live = self.live.lock().await;
        if let Some(session) = live.as_ref().filter(|s| !s.is_closed()) {
            return Ok(session.clone());
        }
        let session = Arc::new(start().await?);
        *live = Some(session.clone());
        Ok(session)
    }

    /// The live session, without starting one.
    pub async fn current(&self) -> Option<Arc<McpSession>> {
        self.live.lock().await.clone()
    }

    /// `tools/call` on `session`; a session whose server went away is forgotten, so that the
    /// next call starts a new one.
    pub async fn call(&self, session: &Arc<McpSession>, tool: &str, input: Value) -> Result<ToolOutput, CallError> {
        let result = session.call(tool, input).await;
        if matches!(result, Err(CallError::Gone(_))) {
            let mut live = self.live.lock().await;
            if live.as_ref().is_some_and(|s| Arc::ptr_eq(s, session)) {
                live.take();
            }
        }
        result
    }

    /// End the session, if there is one.
    pub async fn close(&self) {
        let session = self.live.lock().await.take();
        if let Some(session) = session.and_then(|s| Arc::try_unwrap(s).ok()) {
            session.close().await;
        }
    }
}

/// An MCP `CallToolResult` as a Suzumio result: text, image and resource-link blocks pass as
/// they are; audio, embedded resources and images of a type the models do not take become a
/// line of text saying what was left out; past [`MAX_CONTENT_BLOCKS`] the rest is summed up.
pub fn output_of(what: &str, result: Value) -> Result<ToolOutput, ToolError> {
    let mut content = Vec::new();
    let blocks = result.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
    let total = blocks.len();
    for block in blocks {
        if content.len() == MAX_CONTENT_BLOCKS - 1 && total > MAX_CONTENT_BLOCKS {
            content.push(
                json!({"type": "text", "text": format!("[{} more content blocks left out]", total - content.len())}),
            );
            break;
        }
        content.push(block_of(&block));
    }
    let mut out = Map::new();
    out.insert("content".into(), Value::Array(content));
    if let Some(e) = result.get("isError").filter(|e| e.is_boolean()) {
        out.insert("isError".into(), e.clone());
    }
    if let Some(s) = result.get("structuredContent").filter(|s| s.is_object()) {
        out.insert("structuredContent".into(), s.clone());
    }
    let size = rich_size(&out);
    if size > MAX_RESULT_BYTES {
        return Err(ToolError::TooLarge(format!("{what}: {}", too_large(size, MAX_RESULT_BYTES))));
    }
    parse_output(what, Value::Object(out)).map_err(ToolError::Failed)
}

/// The bytes of a rich result as `parse_output` counts them: its blocks and structured content.
fn rich_size(out: &Map<String, Value>) -> usize {
    let blocks =
        out.get("content").and_then(Value::as_array).map_or(0, |b| b.iter().map(|b| b.to_string().len()).sum());
    blocks + out.get("structuredContent").map_or(0, |s| s.to_string().len())
}

fn block_of(block: &Value) -> Value {
    let text = |s: &str| json!({"type": "text", "text": s});
    let field = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or_default();
    match field("type") {
        "text" => text(field("text")),
        "image" if IMAGE_TYPES.contains(&field("mimeType")) => {
            json!({"type": "image", "data": field("data"), "mimeType": field("mimeType")})
        }
        "image" | "audio" => text(&format!(
            "[{} {} of {} base64 characters left out]",
            field("type"),
            field("mimeType"),
            field("data").len()
        )),
        "resource_link" => {
            let name = Some(field("name")).filter(|n| !n.is_empty()).unwrap_or(field("uri"));
            json!({"type": "resource_link", "uri": field("uri"), "name": name})
        }
        "resource" => {
            let r = block.get("resource").cloned().unwrap_or_default();
            let uri = r.get("uri").and_then(Value::as_str).unwrap_or_default();
            match r.get("text").and_then(Value::as_str) {
                Some(t) => text(&format!("[{uri}]\n{t}")),
                None => text(&format!("[resource {uri}: binary content left out]")),
            }
        }
        other => text(&format!("[a {other:?} content block left out]")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_blocks_become_suzumio_blocks() {
        let result = json!({
            "content": [
                {"type": "text", "text": "Echo: hi"},
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
                {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
                {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "body"}},
                {"type": "resource_link", "uri": "file:///b", "name": "b"}
            ],
            "structuredContent": {"n": 5}
        });
        let out = output_of("t", result).unwrap();
        assert_eq!(out.content.len(), 5);
        assert_eq!(
            out.output,
            "Echo: hi\n[image image/png, 8 bytes]\n[audio audio/wav of 4 base64 characters left out]\n[file:///a.txt]\nbody\n[b](file:///b)"
        );
        assert_eq!(out.structured_content, Some(json!({"n": 5})));
        assert!(!out.is_error);
    }

    #[test]
    fn too_many_blocks_are_summed_up() {
        let blocks: Vec<Value> = (0..20).map(|i| json!({"type": "text", "text": i.to_string()})).collect();
        let out = output_of("t", json!({"content": blocks, "isError": true})).unwrap();
        assert_eq!(out.content.len(), MAX_CONTENT_BLOCKS);
        assert!(out.output.ends_with("[13 more content blocks left out]"), "{}", out.output);
        assert!(out.is_error);
    }
}
