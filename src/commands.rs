//! What each CLI command does. Commands load the project, compute, and return their output as
//! text (or JSON text) plus warnings; `main.rs` prints and picks the exit code.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;

use crate::config::load::ProcessEnv;
use crate::config::{Diagnostic, Diagnostics, InvalidInput};
use crate::project::Project;

pub struct Output {
    pub stdout: String,
    pub warnings: Vec<Diagnostic>,
}

fn invalid(message: String) -> InvalidInput {
    let mut d = Diagnostics::default();
    d.error(None, "", message);
    InvalidInput(d)
}

/// `suzumio check <dir>`.
pub fn check(dir: &Path) -> Result<Output, InvalidInput> {
    let project = Project::load(dir, &ProcessEnv)?;
    let c = &project.config;
    let r = &project.registry;
    let mut out = String::new();
    let _ = writeln!(out, "project {}: {}", c.name, first_line(&c.task, 100));
    let _ = writeln!(out, "toolpacks:");
    for pack in r.packs() {
        let webui = if pack.webui.is_empty() {
            String::new()
        } else {
            format!(", {} WebUI {}", pack.webui.len(), plural(pack.webui.len(), "entry", "entries"))
        };
        let _ = writeln!(
            out,
            "  {} ({}, {} {}{webui})",
            pack.id,
            pack.kind_name(),
            pack.tools.len(),
            plural(pack.tools.len(), "tool", "tools")
        );
    }
    for (agent, set) in c.agents.iter().zip(project.toolsets()) {
        let _ =
            writeln!(out, "agent {} ({}, role {}, model {}):", agent.id, agent.display_name, agent.role, agent.model);
        let _ = writeln!(out, "  allowed tools ({}): {}", set.tools.len(), list_or_none(&set.tools));
        let _ = writeln!(out, "  mounted toolpacks: {}", list_or_none(&set.mounted_packs));
    }
    let tools = r.tools().count();
    let _ = writeln!(
        out,
        "ok: {} {}, {} {}, {tools} {}",
        c.agents.len(),
        plural(c.agents.len(), "agent", "agents"),
        r.packs().len(),
        plural(r.packs().len(), "toolpack", "toolpacks"),
        plural(tools, "tool", "tools")
    );
    Ok(Output { stdout: out, warnings: project.warnings.warnings })
}

/// `suzumio tools <dir> [--agent ID] [--json]`.
pub fn tools(dir: &Path, agent: Option<&str>, as_json: bool) -> Result<Output, InvalidInput> {
    let project = Project::load(dir, &ProcessEnv)?;
    let c = &project.config;
    if let Some(id) = agent
        && c.agent(id).is_none()
    {
        let known: Vec<&str> = c.agents.iter().map(|a| a.id.as_str()).collect();
        return Err(invalid(format!("Unknown agent: {id} (agents: {})", known.join(", "))));
    }
    let rows: Vec<_> = project
        .registry
        .tools()
        .map(|(pack, tool)| {
            let allowed: Vec<&str> =
                c.agents.iter().filter(|a| a.tools.allows(&tool.name)).map(|a| a.id.as_str()).collect();
            (pack, tool, allowed)
        })
        .filter(|(_, _, allowed)| agent.is_none_or(|id| allowed.contains(&id)))
        .collect();
    let stdout = if as_json {
        let items: Vec<_> = rows
            .iter()
            .map(|(pack, tool, allowed)| {
                let a = &tool.annotations;
                let hints = [
                    ("readOnlyHint", a.read_only_hint),
                    ("destructiveHint", a.destructive_hint),
                    ("idempotentHint", a.idempotent_hint),
                    ("openWorldHint", a.open_world_hint),
                ];
                let annotations: serde_json::Map<String, serde_json::Value> =
                    hints.into_iter().filter_map(|(k, v)| Some((k.to_string(), json!(v?)))).collect();
                json!({
                    "name": tool.name,
                    "toolpack": pack.id,
                    "toolpackKind": pack.kind_name(),
                    "description": tool.description,
                    "requiresApproval": tool.requires_approval,
                    "annotations": annotations,
                    "allowedAgents": allowed,
                    "inputSchema": tool.input_schema,
                })
            })
            .collect();
        serde_json::to_string_pretty(&items).unwrap_or_default() + "\n"
    } else {
        let table: Vec<[String; 5]> = rows
            .iter()
            .map(|(pack, tool, allowed)| {
                [
                    tool.name.clone(),
                    pack.id.clone(),
                    if tool.requires_approval { "required".into() } else { "-".into() },
                    if allowed.is_empty() { "-".into() } else { allowed.join(",") },
                    first_line(&tool.description, 72),
                ]
            })
            .collect();
        render_table(["TOOL", "TOOLPACK", "APPROVAL", "AGENTS", "DESCRIPTION"], &table)
    };
    Ok(Output { stdout, warnings: project.warnings.warnings })
}

fn render_table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == N {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}  ", width = widths[i]);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// The first sentence or line of a text, cut at `max` characters.
fn first_line(text: &str, max: usize) -> String {
    let line = text.trim().lines().next().unwrap_or("");
    let sentence = line.find(". ").map_or(line, |i| &line[..=i]);
    if sentence.chars().count() <= max {
        sentence.to_string()
    } else {
        let cut: String = sentence.chars().take(max - 1).collect();
        format!("{}…", cut.trim_end())
    }
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() { "none".to_string() } else { items.join(", ") }
}

/// `suzumio ui <dir> <pack>/<entry> [json]`: run a WebUI entry and render its result.
/// Errors carry their exit code: 2 for input the user must fix, 1 for handler failures.
pub async fn ui(dir: &Path, target: &str, input: Option<&str>, as_json: bool) -> Result<String, (u8, String)> {
    use crate::support::InvokeError;
    let Some((pack, entry)) = target.split_once('/') else {
        return Err((2, format!("`{target}` is not <toolpack>/<entry> (e.g. core/project.stats)")));
    };
    let input: serde_json::Value = match input {
        None => json!({}),
        Some(text) => serde_json::from_str(text).map_err(|e| (2, format!("the input is not valid JSON: {e}")))?,
    };
    let tools = crate::controller::open(dir).map_err(|e| (e.exit_code(), e.to_string()))?;
    let output = tools.invoke_webui(pack, entry, input).await.map_err(|e| {
        let code = match e {
            InvokeError::Handler(_) | InvokeError::Internal(_) => 1,
            _ => 2,
        };
        (code, e.to_string())
    })?;
    if as_json {
        return Ok(serde_json::to_string_pretty(&output).unwrap_or_default() + "\n");
    }
    let mut out = String::new();
    if let Some(title) = &output.title {
        let _ = writeln!(out, "{title}");
    }
    if let Some(metrics) = output.metadata.as_ref().and_then(|m| m.get("metrics")).and_then(|m| m.as_array()) {
        for m in metrics {
            let value = match &m["value"] {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let _ = writeln!(out, "  {}: {value}", m["label"].as_str().unwrap_or(""));
        }
    }
    let _ = writeln!(out, "{}", output.output);
    Ok(out)
}

/// `suzumio start|stop <dir>`: set the project status (only `running` projects are scheduled).
pub fn set_status(dir: &Path, status: crate::store::ProjectStatus) -> Result<String, (u8, String)> {
    let tools = crate::controller::open(dir).map_err(|e| (e.exit_code(), e.to_string()))?;
    let before = tools.store.project().map_err(|e| (1, e.to_string()))?;
    let after = tools.store.set_project_status(status).map_err(|e| (1, e.to_string()))?;
    Ok(format!("project {}: {} -> {}\n", after.name, before.status.as_str(), after.status.as_str()))
}

/// `suzumio tick <dir>`: one scheduler tick, and what it did.
pub async fn tick(dir: &Path) -> Result<String, (u8, String)> {
    use crate::scheduler::{RecordingLauncher, Scheduler};
    let tools = crate::controller::open(dir).map_err(|e| (e.exit_code(), e.to_string()))?;
    let scheduler = Scheduler::new(tools.clone(), std::sync::Arc::new(RecordingLauncher));
    let report = scheduler.tick().await;
    let mut out = String::new();
    if !report.ran {
        let status = tools.store.project().map(|p| p.status.as_str().to_string()).unwrap_or_default();
        let _ =
            writeln!(out, "project {} is {status}; only running projects are scheduled (suzumio start)", tools.name());
        return Ok(out);
    }
    for a in &report.cancelled {
        let _ = writeln!(out, "cancelled {} of {}: {}", a.id, a.agent_id, a.error.as_deref().unwrap_or(""));
    }
    for a in &report.started {
        let _ = writeln!(out, "started {} for {} with {}", a.id, a.agent_id, a.signal_ids.join(", "));
    }
    for h in &report.hooks {
        let wake = h.wake_at.map(|t| format!(", wake at {}", crate::clock::iso(t))).unwrap_or_default();
        let _ = writeln!(out, "hook {}: {} signal(s){wake}", h.pack, h.recorded.len());
    }
    for n in &report.nudges {
        let _ = writeln!(out, "nudge {} {} -> {}", n.id, n.kind, n.target_agent.as_deref().unwrap_or("-"));
    }
    for m in &report.monitor_messages {
        let _ = writeln!(out, "monitor message {m}");
    }
    for e in &report.errors {
        let _ = writeln!(out, "error: {e}");
    }
    if let Some(due) = report.next_due {
        let _ = writeln!(out, "next due {}", crate::clock::iso(due));
    }
    if out.is_empty() {
        out.push_str("nothing to do\n");
    }
    Ok(out)
}

/// `suzumio signals <dir> [--agent ID] [--status S] [--limit N] [--json]`.
pub fn signals(
    dir: &Path,
    agent: Option<&str>,
    status: Option<&str>,
    limit: usize,
    as_json: bool,
) -> Result<String, (u8, String)> {
    let tools = crate::controller::open(dir).map_err(|e| (e.exit_code(), e.to_string()))?;
    let status = match status {
        None => None,
        Some(s) => Some(s.parse::<crate::store::SignalStatus>().map_err(|e| (2, e.to_string()))?),
    };
    if let Some(a) = agent
        && tools.project.config.agent(a).is_none()
    {
        return Err((2, format!("Unknown agent: {a}")));
    }
    let query =
        crate::store::SignalQuery { target_agent: agent.map(str::to_string), status, limit: Some(limit), kind: None };
    let signals = tools.store.list_signals(&query).map_err(|e| (1, e.to_string()))?;
    if as_json {
        return Ok(serde_json::to_string_pretty(&signals).unwrap_or_default() + "\n");
    }
    let rows: Vec<[String; 7]> = signals
        .iter()
        .map(|s| {
            let target = s.target_agent.clone().or_else(|| s.target_channel.clone()).unwrap_or_else(|| "-".into());
            [
                s.id.clone(),
                s.kind.clone(),
                s.priority.to_string(),
                s.status.as_str().to_string(),
                target,
                s.created_at.clone(),
                s.not_before.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    Ok(render_table(["SIGNAL", "KIND", "PRI", "STATUS", "TARGET", "CREATED", "NOT BEFORE"], &rows))
}

/// `suzumio tool call <dir> --agent ID <tool> [json]`: one tool through the real path, inside a
/// short activation of its own (so the call is recorded like any other). Exit 1 on a tool error.
pub async fn tool_call(
    dir: &Path,
    agent: &str,
    tool: &str,
    input: Option<&str>,
    backend: Option<crate::config::BackendKind>,
    as_json: bool,
) -> Result<String, (u8, String)> {
    let input: serde_json::Value = match input {
        None => json!({}),
        Some(text) => serde_json::from_str(text).map_err(|e| (2, format!("the input is not valid JSON: {e}")))?,
    };
    let tools = crate::controller::open(dir).map_err(|e| (e.exit_code(), e.to_string()))?;
    if tools.project.config.agent(agent).is_none() {
        return Err((2, format!("Unknown agent: {agent}")));
    }
    let kind = backend.unwrap_or(tools.project.config.backend.kind);
    let needs_runner =
        tools.project.registry.tool(tool).is_some_and(|(_, def)| def.runs_in == crate::toolpack::RunsIn::Runner);
    let runners = if needs_runner {
        Some(crate::controller::runners(&tools, kind).await.map_err(|e| (e.exit_code(), e.to_string()))?)
    } else {
        None
    };
    let no_runner = crate::activation::NoRunner("not needed".into());
    let runner: &dyn crate::activation::RunnerTools = match &runners {
        Some(r) => r.as_ref(),
        None => &no_runner,
    };
    let activation = tools
        .store
        .start_activation(agent, &format!("suzumio tool call {tool}"), &[])
        .map_err(|e| (1, e.to_string()))?;
    let result = crate::activation::run::execute_tool(&tools, runner, agent, &activation.id, tool, input).await;
    // The activation only frames the call; a failing tool is recorded on the tool call, and must
    // not leave the agent `failed`.
    let framed = tools.store.finish_activation(&activation.id, crate::store::ActivationOutcome::Completed, None, None);
    if let Some(r) = &runners {
        r.shutdown().await;
    }
    framed.map_err(|e| (1, format!("recording the end of the call's activation: {e}")))?;
    let output = result.map_err(|e| match e {
        crate::toolpack::ToolError::Rejected(message) => (2, message),
        other => (1, other.to_string()),
    })?;
    if as_json {
        return Ok(serde_json::to_string_pretty(&output).unwrap_or_default() + "\n");
    }
    let mut out = String::new();
    if let Some(title) = &output.title {
        let _ = writeln!(out, "{title}");
    }
    let _ = writeln!(out, "{}", output.output);
    Ok(out)
}

/// `suzumio send <dir> <recipient> [--priority P] <body…>`: a message from the user.
pub fn send(dir: &Path, recipient: &str, priority: &str, body: &str) -> Result<String, (u8, String)> {
    let tools = crate::controller::open(dir).map_err(|e| (e.exit_code(), e.to_string()))?;
    let (recipient, channel) = if recipient.starts_with('#') {
        (None, Some(recipient.to_string()))
    } else {
        (Some(recipient.to_string()), None)
    };
    let sent = tools
        .store
        .send_message(crate::store::SendMessage {
            sender: "user".into(),
            recipient,
            channel,
            priority: Some(priority.to_string()),
            body: body.to_string(),
            source_agent: None,
            source_activation: None,
        })
        .map_err(|e| (2, e.to_string()))?;
    Ok(format!("sent {} ({} signal(s))\n", sent.message_id, sent.signal_ids.len()))
}

/// `suzumio status <dir>`.
pub fn status(dir: &Path) -> Result<String, (u8, String)> {
    let tools = crate::controller::open(dir).map_err(|e| (e.exit_code(), e.to_string()))?;
    let fail = |e: crate::store::StoreError| (1, e.to_string());
    let project = tools.store.project().map_err(fail)?;
    let stats = tools.store.project_stats().map_err(fail)?;
    let counts = tools.store.signal_counts().map_err(fail)?;
    let mut out = String::new();
    let _ = writeln!(out, "project {}: {}", project.name, project.status.as_str());
    for a in tools.store.agents().map_err(fail)? {
        if tools.project.config.agent(&a.id).is_none() {
            continue;
        }
        let active = a.active_activation_id.map(|id| format!(" ({id})")).unwrap_or_default();
        let _ = writeln!(out, "  {:<16} {}{active}", a.id, a.status.as_str());
    }
    let _ = writeln!(
        out,
        "messages {}, activations {} ({} running, {} failed), tool calls {}, pending signals {}",
        stats.messages,
        stats.activations.total,
        stats.activations.running,
        stats.activations.failed,
        stats.tool_calls,
        counts.by_status.get("pending").copied().unwrap_or(0)
    );
    if let Some(report) = &project.submitted_report {
        let _ = writeln!(out, "report: {report}");
    }
    Ok(out)
}

/// `suzumio approve <dir>`: a submitted project becomes completed.
pub fn approve(dir: &Path) -> Result<String, (u8, String)> {
    let tools = crate::controller::open(dir).map_err(|e| (e.exit_code(), e.to_string()))?;
    let project = tools.store.project().map_err(|e| (1, e.to_string()))?;
    if project.status != crate::store::ProjectStatus::Submitted {
        return Err((
            2,
            format!(
                "project {} is {}; only a submitted project can be approved",
                project.name,
                project.status.as_str()
            ),
        ));
    }
    set_status(dir, crate::store::ProjectStatus::Completed)
}
