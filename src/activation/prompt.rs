//! The prompt (reference §1.6), in two parts. The system part (task, identity, instructions,
//! mounts, agents, artifacts, the tool and reporting contract, the activation rule) depends only
//! on the project config and the agent's tools, so it is byte-identical across an agent's
//! activations and goes first in every request (the provider's system prompt, a stable prefix
//! for prompt caching). The activation part is what is new: the signals this activation is
//! given, after a "continue" note on later activations; it follows the replayed history.
//! Pure text in, text out: no store, no I/O, so every rendering rule is unit-tested.

use std::fmt::Write as _;

use serde_json::Value;

use crate::clock::iso;
use crate::config::{AgentConfig, ProjectConfig};
use crate::store::SignalRecord;

/// Signal kinds whose payload carries a ready-made `message` to show as it is.
const MESSAGE_KINDS: [&str; 3] = ["scheduler.no_effect_nudge", "scheduler.failed_nudge", "scheduler.all_quiet_nudge"];

pub struct SystemInput<'a> {
    pub config: &'a ProjectConfig,
    pub agent: &'a AgentConfig,
    /// Model-facing tool names the agent may call.
    pub tools: &'a [String],
    /// Those of them that end the activation (the tool table's `endsActivation`).
    pub ending: &'a [String],
}

/// The system part: the same text for every activation of the agent while the config holds.
pub fn system(input: &SystemInput<'_>) -> String {
    let mut out = String::new();
    first_sections(&mut out, input);
    contract_section(&mut out, input);
    out.push_str("# Activation Rule\n\n");
    let ending: Vec<String> = input.ending.iter().map(|t| format!("`{t}`")).collect();
    match ending.as_slice() {
        [] => out.push_str("This activation ends when you reply without calling a tool.\n"),
        [one] => {
            let _ = writeln!(out, "Calling {one} ends this activation.");
        }
        [rest @ .., last] => {
            let _ = writeln!(out, "Calling {} or {last} ends this activation.", rest.join(", "));
        }
    }
    out
}

/// The activation part: the signals, after a note that the history above is the agent's own
/// on every activation but the first.
pub fn build(first: bool, signals: &[SignalRecord]) -> String {
    let mut out = String::new();
    if !first {
        out.push_str(
            "# Continue Existing Context\n\nYou have worked on this project before; your earlier activations are in \
             the conversation above. Continue from where you left off.\n\n",
        );
    }
    signals_section(&mut out, signals);
    out.trim_end().to_string()
}

fn first_sections(out: &mut String, input: &SystemInput<'_>) {
    let c = input.config;
    let a = input.agent;
    let _ = write!(out, "# Project Task\n\n{}\n\n", c.task.trim());
    let _ = write!(out, "# Agent Identity\n\n- ID: {}\n- Name: {}\n- Role: {}\n\n", a.id, a.display_name, a.role);
    if !a.prompt.trim().is_empty() {
        let _ = write!(out, "# Agent Instructions\n\n{}\n\n", a.prompt.trim());
    }
    let mounts: Vec<_> = c.backend.docker.mounts.iter().chain(a.mounts.iter()).collect();
    if !mounts.is_empty() {
        out.push_str("# Mounted Inputs\n\n");
        for m in mounts {
            let mode = if m.readonly { "read-only" } else { "read-write" };
            let description = m.description.as_deref().map(|d| format!(": {d}")).unwrap_or_default();
            let _ = writeln!(out, "- {} ({mode}){description}", m.target);
        }
        out.push('\n');
    }
    out.push_str("# Project Agents\n\n");
    for other in &c.agents {
        let you = if other.id == a.id { " — you" } else { "" };
        let _ = writeln!(out, "- {} ({}, {}){you}", other.id, other.display_name, other.role);
    }
    out.push_str("\n# Shared Artifacts\n\n");
    for other in &c.agents {
        let mode = if other.id == a.id { "read-write, yours" } else { "read-only" };
        let _ = writeln!(out, "- /artifacts/{} ({mode})", other.id);
    }
    out.push('\n');
}

/// Signals as the prompt shows them, for signals handed over at a tool boundary.
pub fn render_signals(signals: &[SignalRecord]) -> String {
    let mut out = String::from("# New Signals\n\n");
    render_each(&mut out, signals);
    out.trim_end().to_string()
}

fn signals_section(out: &mut String, signals: &[SignalRecord]) {
    out.push_str("# New Signals\n\n");
    if signals.is_empty() {
        out.push_str("No new signals.\n\n");
    }
    render_each(out, signals);
}

fn render_each(out: &mut String, signals: &[SignalRecord]) {
    for s in signals {
        let _ = writeln!(out, "## {} {}\n", s.id, s.kind);
        if s.deliveries > 0 {
            let _ = writeln!(
                out,
                "- Delivered again: the activation it first went to was interrupted before it finished, \
                 so part of it may already be done. Check before repeating work.\n"
            );
        }
        let p = &s.payload;
        let text = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or("");
        if s.kind == "message.created" {
            let _ = writeln!(out, "- Message: {}", text("messageId"));
            let _ = writeln!(out, "- From: {}", text("sender"));
            match p.get("channel").and_then(Value::as_str) {
                Some(channel) => {
                    let _ = writeln!(out, "- Channel: {channel}");
                }
                None => {
                    let _ = writeln!(out, "- To: {}", text("recipient"));
                }
            }
            let _ = writeln!(out, "- Priority: {}", s.priority);
            let _ = write!(out, "- Time: {}\n\n{}\n\n", iso(s.created_at), text("body").trim_end());
        } else if MESSAGE_KINDS.contains(&s.kind.as_str()) {
            let _ = write!(out, "{}\n\n", text("message").trim_end());
        } else {
            let _ = writeln!(out, "- Priority: {}", s.priority);
            let _ = writeln!(out, "- Time: {}\n", iso(s.created_at));
            let pretty = serde_json::to_string_pretty(p).unwrap_or_else(|_| p.to_string());
            let _ = write!(out, "```json\n{pretty}\n```\n\n");
        }
    }
}

fn contract_section(out: &mut String, input: &SystemInput<'_>) {
    let c = input.config;
    let coordinator = c.communication.coordinator_agent.as_deref().unwrap_or_default();
    let is_coordinator = c.communication.coordinator_agent.as_deref() == Some(input.agent.id.as_str());
    out.push_str("# Tool And Reporting Contract\n\n");
    let tools = if input.tools.is_empty() { "none".to_string() } else { input.tools.join(", ") };
    let _ = writeln!(out, "- Available tools: {tools}.");
    out.push_str(
        "- Priorities: P0 interrupts the recipient's running activation (emergencies only); P1 reaches it at its \
         next tool call; P2 is continuation or control work delivered before routine work; P3 is routine work and \
         the default.\n",
    );
    if c.communication.restrict_non_coordinator_to_coordinator && !is_coordinator && !coordinator.is_empty() {
        let _ = writeln!(
            out,
            "- Communication policy: send direct messages only to {coordinator}, at {} or lower; channels are not \
             allowed.",
            c.communication.non_coordinator_max_priority
        );
    }
    let _ = writeln!(
        out,
        "- Files: /workspace is your private working directory; /artifacts/{} is yours to share results (other \
         agents can read it, and you can read theirs); /mnt holds mounted inputs. Shell commands run in /workspace.",
        input.agent.id
    );
    out.push_str(
        "- Before ending every activation, create one externally visible effect: a message, a shared artifact, a \
         plan update, or a wait with a reason.\n",
    );
    out.push_str(
        "- Do not send acknowledgements or thanks that carry no information; they wake the recipient for nothing.\n",
    );
    // Speak of a coordinator only when there is one, and of `completion.submit` only to agents
    // that may call it.
    let has_coordinator = !coordinator.is_empty() && c.agent(coordinator).is_some();
    let can_submit = input.tools.iter().any(|t| t == "completion.submit");
    match (is_coordinator, can_submit) {
        (true, true) => out.push_str(
            "- You are the coordinator: call `completion.submit` with the final report when the task is done.\n",
        ),
        (true, false) => out.push_str("- You are the coordinator: the others report to you.\n"),
        (false, true) => {
            out.push_str("- Call `completion.submit` with the final report when the whole task is done.\n")
        }
        (false, false) => {}
    }
    let blocked = if c.channels.iter().any(|ch| ch == "#blocked") { " or post to #blocked" } else { "" };
    if has_coordinator && !is_coordinator {
        let _ = writeln!(
            out,
            "- When blocked, say what you need and from whom: message {coordinator}{blocked}, then wait for a signal.\n"
        );
    } else {
        let _ = writeln!(
            out,
            "- When blocked, say what you need and from whom: message the agent (or `user`) who can help{blocked}, then \
             wait for a signal.\n"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load::ProcessEnv;
    use crate::config::{Priority, load_config};
    use crate::store::SignalStatus;
    use serde_json::json;

    fn config() -> ProjectConfig {
        let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("projects/demo");
        load_config(&root, &ProcessEnv).ok().and_then(|l| l.config).expect("demo config loads")
    }

    fn signal(kind: &str, priority: Priority, payload: Value) -> SignalRecord {
        SignalRecord {
            id: "sig_1".into(),
            kind: kind.into(),
            source_agent: None,
            source_activation: None,
            target_agent: Some("worker-1".into()),
            target_channel: None,
            priority,
            payload,
            status: SignalStatus::Pending,
            useful_effect: true,
            created_at: crate::clock::parse_iso("2026-03-01T09:00:00.000Z").unwrap(),
            not_before: None,
            delivered_at: None,
            deliveries: 0,
            delivered_activation_id: None,
        }
    }

    #[test]
    fn the_system_part_has_every_section_in_order() {
        let c = config();
        let agent = c.agent("worker-1").unwrap();
        let tools = vec!["messages.send".to_string(), "file.read".to_string()];
        let system = system(&SystemInput { config: &c, agent, tools: &tools, ending: &[] });
        let headings: Vec<&str> = system.lines().filter(|l| l.starts_with("# ")).collect();
        assert_eq!(
            headings,
            [
                "# Project Task",
                "# Agent Identity",
                "# Agent Instructions",
                "# Mounted Inputs",
                "# Project Agents",
                "# Shared Artifacts",
                "# Tool And Reporting Contract",
                "# Activation Rule"
            ]
        );
        assert!(system.contains("- ID: worker-1\n- Name: Akari\n- Role: worker\n"));
        assert!(system.contains("- /mnt/demo-fragments (read-only): Demo input fragments (read-only).\n"));
        assert!(system.contains("- /artifacts/worker-1 (read-write, yours)\n- /artifacts/worker-2 (read-only)\n"));
        assert!(system.contains("- Available tools: messages.send, file.read.\n"));
        assert!(system.contains("- Communication policy: send direct messages only to pm, at P2 or lower"));
        // `completion.submit` is not among its tools, so the prompt does not speak of it.
        assert!(!system.contains("completion.submit"), "{system}");
        assert!(system.contains("- When blocked, say what you need and from whom: message pm"), "{system}");
        assert_eq!(
            system,
            super::system(&SystemInput { config: &c, agent, tools: &tools, ending: &[] }),
            "deterministic"
        );
    }

    /// Regression: without `coordinatorAgent` and without an agent called `pm`, every prompt told
    /// agents to "message pm", and `messages.send {"recipient":"pm"}` then failed.
    #[test]
    fn a_project_without_a_coordinator_names_none() {
        let mut c = config();
        c.communication.coordinator_agent = None;
        let agent = c.agent("worker-1").unwrap();
        let tools = vec!["messages.send".to_string(), "completion.submit".to_string()];
        let system = system(&SystemInput { config: &c, agent, tools: &tools, ending: &[] });
        assert!(!system.contains("message nobody-here") && !system.contains("coordinator"), "{system}");
        assert!(system.contains("message the agent (or `user`) who can help"), "{system}");
        assert!(system.contains("- Call `completion.submit` with the final report when the whole task is done."));
    }

    #[test]
    fn the_first_activation_part_is_only_its_signals() {
        let message = signal(
            "message.created",
            Priority::P3,
            json!({"messageId": "msg_1", "sender": "pm", "recipient": "worker-1", "body": "Write section 1."}),
        );
        let prompt = build(true, &[message]);
        assert_eq!(
            prompt,
            "# New Signals\n\n## sig_1 message.created\n\n- Message: msg_1\n- From: pm\n- To: worker-1\n- Priority: P3\n- Time: 2026-03-01T09:00:00.000Z\n\nWrite section 1."
        );
        assert_eq!(build(true, &[]), "# New Signals\n\nNo new signals.");
    }

    #[test]
    fn later_activations_continue_and_render_other_kinds_as_json() {
        let nudge = signal("scheduler.no_effect_nudge", Priority::P3, json!({"message": "Do something visible."}));
        let plan = signal("plan.continuation_nudge", Priority::P2, json!({"planId": "pln_1"}));
        let prompt = build(false, &[nudge, plan]);
        assert!(prompt.starts_with("# Continue Existing Context\n"));
        assert!(!prompt.contains("# Project Task"));
        assert!(prompt.contains("## sig_1 scheduler.no_effect_nudge\n\nDo something visible.\n"));
        assert!(prompt.contains(
            "## sig_1 plan.continuation_nudge\n\n- Priority: P2\n- Time: 2026-03-01T09:00:00.000Z\n\n```json\n{\n  \"planId\": \"pln_1\"\n}\n```"
        ));
    }

    /// Delivery is at least once: a signal whose first activation was interrupted says so.
    #[test]
    fn a_signal_delivered_again_says_so() {
        let mut again = signal("plan.continuation_nudge", Priority::P2, json!({"planId": "pln_1"}));
        let fresh = render_signals(std::slice::from_ref(&again));
        assert!(!fresh.contains("Delivered again"), "{fresh}");
        again.deliveries = 1;
        let text = render_signals(&[again]);
        assert!(text.contains("- Delivered again: the activation it first went to was interrupted"), "{text}");
    }

    #[test]
    fn the_coordinator_is_not_restricted() {
        let c = config();
        let system = system(&SystemInput { config: &c, agent: c.agent("pm").unwrap(), tools: &[], ending: &[] });
        assert!(system.contains("You are the coordinator"));
        assert!(system.contains("- Available tools: none."));
        assert!(!system.contains("Communication policy"), "the coordinator is not restricted");
    }
}
