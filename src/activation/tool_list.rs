//! The tools a model is given during one activation. Without deferred tools or switches this is
//! the agent's allowlist, fixed. With deferred tools, it is the tools that cannot be deferred,
//! `tool_search`, then the deferred tools the agent activated, in the order it activated them.
//! A person may switch tools off for the agent, and back on, while it runs (`catalog::switch`);
//! the list is read again before every request, so the model sees a switch from its next turn.
//!
//! The order is chosen so that a change costs the provider's cached prefix as little as it can:
//! a provider caches a request's prompt from its start (Anthropic: tools, then system, then
//! messages), so a change at position *k* of the tool list loses the cache of everything after
//! *k*, and a change at the end loses only what follows the list. Hence:
//! - Within an activation, each request keeps the previous request's list in its order, less
//!   the tools switched off since, and anything new joins at the end: activated deferred tools,
//!   and tools switched back on. Nothing is ever inserted in the middle, and nothing moves.
//! - A tool switched off leaves from where it is (it cannot be cheaper than that without
//!   keeping a definition the model must not have); the tools before it keep their cache.
//! - A tool switched back on joins the end, like a deferred tool activated, and stays there in
//!   later activations (ordered by when it came back): so switching the same tool or group off
//!   and on again, the usual toggling, removes and appends at the end of the list, and costs
//!   only its own definitions. Inserting it back at its registry place would instead cost every
//!   definition after that place, each time.
//! - A group's tools are neighbours in registry order (a pack's tools, by their manifest), so a
//!   group switched off is one cut, not many.
//!
//! The system prompt (`prompt.rs`) names the agent's allowed tools and is not changed by a
//! switch: it is the start of every request, and rewriting it would lose the whole cache.
//! A switched-off tool a model calls anyway (its list was older, or it ignores the list) is
//! refused by the call pipeline (`calls`), not here.

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
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Deferred tools activated so far, oldest first.
    activated: Vec<String>,
    /// Tools switched off for the agent now.
    off: BTreeSet<String>,
    /// Tools switched back on, in the order they came back: they join the end.
    back_on: Vec<String>,
    /// The real names of the list last sent in this activation, in order.
    sent: Vec<String>,
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
            state: Mutex::new(State::default()),
        };
        list.refresh(store)?;
        list.refresh_switches(store)?;
        Ok(list)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Read the agent's activated tools again (after a `tool_search` call).
    pub fn refresh(&self, store: &Store) -> Result<(), StoreError> {
        if self.deferred.is_empty() {
            return Ok(());
        }
        let activated: Vec<String> =
            store.activated_tools(&self.agent_id)?.into_iter().filter(|t| self.deferred.contains(t)).collect();
        self.state().activated = activated;
        Ok(())
    }

    /// Read the agent's tool switches again: before every request.
    pub fn refresh_switches(&self, store: &Store) -> Result<(), StoreError> {
        let switches = store.tool_switches(&self.agent_id)?;
        let mut state = self.state();
        state.off = switches.iter().filter(|s| !s.enabled).map(|s| s.tool.clone()).collect();
        // In the order they were last switched: the latest to come back is the last.
        state.back_on = switches.into_iter().filter(|s| s.enabled).map(|s| s.tool).collect();
        Ok(())
    }

    /// The definitions for the next request (see the module header for the order), with the
    /// switches as `store` has them now. A store that cannot be read keeps the last switches
    /// known: the call pipeline still refuses a switched-off tool.
    pub fn next(&self, store: &Store) -> Vec<ModelTool> {
        if let Err(e) = self.refresh_switches(store) {
            tracing::warn!(agent = %self.agent_id, "cannot read the agent's tool switches: {e}");
        }
        self.current()
    }

    /// The definitions for the next request, with the switches last read.
    pub fn current(&self) -> Vec<ModelTool> {
        let mut state = self.state();
        let order = self.order(&state);
        let out =
            order.iter().filter_map(|real| self.all.iter().find(|(r, _)| r == real).map(|(_, t)| t.clone())).collect();
        state.sent = order;
        out
    }

    /// The real names of the next list: the last one sent, less what is not available now, then
    /// what is new, in the order a fresh activation gets (registry order, then the activated
    /// deferred tools, then the ones switched back on).
    fn order(&self, state: &State) -> Vec<String> {
        let available = |tool: &str| {
            !state.off.contains(tool) && (!self.deferred.contains(tool) || state.activated.iter().any(|a| a == tool))
        };
        let came_back = |tool: &str| state.back_on.iter().any(|b| b == tool);
        let fresh = self
            .all
            .iter()
            .map(|(real, _)| real.as_str())
            .filter(|t| !self.deferred.contains(*t) && !came_back(t))
            .chain(state.activated.iter().map(String::as_str))
            .chain(state.back_on.iter().map(String::as_str))
            .filter(|t| available(t));
        let mut order: Vec<String> = state.sent.iter().filter(|t| available(t.as_str())).cloned().collect();
        for tool in fresh {
            if !order.iter().any(|t| t == tool) {
                order.push(tool.to_string());
            }
        }
        order
    }

    /// Why `tool` cannot be called now: a deferred tool that was not activated.
    pub fn not_loaded(&self, tool: &str) -> Option<String> {
        let state = self.state();
        (self.deferred.contains(tool) && !state.activated.iter().any(|a| a == tool) && !state.off.contains(tool))
            .then(|| {
                format!("{tool} is not loaded yet: activate it with {TOOL_SEARCH} ({{\"mode\": \"activate\", \"names\": [\"{tool}\"]}}) first")
            })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{TimeZone, Utc};

    use super::ToolList;
    use crate::clock::ManualClock;
    use crate::project::Project;
    use crate::store::{Store, SwitchTarget};
    use crate::toolpack::sanitize_tool_name;

    struct World {
        _dir: tempfile::TempDir,
        project: Project,
        store: Store,
        clock: Arc<ManualClock>,
    }

    fn world() -> World {
        let dir = tempfile::Builder::new().prefix("suzumio-tool-list-").tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("suzumio.yaml"),
            "name: t\ntask: T.\ntools:\n  toolpacks: [core, shell]\nagents:\n  w:\n    tools: [messages.send, \
             file.read, file.write, shell.exec]\nbackend:\n  runner:\n    model: main\n    models:\n      providers: \
             {local: {type: scripted}}\n      presets: {main: {provider: local}}\n",
        )
        .expect("config written");
        let project = Project::load(dir.path(), &crate::config::load::ProcessEnv).expect("project");
        let clock = Arc::new(ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).single().expect("a time")));
        let store = Store::open(&project.config, clock.clone()).expect("store");
        World { _dir: dir, project, store, clock }
    }

    impl World {
        fn list(&self) -> ToolList {
            let agent = self.project.config.agent("w").expect("agent");
            let toolset = self.project.registry.resolve_agent(agent);
            let names: Vec<(String, String)> =
                toolset.tools.iter().map(|t| (t.clone(), sanitize_tool_name(t))).collect();
            ToolList::new(&self.project.registry, &toolset, &names, &self.store).expect("tool list")
        }

        fn switch(&self, tools: &[&str], enabled: bool) {
            self.clock.advance(chrono::Duration::seconds(1));
            let target = SwitchTarget { group: None, tools: tools.iter().map(|t| t.to_string()).collect() };
            self.store.switch_tools("w", &[target], enabled, "test").expect("switched");
        }
    }

    fn names(list: &ToolList, store: &Store) -> Vec<String> {
        list.next(store).into_iter().map(|t| t.name).collect()
    }

    /// A tool switched off leaves from where it is; one switched back on joins the end and stays
    /// there for the next activation; toggling it again only touches the end.
    #[test]
    fn switches_remove_in_place_and_bring_back_at_the_end() {
        let w = world();
        let list = w.list();
        let all = ["messages_send", "file_read", "file_write", "shell_exec"];
        assert_eq!(names(&list, &w.store), all);
        w.switch(&["file.read"], false);
        assert_eq!(names(&list, &w.store), ["messages_send", "file_write", "shell_exec"]);
        w.switch(&["file.read"], true);
        assert_eq!(names(&list, &w.store), ["messages_send", "file_write", "shell_exec", "file_read"]);
        w.switch(&["file.read", "file.write"], false);
        assert_eq!(names(&list, &w.store), ["messages_send", "shell_exec"]);
        w.switch(&["file.write"], true);
        w.switch(&["file.read"], true);
        assert_eq!(names(&list, &w.store), ["messages_send", "shell_exec", "file_write", "file_read"]);
        // The next activation starts with the same list, in the order the tools came back.
        assert_eq!(names(&w.list(), &w.store), ["messages_send", "shell_exec", "file_write", "file_read"]);
    }
}
