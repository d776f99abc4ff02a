//! The WebUI entries of the built-in `core`, `shell` and `web` packs (reference §4.10), in Rust.
//! Inputs arrive already checked against the entry schemas in `toolpack/builtin/*.json`; these
//! functions apply defaults, query the store and render `{title, output, metadata}`.
//! Activity panels show paths, commands and URLs — never file contents or tool outputs.

use std::fmt::Write as _;

use serde_json::{Value, json};

use super::{InvokeError, ToolHost, ToolOutput};
use crate::clock::iso;
use crate::store::{MessageQuery, SendMessage, SignalQuery, SignalStatus};

/// Largest report shown by `completion.report`.
const REPORT_CAP: usize = 20_000;

pub fn invoke(host: &ToolHost, pack: &str, entry: &str, input: &Value) -> Result<ToolOutput, InvokeError> {
    match (pack, entry) {
        ("core", "project.stats") => project_stats(host),
        ("core", "messages.conversation") => conversation(host, input),
        ("core", "messages.send") => send(host, input),
        ("core", "coordination.signals") => signals(host, input),
        ("core", "completion.report") => report(host),
        ("core", "file.activity") => activity(host, input, pack, entry, "File activity"),
        ("shell", "shell.activity") => activity(host, input, pack, entry, "Shell activity"),
        ("web", "web.activity") => activity(host, input, pack, entry, "Web activity"),
        _ => Err(InvokeError::UnknownEntry { pack: pack.into(), entry: entry.into() }),
    }
}

fn text(input: &Value, key: &str) -> Option<String> {
    input.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty()).map(str::to_string)
}

fn limit(input: &Value, default: u64, max: u64) -> usize {
    input.get("limit").and_then(Value::as_u64).unwrap_or(default).clamp(1, max) as usize
}

fn metric(label: &str, value: impl Into<Value>) -> Value {
    json!({ "label": label, "value": value.into() })
}

/// `user` or an agent of the project; anything else is refused.
pub fn check_sender(host: &ToolHost, sender: &str) -> Result<(), InvokeError> {
    if sender == "user" || host.project.config.agent(sender).is_some() {
        Ok(())
    } else {
        Err(InvokeError::Rejected(format!("Unknown sender: {sender}")))
    }
}

fn project_stats(host: &ToolHost) -> Result<ToolOutput, InvokeError> {
    let s = host.store.project_stats()?;
    let agents = s.agents.by_status.iter().map(|(k, v)| format!("{v} {k}")).collect::<Vec<_>>().join(", ");
    let agents = if agents.is_empty() { "none".to_string() } else { agents };
    let a = &s.activations;
    let waiting =
        if a.waiting_approval > 0 { format!(", {} waiting for approval", a.waiting_approval) } else { String::new() };
    let counted = format!("{} running{waiting}, {} failed", a.running, a.failed);
    let activations = format!("{} ({counted})", a.total);
    let mut out = String::new();
    let _ = writeln!(out, "Project {} is {}.", s.name, s.status.as_str());
    let _ = writeln!(out, "Agents: {} ({agents})", s.agents.total);
    let _ = writeln!(out, "Messages: {}", s.messages);
    let _ = writeln!(out, "Activations: {activations}");
    let _ = writeln!(out, "Tool calls: {}", s.tool_calls);
    let _ = writeln!(out, "History compactions: {}", s.history_compactions);
    let _ = write!(out, "Events: {}", s.events);
    let metrics = vec![
        metric("Status", s.status.as_str()),
        json!({ "label": "Agents", "value": s.agents.total, "description": agents }),
        metric("Messages", s.messages),
        json!({ "label": "Activations", "value": s.activations.total, "description": counted }),
        metric("Tool calls", s.tool_calls),
        metric("History", s.history_compactions),
        metric("Events", s.events),
    ];
    Ok(ToolOutput::new("project stats", out).with_metadata(json!({ "metrics": metrics, "stats": s })))
}

fn conversation(host: &ToolHost, input: &Value) -> Result<ToolOutput, InvokeError> {
    let limit = limit(input, 40, 200);
    let (Some(a), Some(b)) = (text(input, "agentA"), text(input, "agentB")) else {
        let pairs = host.store.direct_pairs(limit)?;
        let mut out = String::from("Recent direct conversations:\n");
        for p in &pairs {
            let _ = writeln!(out, "- {} <-> {}: {} message(s), last {}", p.a, p.b, p.count, iso(p.last_at));
        }
        if pairs.is_empty() {
            out.push_str("- none\n");
        }
        return Ok(ToolOutput::new("conversations", out.trim_end())
            .with_metadata(json!({ "metrics": [metric("Pairs", pairs.len())], "pairs": pairs })));
    };
    let mut messages = host.store.list_messages(&MessageQuery {
        participant_a: Some(a.clone()),
        participant_b: Some(b.clone()),
        limit: Some(limit),
        ..Default::default()
    })?;
    messages.sort_by_key(|m| m.created_at);
    let mut out = format!("Conversation between {a} and {b}:\n");
    for m in &messages {
        let to = m.recipient.as_deref().unwrap_or("?");
        let _ = writeln!(out, "\n[{}] {} -> {to} ({}) {}\n{}", iso(m.created_at), m.sender, m.priority, m.id, m.body);
    }
    if messages.is_empty() {
        out.push_str("- no messages\n");
    }
    Ok(ToolOutput::new("conversation", out.trim_end())
        .with_metadata(json!({ "metrics": [metric("Messages", messages.len())], "messages": messages })))
}

fn send(host: &ToolHost, input: &Value) -> Result<ToolOutput, InvokeError> {
    let sender = text(input, "sender").unwrap_or_else(|| "user".into());
    check_sender(host, &sender)?;
    let recipient = text(input, "recipient");
    let channel = text(input, "channel");
    let config = &host.project.config;
    // No recipient and no channel: the coordinator if it exists, else the first agent.
    let recipient = match (&recipient, &channel) {
        (None, None) => Some(
            config
                .communication
                .coordinator_agent
                .as_deref()
                .and_then(|id| config.agent(id))
                .or(config.agents.first())
                .map(|a| a.id.clone())
                .unwrap_or_else(|| "user".into()),
        ),
        _ => recipient,
    };
    let body = text(input, "body").ok_or_else(|| InvokeError::Rejected("body is required".into()))?;
    let sent = host.store.send_message(SendMessage {
        sender: sender.clone(),
        recipient: recipient.clone(),
        channel: channel.clone(),
        priority: text(input, "priority"),
        body,
        source_agent: None,
        source_activation: None,
    })?;
    let route = channel.or(recipient).unwrap_or_default();
    Ok(ToolOutput::new("message sent", format!("Message sent: {}\nRoute: {sender} -> {route}", sent.message_id))
        .with_metadata(json!({ "messageId": sent.message_id, "signalIds": sent.signal_ids })))
}

fn signals(host: &ToolHost, input: &Value) -> Result<ToolOutput, InvokeError> {
    let status = match text(input, "status") {
        None => None,
        Some(s) => Some(s.parse::<SignalStatus>().map_err(|e| InvokeError::Rejected(e.to_string()))?),
    };
    let target = text(input, "targetAgent");
    let counts = host.store.signal_counts()?;
    let recent = host.store.list_signals(&SignalQuery {
        target_agent: target.clone(),
        status,
        limit: Some(limit(input, 25, 100)),
        kind: None,
        before_id: None,
    })?;
    let mut out = String::new();
    let by = |m: &std::collections::BTreeMap<String, u64>| {
        m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
    };
    let _ = writeln!(out, "Signals: {} ({})", counts.total, by(&counts.by_status));
    let _ = writeln!(out, "By priority: {}", by(&counts.by_priority));
    let _ = writeln!(out, "\nRecent{}:", target.as_ref().map(|t| format!(" for {t}")).unwrap_or_default());
    for s in &recent {
        let to = s.target_agent.clone().or_else(|| s.target_channel.clone()).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "- {} {} [{}/{}] -> {to} at {}",
            s.id,
            s.kind,
            s.priority,
            s.status.as_str(),
            iso(s.created_at)
        );
    }
    if recent.is_empty() {
        out.push_str("- none\n");
    }
    let mut metrics: Vec<Value> = counts.by_status.iter().map(|(k, v)| metric(&capitalize(k), *v)).collect();
    metrics.extend(counts.by_priority.iter().map(|(k, v)| metric(k, *v)));
    Ok(ToolOutput::new("signals", out.trim_end())
        .with_metadata(json!({ "metrics": metrics, "counts": counts, "signals": recent })))
}

fn report(host: &ToolHost) -> Result<ToolOutput, InvokeError> {
    let project = host.store.project()?;
    let path = host.project.config.root.join("final-report.md");
    let Some(submitted) = project.submitted_report.clone() else {
        return Ok(ToolOutput::new(
            "final report",
            format!("No report submitted yet (project is {}).", project.status.as_str()),
        )
        .with_metadata(json!({ "metrics": [metric("Status", project.status.as_str()), metric("Submitted", false)] })));
    };
    let content = std::fs::read_to_string(&path).unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()));
    let truncated = content.len() > REPORT_CAP;
    let shown: String = if truncated {
        let mut cut = REPORT_CAP;
        while !content.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}\n[truncated]", &content[..cut])
    } else {
        content
    };
    Ok(ToolOutput::new("final report", format!("Report: {submitted}\nStatus: {}\n\n{shown}", project.status.as_str()))
        .with_metadata(json!({
            "metrics": [metric("Status", project.status.as_str()), metric("Submitted", true)],
            "reportPath": submitted, "truncated": truncated,
        })))
}

/// Recent calls of the tools an activity entry lists in its manifest `relatedTools`.
fn activity(host: &ToolHost, input: &Value, pack: &str, entry: &str, title: &str) -> Result<ToolOutput, InvokeError> {
    let project = host.project.snapshot();
    let related = project.registry.pack(pack).and_then(|p| p.webui.iter().find(|e| e.id == entry));
    let tools: Vec<&str> = related.map(|e| e.related_tools.iter().map(String::as_str).collect()).unwrap_or_default();
    let stats = host.store.tool_stats()?;
    let recent = host.store.recent_tool_calls(&tools, limit(input, 20, 100))?;
    let mut out = String::new();
    let mut metrics = Vec::new();
    for tool in &tools {
        let s = stats.iter().find(|s| s.tool == *tool);
        let (calls, failed) = s.map_or((0, 0), |s| (s.call_count, s.failed_count));
        let _ = writeln!(out, "{tool}: {calls} call(s), {failed} failed");
        metrics.push(json!({ "label": tool, "value": calls, "description": format!("{failed} failed") }));
    }
    let _ = writeln!(out, "\nRecent calls:");
    for c in &recent {
        let target = c.target.as_deref().unwrap_or("-");
        let _ = writeln!(out, "- {} {} by {} [{}] {target}", iso(c.started_at), c.tool, c.agent_id, c.status.as_str());
    }
    if recent.is_empty() {
        out.push_str("- none\n");
    }
    Ok(ToolOutput::new(title.to_lowercase(), out.trim_end())
        .with_metadata(json!({ "metrics": metrics, "calls": recent })))
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().collect::<String>() + c.as_str()).unwrap_or_default()
}
