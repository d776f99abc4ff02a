//! MCP packs, controller side: what a server listed (at a runner's `load`, after its
//! `tools/list_changed`, or from an HTTP server) held against the list in use. The live list is
//! written to the discovery cache (`.suzumio/mcp/<id>.json`, with the server's name and
//! version), so `check` and the next run know it offline. A pinned list stays in use and a live
//! list that differs from it is reported; otherwise a changed list becomes the project served
//! from the next activation on (a running activation keeps the tools it started with).

use crate::toolpack::mcp::{self, McpListing};

use super::ToolHost;

impl ToolHost {
    /// What each MCP server listed last in this process, by pack id.
    pub(crate) fn mcp_seen(&self) -> std::collections::BTreeMap<String, McpListing> {
        self.mcp_seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Take what `agent`'s runner (or the controller, for an HTTP server) got from a server.
    pub(crate) fn mcp_listed(&self, agent: &str, listing: McpListing) {
        let _one_at_a_time = self.mcp_updates.lock().unwrap_or_else(|p| p.into_inner());
        let project = self.project.snapshot();
        let id = listing.id.clone();
        let Some(pack) = project.registry.pack(&id).and_then(|p| p.mcp()) else {
            tracing::warn!(%agent, mcp = %id, "a runner listed tools of an MCP server the project does not have");
            return;
        };
        // Only a runner that runs this server speaks for it (HTTP servers are listed here).
        let stdio = matches!(pack.transport, crate::config::McpTransport::Stdio { .. });
        if stdio && !project.mcp_packs_for(agent).iter().any(|p| p.id == id) {
            tracing::warn!(%agent, mcp = %id, "refused a tool list of an MCP server this agent does not run");
            return;
        }
        self.mcp_seen.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), listing.clone());
        if let Some(error) = &listing.error {
            tracing::warn!(%agent, mcp = %id, "the MCP server's tools are not available: {error}");
            return;
        }
        let now = crate::clock::iso(self.store.now());
        if let Err(e) = mcp::write_cache(&project.config.root, pack, &listing, &now) {
            tracing::warn!(mcp = %id, "cannot write the discovery cache of the MCP server: {e}");
        }
        if pack.pinned.is_some() {
            if let Some(diff) = mcp::pinned_difference(pack, &listing.tools) {
                tracing::warn!(
                    mcp = %id,
                    "{} lists other tools than the ones pinned in the config ({diff}); the pinned list is used",
                    listing.server()
                );
            }
            return;
        }
        let in_use = project.mcp_lists.get(&id).map(|l| l.tools.as_slice()).unwrap_or_default();
        let diff = mcp::diff(in_use, &listing.tools);
        if diff.is_empty() && project.mcp_lists.contains_key(&id) {
            return;
        }
        let server = listing.server();
        let count = listing.tools.len();
        match project.with_mcp_list(listing) {
            Ok((next, warnings)) => {
                for w in crate::config::diag::sorted(&warnings.warnings) {
                    tracing::warn!(mcp = %id, "{w}");
                }
                self.project.replace(next);
                if in_use.is_empty() && diff.removed.is_empty() {
                    tracing::info!(mcp = %id, "{server} lists {count} tools; they are used from the next activation")
                } else {
                    tracing::info!(
                        mcp = %id,
                        "{server} changed its tools ({diff}); the new list is used from the next activation"
                    )
                }
            }
            Err(errors) => {
                for e in &errors.errors {
                    tracing::warn!(mcp = %id, "the new tool list of {server} cannot be used: {e}");
                }
            }
        }
    }
}
