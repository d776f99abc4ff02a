//! `suzumio mcp <dir> --agent ID`: one agent's [`McpServer`] over MCP stdio. While `run` serves
//! the project its calls are handed to it (`calls::cli`); otherwise the agent's runner is
//! started at the first call that needs it. stdout is the protocol; logs go to stderr.

use std::path::Path;
use std::sync::Arc;

use rmcp::ServiceExt;

use super::CliError;
use crate::calls::cli::CliCalls;
use crate::config::BackendKind;
use crate::mcp_serve::{McpServer, Runners};

/// `suzumio mcp`: serve until the client closes stdin.
pub async fn serve(dir: &Path, agent: &str, backend: Option<BackendKind>) -> Result<(), CliError> {
    let host = crate::controller::open(dir)?;
    if host.project.config.agent(agent).is_none() {
        return Err(super::unknown_agent(&host.project.config, agent));
    }
    let calls = CliCalls::new(&host, backend.unwrap_or(host.project.config.backend.kind), crate::support::serving::MCP)
        .map_err(|e| CliError::Failed(format!("finding who serves the project: {e}")))?;
    // A call handed to the serving controller asks for approval there: its request reaches
    // this session (which puts it to the client) through the store.
    let following = tokio_util::sync::CancellationToken::new();
    if calls.is_served() {
        let store = host.store.clone();
        let stop = following.clone();
        tokio::spawn(async move { store.follow_other_writers(stop).await });
    }
    let runners = Runners::on_demand(calls);
    let server = McpServer::new(Arc::clone(&host), agent.to_string(), Arc::clone(&runners)).into_service();
    let ended = match server.serve(rmcp::transport::stdio()).await {
        Ok(running) => running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| CliError::Failed(format!("the MCP session ended badly: {e}"))),
        // A client that only discovered or pinged, then closed: no session began, nothing failed.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => Ok(()),
        Err(e) => Err(CliError::Failed(format!("starting the MCP session: {e}"))),
    };
    following.cancel();
    runners.shutdown().await;
    if !host.audit.flush_async(crate::controller::AUDIT_FLUSH).await {
        tracing::warn!("the permission audit was not written within {} s", crate::controller::AUDIT_FLUSH.as_secs());
    }
    ended
}
