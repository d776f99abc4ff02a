//! The commands that follow a team at work: `activations` (the list), `show` (one
//! activation's timeline), `logs` (the store's events, `-f` to follow them), `history` (an
//! agent's history), and the two that act on a running `suzumio run` from another terminal:
//! `cancel` and `wake`.
//!
//! How `cancel` reaches a controller in another process: the store is the one truth both
//! share. `cancel` ends the agent's running activation in the store (status `cancelled`,
//! "cancelled by the user", its open tool calls closed, an `activation.cancelled` event), the
//! same transaction a P0 interruption makes. The running controller follows the database's
//! event rows ([`crate::store::Store::follow_other_writers`], every 200 ms), sees the event,
//! and stops that activation's loop: the model call is dropped and the runner is told to stop
//! the tool call (`Activations::stop_ended_elsewhere`). With no controller running, the store
//! change is all there is to do. `wake` is a P1 message from the user: the scheduler of a
//! running controller wakes on it at once (same following) and starts an activation if the
//! agent is idle, or hands it over at the next tool boundary if it is at work.

use std::fmt::Write as _;
use std::path::Path;

use super::views::CancelView;
use super::{CliError, Output, first_line, render_table, to_json, unknown_agent};
use crate::clock::iso;
use crate::config::Priority;
use crate::store::{
    ActivationLookup, ActivationOutcome, ActivationQuery, ActivationStatus, ActivationSummary, ActivationTimeline,
    Event, EventQuery, EventRecord, HistoryEntry, StoreError, TimelineItem, TimelineSignal,
};
use crate::support::ToolHost;

/// The error an activation is cancelled with by `suzumio cancel`.
pub const CANCELLED_BY_USER: &str = "cancelled by the user";

/// A wake-up's text when none is given.
pub const WAKE_BODY: &str = "Wake up: check where your work stands and continue.";

fn check_agent(tools: &ToolHost, agent: &str) -> Result<(), CliError> {
    match tools.project.config.agent(agent) {
        Some(_) => Ok(()),
        None => Err(unknown_agent(&tools.project.config, agent)),
    }
}

/// `suzumio activations <dir> [--agent A] [--status S] [--limit N] [--json]`: newest first.
pub fn activations(
    dir: &Path,
    agent: Option<&str>,
    status: Option<ActivationStatus>,
    limit: usize,
    as_json: bool,
) -> Result<Output, CliError> {
    let tools = crate::controller::open_read_only(dir)?;
    if let Some(a) = agent {
        check_agent(&tools, a)?;
    }
    let query = ActivationQuery { agent_id: agent.map(str::to_string), status, limit: Some(limit) };
    let list = tools.store.find_activations(&query)?;
    if as_json {
        return Ok(to_json(&list).into());
    }
    let rows: Vec<[String; 8]> = list
        .iter()
        .map(|a| {
            let outcome = a.error.as_deref().or(a.text.as_deref()).map(|t| first_line(t, 60)).unwrap_or_default();
            [
                a.id.clone(),
                a.agent_id.clone(),
                a.status.as_str().to_string(),
                iso(a.started_at),
                a.duration_ms.map(duration).unwrap_or_else(|| "-".into()),
                match (a.failed_tool_calls, a.rejected_tool_calls) {
                    (0, 0) => a.tool_calls.to_string(),
                    (failed, 0) => format!("{} ({failed} failed)", a.tool_calls),
                    (0, rejected) => format!("{} ({rejected} rejected)", a.tool_calls),
                    (failed, rejected) => format!("{} ({failed} failed, {rejected} rejected)", a.tool_calls),
                },
                a.usage.tokens().to_string(),
                outcome,
            ]
        })
        .collect();
    Ok(render_table(["ACTIVATION", "AGENT", "STATUS", "STARTED", "DURATION", "TOOLS", "TOKENS", "RESULT"], &rows)
        .into())
}

/// `1.2s`, `850ms`, `3m05s`.
fn duration(ms: u64) -> String {
    match ms {
        0..1000 => format!("{ms}ms"),
        1000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

fn lookup(tools: &ToolHost, id: &str) -> Result<String, CliError> {
    tools.store.resolve_activation_id(id).map_err(|e| match e {
        ActivationLookup::Store(e) => e.into(),
        other => CliError::Input(other.to_string()),
    })
}

/// `suzumio show <dir> <activation-id>`: the activation step by step, the same timeline the
/// WebUI's activation page shows (ids may be shortened to any unique prefix, with or without
/// `act_`).
pub fn show(dir: &Path, id: &str, as_json: bool) -> Result<Output, CliError> {
    let tools = crate::controller::open_read_only(dir)?;
    let id = lookup(&tools, id)?;
    let unknown = || CliError::Input(format!("Unknown activation: {id}"));
    let timeline = tools.store.activation_timeline(&id)?.ok_or_else(unknown)?;
    if as_json {
        return Ok(to_json(&timeline).into());
    }
    let summary = tools.store.activation_summary(&id)?.ok_or_else(unknown)?;
    Ok(render_timeline(&summary, &timeline).into())
}

/// The text form of a timeline, headed by the activation's counts.
pub fn render_timeline(a: &ActivationSummary, t: &ActivationTimeline) -> String {
    let mut out = String::new();
    let took = a.duration_ms.map(|ms| format!(" in {}", duration(ms))).unwrap_or_default();
    let _ = writeln!(out, "activation {} of {}: {}{took}", a.id, a.agent_id, a.status);
    let _ = writeln!(
        out,
        "  started {}{}",
        iso(a.started_at),
        a.ended_at.map(|e| format!(", ended {}", iso(e))).unwrap_or_default()
    );
    let cost = if a.usage.cost > 0.0 { format!(", cost {:.4}", a.usage.cost) } else { String::new() };
    let _ = writeln!(
        out,
        "  {} model call(s), tokens {} (input {}, cached {}, output {}){cost}; {} tool call(s){}{}",
        a.usage.model_calls,
        a.usage.tokens(),
        a.usage.input_tokens,
        a.usage.cached_input_tokens,
        a.usage.output_tokens,
        a.tool_calls,
        if a.failed_tool_calls > 0 { format!(", {} failed", a.failed_tool_calls) } else { String::new() },
        if a.rejected_tool_calls > 0 { format!(", {} rejected", a.rejected_tool_calls) } else { String::new() }
    );
    for (n, item) in t.items.iter().enumerate() {
        let _ = write!(out, "{:>3}. ", n + 1);
        match item {
            TimelineItem::Prompt { at, delivery, text, signals } => {
                let _ = writeln!(
                    out,
                    "prompt at {at} ({delivery}, {} chars): {}",
                    text.chars().count(),
                    first_line(text, 120)
                );
                for s in signals {
                    let _ = writeln!(out, "       {}", signal_line(s));
                }
            }
            TimelineItem::ModelTurn { at, model, text, tool_calls, usage, .. } => {
                let cost = if usage.cost > 0.0 { format!(", cost {:.4}", usage.cost) } else { String::new() };
                let calls = if *tool_calls == 0 { String::new() } else { format!(" → {tool_calls} tool call(s)") };
                let _ = writeln!(
                    out,
                    "model {model} at {at}: {} in / {} out{cost}{calls}",
                    usage.input_tokens, usage.output_tokens
                );
                for line in text.trim().lines() {
                    let _ = writeln!(out, "       | {line}");
                }
            }
            TimelineItem::ToolCall(call) => {
                let took = call.duration_ms.map(|ms| format!(" ({})", duration(ms))).unwrap_or_default();
                let kind = call.error_kind.as_deref().map(|k| format!(" [{k}]")).unwrap_or_default();
                let _ = writeln!(out, "tool {}: {}{kind}{took}", call.tool, call.status.as_str());
                let _ = writeln!(out, "       input:  {}", clip(&call.input.to_string(), 400));
                if let Some(error) = &call.error {
                    let _ = writeln!(out, "       error:  {}", clip(error, 400));
                } else if let Some(output) = &call.output {
                    let text = output.get("output").and_then(|o| o.as_str()).map(str::to_string);
                    let _ = writeln!(out, "       output: {}", clip(&text.unwrap_or_else(|| output.to_string()), 400));
                }
            }
            TimelineItem::Signals { at, delivery, signals } => {
                let _ = writeln!(out, "signals at {at} ({delivery}):");
                for s in signals {
                    let _ = writeln!(out, "       {}", signal_line(s));
                }
            }
            TimelineItem::Compaction { at, reason, archived_messages, kept_messages, .. } => {
                let _ = writeln!(
                    out,
                    "compaction at {at} ({reason}): {archived_messages} message(s) summarized, {kept_messages} kept"
                );
            }
            TimelineItem::Approval { at, approval_id, tool, status, resolved_by, feedback, .. } => {
                let by = resolved_by.as_deref().map(|b| format!(" by {b}")).unwrap_or_default();
                let feedback = feedback.as_deref().map(|f| format!(": {f}")).unwrap_or_default();
                let _ = writeln!(out, "approval {approval_id} of {tool} at {at}: {status}{by}{feedback}");
            }
            TimelineItem::ModelFallback { at, from, to, cause, status, error } => {
                let why = crate::store::fallback_cause(cause, *status);
                let _ = writeln!(out, "fallback at {at}: model {from} failed ({why}), continued with {to}");
                let _ = writeln!(out, "       error:  {}", clip(error, 400));
            }
            TimelineItem::Ended { at, status, error } => {
                let why = error.as_deref().map(|e| format!(": {}", first_line(e, 200))).unwrap_or_default();
                let _ = writeln!(out, "ended at {at}: {status}{why}");
            }
        }
    }
    if a.error.is_none()
        && let Some(text) = &a.text
    {
        let _ = writeln!(out, "result: {}", first_line(text, 200));
    }
    out
}

fn signal_line(s: &TimelineSignal) -> String {
    let from = s.sender.as_deref().or(s.source_agent.as_deref()).map(|f| format!(" from {f}")).unwrap_or_default();
    let body = s.body.as_deref().map(|b| first_line(b, 120)).unwrap_or_default();
    format!("{} {} {}{from}: {body}", s.id, s.priority, s.kind)
}

/// One line, escaped newlines, cut at `max` characters.
fn clip(text: &str, max: usize) -> String {
    let flat = text.replace('\n', "\\n");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max - 1).collect();
    format!("{cut}…")
}

/// The filters of `logs`, checked against the project.
pub struct LogFilter {
    pub agent: Option<String>,
    pub kind: Option<String>,
    pub limit: usize,
    pub json: bool,
}

fn event_query(tools: &ToolHost, filter: &LogFilter) -> Result<EventQuery, CliError> {
    if let Some(a) = &filter.agent {
        check_agent(tools, a)?;
    }
    Ok(EventQuery {
        agent_id: filter.agent.clone(),
        kind: filter.kind.clone(),
        after_id: None,
        limit: Some(filter.limit),
    })
}

/// `suzumio logs <dir> [--agent A] [--type T] [--limit N] [--json]`: the newest events, oldest
/// first; `--json` prints one event object per line (JSON Lines).
pub fn logs(dir: &Path, filter: &LogFilter) -> Result<Output, CliError> {
    let tools = crate::controller::open_read_only(dir)?;
    let query = event_query(&tools, filter)?;
    let mut out = String::new();
    for event in tools.store.list_events(&query)? {
        out.push_str(&log_line(&event, filter.json));
        out.push('\n');
    }
    Ok(out.into())
}

/// `suzumio logs -f`: the newest events, then every new one as it is committed — by any
/// process (the store is a SQLite file: this one reads it) — until `stop` resolves.
pub async fn follow_logs(
    dir: &Path,
    filter: &LogFilter,
    mut emit: impl FnMut(&str),
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), CliError> {
    let tools = crate::controller::open_read_only(dir)?;
    let query = event_query(&tools, filter)?;
    let mut last = tools.store.last_event_id()?;
    for event in tools.store.list_events(&query)? {
        emit(&log_line(&event, filter.json));
    }
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tokio::time::sleep(crate::store::FOLLOW_INTERVAL) => {}
        }
        // Read the new rows in id order, then filter: `last` moves past the ones left out too.
        let new = tools.store.events_after(last, 1000)?;
        if let Some(newest) = new.last() {
            last = newest.id;
        }
        for event in new.iter().filter(|e| query.matches(e)) {
            emit(&log_line(event, filter.json));
        }
    }
}

fn log_line(event: &EventRecord, as_json: bool) -> String {
    if as_json {
        return serde_json::to_string(event).unwrap_or_default();
    }
    format!("{} #{} {} {}", iso(event.created_at), event.id, event.kind(), describe(&event.event))
}

/// What an event says, in a few words.
fn describe(event: &Event) -> String {
    let agent = event.agent_id().unwrap_or("-");
    match event {
        Event::ActivationStarted { activation_id, signal_ids, .. } => {
            format!("{agent} {activation_id} ({} signal(s))", signal_ids.len())
        }
        Event::ActivationCompleted(e) | Event::ActivationFailed(e) | Event::ActivationCancelled(e) => {
            let error = e.error.as_deref().map(|x| format!(": {}", first_line(x, 160))).unwrap_or_default();
            format!("{agent} {}{error}", e.activation_id)
        }
        Event::ActivationTurn { activation_id, text, tool_calls, .. } => {
            let calls = if tool_calls.is_empty() { String::new() } else { format!(" → {}", tool_calls.join(", ")) };
            format!("{agent} {activation_id} \"{}\"{calls}", first_line(text, 120))
        }
        Event::ToolCallStarted { tool, tool_call_id, .. } => format!("{agent} {tool} {tool_call_id}"),
        Event::ToolCallFinished { tool, tool_call_id, status, error, .. } => {
            let error = error.as_deref().map(|x| format!(": {}", first_line(x, 160))).unwrap_or_default();
            format!("{agent} {tool} {tool_call_id} {status}{error}")
        }
        Event::ToolCallRejected { tool, reason, .. } => format!("{agent} {tool} rejected: {}", first_line(reason, 160)),
        Event::ToolActivated { tools, .. } => format!("{agent} activated {}", tools.join(", ")),
        Event::MessageCreated { sender, recipient, channel, priority, message_id } => {
            let to = recipient.as_deref().or(channel.as_deref()).unwrap_or("-");
            format!("{sender} -> {to} {priority} {message_id}")
        }
        Event::SignalCreated { signal_id, kind, target_agent, target_channel, priority, status, .. } => {
            let to = target_agent.as_deref().or(target_channel.as_deref()).unwrap_or("-");
            format!("{signal_id} {kind} -> {to} {priority} {status}")
        }
        Event::HistoryAppended { kind, activation_id, .. } => {
            format!("{agent} {kind} {}", activation_id.as_deref().unwrap_or("-"))
        }
        Event::ModelFallback { activation_id, from, to, cause, status, .. } => {
            format!("{agent} {activation_id} {from} -> {to}: {}", crate::store::fallback_cause(cause, *status))
        }
        Event::ProjectStatus { status, previous } => format!("{previous} -> {status}"),
        Event::AgentStatus { status, previous, .. } => format!("{agent} {previous} -> {status}"),
        Event::AgentPaused { reason, .. } | Event::AgentResumed { reason, .. } => format!("{agent}: {reason}"),
        other => {
            let data = other.to_parts().1;
            format!("{agent} {}", first_line(&data.to_string(), 160))
        }
    }
}

/// `suzumio history <dir> <agent> [--limit N] [--json]`: an agent's history, oldest first.
pub fn history(dir: &Path, agent: &str, limit: usize, as_json: bool) -> Result<Output, CliError> {
    let tools = crate::controller::open_read_only(dir)?;
    check_agent(&tools, agent)?;
    let rows = tools.store.history(agent, limit)?;
    if as_json {
        return Ok(to_json(&rows).into());
    }
    let mut out = String::new();
    for row in &rows {
        let what = match &row.entry {
            HistoryEntry::ActivationPrompt { text, .. } => first_line(text, 120),
            HistoryEntry::AssistantOutput { text, tool_calls, .. } => {
                let calls: Vec<&str> = tool_calls.iter().map(|c| c.name.as_str()).collect();
                let calls = if calls.is_empty() { String::new() } else { format!(" → {}", calls.join(", ")) };
                format!("\"{}\"{calls}", first_line(text, 120))
            }
            HistoryEntry::ToolResult { name, content, is_error, .. } => {
                format!("{name}{}: {}", if *is_error { " (error)" } else { "" }, first_line(content, 120))
            }
            HistoryEntry::Signals { delivery, signal_ids } => format!("{delivery}: {}", signal_ids.join(", ")),
            HistoryEntry::HistoryCompaction { reason, archived_messages, .. } => {
                format!("{reason}: {archived_messages} message(s) summarized")
            }
            HistoryEntry::Unrecognized { kind, .. } => kind.clone(),
        };
        let activation = row.activation_id.as_deref().unwrap_or("-");
        let _ = writeln!(out, "{} {activation} {}: {what}", iso(row.created_at), row.kind());
    }
    Ok(out.into())
}

/// `suzumio cancel <dir> <agent>`: cancel the agent's running activation (see the module
/// header for how a controller in another process learns of it).
pub fn cancel(dir: &Path, agent: &str, as_json: bool) -> Result<Output, CliError> {
    let tools = crate::controller::open(dir)?;
    check_agent(&tools, agent)?;
    let record = tools.store.agent(agent)?.ok_or_else(|| unknown_agent(&tools.project.config, agent))?;
    let cancelled = match record.active_activation_id {
        None => None,
        Some(id) => {
            match tools.store.finish_activation(&id, ActivationOutcome::Cancelled, None, Some(CANCELLED_BY_USER)) {
                Ok(a) => Some(a.id),
                // It ended on its own between the read and the write.
                Err(StoreError::ActivationNotRunning { .. }) => None,
                Err(e) => return Err(e.into()),
            }
        }
    };
    if as_json {
        let view = CancelView { agent_id: agent.to_string(), cancelled: cancelled.is_some(), activation_id: cancelled };
        return Ok(to_json(&view).into());
    }
    Ok(match cancelled {
        Some(id) => format!("{agent}: cancelled {id} (a running `suzumio run` stops it within a second)\n"),
        None => format!("{agent}: no running activation\n"),
    }
    .into())
}

/// `suzumio wake <dir> <agent> [body]`: a P1 message from the user, which starts an activation
/// at once when the agent is idle (and is handed over at its next tool call when it is not).
pub fn wake(dir: &Path, agent: &str, body: Option<&str>, as_json: bool) -> Result<Output, CliError> {
    let tools = crate::controller::open(dir)?;
    check_agent(&tools, agent)?;
    let sent = tools.store.send_message(crate::store::SendMessage {
        sender: "user".into(),
        recipient: Some(agent.to_string()),
        channel: None,
        priority: Some(Priority::P1.to_string()),
        body: body.filter(|b| !b.trim().is_empty()).unwrap_or(WAKE_BODY).to_string(),
        source_agent: None,
        source_activation: None,
    })?;
    if as_json {
        return Ok(to_json(&sent).into());
    }
    let mut out = format!("{agent}: woken by {} ({})\n", sent.message_id, sent.signal_ids.join(", "));
    let project = tools.store.project()?;
    if project.status != crate::store::ProjectStatus::Running {
        let _ = writeln!(out, "note: project {} is {}: nothing runs until it is started", project.name, project.status);
    }
    if let Some(pause) = tools.store.agent(agent)?.and_then(|a| a.paused) {
        let _ = writeln!(out, "note: {agent} is paused ({}): it runs after `suzumio resume`", pause.reason);
    }
    Ok(out.into())
}
