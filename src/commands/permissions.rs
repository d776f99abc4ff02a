//! `suzumio permissions explain` (the decision a call would get, and why) and `suzumio audit`
//! (the permission audit trail).

use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;

use crate::config::load::ProcessEnv;
use crate::project::Project;

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
    let decision = permissions::decide(&project, &call);
    let opaque = permissions::opaque_parts(&call, &permissions::config_rules(&project, agent));
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
        reviewer_config.filter(|_| permissions::reviewer::applies(reviewer_config, agent, &decision)).map(|r| {
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
            "mode": agent.permission_mode.as_str(),
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
    let _ = writeln!(out, "mode: {}", agent.permission_mode.as_str());
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
