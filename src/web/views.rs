//! The API's response bodies: `Serialize` views built from the project, its registry and the
//! store. Field names and their order are the wire format (`tests/golden/*`), so they live here
//! and not on the domain types. Views only read; nothing here changes state.

use serde::Serialize;
use serde_json::Value;

use crate::activation::budget::{Spent, spent};
use crate::clock::iso;
use crate::config::{AgentConfig, BudgetLimits, PresetConfig, PresetTarget, ProviderConfig};
use crate::store::{
    ActivationRecord, ActivationStatus, ActivationUsage, AgentStatus, HistoryEntry, HistoryRecord, MessageEdge, Pause,
    ProjectRecord, ProjectStats, ProjectStatus, StoreError, TokenUsage, ToolCallStatus, ToolCallSummary,
};
use crate::support::ToolHost;
use crate::toolpack::{Presentation, Toolpack, WebuiEntry};

#[derive(Serialize)]
pub struct Health {
    pub ok: bool,
    pub version: &'static str,
}

/// `GET …/agents/:a/commands`: the agent's background commands; `runner` is `connected`, or
/// `not running` (then only the lost ones are shown). The runner's commands and the lost ones
/// the store keeps (no runner knows them any more), newest first (ids are time-ordered).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackgroundCommands {
    pub agent_id: String,
    pub runner: &'static str,
    pub items: Vec<BackgroundCommand>,
}

impl BackgroundCommands {
    pub fn new(
        agent: &str,
        listed: Option<Vec<crate::rpc::CommandInfo>>,
        lost: Vec<crate::store::CommandRecord>,
    ) -> Self {
        let runner = if listed.is_some() { "connected" } else { "not running" };
        let mut items: Vec<BackgroundCommand> =
            listed.unwrap_or_default().into_iter().rev().map(BackgroundCommand::from).collect();
        let lost: Vec<BackgroundCommand> =
            lost.into_iter().filter(|l| !items.iter().any(|c| c.id == l.id)).map(BackgroundCommand::from).collect();
        items.extend(lost);
        items.sort_by(|a, b| b.id.cmp(&a.id));
        BackgroundCommands { agent_id: agent.to_string(), runner, items }
    }
}

/// One background command, newest first in lists.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackgroundCommand {
    pub id: String,
    pub name: Option<String>,
    pub command: String,
    pub cwd: String,
    /// `running`, `exited`, `failed`, `stopped` or `lost` (its runner went away: see `cause`).
    pub status: String,
    /// For a lost command: `killed`, `oom`, `removed`, `exited` or `stopped` (how the runner
    /// that ran it ended), and `reason` says it in words.
    pub cause: Option<String>,
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub error: Option<String>,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub output_bytes: u64,
    /// Bytes of output no longer kept (the runner keeps the last 1 MiB).
    pub dropped_bytes: u64,
    pub recent_output: String,
}

impl From<crate::rpc::CommandInfo> for BackgroundCommand {
    fn from(c: crate::rpc::CommandInfo) -> Self {
        BackgroundCommand {
            id: c.id,
            name: c.name,
            command: c.command,
            cwd: c.cwd,
            status: c.status.as_str().to_string(),
            cause: None,
            reason: None,
            exit_code: c.exit_code,
            signal: c.signal,
            error: c.error,
            started_at: c.started_at,
            ended_at: c.ended_at,
            output_bytes: c.output_bytes,
            dropped_bytes: c.dropped_bytes,
            recent_output: c.recent_output.unwrap_or_default(),
        }
    }
}

impl From<crate::store::CommandRecord> for BackgroundCommand {
    fn from(c: crate::store::CommandRecord) -> Self {
        BackgroundCommand {
            id: c.id,
            name: c.name,
            command: c.command,
            cwd: c.cwd,
            status: c.status,
            cause: c.cause,
            reason: c.reason,
            exit_code: c.exit_code,
            signal: c.signal,
            error: None,
            started_at: iso(c.started_at),
            ended_at: c.ended_at.map(iso),
            // Its output went with its runner.
            output_bytes: 0,
            dropped_bytes: 0,
            recent_output: String::new(),
        }
    }
}

/// One page of a list route; `next` is the cursor for the following page.
#[derive(Serialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<String>,
}

/// An item of `GET /api/projects`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectItem<'a> {
    pub name: &'a str,
    pub status: ProjectStatus,
    pub task: &'a str,
    pub updated_at: String,
}

impl<'a> From<&'a ProjectRecord> for ProjectItem<'a> {
    fn from(p: &'a ProjectRecord) -> Self {
        ProjectItem { name: &p.name, status: p.status, task: &p.task, updated_at: iso(p.updated_at) }
    }
}

/// `GET /api/projects/{project}`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary<'a> {
    pub name: &'a str,
    pub status: ProjectStatus,
    pub task: &'a str,
    pub submitted_report: Option<&'a str>,
    pub stats: ProjectStats,
    pub channels: &'a [String],
    pub coordinator: Option<&'a str>,
    pub updated_at: String,
    /// The whole project's usage today against `budgets.project`.
    pub budget: BudgetView,
}

/// Usage in the current periods (today, this hour; UTC) against the limits that apply.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetView {
    pub today: TokenUsage,
    pub activations_this_hour: u64,
    pub max_activations_per_hour: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens_per_activation: Option<u64>,
    pub max_tokens_per_day: Option<u64>,
    pub max_cost_per_day: Option<f64>,
}

impl BudgetView {
    fn new(spent: Spent, limits: &BudgetLimits) -> BudgetView {
        BudgetView {
            today: spent.today,
            activations_this_hour: spent.activations_this_hour,
            max_activations_per_hour: limits.max_activations_per_hour,
            max_tokens_per_activation: limits.max_tokens_per_activation,
            max_tokens_per_day: limits.max_tokens_per_day,
            max_cost_per_day: limits.max_cost_per_day,
        }
    }
}

impl<'a> Summary<'a> {
    pub fn new(host: &'a ToolHost, p: &'a ProjectRecord, stats: ProjectStats) -> Result<Self, StoreError> {
        let config = &host.project.config;
        let budget = BudgetView::new(spent(&host.store, None, None)?, &config.budgets.project);
        Ok(Summary {
            name: &p.name,
            status: p.status,
            task: &p.task,
            submitted_report: p.submitted_report.as_deref(),
            stats,
            channels: &config.channels,
            coordinator: config.communication.coordinator_agent.as_deref(),
            updated_at: iso(p.updated_at),
            budget,
        })
    }
}

#[derive(Serialize)]
pub struct Task<'a> {
    pub task: &'a str,
}

#[derive(Serialize)]
pub struct Report<'a> {
    pub status: ProjectStatus,
    pub path: Option<&'a str>,
    pub content: Option<String>,
}

/// The answer of `start`, `stop` and `approve`.
#[derive(Serialize)]
pub struct StatusChange<'a> {
    pub name: &'a str,
    pub status: ProjectStatus,
}

/// `GET activations/{id}`: the activation and its tool calls (never inputs or outputs).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivationDetail {
    #[serde(flatten)]
    pub activation: ActivationRecord,
    pub tool_calls: Vec<ToolCallSummary>,
}

/// `GET activations/{id}/context`: what the model saw in one activation.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivationContext<'a> {
    pub activation: ActivationHead<'a>,
    pub activation_prompt: &'a str,
    pub context: ContextMessages,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivationHead<'a> {
    pub id: &'a str,
    pub agent_id: &'a str,
    pub status: ActivationStatus,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub error: Option<&'a str>,
    pub usage: Option<&'a ActivationUsage>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextMessages {
    pub message_count: usize,
    pub total_chars: usize,
    pub messages: Vec<ContextMessage>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextMessage {
    pub kind: String,
    pub content: Value,
    /// Characters of `content` as JSON text: what it costs in the model's context.
    pub chars: usize,
    pub created_at: String,
}

impl<'a> ActivationContext<'a> {
    pub fn new(a: &'a ActivationRecord, history: &'a [HistoryRecord]) -> Self {
        let messages: Vec<ContextMessage> = history
            .iter()
            .map(|h| {
                let (kind, content) = h.entry.to_parts();
                let chars = content.to_string().chars().count();
                ContextMessage { kind, content, chars, created_at: iso(h.created_at) }
            })
            .collect();
        ActivationContext {
            activation: ActivationHead {
                id: &a.id,
                agent_id: &a.agent_id,
                status: a.status,
                started_at: iso(a.started_at),
                ended_at: a.ended_at.map(iso),
                error: a.error.as_deref(),
                usage: a.usage.as_ref(),
            },
            activation_prompt: &a.prompt,
            context: ContextMessages {
                message_count: messages.len(),
                total_chars: messages.iter().map(|m| m.chars).sum(),
                messages,
            },
        }
    }
}

/// `GET agents/{agent}/history-archive/{id}`: a compaction and the rows it replaced.
#[derive(Serialize)]
pub struct HistoryArchive<'a> {
    pub compaction: &'a HistoryRecord,
    pub archive: &'a [HistoryRecord],
}

// The registry's parts below are copied, not borrowed: the registry is the version served when
// the request came, which an MCP list change may replace before the answer is written.
#[derive(Serialize)]
pub struct PresentationView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tone: Option<String>,
}

impl From<&Presentation> for PresentationView {
    fn from(p: &Presentation) -> Self {
        PresentationView { label: p.label.clone(), icon: p.icon.clone(), group: p.group.clone(), tone: p.tone.clone() }
    }
}

/// An item of `GET tool-ui`: one WebUI entry of a registered pack.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WebuiEntryView {
    pub id: String,
    pub title: String,
    pub kind: &'static str,
    pub toolpack_id: String,
    pub toolpack_kind: &'static str,
    pub related_tools: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub submit_label: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presentation: Option<PresentationView>,
}

impl WebuiEntryView {
    fn new(pack: &Toolpack, entry: &WebuiEntry) -> Self {
        WebuiEntryView {
            id: entry.id.clone(),
            title: entry.title.clone(),
            kind: entry.kind.as_str(),
            toolpack_id: pack.id.clone(),
            toolpack_kind: pack.kind_name(),
            related_tools: entry.related_tools.clone(),
            description: entry.description.clone(),
            input_schema: entry.input_schema.clone(),
            submit_label: entry.submit_label.clone(),
            presentation: entry.presentation.as_ref().map(PresentationView::from),
        }
    }
}

/// Every WebUI entry of every registered pack, in registry order.
pub fn webui_catalog(host: &ToolHost) -> Vec<WebuiEntryView> {
    host.project
        .snapshot()
        .registry
        .packs()
        .iter()
        .flat_map(|pack| pack.webui.iter().map(move |entry| WebuiEntryView::new(pack, entry)))
        .collect()
}

/// An item of `GET tool-status` (reference §3.9): counts and the last call, never inputs or
/// outputs. The registry's fields are set for registered tools; the `last*` fields once the
/// tool was called.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolStatusView<'a> {
    pub tool: String,
    pub enabled_for_agents: Vec<&'a str>,
    pub call_count: u64,
    pub running_count: u64,
    pub completed_count: u64,
    pub failed_count: u64,
    /// A tool seen only in calls has the pack recorded with them (possibly none).
    pub toolpack_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toolpack_kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requires_approval: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presentation: Option<PresentationView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_status: Option<ToolCallStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_agent_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub submitted_report_path: Option<String>,
}

/// Every registered tool plus any tool seen in calls, sorted by name.
pub fn tool_status(host: &ToolHost) -> Result<Vec<ToolStatusView<'_>>, StoreError> {
    let stats = host.store.tool_stats()?;
    let project = host.store.project()?;
    let served = host.project.snapshot();
    let registry = &served.registry;
    let mut names: Vec<String> = registry.tools().map(|(_, t)| t.name.clone()).collect();
    names.extend(stats.iter().map(|s| s.tool.clone()));
    names.sort();
    names.dedup();
    let agents = &host.project.config.agents;
    Ok(names
        .into_iter()
        .map(|name| {
            let registered = registry.tool(&name);
            let stat = stats.iter().find(|s| s.tool == name);
            let submitted_report_path =
                if name == "completion.submit" { project.submitted_report.clone() } else { None };
            ToolStatusView {
                enabled_for_agents: agents
                    .iter()
                    .filter(|a| registry.may_call(a, &name))
                    .map(|a| a.id.as_str())
                    .collect(),
                call_count: stat.map_or(0, |s| s.call_count),
                running_count: stat.map_or(0, |s| s.running_count),
                completed_count: stat.map_or(0, |s| s.completed_count),
                failed_count: stat.map_or(0, |s| s.failed_count),
                toolpack_id: match registered {
                    Some((pack, _)) => Some(pack.id.clone()),
                    None => stat.and_then(|s| s.toolpack_id.clone()),
                },
                toolpack_kind: registered.map(|(pack, _)| pack.kind_name()),
                description: registered.map(|(_, tool)| tool.description.clone()),
                requires_approval: registered.map(|(_, tool)| tool.requires_approval),
                presentation: registered.and_then(|(_, tool)| tool.presentation.as_ref()).map(PresentationView::from),
                last_status: stat.map(|s| s.last_status),
                last_agent_id: stat.map(|s| s.last_agent_id.clone()),
                last_at: stat.map(|s| iso(s.last_at)),
                last_error: stat.and_then(|s| s.last_error.clone()),
                submitted_report_path,
                tool: name,
            }
        })
        .collect())
}

/// An item of `GET agents`: the roster with live status and what each agent may use. No tokens.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentView<'a> {
    pub id: &'a str,
    pub role: &'a str,
    pub display_name: &'a str,
    pub status: AgentStatus,
    pub active_activation_id: Option<String>,
    pub updated_at: Option<String>,
    pub model: &'a str,
    pub tools: Vec<String>,
    /// The allowed tools its model gets only through `tool_search`.
    pub deferred_tools: Vec<String>,
    /// The permission mode in force: default, auto or full-access (suzumio.yaml's
    /// `permissionMode`, unless switched at run time).
    pub permission_mode: String,
    /// The mode suzumio.yaml gives the agent.
    pub config_permission_mode: &'static str,
    /// Who switched the mode at run time, and when (absent: suzumio.yaml's is in force).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permission_mode_set: Option<crate::store::ModeOverride>,
    pub mounted_toolpacks: Vec<String>,
    /// Set while a budget or the wake-loop guard holds the agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<Pause>,
    /// Its usage today (since its last resume) against its budget.
    pub budget: BudgetView,
    /// Why it failed, while it is `failed`: its latest activation's error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

pub fn agents(host: &ToolHost) -> Result<Vec<AgentView<'_>>, StoreError> {
    let records = host.store.agents()?;
    let modes = host.store.permission_mode_overrides()?;
    host.project
        .config
        .agents
        .iter()
        .map(|a| {
            let record = records.iter().find(|r| r.id == a.id);
            let set_mode = modes.iter().find(|m| m.agent_id == a.id);
            let set = host.project.snapshot().registry.resolve_agent(a);
            let resumed_at = record.and_then(|r| r.resumed_at);
            let budget = BudgetView::new(spent(&host.store, Some(&a.id), resumed_at)?, &a.budget);
            let status = record.map_or(AgentStatus::Quiet, |r| r.status);
            let last_error = match status {
                AgentStatus::Failed => host.store.latest_activation(&a.id, None)?.and_then(|x| x.error),
                _ => None,
            };
            Ok(AgentView {
                id: &a.id,
                role: &a.role,
                display_name: &a.display_name,
                status,
                active_activation_id: record.and_then(|r| r.active_activation_id.clone()),
                updated_at: record.map(|r| iso(r.updated_at)),
                model: &a.model,
                tools: set.tools,
                deferred_tools: set.deferred,
                permission_mode: set_mode.map_or_else(|| a.permission_mode.as_str().to_string(), |o| o.mode.clone()),
                config_permission_mode: a.permission_mode.as_str(),
                permission_mode_set: set_mode.cloned(),
                mounted_toolpacks: set.mounted_packs,
                paused: record.and_then(|r| r.paused.clone()),
                budget,
                last_error,
            })
        })
        .collect()
}

/// `GET config` and `config/resolved`: the resolved config with every secret left out (keys
/// only as whether one is set and the variable it comes from; headers and env only by name).
#[derive(Serialize)]
pub struct ConfigView<'a> {
    pub name: &'a str,
    pub task: &'a str,
    pub channels: &'a [String],
    /// The same object packs get (`support::ops`), so the two never drift apart.
    pub communication: Value,
    pub agents: Vec<AgentConfigView<'a>>,
    pub toolpacks: Vec<ToolpackSummary>,
    pub scheduler: SchedulerView,
    pub backend: BackendView<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentConfigView<'a> {
    pub id: &'a str,
    pub role: &'a str,
    pub display_name: &'a str,
    pub model: &'a str,
    pub tools: Vec<String>,
    pub mounts: Vec<MountView<'a>>,
    pub env: Vec<&'a str>,
}

#[derive(Serialize)]
pub struct MountView<'a> {
    pub target: &'a str,
    pub readonly: bool,
}

#[derive(Serialize)]
pub struct ToolpackSummary {
    pub id: String,
    pub kind: &'static str,
    pub tools: usize,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerView {
    pub max_signals_per_activation: u64,
    pub tick_interval_ms: u64,
    pub no_effect_nudge: NudgeView,
    pub failed_nudge: Enabled,
    pub all_quiet_nudge: Enabled,
}

#[derive(Serialize)]
pub struct NudgeView {
    pub enabled: bool,
    pub priority: &'static str,
}

#[derive(Serialize)]
pub struct Enabled {
    pub enabled: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendView<'a> {
    pub kind: &'static str,
    pub image: &'a str,
    pub network: &'a str,
    pub memory_bytes: u64,
    pub cpus: f64,
    pub pids_limit: u64,
    pub max_tool_calls: Option<u64>,
    pub max_iterations: Option<u64>,
    pub models: ModelsView<'a>,
}

#[derive(Serialize)]
pub struct ModelsView<'a> {
    pub default: Option<&'a str>,
    pub providers: Vec<ProviderView<'a>>,
    pub presets: Vec<PresetView<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderView<'a> {
    pub id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(rename = "baseURL")]
    pub base_url: Option<&'a str>,
    #[serde(rename = "baseURLEnv")]
    pub base_url_env: Option<&'a str>,
    pub api_key_env: Option<&'a str>,
    pub has_inline_api_key: bool,
    pub headers: Vec<&'a str>,
    pub timeout_ms: Option<u64>,
}

impl<'a> From<&'a ProviderConfig> for ProviderView<'a> {
    fn from(p: &'a ProviderConfig) -> Self {
        ProviderView {
            id: &p.id,
            kind: p.kind.as_str(),
            base_url: p.base_url.as_deref(),
            base_url_env: p.base_url_env.as_deref(),
            api_key_env: p.api_key_env.as_deref(),
            has_inline_api_key: p.api_key.is_some(),
            headers: p.headers.keys().map(String::as_str).collect(),
            timeout_ms: p.timeout_ms,
        }
    }
}

#[derive(Serialize)]
#[serde(untagged)]
pub enum PresetView<'a> {
    #[serde(rename_all = "camelCase")]
    Model { id: &'a str, provider: &'a str, model: &'a str, api_model: Option<&'a str> },
    List {
        id: &'a str,
        #[serde(rename = "model-list")]
        model_list: &'a [String],
    },
}

impl<'a> From<&'a PresetConfig> for PresetView<'a> {
    fn from(p: &'a PresetConfig) -> Self {
        match &p.target {
            PresetTarget::Model { provider, model, api_model } => {
                PresetView::Model { id: &p.id, provider, model, api_model: api_model.as_deref() }
            }
            PresetTarget::List(list) => PresetView::List { id: &p.id, model_list: list },
        }
    }
}

impl<'a> From<&'a AgentConfig> for AgentConfigView<'a> {
    fn from(a: &'a AgentConfig) -> Self {
        AgentConfigView {
            id: &a.id,
            role: &a.role,
            display_name: &a.display_name,
            model: &a.model,
            tools: a.tools.entries.iter().map(|(p, _)| p.to_string()).collect(),
            mounts: a.mounts.iter().map(|m| MountView { target: &m.target, readonly: m.readonly }).collect(),
            env: a.env.keys().map(String::as_str).collect(),
        }
    }
}

pub fn config(host: &ToolHost) -> ConfigView<'_> {
    let c = &host.project.config;
    let s = &c.scheduler;
    ConfigView {
        name: &c.name,
        task: &c.task,
        channels: &c.channels,
        communication: crate::support::ops::communication_json(&c.communication),
        agents: c.agents.iter().map(AgentConfigView::from).collect(),
        toolpacks: host
            .project
            .snapshot()
            .registry
            .packs()
            .iter()
            .map(|p| ToolpackSummary { id: p.id.clone(), kind: p.kind_name(), tools: p.tools.len() })
            .collect(),
        scheduler: SchedulerView {
            max_signals_per_activation: s.max_signals_per_activation,
            tick_interval_ms: s.tick_interval_ms,
            no_effect_nudge: NudgeView {
                enabled: s.no_effect_nudge.enabled,
                priority: s.no_effect_nudge.priority.as_str(),
            },
            failed_nudge: Enabled { enabled: s.failed_nudge.enabled },
            all_quiet_nudge: Enabled { enabled: s.all_quiet_nudge.enabled },
        },
        backend: BackendView {
            kind: c.backend.kind.as_str(),
            image: &c.backend.docker.image,
            network: &c.backend.docker.network,
            memory_bytes: c.backend.docker.memory_bytes,
            cpus: c.backend.docker.cpus,
            pids_limit: c.backend.docker.pids_limit,
            max_tool_calls: c.activation.max_tool_calls,
            max_iterations: c.activation.max_iterations,
            models: ModelsView {
                default: c.models.default_preset.as_deref(),
                providers: c.models.providers.iter().map(ProviderView::from).collect(),
                presets: c.models.presets.iter().map(PresetView::from).collect(),
            },
        },
    }
}

/// An item of `GET agents/{agent}/history`: the stored row, and the real names of the tools it
/// names in their model-facing form (`file_write` is `file.write`): `tools` lists an
/// assistant output's calls in order, `tool` names a tool result's tool.
#[derive(Serialize)]
pub struct HistoryItem<'a> {
    #[serde(flatten)]
    pub record: &'a HistoryRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
}

/// `records` of `agent` with the real tool names beside the model-facing ones.
pub fn history_items<'a>(host: &ToolHost, agent: &AgentConfig, records: &'a [HistoryRecord]) -> Vec<HistoryItem<'a>> {
    let tools = host.project.snapshot().registry.resolve_agent(agent).tools;
    // Two tools with the same model-facing name cannot run at all; then names stay as they are.
    let names = crate::activation::providers::safe_tool_names(&tools).unwrap_or_default();
    let real =
        |safe: &str| names.iter().find(|(_, s)| s == safe).map_or_else(|| safe.to_string(), |(real, _)| real.clone());
    records
        .iter()
        .map(|record| {
            let (tools, tool) = match &record.entry {
                HistoryEntry::AssistantOutput { tool_calls, .. } if !tool_calls.is_empty() => {
                    (Some(tool_calls.iter().map(|c| real(&c.name)).collect()), None)
                }
                HistoryEntry::ToolResult { name, .. } => (None, Some(real(name))),
                _ => (None, None),
            };
            HistoryItem { record, tools, tool }
        })
        .collect()
}

/// `GET message-graph?hours=`: who sent how many messages to whom in the window. `nodes` are
/// the project's agents in config order, then every other participant seen (the user, virtual
/// senders, channels as `#name`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageGraph {
    pub window_hours: u32,
    pub since: String,
    pub nodes: Vec<GraphNode>,
    pub edges: Vec<MessageEdge>,
}

#[derive(Serialize)]
pub struct GraphNode {
    pub id: String,
    /// `agent`, `channel` or `other` (the user, a monitor, the scheduler).
    pub kind: &'static str,
}

impl MessageGraph {
    pub fn new(host: &ToolHost, window_hours: u32, since: String, edges: Vec<MessageEdge>) -> MessageGraph {
        let mut nodes: Vec<GraphNode> =
            host.project.config.agents.iter().map(|a| GraphNode { id: a.id.clone(), kind: "agent" }).collect();
        for id in edges.iter().flat_map(|e| [&e.from, &e.to]) {
            if !nodes.iter().any(|n| &n.id == id) {
                let kind = if id.starts_with('#') { "channel" } else { "other" };
                nodes.push(GraphNode { id: id.clone(), kind });
            }
        }
        MessageGraph { window_hours, since, nodes, edges }
    }
}

/// `GET /api/event-types`.
#[derive(Serialize)]
pub struct EventTypes {
    pub types: &'static [crate::store::EventType],
}
