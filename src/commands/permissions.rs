//! `suzumio permissions explain` (the decision a call would get, and why), `permissions
//! list|add|rm|mode` (the rules with their sources; live rules and modes changed while the
//! project runs, written to its store whether or not `suzumio run` serves it) and `suzumio
//! audit` (the permission audit trail).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use crate::clock::SystemClock;
use crate::config::load::ProcessEnv;
use crate::permissions::approvals::cli_user;
use crate::permissions::live;
use crate::project::Project;
use crate::store::Store;

use super::{CliError, Output, first_line, json_input, render_table};

/// `suzumio permissions explain <dir> <agent> <tool> [json]`: the decision a call would get,
/// and why (without running it, and without the hooks, which run at call time).
pub fn permissions_explain(
    dir: &Path,
    agent_id: &str,
    tool: &str,
    input: Option<&str>,
    as_json: bool,
) -> Result<Output, CliError> {
    use crate::permissions::{self, Subject};
    let project = Project::load(dir, &ProcessEnv)?;
    let input = json_input(input)?;
    let agent = project.config.agent(agent_id).ok_or_else(|| CliError::Input(format!("Unknown agent: {agent_id}")))?;
    let (_, def) = project.registry.tool(tool).ok_or_else(|| CliError::Input(format!("Unknown tool: {tool}")))?;
    if !agent.tools.allows(tool) {
        return Err(CliError::Input(format!(
            "Tool not allowed for {agent_id}: {tool} (its allowlist refuses the call before any permission rule)"
        )));
    }
    if let Err(e) = project.registry.validate_input(tool, &input) {
        return Err(CliError::Tool(crate::toolpack::ToolError::invalid_input(tool, &e)));
    }
    let call = permissions::Call { agent, tool, def, input: &input };
    let snapshot = live_snapshot(&project)?;
    let extra = snapshot.rules_for(agent_id).map_err(CliError::Failed)?;
    let mode = snapshot.mode_of(agent);
    let decision = permissions::decide_in(&project, &call, &extra, mode);
    let mut rules = permissions::config_rules(&project, agent);
    rules.extend(extra);
    let opaque = permissions::opaque_parts(&call, &rules);
    let mode_set = snapshot.override_of(agent_id);
    let subject = match Subject::of(def, &input) {
        Subject::Shell(Ok(commands)) => json!({ "commands": commands.iter().map(|c| c.text()).collect::<Vec<_>>() }),
        Subject::Shell(Err(e)) => json!({ "unparsable": e.to_string() }),
        Subject::Paths(paths) => json!({ "paths": paths }),
        Subject::Host(host) => json!({ "host": host.map(|h| h.to_string()) }),
        Subject::None => json!({}),
    };
    let hooks = crate::calls::hooks::packs_for(&project, tool);
    // The reviewer is a model call made when the call runs; explain says it would be asked.
    let reviewer_config = project.config.permissions.reviewer.as_ref();
    let reviewer =
        reviewer_config.filter(|_| permissions::reviewer::applies(reviewer_config, mode, &decision)).map(|r| {
            let loosest = if permissions::reviewer::may_allow(&decision) {
                "allow"
            } else {
                "ask (it can only make this stricter)"
            };
            format!("{} reviews this call when it runs: it may answer deny, ask, or at most {loosest}", r.model)
        });
    if as_json {
        let mut value = json!({
            "agent": agent.id,
            "tool": tool,
            "mode": mode.as_str(),
            "decision": decision.behavior,
            "source": decision.source,
            "reason": decision.reason,
            "risk": decision.risk,
            "code": decision.code,
            "categories": decision.categories,
            "actions": decision.actions,
            "hooks": hooks,
        });
        if let Some(v) = value.as_object_mut()
            && let Some(r) = &reviewer
        {
            v.insert("reviewer".into(), json!(r));
        }
        if let (Some(v), Some(s)) = (value.as_object_mut(), subject.as_object()) {
            v.extend(s.clone());
            if !opaque.is_empty() {
                v.insert("opaque".into(), json!(opaque));
            }
            if let Some(set) = mode_set {
                v.insert(
                    "modeSet".into(),
                    json!({"by": set.set_by, "at": crate::clock::iso(set.set_at), "configMode": agent.permission_mode.as_str()}),
                );
            }
        }
        return Ok((serde_json::to_string_pretty(&value).unwrap_or_default() + "\n").into());
    }
    let mut out = String::new();
    let _ = writeln!(out, "decision: {}", decision.behavior.as_str());
    let _ = writeln!(out, "source: {}", decision.source);
    let _ = writeln!(out, "reason: {}", decision.reason);
    let _ = writeln!(out, "code: {}", decision.code.as_str());
    let _ = writeln!(out, "risk: {}", decision.risk.as_str());
    let names = |v: Vec<String>| if v.is_empty() { "none".to_string() } else { v.join(", ") };
    let _ = writeln!(out, "categories: {}", names(decision.category_names()));
    let _ = writeln!(out, "actions: {}", names(decision.action_names()));
    let _ = writeln!(out, "mode: {}", live::mode_line(agent, mode_set));
    if let Some(r) = &reviewer {
        let _ = writeln!(out, "reviewer: {r}");
    }
    if let Some(commands) = subject.get("commands").and_then(|c| c.as_array()) {
        let texts: Vec<&str> = commands.iter().filter_map(|c| c.as_str()).collect();
        let _ = writeln!(out, "commands: {}", texts.join(" | "));
    }
    for part in &opaque {
        let _ = writeln!(out, "opaque: {part}");
    }
    if let Some(why) = subject.get("unparsable").and_then(|c| c.as_str()) {
        let _ = writeln!(out, "unparsable: {why}");
    }
    if let Some(paths) = subject.get("paths").and_then(|c| c.as_array()) {
        let texts: Vec<String> = paths.iter().map(|p| p.as_str().unwrap_or("(not normalizable)").to_string()).collect();
        let _ = writeln!(out, "paths: {}", texts.join(", "));
    }
    if let Some(host) = subject.get("host") {
        let _ = writeln!(out, "host: {}", host.as_str().unwrap_or("(none)"));
    }
    if !hooks.is_empty() {
        let _ = writeln!(out, "hooks: {} (beforeToolCall runs at call time and may change this)", hooks.join(", "));
    }
    Ok(out.into())
}

/// `suzumio audit <dir> [--agent A] [--since DURATION|RFC3339] [--json]`.
pub fn audit(dir: &Path, agent: Option<&str>, since: Option<&str>, as_json: bool) -> Result<Output, CliError> {
    let project = Project::load(dir, &ProcessEnv)?;
    let since = match since {
        None => None,
        Some(text) => Some(match chrono::DateTime::parse_from_rfc3339(text) {
            Ok(t) => t.with_timezone(&chrono::Utc),
            Err(_) => {
                let ago = humantime::parse_duration(text).map_err(|_| {
                    CliError::Input(format!("--since `{text}` is neither a duration (2h, 30m) nor an RFC 3339 time"))
                })?;
                chrono::Utc::now() - chrono::Duration::from_std(ago).unwrap_or(chrono::Duration::MAX)
            }
        }),
    };
    let query = crate::permissions::audit::AuditQuery { agent: agent.map(str::to_string), since };
    let entries = crate::permissions::audit::read(&project.config.root, &query)
        .map_err(|e| CliError::Failed(format!("reading the permission audit: {e}")))?;
    if as_json {
        let mut out = String::new();
        for e in &entries {
            let _ = writeln!(out, "{e}");
        }
        return Ok(out.into());
    }
    let field = |e: &serde_json::Value, k: &str| e.get(k).and_then(|v| v.as_str()).unwrap_or("-").to_string();
    let rows: Vec<[String; 7]> = entries
        .iter()
        .map(|e| {
            if field(e, "kind") == "dropped" {
                let n = e.get("dropped").and_then(|v| v.as_u64()).unwrap_or(0);
                return [
                    field(e, "time"),
                    "-".into(),
                    "-".into(),
                    "dropped".into(),
                    "-".into(),
                    "-".into(),
                    format!("{n} entries could not be written"),
                ];
            }
            [
                field(e, "time"),
                field(e, "agent"),
                field(e, "tool"),
                field(e, "kind"),
                field(e, "decision"),
                field(e, "source"),
                first_line(&field(e, "reason"), 80),
            ]
        })
        .collect();
    Ok(render_table(["TIME", "AGENT", "TOOL", "KIND", "DECISION", "SOURCE", "REASON"], &rows).into())
}

/// The project's live rules and mode overrides, when it has state (a project never run has
/// none, and reading it creates nothing).
pub(super) fn live_snapshot(project: &Project) -> Result<live::Snapshot, CliError> {
    let path = project.config.root.join(crate::store::STATE_DIR).join(crate::store::DB_FILE);
    if !path.is_file() {
        return Ok(live::Snapshot::default());
    }
    let store = Store::open_read_only(&project.config, Arc::new(SystemClock))?;
    Ok(live::Snapshot::read(&store)?)
}

/// A live change refused, named as the command line says it: `--paths #2: …`.
fn live_error(e: live::LiveError) -> CliError {
    match e {
        live::LiveError::Invalid(problems) => {
            let named: Vec<String> = problems
                .iter()
                .map(|(at, message)| {
                    let mut parts = at.trim_start_matches('/').split('/');
                    let arg = match parts.next().unwrap_or_default() {
                        "" => "the rule".to_string(),
                        "tool" => "<tool-pattern>".to_string(),
                        "decision" => "<allow|ask|deny>".to_string(),
                        "mode" => "<default|auto|full-access|config>".to_string(),
                        "id" => "<rule-id>".to_string(),
                        key => format!("--{key}"),
                    };
                    match parts.next().and_then(|i| i.parse::<usize>().ok()) {
                        Some(i) => format!("{arg} #{}: {message}", i + 1),
                        None => format!("{arg}: {message}"),
                    }
                })
                .collect();
            CliError::Input(named.join("\n"))
        }
        live::LiveError::UnknownRule(_) => CliError::Input(e.to_string()),
        live::LiveError::Store(s) => s.into(),
    }
}

/// Writes what was audited before the process ends (the controller may not be running).
fn flush_audit(host: &crate::support::ToolHost) {
    if !host.audit.flush(std::time::Duration::from_secs(10)) {
        tracing::warn!("the permission audit could not be written in time");
    }
}

/// `suzumio permissions add <dir> [--agent A] <tool-pattern> <allow|ask|deny> [--paths P]…
/// [--commands C]… [--hosts H]… [--reason R]`: a live rule, in force from the next tool call.
pub fn permissions_add(dir: &Path, spec: live::RuleSpec, as_json: bool) -> Result<Output, CliError> {
    let host = crate::controller::open(dir)?;
    let project = host.project.snapshot();
    let added = live::add(&project, &host.store, &host.audit, spec, &cli_user()).map_err(live_error);
    flush_audit(&host);
    let rule = added?;
    if as_json {
        return Ok((serde_json::to_string_pretty(&rule).unwrap_or_default() + "\n").into());
    }
    Ok(format!("{}\n", live::rule_line(&rule)).into())
}

/// `suzumio permissions rm <dir> <rule-id>`.
pub fn permissions_rm(dir: &Path, id: &str) -> Result<Output, CliError> {
    let host = crate::controller::open(dir)?;
    let removed = live::remove(&host.store, &host.audit, id, &cli_user()).map_err(live_error);
    flush_audit(&host);
    let rule = removed?;
    Ok(format!("removed {}\n", live::rule_line(&rule)).into())
}

/// `suzumio permissions mode <dir> <agent> <default|auto|full-access|config>`.
pub fn permissions_mode(dir: &Path, agent: &str, mode: Option<&str>) -> Result<Output, CliError> {
    let host = crate::controller::open(dir)?;
    let project = host.project.snapshot();
    if project.config.agent(agent).is_none() {
        return Err(super::unknown_agent(&project.config, agent));
    }
    let changed = live::set_mode(&project, &host.store, &host.audit, agent, mode, &cli_user()).map_err(live_error);
    flush_audit(&host);
    let change = changed?;
    let how = if change.live {
        format!("set at run time; suzumio.yaml says {}", change.config_mode)
    } else {
        "suzumio.yaml's".to_string()
    };
    Ok(format!(
        "{}: permission mode {} ({how}; was {}), from its next tool call\n",
        change.agent, change.mode, change.previous
    )
    .into())
}

/// `suzumio permissions list <dir> [--agent A] [--json]`: every rule that can decide an agent's
/// calls, with its source (suzumio.yaml, live, remembered), and each agent's mode in force.
pub fn permissions_list(dir: &Path, agent: Option<&str>, as_json: bool) -> Result<Output, CliError> {
    let project = Project::load(dir, &ProcessEnv)?;
    if let Some(id) = agent
        && project.config.agent(id).is_none()
    {
        return Err(super::unknown_agent(&project.config, id));
    }
    let snapshot = live_snapshot(&project)?;
    let path = project.config.root.join(crate::store::STATE_DIR).join(crate::store::DB_FILE);
    let remembered = if path.is_file() {
        Store::open_read_only(&project.config, Arc::new(SystemClock))?.remembered_rules(agent)?
    } else {
        Vec::new()
    };
    let agents: Vec<&crate::config::AgentConfig> =
        project.config.agents.iter().filter(|a| agent.is_none_or(|id| id == a.id)).collect();
    let config_rules: Vec<crate::permissions::Rule> = {
        let mut seen = Vec::new();
        for a in &agents {
            for r in crate::permissions::config_rules(&project, a) {
                if !seen.iter().any(|s: &crate::permissions::Rule| s.source == r.source) {
                    seen.push(r);
                }
            }
        }
        seen
    };
    let live_rules: Vec<&crate::store::LiveRule> = snapshot
        .rules
        .iter()
        .filter(|r| agent.is_none_or(|id| r.agent_id.as_deref().is_none_or(|a| a == id)))
        .collect();
    if as_json {
        let modes: Vec<serde_json::Value> = agents
            .iter()
            .map(|a| {
                let set = snapshot.override_of(&a.id);
                json!({
                    "agent": a.id,
                    "mode": snapshot.mode_of(a).as_str(),
                    "configMode": a.permission_mode.as_str(),
                    "setBy": set.map(|o| o.set_by.clone()),
                    "setAt": set.map(|o| crate::clock::iso(o.set_at)),
                })
            })
            .collect();
        let config: Vec<serde_json::Value> =
            config_rules.iter().map(|r| json!({"source": r.source, "rule": r.describe()})).collect();
        let live: Vec<serde_json::Value> = live_rules
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("source".into(), json!(live::source_of(r)));
                }
                v
            })
            .collect();
        let value = json!({"modes": modes, "configRules": config, "liveRules": live, "rememberedRules": remembered});
        return Ok((serde_json::to_string_pretty(&value).unwrap_or_default() + "\n").into());
    }
    let mut out = String::new();
    for a in &agents {
        let _ = writeln!(out, "mode {}: {}", a.id, live::mode_line(a, snapshot.override_of(&a.id)));
    }
    for r in &config_rules {
        let _ = writeln!(
            out,
            "{}: {}{}",
            r.source,
            r.describe(),
            r.reason.as_deref().map(|w| format!(" — {w}")).unwrap_or_default()
        );
    }
    for r in &live_rules {
        let _ = writeln!(out, "{}", live::rule_line(r));
    }
    for r in &remembered {
        let whose = r.activation_id.as_deref().or(r.agent_id.as_deref()).map(|w| format!(" {w}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "remembered rule {}: {} {} ({}{whose}, by {} at {})",
            r.id,
            r.tool,
            r.decision,
            r.scope,
            r.created_by,
            crate::clock::iso(r.created_at)
        );
    }
    if config_rules.is_empty() && live_rules.is_empty() && remembered.is_empty() {
        let _ = writeln!(out, "no permission rules: each agent's mode decides");
    }
    Ok(out.into())
}
