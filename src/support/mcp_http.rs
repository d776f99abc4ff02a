//! MCP servers reached over Streamable HTTP (`- mcp: {id, url, headers}`), from the controller
//! (containers have no network). The connection obeys the egress rules of `web.fetch`: the
//! host is resolved first and a loopback, private or link-local address is refused unless the
//! project allows private addresses; the client then connects to those addresses only and
//! follows no redirect. `headers` (a token, say) stay in the controller: never in a container,
//! a log line or the cache (which keeps only their hash).
//!
//! One session per server, opened at the first use and opened again after the server went
//! away. A `tools/list_changed` from the server lists it again (the new list serves the next
//! activation, as for stdio servers).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;

use super::ToolHost;
use crate::config::{McpPackConfig, McpTransport};
use crate::toolpack::ToolError;
use crate::toolpack::mcp::McpListing;
use crate::toolpack::mcp_session::{CallError, McpSession, McpSlot};
use crate::toolpack::output::ToolOutput;

/// How long connecting may take (the pack's `timeoutMs` bounds each request).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from a server: far past the result limit, so that a result over it
/// is measured and refused by its size (a 50 MB text is 100 MB on the wire when the server adds
/// it as `structuredContent` too). Past this the SDK drops the answer and the call fails as a
/// stream that closed early.
const HTTP_READ_LIMIT: usize = 128 << 20;

/// The controller's sessions with HTTP MCP servers.
#[derive(Default)]
pub struct HttpMcp {
    sessions: std::sync::Mutex<BTreeMap<String, Arc<McpSlot>>>,
    /// Ids of servers whose list changed, for the task that lists them again.
    changed: std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<String>>,
}

/// Call `tool` (`<id>.<name>`) of the HTTP server of `pack`.
pub async fn call(host: &ToolHost, pack: &McpPackConfig, tool: &str, input: Value) -> Result<ToolOutput, ToolError> {
    let name = tool.strip_prefix(&format!("{}.", pack.id)).unwrap_or(tool);
    let slot = slot_of(host, &pack.id);
    let session = slot.get_or_start(|| connect(host, pack)).await?;
    match slot.call(&session, name, input).await {
        Ok(out) => Ok(out),
        Err(CallError::Tool(e)) => Err(e),
        Err(CallError::Gone(why)) => {
            Err(ToolError::Failed(format!("{why}: the call did not complete. The next call connects again.")))
        }
    }
}

/// List the server's tools now (startup discovery), and take the list.
pub async fn discover(host: &ToolHost) {
    let packs: Vec<McpPackConfig> = host
        .project
        .snapshot()
        .registry
        .packs()
        .iter()
        .filter_map(|p| p.mcp())
        .filter(|m| matches!(m.transport, McpTransport::Http { .. }))
        .cloned()
        .collect();
    for pack in packs {
        let listing = list(host, &pack).await;
        host.mcp_listed("controller", listing);
    }
}

async fn list(host: &ToolHost, pack: &McpPackConfig) -> McpListing {
    let session = match slot_of(host, &pack.id).get_or_start(|| connect(host, pack)).await {
        Ok(s) => s,
        Err(e) => return McpListing::failed(&pack.id, e),
    };
    session.list().await.unwrap_or_else(|e| McpListing::failed(&pack.id, e))
}

fn slot_of(host: &ToolHost, id: &str) -> Arc<McpSlot> {
    let mut sessions = host.http_mcp.sessions.lock().unwrap_or_else(|p| p.into_inner());
    sessions.entry(id.to_string()).or_default().clone()
}

async fn connect(host: &ToolHost, pack: &McpPackConfig) -> Result<McpSession, ToolError> {
    let McpTransport::Http { url, headers } = &pack.transport else {
        return Err(ToolError::Internal(format!("the MCP server {} is not an HTTP server", pack.id)));
    };
    let who = format!("the MCP server {}", pack.id);
    let parsed = reqwest::Url::parse(url).map_err(|e| ToolError::Failed(format!("{who} has an invalid URL: {e}")))?;
    let client = super::web_fetch::egress_client(&host.project.config.web_fetch, &parsed, &who, |b| {
        b.connect_timeout(CONNECT_TIMEOUT)
    })
    .await?;
    let mut custom = HashMap::new();
    for (name, value) in headers {
        let name = http::HeaderName::try_from(name.as_str())
            .map_err(|_| ToolError::Failed(format!("{who}: `{name}` is not a header name")))?;
        let value = http::HeaderValue::try_from(value.as_str())
            .map_err(|_| ToolError::Failed(format!("{who}: the value of header {name} is not valid")))?;
        custom.insert(name, value);
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
    // Read an answer over the result limit whole, so that its call fails saying its size
    // (`too_large`) instead of the SDK dropping it as a broken transport.
    config.max_sse_event_size = HTTP_READ_LIMIT;
    config.max_json_response_size = HTTP_READ_LIMIT;
    let transport = StreamableHttpClientTransport::with_client(client, config);
    let changed = changes(host);
    let id = pack.id.clone();
    let notify = Arc::new(move || {
        let _ = changed.send(id.clone());
    });
    let mut session =
        McpSession::start(&pack.id, transport, CONNECT_TIMEOUT.min(Duration::from_millis(pack.timeout_ms)), notify)
            .await?;
    session.set_timeout(Duration::from_millis(pack.timeout_ms));
    tracing::info!(mcp = %pack.id, "connected to the MCP server");
    Ok(session)
}

/// The sender of list changes, with the task that takes them started on first use.
fn changes(host: &ToolHost) -> tokio::sync::mpsc::UnboundedSender<String> {
    host.http_mcp
        .changed
        .get_or_init(|| {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
            let weak: Weak<ToolHost> = host.me.clone();
            tokio::spawn(async move {
                while let Some(id) = rx.recv().await {
                    let Some(host) = weak.upgrade() else { return };
                    let pack = host.project.snapshot().registry.pack(&id).and_then(|p| p.mcp()).cloned();
                    if let Some(pack) = pack {
                        let listing = relist(&host, &pack).await;
                        host.mcp_listed("controller", listing);
                    }
                }
            });
            tx
        })
        .clone()
}

/// `tools/list` on the open session (no new connection: a list change comes from a live one).
async fn relist(host: &ToolHost, pack: &McpPackConfig) -> McpListing {
    match slot_of(host, &pack.id).current().await {
        Some(s) => s.list().await.unwrap_or_else(|e| McpListing::failed(&pack.id, e)),
        None => McpListing::failed(&pack.id, "the session closed before the new list was read"),
    }
}
