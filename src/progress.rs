//! What `suzumio run` shows while it works: from store events, one live line per agent (status,
//! current tool, counts) drawn by indicatif on stderr when it is a terminal, and plain log lines
//! for the caller to print otherwise; plus [`LogWriter`], through which tracing writes so that
//! log lines land above the live lines instead of through them.
//!
//! Each event maps to at most one plain line ([`Progress::apply`]): activations, tool calls (a
//! failed one with its reason), the model's text replies (first line), a fallback to the next
//! model with its cause, messages, budget pauses and resumes. An event that makes an agent wait for something (an approval) sets the
//! agent's `waiting` note, shown on its live line until the activation goes on; approvals add
//! their arms next to the pause's.

use std::collections::BTreeMap;
use std::io::{self, Write};

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use tracing_subscriber::fmt::MakeWriter;

use crate::store::{Event, EventRecord};

#[derive(Clone, Debug, Default)]
struct AgentLine {
    status: String,
    tool: Option<String>,
    /// What the agent waits for (a budget pause, an approval), shown after its status.
    waiting: Option<String>,
    activations: u64,
    tool_calls: u64,
    failed: u64,
    /// Calls refused (unknown tool, not allowed, not loaded, invalid input).
    rejected: u64,
}

/// The state behind the live view.
pub struct Progress {
    agents: BTreeMap<String, AgentLine>,
}

impl Progress {
    pub fn new(agents: &[String]) -> Progress {
        let lines =
            agents.iter().map(|a| (a.clone(), AgentLine { status: "quiet".into(), ..Default::default() })).collect();
        Progress { agents: lines }
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
            Event::ToolCallRejected { tool, reason, .. } => {
                if let Some(l) = line {
                    l.tool_calls += 1;
                    l.rejected += 1;
                }
                Some(format!("{agent}: {tool} rejected: {}", first_line_of(reason)))
            }
            Event::ToolCallFinished { tool, status, error, error_kind, .. } => {
                let rejected = error_kind.as_deref() == Some("rejected");
                if let Some(l) = line {
                    l.tool = None;
                    if rejected {
                        l.rejected += 1;
                    }
                }
                if rejected {
                    return Some(format!(
                        "{agent}: {tool} rejected: {}",
                        first_line_of(error.as_deref().unwrap_or(""))
                    ));
                }
                // The reason in one line: its first line, cut to fit a terminal.
                let why = error.as_deref().and_then(|e| e.lines().find(|l| !l.trim().is_empty())).map(|first| {
                    let first = first.trim();
                    let cut: String = first.chars().take(160).collect();
                    if cut.len() < first.len() { format!(": {cut}…") } else { format!(": {cut}") }
                });
                // A pack's error carries a stack: where it was thrown, in the pack's files.
                let place = error
                    .as_deref()
                    .and_then(crate::js::check::first_location)
                    .map(|(file, line, col)| format!(" (at {file}:{line}:{col})"))
                    .unwrap_or_default();
                (status == "failed").then(|| format!("{agent}: {tool} failed{}{place}", why.unwrap_or_default()))
            }
            Event::MessageCreated { sender, recipient, channel, priority, .. } => {
                let to = recipient.as_deref().or(channel.as_deref()).unwrap_or("-");
                Some(format!("message {sender} -> {to} ({priority})"))
            }
            Event::ProjectStatus { status, .. } => Some(format!("project is {status}")),
            Event::ActivationTurn { text, .. } => {
                (!text.is_empty()).then(|| format!("{agent}: \"{}\"", cut(text, REPLY_CHARS)))
            }
            Event::ModelFallback { from, to, cause, status, error, .. } => {
                let why = crate::store::fallback_cause(cause, *status);
                Some(format!("{agent}: model {from} failed ({why}), trying {to}: {}", cut(error, REPLY_CHARS)))
            }
            Event::AgentPaused { reason, .. } => {
                if let Some(l) = line {
                    l.waiting = Some("paused".into());
                }
                Some(format!("{agent}: paused: {reason}"))
            }
            Event::AgentResumed { reason, .. } => {
                if let Some(l) = line {
                    l.waiting = None;
                }
                Some(format!("{agent}: resumed: {reason}"))
            }
            Event::ApprovalRequested { approval_id, tool, reason, .. } => {
                if let Some(l) = line {
                    l.status = "waiting approval".into();
                }
                Some(format!("{agent}: waiting for approval of {tool} (#{approval_id}): {reason}"))
            }
            Event::ApprovalResolved { approval_id, tool, status, resolved_by, feedback, .. } => {
                if let Some(l) = line
                    && l.status == "waiting approval"
                {
                    l.status = "running".into();
                }
                let feedback = feedback.as_deref().map(|f| format!(": {f}")).unwrap_or_default();
                Some(format!("{agent}: {tool} {status} by {resolved_by} (#{approval_id}){feedback}"))
            }
            Event::PermissionModeChanged { mode, previous, live, by, .. } => {
                let how = if *live { "switched" } else { "back to its config's" };
                Some(format!("{agent}: permission mode {how} {mode} (was {previous}) by {by}"))
            }
            Event::PermissionRuleAdded { rule_id, agent_id, tool, decision, by }
            | Event::PermissionRuleRemoved { rule_id, agent_id, tool, decision, by } => {
                let done = if matches!(event.event, Event::PermissionRuleAdded { .. }) { "added" } else { "removed" };
                let whose = agent_id.as_deref().unwrap_or("every agent");
                Some(format!("permissions: live rule {rule_id} ({tool} {decision} for {whose}) {done} by {by}"))
            }
            Event::QuestionAsked { question_id, question, choices, .. } => {
                if let Some(l) = line {
                    l.status = "waiting answer".into();
                }
                let choices = if choices.is_empty() { String::new() } else { format!(" [{}]", choices.join(" / ")) };
                Some(format!("{agent}: asks (#{question_id}): {question}{choices}"))
            }
            Event::QuestionAnswered { question_id, status, answered_by, answer, .. } => {
                if let Some(l) = line
                    && l.status == "waiting answer"
                {
                    l.status = "running".into();
                }
                let answer = answer.as_deref().map(|a| format!(": {a}")).unwrap_or_default();
                Some(format!("{agent}: question #{question_id} {status} by {answered_by}{answer}"))
            }
            Event::PermissionDecided { tool, behavior, source, .. } if behavior != "ask" => {
                Some(format!("{agent}: {tool} {behavior} by {source}"))
            }
            Event::ToolsSwitched { enabled, group, tools, by, .. } => {
                let word = if *enabled { "on" } else { "off" };
                let what = match group {
                    Some(g) => format!("group:{g} ({})", tools.join(", ")),
                    None => tools.join(", "),
                };
                Some(format!("{agent}: {what} switched {word} by {by}"))
            }
            _ => None,
        }
    }

    /// The live line of one agent.
    pub fn line(&self, id: &str) -> Option<String> {
        let l = self.agents.get(id)?;
        let tool = l.tool.as_deref().map(|t| format!(" · {t}")).unwrap_or_default();
        let status = match &l.waiting {
            Some(w) => format!("{} ({w})", l.status),
            None => l.status.clone(),
        };
        Some(format!(
            "{id:<16} {status:<8}{tool:<28} {} activation(s), {} tool call(s){}{}",
            l.activations,
            l.tool_calls,
            if l.failed > 0 { format!(", {} failed", l.failed) } else { String::new() },
            if l.rejected > 0 { format!(", {} rejected", l.rejected) } else { String::new() }
        ))
    }
}

/// A reason in one line: its first non-empty line, cut to fit a terminal.
fn first_line_of(text: &str) -> String {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    cut(first, 160)
}

/// How much of a model's reply a plain line shows.
const REPLY_CHARS: usize = 120;

/// `text` cut to `max` characters, with an ellipsis when cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let kept: String = text.chars().take(max - 1).collect();
    format!("{}…", kept.trim_end())
}

/// The live view of a run: [`Progress`] plus one indicatif line per agent on `terminal`.
/// indicatif hides the lines by itself when stderr is not a terminal.
pub struct LiveView {
    progress: Progress,
    bars: BTreeMap<String, ProgressBar>,
    plain: bool,
}

impl LiveView {
    /// `plain`: also hand back a log line per event (for a stdout that is not the terminal the
    /// live lines are on, or when they are hidden).
    pub fn new(terminal: &MultiProgress, agents: &[String], plain: bool) -> LiveView {
        let progress = Progress::new(agents);
        let style = ProgressStyle::with_template("{msg}").unwrap_or_else(|_| ProgressStyle::default_spinner());
        let bars = agents
            .iter()
            .map(|id| {
                let bar = terminal.add(ProgressBar::new_spinner().with_style(style.clone()));
                bar.set_message(progress.line(id).unwrap_or_default());
                (id.clone(), bar)
            })
            .collect();
        LiveView { progress, bars, plain }
    }

    /// Fold one event in and redraw its agent's line; returns the plain log line to print, if
    /// plain lines were asked for and the event is worth one.
    pub fn show(&mut self, event: &EventRecord) -> Option<String> {
        let line = self.progress.apply(event);
        let agent = event.event.agent_id().unwrap_or("");
        if let (Some(bar), Some(text)) = (self.bars.get(agent), self.progress.line(agent)) {
            bar.set_message(text);
            // Events are rare and each should be seen: skip indicatif's rate limit.
            bar.force_draw();
        }
        line.filter(|_| self.plain)
    }
}

impl Drop for LiveView {
    /// Leave the last state on screen: indicatif clears a line whose bar is dropped unfinished.
    fn drop(&mut self) {
        for bar in self.bars.values() {
            bar.finish();
        }
    }
}

/// Where tracing writes: stderr, with the live lines lifted out of the way for each write (the
/// formatter writes one event per `write_all`).
#[derive(Clone)]
pub struct LogWriter {
    terminal: MultiProgress,
}

impl LogWriter {
    pub fn new(terminal: &MultiProgress) -> LogWriter {
        LogWriter { terminal: terminal.clone() }
    }
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.terminal.suspend(|| io::stderr().write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.terminal.suspend(|| io::stderr().write_all(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr().flush()
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> LogWriter {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use indicatif::ProgressDrawTarget;
    use serde_json::json;

    use super::*;

    fn event(kind: &str, data: serde_json::Value) -> EventRecord {
        let event = Event::from_parts(kind, data);
        assert!(!matches!(event, Event::Unrecognized { .. }), "{kind}: not a whole event");
        EventRecord { id: 0, event, created_at: chrono::DateTime::UNIX_EPOCH }
    }

    #[test]
    fn each_agent_line_follows_its_events_and_plain_lines_are_handed_back() {
        let terminal = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
        let mut view = LiveView::new(&terminal, &["dev".into(), "pm".into()], true);
        let events = [
            event("activation.started", json!({"agentId": "dev", "activationId": "act_1", "signalIds": []})),
            event(
                "tool_call.started",
                json!({"toolCallId": "tc_1", "activationId": "act_1", "agentId": "dev", "tool": "shell.exec", "toolpackId": "shell"}),
            ),
            event(
                "tool_call.finished",
                json!({"toolCallId": "tc_1", "activationId": "act_1", "agentId": "dev", "tool": "shell.exec",
                       "status": "completed", "error": null, "errorKind": null}),
            ),
            event(
                "activation.failed",
                json!({"agentId": "dev", "activationId": "act_1", "status": "failed", "error": "boom"}),
            ),
        ];
        let plain: Vec<Option<String>> = events.iter().map(|e| view.show(e)).collect();
        assert_eq!(
            plain,
            [
                Some("dev: activation act_1 started".to_string()),
                Some("dev: shell.exec".to_string()),
                None,
                Some("dev: activation act_1 failed: boom".to_string()),
            ]
        );
        let message = |id: &str| view.bars[id].message().split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(message("dev"), "dev failed 1 activation(s), 1 tool call(s), 1 failed");
        assert_eq!(message("pm"), "pm quiet 0 activation(s), 0 tool call(s)");
    }

    /// Regression: `run` printed `writer: file.write failed` and not why.
    #[test]
    fn a_failed_tool_line_says_why_in_one_line() {
        let terminal = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
        let mut view = LiveView::new(&terminal, &["dev".into()], true);
        let failed = event(
            "tool_call.finished",
            json!({"toolCallId": "tc_1", "activationId": "act_1", "agentId": "dev", "tool": "file.write",
                   "status": "failed", "error": "\nWrite path must be under /workspace: /etc/x\nmore detail", "errorKind": "failed"}),
        );
        assert_eq!(
            view.show(&failed).as_deref(),
            Some("dev: file.write failed: Write path must be under /workspace: /etc/x")
        );
    }

    /// Regression: a text-only model reply showed only "started/completed".
    #[test]
    fn a_model_reply_shows_its_first_line_and_a_pause_stays_on_the_live_line() {
        let terminal = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
        let mut view = LiveView::new(&terminal, &["dev".into()], true);
        let long = "x".repeat(300);
        let turn = |text: &str| {
            event(
                "activation.turn",
                json!({"activationId": "act_1", "agentId": "dev", "model": "m", "text": text, "toolCalls": []}),
            )
        };
        assert_eq!(view.show(&turn("The report is done.")).as_deref(), Some("dev: \"The report is done.\""));
        let shown = view.show(&turn(&long)).unwrap();
        assert_eq!(shown.chars().count(), "dev: \"\"".len() + REPLY_CHARS, "{shown}");
        assert!(shown.ends_with("…\""), "{shown}");
        assert_eq!(view.show(&turn("")), None, "a turn with only tool calls shows its tools instead");
        let paused = event(
            "agent.paused",
            json!({"agentId": "dev", "reason": "maxTokensPerDay 100 reached", "limit": "maxTokensPerDay", "until": null}),
        );
        assert_eq!(view.show(&paused).as_deref(), Some("dev: paused: maxTokensPerDay 100 reached"));
        assert!(view.bars["dev"].message().contains("quiet (paused)"), "{}", view.bars["dev"].message());
        view.show(&event("agent.resumed", json!({"agentId": "dev", "reason": "resumed by the user"})));
        assert!(!view.bars["dev"].message().contains("paused"), "{}", view.bars["dev"].message());
    }

    /// Regression: a model-list fallback left no trace in `run`'s lines.
    #[test]
    fn a_fallback_line_says_which_model_failed_why_and_which_goes_on() {
        let terminal = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
        let mut view = LiveView::new(&terminal, &["dev".into()], true);
        let fallback = event(
            "model.fallback",
            json!({"activationId": "act_1", "agentId": "dev", "from": "fast (m1)", "to": "slow (m2)",
                   "cause": "http_error", "status": 500, "error": "provider `p` (openai): HTTP 500: down"}),
        );
        assert_eq!(
            view.show(&fallback).as_deref(),
            Some("dev: model fast (m1) failed (HTTP 500), trying slow (m2): provider `p` (openai): HTTP 500: down")
        );
    }

    #[test]
    fn approvals_show_as_they_happen() {
        let terminal = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
        let mut view = LiveView::new(&terminal, &["writer".into()], true);
        let asked = event(
            "approval.requested",
            json!({"approvalId": "apr_1", "agentId": "writer", "activationId": "act_1", "tool": "file.delete",
                   "reason": "file.delete is marked requiresApproval", "risk": "medium", "expiresAt": "2026-01-02T00:00:00.000Z"}),
        );
        assert_eq!(
            view.show(&asked).as_deref(),
            Some("writer: waiting for approval of file.delete (#apr_1): file.delete is marked requiresApproval")
        );
        let message = |view: &LiveView| view.bars["writer"].message().split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(message(&view).starts_with("writer waiting approval"), "{}", message(&view));
        let denied = event(
            "approval.resolved",
            json!({"approvalId": "apr_1", "agentId": "writer", "activationId": "act_1", "tool": "file.delete",
                   "status": "denied", "resolvedBy": "cli (alice)", "feedback": "keep it", "remember": null}),
        );
        assert_eq!(view.show(&denied).as_deref(), Some("writer: file.delete denied by cli (alice) (#apr_1): keep it"));
        assert!(message(&view).starts_with("writer running"), "{}", message(&view));
    }

    #[test]
    fn tool_switches_say_who_switched_what() {
        let terminal = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
        let mut view = LiveView::new(&terminal, &["writer".into()], true);
        let off = event(
            "tools.switched",
            json!({"agentId": "writer", "enabled": false, "group": "web", "tools": ["web.fetch"], "by": "cli (alice)"}),
        );
        assert_eq!(view.show(&off).as_deref(), Some("writer: group:web (web.fetch) switched off by cli (alice)"));
        let on = event(
            "tools.switched",
            json!({"agentId": "writer", "enabled": true, "group": null, "tools": ["web.fetch"], "by": "webui"}),
        );
        assert_eq!(view.show(&on).as_deref(), Some("writer: web.fetch switched on by webui"));
    }

    /// Regression: a call of a tool the agent may not use (or that does not exist) left no
    /// line: the model was told, the person watching was not.
    #[test]
    fn a_rejected_call_says_why_and_is_counted_on_the_live_line() {
        let terminal = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
        let mut view = LiveView::new(&terminal, &["pm".into()], true);
        let rejected = event(
            "tool_call.rejected",
            json!({"activationId": "act_1", "agentId": "pm", "tool": "notes.add", "callId": "call_1",
                   "reason": "Tool not allowed for pm: notes.add"}),
        );
        assert_eq!(view.show(&rejected).as_deref(), Some("pm: notes.add rejected: Tool not allowed for pm: notes.add"));
        view.show(&event(
            "tool_call.started",
            json!({"toolCallId": "tc_1", "activationId": "act_1", "agentId": "pm", "tool": "file.write", "toolpackId": "core"}),
        ));
        let invalid = event(
            "tool_call.finished",
            json!({"toolCallId": "tc_1", "activationId": "act_1", "agentId": "pm", "tool": "file.write",
                   "status": "failed", "error": "Invalid input for file.write: /path: is required", "errorKind": "rejected"}),
        );
        assert_eq!(
            view.show(&invalid).as_deref(),
            Some("pm: file.write rejected: Invalid input for file.write: /path: is required")
        );
        let message = view.bars["pm"].message().split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(message, "pm quiet 0 activation(s), 2 tool call(s), 2 rejected");
    }

    #[test]
    fn a_failed_pack_tool_line_says_where_it_threw() {
        let terminal = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
        let mut view = LiveView::new(&terminal, &["dev".into()], true);
        let failed = event(
            "tool_call.finished",
            json!({"toolCallId": "tc_1", "activationId": "act_1", "agentId": "dev", "tool": "notes.add",
                   "status": "failed", "errorKind": "failed",
                   "error": "toolpack notes, tool notes.add: boom\n    at add (toolpacks/notes/runner.mjs:7:28)"}),
        );
        assert_eq!(
            view.show(&failed).as_deref(),
            Some("dev: notes.add failed: toolpack notes, tool notes.add: boom (at toolpacks/notes/runner.mjs:7:28)")
        );
    }

    #[test]
    fn without_plain_output_no_line_is_handed_back() {
        let terminal = MultiProgress::with_draw_target(ProgressDrawTarget::hidden());
        let mut view = LiveView::new(&terminal, &["dev".into()], false);
        assert_eq!(
            view.show(&event("activation.started", json!({"agentId": "dev", "activationId": "a", "signalIds": []}))),
            None
        );
        assert!(view.bars["dev"].message().contains("running"));
    }
}
