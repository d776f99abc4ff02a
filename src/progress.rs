//! What `suzumio run` shows while it works: from store events, either one live line per agent
//! (status, current tool, counts) redrawn in place on a terminal, or plain log lines otherwise.
//! Rendering only: it returns text; `main.rs` writes it.

use std::collections::BTreeMap;

use crate::store::EventRecord;

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
        let d = &event.data;
        let text = |k: &str| d.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
        let agent = text("agentId");
        let line = self.agents.get_mut(&agent);
        match event.kind.as_str() {
            "activation.started" => {
                if let Some(l) = line {
                    l.status = "running".into();
                    l.activations += 1;
                }
                Some(format!("{agent}: activation {} started", text("activationId")))
            }
            "activation.completed" | "activation.failed" | "activation.cancelled" => {
                let status = event.kind.trim_start_matches("activation.");
                if let Some(l) = line {
                    l.status = if status == "failed" { "failed".into() } else { "quiet".into() };
                    l.tool = None;
                    if status == "failed" {
                        l.failed += 1;
                    }
                }
                let error = d.get("error").and_then(|e| e.as_str()).map(|e| format!(": {e}")).unwrap_or_default();
                Some(format!("{agent}: activation {} {status}{error}", text("activationId")))
            }
            "tool_call.started" => {
                if let Some(l) = line {
                    l.tool = Some(text("tool"));
                    l.tool_calls += 1;
                }
                Some(format!("{agent}: {}", text("tool")))
            }
            "tool_call.finished" => {
                if let Some(l) = line {
                    l.tool = None;
                }
                (text("status") == "failed").then(|| format!("{agent}: {} failed", text("tool")))
            }
            "message.created" => {
                let to =
                    d.get("recipient").and_then(|v| v.as_str()).or_else(|| d.get("channel").and_then(|v| v.as_str()));
                Some(format!("message {} -> {} ({})", text("sender"), to.unwrap_or("-"), text("priority")))
            }
            "project.status" => Some(format!("project is {}", text("status"))),
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
