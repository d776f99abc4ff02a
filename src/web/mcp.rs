//! `/mcp/<agent>`: each configured agent's [`McpServer`](crate::mcp_serve::McpServer) over MCP
//! Streamable HTTP (`rmcp`'s tower service), behind the same guard as every route (`Host`,
//! token, `Origin`). Calls run in `suzumio run`'s own runners, as that agent. Any other agent
//! name is a 404 with the API's error body.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
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
        router = router.route_service(&format!("/mcp/{}", agent.id), service);
    }
    router
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
