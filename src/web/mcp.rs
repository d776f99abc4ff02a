//! `/mcp/<agent>`: each configured agent's [`McpServer`](crate::mcp_serve::McpServer) over MCP
//! Streamable HTTP (`rmcp`'s tower service), behind the same guard as every route (`Host`,
//! token, `Origin`). Calls run in `suzumio run`'s own runners, as that agent. Any other agent
//! name is a 404 with the API's error body.
//!
//! A `ping` outside a session (the stateless protocol 2026-07-28, or before `initialize`) is
//! answered here, in front of rmcp's service, whose dispatch refuses it on that protocol while
//! every MCP peer must answer it. In a session rmcp answers it itself.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{ApiError, AppState};
use crate::mcp_serve::{Runners, http_service};
use crate::support::ToolHost;
use crate::support::runners::AgentRunners;

pub fn routes(tools: &Arc<ToolHost>, runners: Arc<AgentRunners>, stopping: &CancellationToken) -> Router<AppState> {
    let runners = Arc::new(Runners::Running(runners));
    let mut router = Router::new()
        .route("/mcp", axum::routing::any(no_agent))
        .route("/mcp/{agent}", axum::routing::any(unknown_agent));
    for agent in &tools.project.config.agents {
        let service = http_service(tools.clone(), agent.id.clone(), runners.clone(), stopping.child_token());
        let served = Router::new()
            .route_service(&format!("/mcp/{}", agent.id), service)
            .layer(axum::middleware::from_fn(answer_ping));
        router = router.merge(served);
    }
    router
}

/// At most this many bytes of a body are looked at for a `ping` (one is a few dozen).
const PING_BYTES: u64 = 1024;

/// A `ping` POSTed outside a session is answered with the empty result; anything else goes on
/// to rmcp's service as it came. Only a short body with a `Content-Length` is read here, so a
/// large or streamed one reaches the service (and its size limit) untouched.
async fn answer_ping(request: Request, next: Next) -> Response {
    if request.method() != Method::POST
        || request.headers().contains_key("mcp-session-id")
        || content_length(request.headers()).is_none_or(|n| n > PING_BYTES)
    {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, PING_BYTES as usize).await {
        Ok(bytes) => bytes,
        Err(e) => {
            let message = format!("reading the request body: {e}");
            return ApiError::BadRequest { message, details: Vec::new() }.into_response();
        }
    };
    let message: Option<Value> = serde_json::from_slice(&bytes).ok();
    if let Some(id) =
        message.as_ref().filter(|m| m["method"] == "ping" && m["jsonrpc"] == "2.0").and_then(|m| m.get("id"))
    {
        let answer = json!({"jsonrpc": "2.0", "id": id, "result": {}});
        return ([(header::CONTENT_TYPE, "application/json")], answer.to_string()).into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

async fn no_agent(State(state): State<AppState>) -> ApiError {
    ApiError::NotFound(format!("MCP is served per agent, at /mcp/<agent>: {}", agents(&state)))
}

async fn unknown_agent(State(state): State<AppState>, Path(agent): Path<String>) -> ApiError {
    ApiError::NotFound(format!("Unknown agent: {agent}; MCP is served at /mcp/<agent> for {}", agents(&state)))
}

fn agents(state: &AppState) -> String {
    let ids: Vec<&str> = state.tools.project.config.agents.iter().map(|a| a.id.as_str()).collect();
    if ids.is_empty() { "no agent (none is configured)".into() } else { ids.join(", ") }
}
