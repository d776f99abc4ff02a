//! What `suzumio run` shows while it works: from store events, either one live line per agent
//! (status, current tool, counts) redrawn in place on a terminal, or plain log lines otherwise.
//! Rendering only: it returns text; `main.rs` writes it.

use std::collections::BTreeMap;

use crate::store::{Event, EventRecord};

#[derive(Clone, Debug, Default)]
struct AgentLine {
    status: String,
    tool: Option<String>,
    activations: u64,
    tool_calls: u64,
    failed: u64,
}

/// The state behind the live view.
pub struct Progress {
    agents: BTreeMap<String, AgentLine>,
    order: Vec<String>,
}

impl Progress {
    pub fn new(agents: &[String]) -> Progress {
        let lines =
            agents.iter().map(|a| (a.clone(), AgentLine { status: "quiet".into(), ..Default::default() })).collect();
        Progress { agents: lines, order: agents.to_vec() }
    }

    /// Fold one event in; returns the plain log line for it, if it is worth one.
    pub fn apply(&mut self, event: &EventRecord) -> Option<String> {
        let agent = event.event.agent_id().unwrap_or_default().to_string();
        let line = self.agents.get_mut(&agent);
        match &event.event {
            Event::ActivationStarted { activation_id, .. } => {
                if let Some(l) = line {
                    l.status = "running".into();
                    l.activations += 1;
                }
                Some(format!("{agent}: activation {activation_id} started"))
            }
            Event::ActivationCompleted(ended) | Event::ActivationFailed(ended) | Event::ActivationCancelled(ended) => {
                let failed = matches!(event.event, Event::ActivationFailed(_));
                if let Some(l) = line {
                    l.status = if failed { "failed".into() } else { "quiet".into() };
                    l.tool = None;
                    if failed {
                        l.failed += 1;
                    }
                }
                let error = ended.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
                Some(format!("{agent}: activation {} {}{error}", ended.activation_id, ended.status))
            }
            Event::ToolCallStarted { tool, .. } => {
                if let Some(l) = line {
                    l.tool = Some(tool.clone());
                    l.tool_calls += 1;
                }
                Some(format!("{agent}: {tool}"))
            }
            Event::ToolCallFinished { tool, status, .. } => {
                if let Some(l) = line {
                    l.tool = None;
                }
                (status == "failed").then(|| format!("{agent}: {tool} failed"))
            }
            Event::MessageCreated { sender, recipient, channel, priority, .. } => {
                let to = recipient.as_deref().or(channel.as_deref()).unwrap_or("-");
                Some(format!("message {sender} -> {to} ({priority})"))
            }
            Event::ProjectStatus { status, .. } => Some(format!("project is {status}")),
            _ => None,
        }
    }

    /// The live block: one line per agent.
    pub fn render(&self) -> Vec<String> {
        self.order
            .iter()
            .filter_map(|id| {
                let l = self.agents.get(id)?;
                let tool = l.tool.as_deref().map(|t| format!(" · {t}")).unwrap_or_default();
                Some(format!(
                    "{id:<16} {:<8}{tool:<28} {} activation(s), {} tool call(s){}",
                    l.status,
                    l.activations,
                    l.tool_calls,
                    if l.failed > 0 { format!(", {} failed", l.failed) } else { String::new() }
                ))
            })
            .collect()
    }
}
