//! `suzumio check` and `suzumio tools`: a project validated (config, manifests, pack modules)
//! and its tool catalogue, with each agent's tools and what the permission rules decide for them.

use std::fmt::Write as _;
use std::path::Path;

use crate::config::load::ProcessEnv;
use crate::config::{BackendKind, Diagnostics, InvalidInput};
use crate::project::Project;

use super::{CliError, Output, first_line, list_or_none, plural, render_table, to_json, unknown_agent, views};

/// `suzumio check <dir> [--json]`.
pub async fn check(dir: &Path, as_json: bool, backend: Option<BackendKind>) -> Result<Output, CliError> {
    let mut project = Project::load(dir, &ProcessEnv)?;
    if crate::support::mcp_discovery::undiscovered(&project) {
        let listed = crate::support::mcp_discovery::discover(dir, backend).await?;
        project = Project::load_with(dir, &ProcessEnv, &listed)?;
    }
    // What the agents' containers could not change in their workspaces (Docker: they run as
    // the project directory's owner; local processes as whoever runs `run`).
    if backend.unwrap_or(project.config.backend.kind) == BackendKind::Docker {
        let user = crate::backend::RunnerUser::owner_of(&project.config.root);
        project.warnings.warnings.extend(crate::backend::owner::workspace_warnings(&project.config, user));
    }
    let mut modules = check_modules(&project).await;
    modules.extend(check_scripts(&project));
    if modules.has_errors() {
        return Err(CliError::Invalid(InvalidInput(modules)));
    }
    project.warnings.warnings.extend(modules.warnings);
    // What was changed while the project ran (live rules, switched modes) is shown with the
    // config's, each with who changed it.
    let live = super::permissions::live_snapshot(&project)?;
    let c = &project.config;
    let r = &project.registry;
    if as_json {
        let toolsets = project.toolsets();
        let view = views::CheckView {
            project: &c.name,
            task: &c.task,
            toolpacks: r
                .packs()
                .iter()
                .map(|p| views::ToolpackView {
                    id: &p.id,
                    kind: p.kind_name(),
                    tools: p.tools.len(),
                    webui_entries: p.webui.len(),
                })
                .collect(),
            agents: c
                .agents
                .iter()
                .zip(&toolsets)
                .map(|(a, set)| views::CheckedAgent {
                    id: &a.id,
                    display_name: &a.display_name,
                    role: &a.role,
                    model: &a.model,
                    tools: &set.tools,
                    deferred_tools: &set.deferred,
                    permission_mode: live.mode_of(a).as_str(),
                    permission_mode_set: live
                        .override_of(&a.id)
                        .map(|o| crate::permissions::live::mode_line(a, Some(o))),
                    live_rules: live
                        .rules
                        .iter()
                        .filter(|r| r.agent_id.as_deref().is_none_or(|id| id == a.id))
                        .map(crate::permissions::live::rule_line)
                        .collect(),
                    mounted_toolpacks: &set.mounted_packs,
                })
                .collect(),
            warnings: crate::config::diag::sorted(&project.warnings.warnings).iter().map(|w| w.to_string()).collect(),
        };
        // The warnings are in the object; stderr stays quiet.
        return Ok(to_json(&view).into());
    }
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
        for (group, tools) in &agent.tools.groups {
            let _ = writeln!(out, "    group:{group} = {}", tools.join(", "));
        }
        if !set.deferred.is_empty() {
            let _ = writeln!(out, "  deferred until tool_search ({}): {}", set.deferred.len(), set.deferred.join(", "));
        }
        let _ = writeln!(out, "  mounted toolpacks: {}", list_or_none(&set.mounted_packs));
        let _ = writeln!(out, "{}", permission_line(&project, agent, &set.tools, &live));
        for rule in live.rules.iter().filter(|r| r.agent_id.as_deref().is_none_or(|id| id == agent.id)) {
            let _ = writeln!(out, "    {}", crate::permissions::live::rule_line(rule));
        }
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

/// Every local pack's modules compiled (syntax errors with file, line and column), then loaded
/// in the check's sandbox (`js::check`): the runner module must have a handler for each tool
/// the manifest declares.
async fn check_modules(project: &Project) -> Diagnostics {
    use crate::js::check::{self, ModuleProblem};
    let mut d = Diagnostics::default();
    let report = |d: &mut Diagnostics, problem: ModuleProblem| {
        let file: std::sync::Arc<Path> = std::sync::Arc::from(problem.file.as_path());
        let loc = match problem.position {
            Some((line, col)) => crate::config::node::Loc::new(file, line, col),
            None => crate::config::node::Loc::file(file),
        };
        d.error(Some(&loc), "", problem.message);
    };
    for pack in project.registry.packs() {
        let crate::toolpack::PackSource::Local { root, runner_module, controller_module, limits } = &pack.source else {
            continue;
        };
        let limits = crate::js::JsLimits {
            call_timeout: std::time::Duration::from_millis(limits.timeout_ms.max(1)),
            memory_bytes: (limits.memory_mb.max(1) as usize) << 20,
        };
        let mut compiled = true;
        for module in runner_module.iter().chain([controller_module].into_iter().filter(|m| m.is_file())) {
            if let Err(problem) = check::compile_module(module, root, &pack.id) {
                report(&mut d, problem);
                compiled = false;
            }
        }
        if !compiled {
            continue;
        }
        if controller_module.is_file()
            && let Err(problem) = check::load_controller(&pack.id, root, controller_module, limits.clone()).await
        {
            report(&mut d, problem);
        }
        let Some(runner) = runner_module else { continue };
        match check::runner_handlers(&pack.id, root, runner, limits).await {
            Err(problem) => report(&mut d, problem),
            Ok(handlers) => {
                for tool in pack.tools.iter().filter(|t| !handlers.contains(&t.name)) {
                    let loc = crate::config::node::Loc::file(std::sync::Arc::from(runner.as_path()));
                    d.error(
                        Some(&loc),
                        "",
                        format!(
                            "toolpack {}: the manifest declares tool {} but the runner module has no handler for it",
                            pack.id, tool.name
                        ),
                    );
                }
            }
        }
    }
    d
}

/// The scripts of scripted models: each one's own mistakes (located), and a warning for each
/// call of a tool that the agent playing it may not use or that no pack declares — the loop
/// would reject it at run time.
fn check_scripts(project: &Project) -> Diagnostics {
    use crate::activation::providers::{entry_plays_for, resolve_presets, script_calls};
    use crate::config::ProviderKind;
    let c = &project.config;
    // Each script with the agents that play it (one per configured entry: counted agents share
    // their allowlist).
    let mut scripts: Vec<(std::path::PathBuf, Vec<&crate::config::AgentConfig>)> = Vec::new();
    for agent in &c.agents {
        let Ok(models) = resolve_presets(&c.models, &agent.model) else { continue };
        for model in models.iter().filter(|m| m.provider.kind == ProviderKind::Scripted) {
            let Some(script) = model.script() else { continue };
            let at = match scripts.iter().position(|(p, _)| p == script) {
                Some(at) => at,
                None => {
                    scripts.push((script.to_path_buf(), Vec::new()));
                    scripts.len() - 1
                }
            };
            let players = &mut scripts[at].1;
            if !players.iter().any(|a| a.base_id == agent.base_id) {
                players.push(agent);
            }
        }
    }
    let line_of =
        |loc: &crate::config::node::Loc| format!("{}:{}", crate::config::diag::display_path(&loc.file), loc.line);
    let list_of = |agent: &crate::config::AgentConfig| match &agent.tools.declared_at {
        Some(loc) => format!("agents.{}.tools ({})", agent.base_id, line_of(loc)),
        None => format!("agents.{}, which has no tools list ({})", agent.base_id, line_of(&agent.loc)),
    };
    let registry = &project.registry;
    let safe = crate::toolpack::sanitize_tool_name;
    let mut d = Diagnostics::default();
    for (script, players) in &scripts {
        for call in script_calls(script, &mut d) {
            // The loop maps a model-facing name (`notes_add`) back as well.
            let tool = registry.tool(&call.tool).map(|(_, t)| t.name.clone()).or_else(|| {
                registry.tools().find(|(_, t)| safe(&t.name) == safe(&call.tool)).map(|(_, t)| t.name.clone())
            });
            let Some(tool) = tool else {
                let hint =
                    crate::config::diag::did_you_mean(&call.tool, registry.tools().map(|(_, t)| t.name.as_str()));
                d.warning_hint(
                    Some(&call.loc),
                    "",
                    format!(
                        "`{}` is called by the script but no toolpack declares it; the call will be rejected",
                        call.tool
                    ),
                    hint,
                );
                continue;
            };
            let playing: Vec<&&crate::config::AgentConfig> = players
                .iter()
                .filter(|a| {
                    entry_plays_for(call.agent.as_deref(), &a.id) || entry_plays_for(call.agent.as_deref(), &a.base_id)
                })
                .collect();
            let refused: Vec<&&crate::config::AgentConfig> =
                playing.iter().copied().filter(|a| !registry.may_call(a, &tool)).collect();
            // An entry for any agent is wrong only when none of its players may make the call.
            if refused.is_empty() || (call.agent.is_none() && refused.len() < playing.len()) {
                continue;
            }
            let ids: Vec<&str> = refused.iter().map(|a| a.base_id.as_str()).collect();
            let lists: Vec<String> = refused.iter().map(|a| list_of(a)).collect();
            d.warning(
                Some(&call.loc),
                "",
                format!(
                    "`{tool}` is called for {} but is not in {}; the call will be rejected",
                    ids.join(", "),
                    lists.join(", ")
                ),
            );
        }
    }
    d
}

/// `tools --agent`: what deferred loading keeps out of the agent's first request.
fn deferred_note(project: &Project, agent: &crate::config::AgentConfig) -> String {
    let toolset = project.registry.resolve_agent(agent);
    if toolset.deferred.is_empty() {
        return String::new();
    }
    let (deferred, search) = crate::support::tool_search::deferred_chars(&project.registry, &toolset);
    // The same 4-characters-per-token rate the model loop starts from before it calibrates.
    let saved = deferred.saturating_sub(search) / 4;
    format!(
        "\n{} of {}'s {} tools are deferred (loaded through tool_search): about {saved} prompt tokens saved per \
         request until they are activated ({} characters of definitions, less {} for tool_search).\n",
        toolset.deferred.len(),
        agent.id,
        toolset.tools.len() - 1,
        deferred,
        search
    )
}

/// `suzumio tools <dir> [--agent ID] [--json]`.
pub fn tools(dir: &Path, agent: Option<&str>, as_json: bool) -> Result<Output, CliError> {
    let project = Project::load(dir, &ProcessEnv)?;
    let live = super::permissions::live_snapshot(&project)?;
    let c = &project.config;
    if let Some(id) = agent
        && c.agent(id).is_none()
    {
        return Err(unknown_agent(c, id));
    }
    let rows: Vec<_> = project
        .registry
        .tools()
        .map(|(pack, tool)| {
            let allowed: Vec<&str> =
                c.agents.iter().filter(|a| project.registry.may_call(a, &tool.name)).map(|a| a.id.as_str()).collect();
            (pack, tool, allowed)
        })
        .filter(|(_, _, allowed)| agent.is_none_or(|id| allowed.contains(&id)))
        .collect();
    let switches = switches_of(&project)?;
    let stdout = if as_json {
        let entries = crate::catalog::catalog_in(&project, agent.and_then(|id| c.agent(id)), &live, &switches);
        serde_json::to_string_pretty(&entries).unwrap_or_default() + "\n"
    } else {
        let table: Vec<[String; 5]> = rows
            .iter()
            .map(|(pack, tool, allowed)| {
                [
                    tool.name.clone(),
                    pack.id.clone(),
                    decision_cell(&project, &live, agent, &tool.name, allowed),
                    if allowed.is_empty() { "-".into() } else { allowed.join(",") },
                    first_line(&tool.description, 72),
                ]
            })
            .collect();
        let mut out = render_table(["TOOL", "TOOLPACK", "DECISION", "AGENTS", "DESCRIPTION"], &table);
        if let Some(a) = agent.and_then(|id| c.agent(id)) {
            out.push_str(&deferred_note(&project, a));
        }
        out.push_str(&switched_off_note(&project, agent, &switches));
        out
    };
    Ok(Output { stdout, warnings: project.warnings.warnings })
}

/// The tools switched for the project's agents, from its store when it has one (`tools` does
/// not create the state of a project that never ran).
fn switches_of(project: &Project) -> Result<Vec<crate::store::ToolSwitch>, CliError> {
    let db = project.config.root.join(crate::store::STATE_DIR).join(crate::store::DB_FILE);
    if !db.is_file() {
        return Ok(Vec::new());
    }
    let store = crate::store::Store::open_read_only(&project.config, std::sync::Arc::new(crate::clock::SystemClock))?;
    Ok(store.all_tool_switches()?)
}

/// `tools`: the tools switched off per agent now (`suzumio tools on` brings them back), with who
/// switched them and when; nothing when none is.
fn switched_off_note(project: &Project, only: Option<&str>, switches: &[crate::store::ToolSwitch]) -> String {
    let mut out = String::new();
    for agent in project.config.agents.iter().filter(|a| only.is_none_or(|o| o == a.id)) {
        let off: Vec<String> = switches
            .iter()
            .filter(|s| !s.enabled && s.agent_id == agent.id && project.registry.may_call(agent, &s.tool))
            .map(|s| {
                let group = s.group.as_ref().map(|g| format!(", with group:{g}")).unwrap_or_default();
                format!("{} (by {} at {}{group})", s.tool, s.by, crate::clock::iso(s.at))
            })
            .collect();
        if !off.is_empty() {
            let _ = write!(out, "\nswitched off for {} ({}): {}", agent.id, off.len(), off.join(", "));
        }
    }
    if !out.is_empty() {
        out.push_str("\n(suzumio tools on <dir> <agent> <tool|group:NAME> switches them back on)\n");
    }
    out
}

/// The `tools` table's DECISION: the one decision every allowed agent gets, or `agent:decision`
/// for each when they differ (only `--agent`'s with `--agent`).
fn decision_cell(
    project: &Project,
    live: &crate::permissions::live::Snapshot,
    only: Option<&str>,
    tool: &str,
    allowed: &[&str],
) -> String {
    let decisions: Vec<(&str, &'static str)> = allowed
        .iter()
        .filter(|id| only.is_none_or(|o| o == **id))
        .filter_map(|id| {
            let agent = project.config.agent(id)?;
            let extra = live.rules_for(id).unwrap_or_default();
            let d = crate::permissions::default_for_tool_in(project, agent, tool, &extra, live.mode_of(agent))?;
            Some((*id, d.behavior.as_str()))
        })
        .collect();
    match decisions.first() {
        None => "-".into(),
        Some((_, first)) if decisions.iter().all(|(_, d)| d == first) => first.to_string(),
        Some(_) => decisions.iter().map(|(a, d)| format!("{a}:{d}")).collect::<Vec<_>>().join(","),
    }
}

/// `  permissions (mode default): allow a, b; ask c` for `check`, with the live rules and the
/// mode in force.
fn permission_line(
    project: &Project,
    agent: &crate::config::AgentConfig,
    tools: &[String],
    live: &crate::permissions::live::Snapshot,
) -> String {
    use crate::permissions::Behavior;
    let mut groups: Vec<(Behavior, Vec<String>)> =
        vec![(Behavior::Allow, Vec::new()), (Behavior::Ask, Vec::new()), (Behavior::Deny, Vec::new())];
    // A live rule that does not read is named in the rule lines below; here it decides nothing.
    let extra = live.rules_for(&agent.id).unwrap_or_default();
    let mode = live.mode_of(agent);
    for tool in tools {
        if let Some(d) = crate::permissions::default_for_tool_in(project, agent, tool, &extra, mode) {
            let label = if d.behavior == Behavior::Allow { tool.clone() } else { format!("{tool} ({})", d.source) };
            if let Some((_, list)) = groups.iter_mut().find(|(b, _)| *b == d.behavior) {
                list.push(label);
            }
        }
    }
    let parts: Vec<String> = groups
        .into_iter()
        .filter(|(_, list)| !list.is_empty())
        .map(|(b, list)| format!("{} {}", b.as_str(), list.join(", ")))
        .collect();
    let decisions = if parts.is_empty() { "no tools".to_string() } else { parts.join("; ") };
    let mode = crate::permissions::live::mode_line(agent, live.override_of(&agent.id));
    format!("  permissions (mode {mode}): {decisions}")
}
