//! What each CLI command does. Commands load the project, compute, and return their output as
//! text (or JSON text) plus warnings, or a [`CliError`] that knows its exit code; `main.rs`
//! prints and exits. `--json` shapes are the structs of [`views`]; the commands that follow
//! activations and events are in [`activity`].

mod activity;
pub mod views;

pub use activity::{
    CANCELLED_BY_USER, LogFilter, WAKE_BODY, activations, cancel, follow_logs, history, logs, show, wake,
};

pub mod approvals;
pub mod mcp;
pub mod scaffold;

use std::fmt::Write as _;
use std::path::Path;

use serde_json::json;

use crate::backend::BackendError;
use crate::config::load::ProcessEnv;
use crate::config::{BackendKind, Diagnostic, Diagnostics, InvalidInput, Priority};
use crate::controller::RunError;
use crate::project::Project;
use crate::store::{ProjectStatus, SignalStatus, StoreError};
use crate::support::InvokeError;

pub struct Output {
    pub stdout: String,
    pub warnings: Vec<Diagnostic>,
}

impl From<String> for Output {
    fn from(stdout: String) -> Self {
        Output { stdout, warnings: Vec::new() }
    }
}

/// Why a command failed. [`CliError::exit_code`]: 2 when the user's input (arguments, config,
/// the project's state they asked to change) is wrong, 1 for failures at run time.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The config or a manifest is invalid; rendered as its own `error:` lines.
    #[error("{0}")]
    Invalid(#[from] InvalidInput),
    /// An argument or request the user must change.
    #[error("{0}")]
    Input(String),
    /// Loading the project, opening its state, serving or starting runners failed.
    #[error("{0}")]
    Run(#[from] RunError),
    /// A WebUI entry or a store request was refused (exit 2) or failed (exit 1).
    #[error("{0}")]
    Invoke(#[from] InvokeError),
    #[error("{0}")]
    Backend(#[from] BackendError),
    /// A tool call that did not produce an output: refused (exit 2) or failed (exit 1).
    #[error("{0}")]
    Tool(#[from] crate::toolpack::ToolError),
    /// A failure at run time.
    #[error("{0}")]
    Failed(String),
}

/// The store's own split: what the caller can fix is refused, the rest failed.
impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        CliError::Invoke(e.into())
    }
}

impl CliError {
    /// What kind of failure, as `--json` error objects name it.
    pub fn kind(&self) -> &'static str {
        match self {
            CliError::Invalid(_) | CliError::Run(RunError::Invalid(_)) => "invalid_config",
            CliError::Tool(e) => e.kind(),
            _ if self.exit_code() == 2 => "invalid_input",
            _ => "failed",
        }
    }

    /// A line that helps fix the input, printed under the error: the allowed values of an enum
    /// that arrived in JSON (where clap could not check it).
    pub fn hint(&self) -> Option<String> {
        // Config diagnostics carry their own hints.
        if self.is_rendered() {
            return None;
        }
        let message = self.to_string();
        // The store's and the policy's text, and a schema's enum failure on a `priority` field.
        let priority = message.contains("Invalid priority: ") || message.contains("/priority: ");
        priority.then(|| {
            let all: Vec<&str> = Priority::ALL.iter().map(|p| p.as_str()).collect();
            format!("hint: a priority is one of {}", all.join(", "))
        })
    }

    /// The `--json` error object.
    pub fn to_json(&self) -> String {
        let message = match self {
            CliError::Invalid(i) | CliError::Run(RunError::Invalid(i)) => {
                crate::config::diag::sorted(&i.0.errors).iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n")
            }
            other => other.to_string(),
        };
        to_json(&views::JsonError {
            error: views::ErrorBody { message, kind: self.kind(), exit_code: self.exit_code() },
        })
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Invalid(_) | CliError::Input(_) => 2,
            CliError::Run(e) => e.exit_code(),
            CliError::Invoke(InvokeError::Handler(_) | InvokeError::Internal(_) | InvokeError::DiskFull(_)) => 1,
            CliError::Invoke(_) => 2,
            CliError::Tool(crate::toolpack::ToolError::Rejected(_)) => 2,
            CliError::Backend(_) | CliError::Tool(_) | CliError::Failed(_) => 1,
        }
    }

    /// Config diagnostics are already `error: ...` lines; everything else is one message.
    pub fn is_rendered(&self) -> bool {
        matches!(self, CliError::Invalid(_) | CliError::Run(RunError::Invalid(_)))
    }
}

/// Pretty JSON and a newline: how every `--json` prints.
fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
}

/// `Unknown agent: wirter (did you mean `writer`? agents: pm, writer)`: exit 2.
pub(crate) fn unknown_agent(config: &crate::config::ProjectConfig, id: &str) -> CliError {
    let known: Vec<&str> = config.agents.iter().map(|a| a.id.as_str()).collect();
    let hint =
        crate::config::diag::did_you_mean(id, known.iter().copied()).map(|h| format!("{h} ")).unwrap_or_default();
    CliError::Input(format!("Unknown agent: {id} ({hint}agents: {})", known.join(", ")))
}

/// `Unknown tool: file.raed (did you mean `file.read`?)`: exit 2.
fn unknown_tool(project: &Project, name: &str) -> CliError {
    let hint = crate::config::diag::did_you_mean(name, project.registry.tools().map(|(_, t)| t.name.as_str()))
        .map(|h| format!(" ({h})"))
        .unwrap_or_default();
    CliError::Input(format!("Unknown tool: {name}{hint} (suzumio tools lists them)"))
}

/// The input argument of `ui` and `tool call`: a JSON object, `{}` when left out.
fn json_input(input: Option<&str>) -> Result<serde_json::Value, CliError> {
    match input {
        None => Ok(json!({})),
        Some(text) => {
            serde_json::from_str(text).map_err(|e| CliError::Input(format!("the input is not valid JSON: {e}")))
        }
    }
}

/// `suzumio check <dir> [--json]`.
pub async fn check(dir: &Path, as_json: bool, backend: Option<BackendKind>) -> Result<Output, CliError> {
    let mut project = Project::load(dir, &ProcessEnv)?;
    if crate::support::mcp_discovery::undiscovered(&project) {
        let listed = crate::support::mcp_discovery::discover(dir, backend).await?;
        project = Project::load_with(dir, &ProcessEnv, &listed)?;
    }
    let modules = check_modules(&project).await;
    if modules.has_errors() {
        return Err(CliError::Invalid(InvalidInput(modules)));
    }
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
                    permission_mode: a.permission_mode.as_str(),
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
        if !set.deferred.is_empty() {
            let _ = writeln!(out, "  deferred until tool_search ({}): {}", set.deferred.len(), set.deferred.join(", "));
        }
        let _ = writeln!(out, "  mounted toolpacks: {}", list_or_none(&set.mounted_packs));
        let _ = writeln!(out, "{}", permission_line(&project, agent, &set.tools));
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

/// `suzumio tools <dir> [--agent ID] [--json]`.
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

pub fn tools(dir: &Path, agent: Option<&str>, as_json: bool) -> Result<Output, CliError> {
    let project = Project::load(dir, &ProcessEnv)?;
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
    let stdout = if as_json {
        let entries = crate::catalog::catalog(&project, agent.and_then(|id| c.agent(id)));
        serde_json::to_string_pretty(&entries).unwrap_or_default() + "\n"
    } else {
        let table: Vec<[String; 5]> = rows
            .iter()
            .map(|(pack, tool, allowed)| {
                [
                    tool.name.clone(),
                    pack.id.clone(),
                    decision_cell(&project, agent, &tool.name, allowed),
                    if allowed.is_empty() { "-".into() } else { allowed.join(",") },
                    first_line(&tool.description, 72),
                ]
            })
            .collect();
        let mut out = render_table(["TOOL", "TOOLPACK", "DECISION", "AGENTS", "DESCRIPTION"], &table);
        if let Some(a) = agent.and_then(|id| c.agent(id)) {
            out.push_str(&deferred_note(&project, a));
        }
        out
    };
    Ok(Output { stdout, warnings: project.warnings.warnings })
}

/// The `tools` table's DECISION: the one decision every allowed agent gets, or `agent:decision`
/// for each when they differ (only `--agent`'s with `--agent`).
fn decision_cell(project: &Project, only: Option<&str>, tool: &str, allowed: &[&str]) -> String {
    let decisions: Vec<(&str, &'static str)> = allowed
        .iter()
        .filter(|id| only.is_none_or(|o| o == **id))
        .filter_map(|id| {
            Some((
                *id,
                crate::permissions::default_for_tool(project, project.config.agent(id)?, tool)?.behavior.as_str(),
            ))
        })
        .collect();
    match decisions.first() {
        None => "-".into(),
        Some((_, first)) if decisions.iter().all(|(_, d)| d == first) => first.to_string(),
        Some(_) => decisions.iter().map(|(a, d)| format!("{a}:{d}")).collect::<Vec<_>>().join(","),
    }
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
pub async fn ui(dir: &Path, target: &str, input: Option<&str>, as_json: bool) -> Result<Output, CliError> {
    let Some((pack, entry)) = target.split_once('/') else {
        return Err(CliError::Input(format!("`{target}` is not <toolpack>/<entry> (e.g. core/project.stats)")));
    };
    let input = json_input(input)?;
    let tools = crate::controller::open(dir)?;
    let project = tools.project.snapshot();
    let registry = &project.registry;
    let suggest = |name: &str, known: Vec<&str>| {
        crate::config::diag::did_you_mean(name, known).map(|h| format!(" ({h})")).unwrap_or_default()
    };
    match registry.pack(pack) {
        None => {
            let known = registry.packs().iter().map(|p| p.id.as_str()).collect();
            return Err(CliError::Invoke(InvokeError::Rejected(format!(
                "Unknown toolpack: {pack}{}",
                suggest(pack, known)
            ))));
        }
        Some(p) if !p.webui.iter().any(|e| e.id == entry) => {
            let known = p.webui.iter().map(|e| e.id.as_str()).collect();
            return Err(CliError::Invoke(InvokeError::Rejected(format!(
                "Unknown WebUI tool entry {entry} in {pack}{}",
                suggest(entry, known)
            ))));
        }
        Some(_) => {}
    }
    let output = tools.invoke_webui(pack, entry, input).await?;
    if as_json {
        return Ok(to_json(&output).into());
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
    Ok(out.into())
}

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

/// `suzumio signals <dir> [--agent ID] [--status S] [--limit N] [--json]`.
pub fn signals(
    dir: &Path,
    agent: Option<&str>,
    status: Option<SignalStatus>,
    limit: usize,
    as_json: bool,
) -> Result<Output, CliError> {
    let tools = crate::controller::open_read_only(dir)?;
    if let Some(a) = agent
        && tools.project.config.agent(a).is_none()
    {
        return Err(unknown_agent(&tools.project.config, a));
    }
    let query = crate::store::SignalQuery {
        target_agent: agent.map(str::to_string),
        status,
        limit: Some(limit),
        kind: None,
        before_id: None,
    };
    let signals = tools.store.list_signals(&query)?;
    if as_json {
        return Ok(to_json(&signals).into());
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
    Ok(render_table(["SIGNAL", "KIND", "PRI", "STATUS", "TARGET", "CREATED", "NOT BEFORE"], &rows).into())
}

/// `suzumio tool call <dir> --agent ID <tool> [json]`: one tool through the real path, inside a
/// short activation of its own (so the call is recorded like any other). Exit 1 on a tool error.
pub async fn tool_call(
    dir: &Path,
    agent: &str,
    tool: &str,
    input: Option<&str>,
    backend: Option<BackendKind>,
    as_json: bool,
) -> Result<Output, CliError> {
    let input = json_input(input)?;
    let tools = crate::controller::open(dir)?;
    if tools.project.config.agent(agent).is_none() {
        return Err(unknown_agent(&tools.project.config, agent));
    }
    if tools.project.snapshot().registry.tool(tool).is_none() {
        return Err(unknown_tool(&tools.project.snapshot(), tool));
    }
    // Refused input is refused before a runner (or a Docker engine) is asked for; the path
    // below says the same for calls that get that far.
    if tools.project.config.agent(agent).is_some_and(|a| !a.tools.allows(tool)) {
        return Err(crate::toolpack::ToolError::Rejected(format!("Tool not allowed for {agent}: {tool}")).into());
    }
    let kind = backend.unwrap_or(tools.project.config.backend.kind);
    let needs_runner = tools
        .project
        .snapshot()
        .registry
        .tool(tool)
        .is_some_and(|(_, def)| def.runs_in == crate::toolpack::RunsIn::Runner);
    let runners = if needs_runner { Some(crate::controller::runners(&tools, kind).await?) } else { None };
    let no_runner = crate::activation::NoRunner("not needed".into());
    let runner: &dyn crate::activation::RunnerTools = match &runners {
        Some(r) => r.as_ref(),
        None => &no_runner,
    };
    // A busy agent is a failure at run time (try again later), not something to fix in the input.
    let activation = tools
        .store
        .start_activation(agent, &format!("suzumio tool call {tool}"), &[])
        .map_err(|e| CliError::Failed(e.to_string()))?;
    let result = crate::activation::run::execute_tool(&tools, runner, agent, &activation.id, tool, input).await;
    // The activation only frames the call; a failing tool is recorded on the tool call, and must
    // not leave the agent `failed`.
    let framed = tools.store.finish_activation(&activation.id, crate::store::ActivationOutcome::Completed, None, None);
    if let Some(r) = &runners {
        r.shutdown().await;
    }
    if !tools.audit.flush_async(crate::controller::AUDIT_FLUSH).await {
        tracing::warn!("the permission audit was not written within {} s", crate::controller::AUDIT_FLUSH.as_secs());
    }
    framed.map_err(|e| CliError::Failed(format!("recording the end of the call's activation: {e}")))?;
    let output = result?;
    if as_json {
        return Ok(to_json(&output).into());
    }
    let mut out = String::new();
    if let Some(title) = &output.title {
        let _ = writeln!(out, "{title}");
    }
    let _ = writeln!(out, "{}", output.output);
    Ok(out.into())
}

/// `suzumio send <dir> <recipient> [--priority P] <body…> [--json]`: a message from the user.
pub fn send(dir: &Path, recipient: &str, priority: Priority, body: &str, as_json: bool) -> Result<Output, CliError> {
    let tools = crate::controller::open(dir)?;
    if !recipient.starts_with('#') && recipient != "user" && tools.project.config.agent(recipient).is_none() {
        return Err(unknown_agent(&tools.project.config, recipient));
    }
    let (recipient, channel) = if recipient.starts_with('#') {
        (None, Some(recipient.to_string()))
    } else {
        (Some(recipient.to_string()), None)
    };
    let sent = tools.store.send_message(crate::store::SendMessage {
        sender: "user".into(),
        recipient,
        channel,
        priority: Some(priority.to_string()),
        body: body.to_string(),
        source_agent: None,
        source_activation: None,
    })?;
    if as_json {
        return Ok(to_json(&sent).into());
    }
    Ok(format!("sent {} ({} signal(s))\n", sent.message_id, sent.signal_ids.len()).into())
}

/// `suzumio status <dir> [--json]`.
pub fn status(dir: &Path, as_json: bool) -> Result<Output, CliError> {
    let tools = crate::controller::open_read_only(dir)?;
    let project = tools.store.project()?;
    let stats = tools.store.project_stats()?;
    let counts = tools.store.signal_counts()?;
    if as_json {
        use crate::activation::budget::spent;
        let mut agents = Vec::new();
        for a in tools.store.agents()? {
            if tools.project.config.agent(&a.id).is_none() {
                continue;
            }
            let s = spent(&tools.store, Some(&a.id), a.resumed_at.as_deref())?;
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
        };
        return Ok(to_json(&view).into());
    }
    let mut out = String::new();
    let _ = writeln!(out, "project {}: {}", project.name, project.status.as_str());
    for a in tools.store.agents()? {
        if tools.project.config.agent(&a.id).is_none() {
            continue;
        }
        let active = a.active_activation_id.map(|id| format!(" ({id})")).unwrap_or_default();
        let paused = a.paused.as_ref().map(|p| format!("  {}", pause_line(&a.id, p))).unwrap_or_default();
        let _ = writeln!(out, "  {:<16} {}{active}{paused}", a.id, a.status.as_str());
    }
    for request in tools.store.approvals(true, crate::store::MAX_LIMIT)? {
        let _ = writeln!(out, "  {}: {}", request.agent_id, approvals::waiting_line(&request));
    }
    usage_lines(&tools, &mut out)?;
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
    Ok(out.into())
}

/// How `status` shows a pause: why, and what ends it.
fn pause_line(agent: &str, pause: &crate::store::Pause) -> String {
    let until = pause.until.as_deref().map(|u| format!("; resumes at {u}")).unwrap_or_default();
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
        let s = spent(&tools.store, Some(&a.id), a.resumed_at.as_deref())?;
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

/// `  permissions (mode default): allow a, b; ask c` for `check`.
fn permission_line(project: &Project, agent: &crate::config::AgentConfig, tools: &[String]) -> String {
    use crate::permissions::Behavior;
    let mut groups: Vec<(Behavior, Vec<String>)> =
        vec![(Behavior::Allow, Vec::new()), (Behavior::Ask, Vec::new()), (Behavior::Deny, Vec::new())];
    for tool in tools {
        if let Some(d) = crate::permissions::default_for_tool(project, agent, tool) {
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
    format!("  permissions (mode {}): {decisions}", agent.permission_mode.as_str())
}

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
    let decision = permissions::decide(&project, &permissions::Call { agent, tool, def, input: &input });
    let pointers = def.presentation.as_ref().map(|p| p.target.as_slice()).unwrap_or_default();
    let subject = match Subject::of(tool, pointers, &input) {
        Subject::Shell(Ok(commands)) => json!({ "commands": commands.iter().map(|c| c.text()).collect::<Vec<_>>() }),
        Subject::Shell(Err(e)) => json!({ "unparsable": e.to_string() }),
        Subject::Paths(paths) => json!({ "paths": paths }),
        Subject::Host(host) => json!({ "host": host }),
        Subject::None => json!({}),
    };
    let hooks = permissions::hooks::packs_for(&project, tool);
    if as_json {
        let mut value = json!({
            "agent": agent.id,
            "tool": tool,
            "mode": agent.permission_mode.as_str(),
            "decision": decision.behavior,
            "source": decision.source,
            "reason": decision.reason,
            "risk": decision.risk,
            "hooks": hooks,
        });
        if let (Some(v), Some(s)) = (value.as_object_mut(), subject.as_object()) {
            v.extend(s.clone());
        }
        return Ok((serde_json::to_string_pretty(&value).unwrap_or_default() + "\n").into());
    }
    let mut out = String::new();
    let _ = writeln!(out, "decision: {}", decision.behavior.as_str());
    let _ = writeln!(out, "source: {}", decision.source);
    let _ = writeln!(out, "reason: {}", decision.reason);
    let _ = writeln!(out, "risk: {}", decision.risk.as_str());
    let _ = writeln!(out, "mode: {}", agent.permission_mode.as_str());
    if let Some(commands) = subject.get("commands").and_then(|c| c.as_array()) {
        let texts: Vec<&str> = commands.iter().filter_map(|c| c.as_str()).collect();
        let _ = writeln!(out, "commands: {}", texts.join(" | "));
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
