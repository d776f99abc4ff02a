//! `suzumio mcp <dir> --agent ID`: one agent's [`McpServer`] over MCP stdio, its runner started
//! at the first call that needs it. stdout is the protocol; logs go to stderr.

use std::path::Path;
use std::sync::Arc;

use rmcp::ServiceExt;

use super::CliError;
use crate::config::BackendKind;
use crate::mcp_serve::{McpServer, Runners};

/// `suzumio mcp`: serve until the client closes stdin.
pub async fn serve(dir: &Path, agent: &str, backend: Option<BackendKind>) -> Result<(), CliError> {
    let host = crate::controller::open(dir)?;
    if host.project.config.agent(agent).is_none() {
        return Err(super::unknown_agent(&host.project.config, agent));
    }
    let runners = Runners::on_demand(backend.unwrap_or(host.project.config.backend.kind));
    let server = McpServer::new(Arc::clone(&host), agent.to_string(), Arc::clone(&runners));
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| CliError::Failed(format!("starting the MCP session: {e}")))?;
    let ended = running.waiting().await;
    runners.shutdown().await;
    if !host.audit.flush_async(crate::controller::AUDIT_FLUSH).await {
        tracing::warn!("the permission audit was not written within {} s", crate::controller::AUDIT_FLUSH.as_secs());
    }
    ended.map(|_| ()).map_err(|e| CliError::Failed(format!("the MCP session ended badly: {e}")))
}
