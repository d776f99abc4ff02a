//! `suzumio check` lists the MCP servers whose tools are not known yet (not pinned, never
//! listed with their current command or URL), so that a project checks with its real tools:
//! HTTP servers from here, stdio servers by starting the runner of one agent that may use each
//! (in its container, as `suzumio run` does), which lists them at its `load`. What they list is
//! cached like at run time, so the next `check` needs neither the servers nor Docker.

use std::collections::BTreeMap;
use std::path::Path;

use super::start::StartError;
use crate::config::{BackendKind, McpTransport};
use crate::project::Project;
use crate::toolpack::mcp::McpListing;

/// Whether some MCP pack of `project` has no list yet.
pub fn undiscovered(project: &Project) -> bool {
    !missing(project).is_empty()
}

/// The MCP packs without a list: (id, whether it is a stdio server).
fn missing(project: &Project) -> Vec<(String, bool)> {
    project.unlisted_mcp_packs().map(|m| (m.id.clone(), matches!(m.transport, McpTransport::Stdio { .. }))).collect()
}

/// List what is missing; a server that cannot be listed gives a listing with its error.
pub async fn discover(dir: &Path, backend: Option<BackendKind>) -> Result<BTreeMap<String, McpListing>, StartError> {
    // Its warnings are the ones `check` is about to print (with the lists found).
    let project = Project::load(dir, &crate::config::load::ProcessEnv)?;
    let host = super::start::open_project(project)?;
    let wanted = missing(&host.project.snapshot());
    let mut failed: Vec<McpListing> = Vec::new();
    if wanted.iter().any(|(_, stdio)| !stdio) {
        super::mcp_http::discover(&host).await;
    }
    let stdio_failed = |e: &dyn std::fmt::Display| -> Vec<McpListing> {
        wanted
            .iter()
            .filter(|(_, stdio)| *stdio)
            .map(|(id, _)| McpListing::failed(id, format!("no runner could be started to list it ({e})")))
            .collect()
    };
    // While `run` serves the project its runners list the servers (no runner is started
    // next to them).
    if wanted.iter().any(|(_, stdio)| *stdio)
        && let Some((holder, socket)) = super::serving::serving(&host.project.config.root)?
    {
        let delegated = super::control::Delegated::new(holder, socket);
        let mut listed = match delegated.discover_mcp().await {
            Ok(listed) => listed,
            Err(e) => stdio_failed(&e).into_iter().map(|l| (l.id.clone(), l)).collect(),
        };
        for (id, listing) in host.mcp_seen() {
            listed.insert(id, listing);
        }
        listed.retain(|id, _| wanted.iter().any(|(w, _)| w == id));
        return Ok(listed);
    }
    if wanted.iter().any(|(_, stdio)| *stdio) {
        let kind = backend.unwrap_or(host.project.config.backend.kind);
        let lock = super::serving::ServeLock::acquire_or_serving(
            &host.project.config.root,
            "check",
            &crate::clock::iso(host.store.now()),
        )
        .await?;
        let started = match lock {
            Ok(lock) => super::start::runners(&host, kind).await.map(|r| (r, lock)),
            Err((holder, _)) => {
                Err(super::start::StartError::Runner(format!("{} started meanwhile", holder.describe())))
            }
        };
        match started {
            Ok((runners, _lock)) => {
                failed.extend(runners.discover_mcp().await);
                runners.shutdown().await;
            }
            Err(e) => failed.extend(stdio_failed(&e)),
        }
    }
    let mut listed = host.mcp_seen();
    for listing in failed {
        listed.entry(listing.id.clone()).or_insert(listing);
    }
    listed.retain(|id, _| wanted.iter().any(|(w, _)| w == id));
    Ok(listed)
}
