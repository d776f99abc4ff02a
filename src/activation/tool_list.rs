//! The tools a model is given during one activation. Without deferred tools this is the
//! agent's allowlist, fixed. With them, it is the tools that cannot be deferred, `tool_search`,
//! then the deferred tools the agent activated, in the order it activated them: the list only
//! grows, at its end, so each request still starts with the previous one's tool definitions.

use std::collections::BTreeSet;
use std::sync::Mutex;

use super::providers::ModelTool;
use crate::store::{Store, StoreError};
use crate::toolpack::{AgentToolset, TOOL_SEARCH, ToolpackRegistry};

pub struct ToolList {
    agent_id: String,
    /// Every tool the agent may call: (real name, model-facing definition), registry order.
    all: Vec<(String, ModelTool)>,
    deferred: BTreeSet<String>,
    /// Deferred tools activated so far, oldest first.
    activated: Mutex<Vec<String>>,
}

impl ToolList {
    /// `names`: (real, model-safe) for every tool of `toolset`.
    pub fn new(
        registry: &ToolpackRegistry,
        toolset: &AgentToolset,
        names: &[(String, String)],
        store: &Store,
    ) -> Result<ToolList, StoreError> {
        let all = names
            .iter()
            .filter_map(|(real, safe)| {
                let (_, def) = registry.tool(real)?;
                let tool = ModelTool {
                    name: safe.clone(),
                    description: def.description.clone(),
                    parameters: def.input_schema.clone(),
                };
                Some((real.clone(), tool))
            })
            .collect();
        let list = ToolList {
            agent_id: toolset.agent.clone(),
            all,
            deferred: toolset.deferred.iter().cloned().collect(),
            activated: Mutex::new(Vec::new()),
        };
        list.refresh(store)?;
        Ok(list)
    }

    /// Read the agent's activated tools again (after a `tool_search` call).
    pub fn refresh(&self, store: &Store) -> Result<(), StoreError> {
        if self.deferred.is_empty() {
            return Ok(());
        }
        let activated: Vec<String> =
            store.activated_tools(&self.agent_id)?.into_iter().filter(|t| self.deferred.contains(t)).collect();
        *self.activated.lock().unwrap_or_else(|p| p.into_inner()) = activated;
        Ok(())
    }

    /// The definitions for the next request.
    pub fn current(&self) -> Vec<ModelTool> {
        let activated = self.activated.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut out: Vec<ModelTool> =
            self.all.iter().filter(|(real, _)| !self.deferred.contains(real)).map(|(_, t)| t.clone()).collect();
        out.extend(
            activated.iter().filter_map(|a| self.all.iter().find(|(real, _)| real == a).map(|(_, t)| t.clone())),
        );
        out
    }

    /// Why `tool` cannot be called now: a deferred tool that was not activated.
    pub fn not_loaded(&self, tool: &str) -> Option<String> {
        let activated = self.activated.lock().unwrap_or_else(|p| p.into_inner());
        (self.deferred.contains(tool) && !activated.iter().any(|a| a == tool)).then(|| {
            format!("{tool} is not loaded yet: activate it with {TOOL_SEARCH} ({{\"mode\": \"activate\", \"names\": [\"{tool}\"]}}) first")
        })
    }
}
