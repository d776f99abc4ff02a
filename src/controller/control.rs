//! The serving side of the control endpoint (`support::control` holds the protocol and the
//! client): `suzumio run` accepts its owner's connections on `.suzumio/controller/control.sock`
//! and runs what they ask with its own runners and packs — a tool call through the one
//! pipeline (`calls::execute_tool`) in the caller's activation, a WebUI entry, an MCP listing.
//!
//! The directory (0700) and the socket (0600) keep other users out; the peer's uid is checked
//! at accept as well, which also keeps out a process that got hold of the path another way (a
//! container's uid is never the owner's).

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;

use crate::rpc::{Connection, HandlerFuture, RequestHandler, RpcError};
use crate::support::ToolHost;
use crate::support::control::{Discovered, ExecuteParams, InvokeWebuiParams, method, webui_error};
use crate::support::runners::AgentRunners;

/// Accept the owner's connections until `stopping`.
pub async fn serve(
    listener: UnixListener,
    host: Arc<ToolHost>,
    runners: Arc<AgentRunners>,
    stopping: CancellationToken,
) {
    // The socket is this process's file: its owner is this process's user.
    let me = match listener.local_addr().ok().and_then(|a| a.as_pathname().map(std::fs::metadata)) {
        Some(Ok(meta)) => std::os::unix::fs::MetadataExt::uid(&meta),
        _ => {
            tracing::warn!("the control socket's owner is unknown: no command can hand calls to this controller");
            return;
        }
    };
    let handler: Arc<dyn RequestHandler> = Arc::new(Handler { host, runners });
    loop {
        let stream = tokio::select! {
            _ = stopping.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("the control socket: {e}");
                    continue;
                }
            },
        };
        match stream.peer_cred() {
            Ok(cred) if cred.uid() == me => {}
            Ok(cred) => {
                tracing::warn!(uid = cred.uid(), "refused a control connection from another user");
                continue;
            }
            Err(e) => {
                tracing::warn!("refused a control connection whose peer is unknown: {e}");
                continue;
            }
        }
        let (conn, _task) = Connection::spawn(stream, handler.clone());
        let stopping = stopping.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stopping.cancelled() => conn.close().await,
                _ = conn.closed() => {}
            }
        });
    }
}

struct Handler {
    host: Arc<ToolHost>,
    runners: Arc<AgentRunners>,
}

fn params<T: serde::de::DeserializeOwned>(method: &str, params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params).map_err(|e| RpcError::invalid_params(format!("{method}: {e}")))
}

fn answer(value: impl serde::Serialize) -> Result<Value, RpcError> {
    serde_json::to_value(value).map_err(|e| RpcError::internal(e.to_string()))
}

impl RequestHandler for Handler {
    fn handle(&self, method: String, raw: Value) -> HandlerFuture {
        let (host, runners) = (self.host.clone(), self.runners.clone());
        Box::pin(async move {
            match method.as_str() {
                method::EXECUTE => {
                    let p: ExecuteParams = params(&method, raw)?;
                    // The caller's activation frames the call: it must be the agent's and running.
                    crate::support::broker::check_activation(&host, &p.agent_id, &p.activation_id, true)
                        .map_err(|e| e.to_rpc())?;
                    let output = crate::calls::execute_tool(
                        &host,
                        runners.as_ref(),
                        &p.agent_id,
                        &p.activation_id,
                        &p.tool,
                        p.input,
                    )
                    .await;
                    answer(output.map_err(|e| e.to_rpc())?)
                }
                method::INVOKE_WEBUI => {
                    let p: InvokeWebuiParams = params(&method, raw)?;
                    let input = if p.input.is_null() { json!({}) } else { p.input };
                    answer(host.invoke_webui(&p.pack, &p.entry, input).await.map_err(|e| webui_error(&e))?)
                }
                method::DISCOVER_MCP => {
                    let failed = runners.discover_mcp().await;
                    let mut listings = host.mcp_seen();
                    for listing in failed {
                        listings.entry(listing.id.clone()).or_insert(listing);
                    }
                    answer(Discovered { listings })
                }
                other => Err(RpcError::method_not_found(other)),
            }
        })
    }
}
