//! The deferred tools each agent activated with `tool_search`: once activated a tool stays in
//! the agent's tool list (its history calls it), in the order it was activated, so the tool list
//! a model sees only grows at its end.

use rusqlite::params;

use crate::store::{Event, Store, StoreError};

/// The agent's activated tools, read for every tool list (`query_plans`).
pub(super) const ACTIVATED_TOOLS: &str = "SELECT tool FROM activated_tools WHERE agent_id = ?1 ORDER BY rowid";

impl Store {
    /// Mark `tools` activated for `agent_id`; returns the ones that were not already.
    pub fn activate_tools(
        &self,
        agent_id: &str,
        activation_id: Option<&str>,
        tools: &[String],
    ) -> Result<Vec<String>, StoreError> {
        self.write(|w| {
            let mut added = Vec::new();
            for tool in tools {
                let n = w.tx.execute(
                    "INSERT OR IGNORE INTO activated_tools (agent_id, tool, activation_id, created_at)
                     VALUES (?1, ?2, ?3, ?4)",
                    params![agent_id, tool, activation_id, w.now],
                )?;
                if n > 0 {
                    added.push(tool.clone());
                }
            }
            if !added.is_empty() {
                w.event(Event::ToolActivated {
                    agent_id: agent_id.to_string(),
                    activation_id: activation_id.map(str::to_string),
                    model_names: added.iter().map(|t| crate::toolpack::sanitize_tool_name(t)).collect(),
                    tools: added.clone(),
                })?;
            }
            Ok(added)
        })
    }

    /// The tools `agent_id` activated, oldest first.
    pub fn activated_tools(&self, agent_id: &str) -> Result<Vec<String>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(ACTIVATED_TOOLS)?;
            let rows = stmt.query_map([agent_id], |r| r.get(0))?;
            Ok(rows.collect::<Result<Vec<String>, _>>()?)
        })
    }
}
