//! The project's lifecycle from the CLI: `status`, `start`/`stop`, `approve`, `resume` and one
//! scheduler `tick`.

use std::fmt::Write as _;
use std::path::Path;

use crate::clock::iso;
use crate::store::{ActivationStatus, ProjectStatus};

use super::{CliError, Output, approvals, to_json, unknown_agent, views};

/// `suzumio start|stop <dir>`: set the project status (only `running` projects are scheduled).
pub fn set_status(dir: &Path, status: ProjectStatus) -> Result<Output, CliError> {
    let tools = crate::controller::open(dir)?;
    let before = tools.store.project()?;
    let after = tools.store.set_project_status(status)?;
    Ok(format!("project {}: {} -> {}\n", after.name, before.status.as_str(), after.status.as_str()).into())
}

/// `suzumio tick <dir> [--json]`: one scheduler tick, and what it did.
pub async fn tick(dir: &Path, as_json: bool) -> Result<Output, CliError> {
    use crate::scheduler::{RecordingLauncher, Scheduler};
    let tools = crate::controller::open(dir)?;
    let scheduler = Scheduler::new(tools.clone(), std::sync::Arc::new(RecordingLauncher));
    let report = scheduler.tick().await;
    if as_json {
        let activation = |a: &crate::store::ActivationRecord| views::TickActivation {
            activation_id: a.id.clone(),
            agent_id: a.agent_id.clone(),
            signal_ids: a.signal_ids.clone(),
            error: a.error.clone(),
        };
        let view = views::TickView {
            ran: report.ran,
            started: report.started.iter().map(activation).collect(),
            cancelled: report.cancelled.iter().map(activation).collect(),
            hooks: report
                .hooks
                .iter()
                .map(|h| views::TickHook {
                    toolpack: h.pack.clone(),
                    signals: h.recorded.clone(),
                    wake_at: h.wake_at.map(crate::clock::iso),
                    errors: h.errors.clone(),
                })
                .collect(),
            nudges: report.nudges.iter().map(|n| n.id.clone()).collect(),
            monitor_messages: report.monitor_messages.clone(),
            errors: report.errors.clone(),
            next_due: report.next_due.map(crate::clock::iso),
        };
        return Ok(to_json(&view).into());
    }
    let mut out = String::new();
    if !report.ran {
        let status = tools.store.project()?.status;
        let _ = writeln!(
            out,
            "project {} is {}; only running projects are scheduled (suzumio start)",
            tools.name(),
            status.as_str()
        );
        return Ok(out.into());
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
    Ok(out.into())
}

/// `suzumio status <dir> [--json]`.
pub fn status(dir: &Path, as_json: bool) -> Result<Output, CliError> {
    let tools = crate::controller::open_read_only(dir)?;
    let project = tools.store.project()?;
    let stats = tools.store.project_stats()?;
    let counts = tools.store.signal_counts()?;
    let served_by = crate::support::serving::holder(&tools.project.config.root)
        .map_err(|e| CliError::Failed(format!("reading who serves the project: {e}")))?;
    if as_json {
        use crate::activation::budget::spent;
        let mut agents = Vec::new();
        for a in tools.store.agents()? {
            if tools.project.config.agent(&a.id).is_none() {
                continue;
            }
            let s = spent(&tools.store, Some(&a.id), a.resumed_at)?;
            agents.push(views::AgentStatusView {
                id: a.id,
                status: a.status,
                active_activation_id: a.active_activation_id,
                paused: a.paused,
                usage_today: s.today,
                activations_this_hour: s.activations_this_hour,
            });
        }
        let view = views::StatusView {
            project: project.name,
            status: project.status,
            submitted_report: project.submitted_report,
            agents,
            usage_today: spent(&tools.store, None, None)?.today,
            messages: stats.messages,
            activations: stats.activations,
            tool_calls: stats.tool_calls,
            pending_signals: counts.by_status.get("pending").copied().unwrap_or(0),
            served_by,
        };
        return Ok(to_json(&view).into());
    }
    let mut out = String::new();
    let _ = writeln!(out, "project {}: {}", project.name, project.status.as_str());
    let _ = match &served_by {
        Some(h) if h.command == crate::support::serving::RUN => writeln!(out, "served by {}", h.describe()),
        Some(h) => writeln!(out, "not served; its runners are in use by {}", h.describe()),
        None => writeln!(out, "not served (no `suzumio run` holds it)"),
    };
    for a in tools.store.agents()? {
        if tools.project.config.agent(&a.id).is_none() {
            continue;
        }
        // A parked activation is not running: it waits for a person (listed below).
        let parked = match &a.active_activation_id {
            Some(id) => tools.store.activation(id)?.map(|x| x.status),
            None => None,
        };
        let status = match parked {
            Some(ActivationStatus::WaitingApproval) => "waiting for approval",
            Some(ActivationStatus::WaitingUser) => "waiting for an answer",
            _ => a.status.as_str(),
        };
        let active = a.active_activation_id.map(|id| format!(" ({id})")).unwrap_or_default();
        let paused = a.paused.as_ref().map(|p| format!("  {}", pause_line(&a.id, p))).unwrap_or_default();
        let _ = writeln!(out, "  {:<16} {status}{active}{paused}", a.id);
    }
    for request in tools.store.approvals(true, crate::store::MAX_LIMIT)? {
        let _ = writeln!(out, "  {}: {}", request.agent_id, approvals::waiting_line(&request));
    }
    for question in tools.store.questions(true, crate::store::MAX_LIMIT)? {
        let _ = writeln!(out, "  {}: {}", question.agent_id, super::questions::waiting_line(&question));
    }
    usage_lines(&tools, &mut out)?;
    let mut waiting = match stats.activations.waiting_approval {
        0 => String::new(),
        n => format!(", {n} waiting for approval"),
    };
    if stats.activations.waiting_user > 0 {
        waiting.push_str(&format!(", {} waiting for an answer", stats.activations.waiting_user));
    }
    let _ = writeln!(
        out,
        "messages {}, activations {} ({} running{waiting}, {} failed), tool calls {}, pending signals {}",
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
    Ok(out.into())
}

/// How `status` shows a pause: why, and what ends it.
fn pause_line(agent: &str, pause: &crate::store::Pause) -> String {
    let until = pause.until.map(|u| format!("; resumes at {}", iso(u))).unwrap_or_default();
    format!("PAUSED: {}{until} (or: suzumio resume <dir> {agent})", pause.reason)
}

/// Today's usage (UTC) of each agent and of the project, against their budgets.
fn usage_lines(tools: &crate::support::ToolHost, out: &mut String) -> Result<(), CliError> {
    use crate::activation::budget::{number, spent};
    let config = &tools.project.config;
    let priced = config.models.presets.iter().any(|p| p.prices.is_set());
    let of = |limit: Option<f64>| limit.map(|l| format!(" of {}", number(l))).unwrap_or_default();
    let line = |who: &str, s: &crate::activation::budget::Spent, limits: &crate::config::BudgetLimits| {
        let t = &s.today;
        let cost = if priced || limits.max_cost_per_day.is_some() {
            format!(", cost {:.4}{}", t.cost, of(limits.max_cost_per_day))
        } else {
            String::new()
        };
        format!(
            "  {who:<16} tokens {}{} (input {}, cached {}, output {}){cost}, activations this hour {}{}\n",
            t.tokens(),
            of(limits.max_tokens_per_day.map(|v| v as f64)),
            t.input_tokens,
            t.cached_input_tokens,
            t.output_tokens,
            s.activations_this_hour,
            of(limits.max_activations_per_hour.map(|v| v as f64)),
        )
    };
    let _ = writeln!(out, "usage today (UTC, since a resume when there was one):");
    for a in tools.store.agents()? {
        let Some(agent) = config.agent(&a.id) else { continue };
        let s = spent(&tools.store, Some(&a.id), a.resumed_at)?;
        out.push_str(&line(&a.id, &s, &agent.budget));
    }
    out.push_str(&line("(project)", &spent(&tools.store, None, None)?, &config.budgets.project));
    Ok(())
}

/// `suzumio resume <dir> <agent>…`: end the pause of each agent (a budget or the wake-loop
/// guard paused it); the scheduler delivers their pending signals again.
pub fn resume(dir: &Path, agents: &[String]) -> Result<Output, CliError> {
    let tools = crate::controller::open(dir)?;
    if let Some(unknown) = agents.iter().find(|a| tools.project.config.agent(a).is_none()) {
        return Err(unknown_agent(&tools.project.config, unknown));
    }
    let mut out = String::new();
    for agent in agents {
        match tools.store.resume_agent(agent, "resumed by the user")? {
            Some(pause) => {
                let _ = writeln!(out, "{agent}: resumed (was paused: {})", pause.reason);
            }
            None => {
                let _ = writeln!(out, "{agent}: not paused");
            }
        }
    }
    Ok(out.into())
}

/// `suzumio approve <dir>`: a submitted project becomes completed.
pub fn approve(dir: &Path) -> Result<Output, CliError> {
    let tools = crate::controller::open(dir)?;
    let project = tools.store.project()?;
    if project.status != ProjectStatus::Submitted {
        return Err(CliError::Input(format!(
            "project {} is {}; only a submitted project can be approved",
            project.name,
            project.status.as_str()
        )));
    }
    set_status(dir, ProjectStatus::Completed)
}
