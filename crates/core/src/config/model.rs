//! The validated project configuration: plain Rust types with every default applied.
//!
//! Nothing here reads config keys or checks them (see `validate.rs` and `validate/`); these
//! types are what the rest of the controller reads. Paths are absolute. Agents are already
//! expanded (`count: 2` → `w-1`, `w-2`). Each enum carries its one string mapping (strum), which
//! validation, views and messages all use.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::config::node::Loc;

/// Signal priority. P0 interrupts, P1 arrives at the next tool boundary, P2 and P3 queue.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, strum::IntoStaticStr, strum::Display, strum::VariantArray,
)]
pub enum Priority {
    P0,
    P1,
    P2,
    P3,
}

impl Priority {
    pub const ALL: &'static [Priority] = <Priority as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Parsing by hand only to keep the reference's error text (`Invalid priority: <x>`); the names
/// still come from the one mapping above.
impl FromStr for Priority {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Priority::ALL.iter().copied().find(|p| p.as_str() == s).ok_or_else(|| format!("Invalid priority: {s}"))
    }
}

#[derive(Clone, Debug)]
pub struct ProjectConfig {
    /// The project directory (holds `suzumio.yaml` and the state the controller creates).
    pub root: PathBuf,
    pub config_file: PathBuf,
    pub name: String,
    pub task: String,
    /// `kickoff`: the first `suzumio run` of the project sends `task` to the coordinator as the
    /// user's first message (only while the project has no message at all: once).
    pub kickoff: bool,
    /// Expanded agent instances, in config order.
    pub agents: Vec<AgentConfig>,
    pub toolpacks: Vec<ToolpackRef>,
    pub scheduler: SchedulerConfig,
    pub communication: CommunicationConfig,
    pub channels: Vec<String>,
    pub backend: BackendConfig,
    /// `backend.runner.maxIterations` / `maxToolCalls`.
    pub activation: ActivationLimits,
    pub models: ModelsConfig,
    pub web_fetch: WebFetchConfig,
    /// `budgets`: the project's limits, every agent's default limits and the wake-loop guard.
    pub budgets: BudgetsConfig,
    /// `permissions`: the project's rules, `onAsk`, `approvalTimeout` and tool-call hooks.
    pub permissions: PermissionsConfig,
}

/// `tools.webFetch`: loopback, private and link-local addresses are refused unless allowed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WebFetchConfig {
    pub allow_private_addresses: bool,
}

impl ProjectConfig {
    pub fn agent(&self, id: &str) -> Option<&AgentConfig> {
        self.agents.iter().find(|a| a.id == id)
    }

    /// The agent `kickoff` sends the task to (the coordinator), or why there is none.
    pub fn kickoff_recipient(&self) -> Result<&str, String> {
        let agents: Vec<&str> = self.agents.iter().map(|a| a.id.as_str()).collect();
        crate::config::validate::kickoff_recipient(&agents, self.communication.coordinator_agent.as_deref())
    }
}

#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// Instance id (`worker-2`).
    pub id: String,
    /// The key under `agents:` it was expanded from (`worker`).
    pub base_id: String,
    pub role: String,
    pub display_name: String,
    pub prompt: String,
    /// The model preset (resolved: the agent's own or `backend.runner.model`).
    pub model: String,
    pub tools: Allowlist,
    /// `toolLoading`: with `deferred`, only the tools that cannot be deferred are sent to the
    /// model, plus `tool_search` to activate the others.
    pub tool_loading: ToolLoading,
    /// `deferredTools`: allowed tools loaded only through `tool_search`, whatever `tool_loading`.
    pub deferred_tools: Allowlist,
    pub mounts: Vec<MountConfig>,
    pub env: BTreeMap<String, String>,
    /// `budgets.agents` with this agent's `budget` over it.
    pub budget: BudgetLimits,
    /// `permissionMode` (default `default`).
    pub permission_mode: PermissionMode,
    /// The agent's own `permissions` (its rules add to the project's).
    pub permissions: PermissionsConfig,
    pub loc: Loc,
}

/// `agents.<id>.toolLoading`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum ToolLoading {
    /// Every allowed tool is sent to the model.
    #[default]
    Eager,
    /// Deferrable tools wait for `tool_search`.
    Deferred,
}

/// An agent's `tools:` list: which registered tools its model may see.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Allowlist {
    /// Each pattern with where it was written.
    pub entries: Vec<(AllowPattern, Loc)>,
    /// Where the list's key is written (none when the agent has no such list).
    pub declared_at: Option<Loc>,
    /// The tools of each `group:` entry, filled when the project's packs are loaded
    /// (`ToolpackRegistry::expand_groups`).
    pub groups: BTreeMap<String, Vec<String>>,
}

impl Allowlist {
    pub fn allows(&self, tool: &str) -> bool {
        self.entries.iter().any(|(p, _)| self.entry_allows(p, tool))
    }

    /// Whether one of this list's entries allows `tool` (a group by its expanded tools).
    pub fn entry_allows(&self, pattern: &AllowPattern, tool: &str) -> bool {
        match pattern {
            AllowPattern::Group(group) => self.groups.get(group).is_some_and(|tools| tools.iter().any(|t| t == tool)),
            p => p.matches(tool),
        }
    }

    /// Whether some entry may allow a tool whose name starts with `prefix` (`<pack>.`), decided
    /// on the patterns alone: it holds before the pack's tools are known (a group may hold any).
    pub fn may_reach(&self, prefix: &str) -> bool {
        self.entries.iter().any(|(p, _)| match p {
            AllowPattern::Exact(name) => name.starts_with(prefix),
            AllowPattern::Namespace(ns) => ns.starts_with(prefix) || prefix.starts_with(ns.as_str()),
            AllowPattern::All | AllowPattern::Group(_) => true,
        })
    }
}

/// One allowlist entry: an exact tool name, `ns.*`, `*`, or `group:<name>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowPattern {
    Exact(String),
    /// `file.*`: stored as the prefix with its dot, `file.`.
    Namespace(String),
    All,
    /// `group:git`: the tools of a catalog group. Only the registry knows them: a project's
    /// allowlists are expanded when it loads (`ToolpackRegistry::expand_groups`), and until
    /// then a group matches nothing.
    Group(String),
}

/// How an allowlist entry names a group.
pub const GROUP_PREFIX: &str = "group:";

impl AllowPattern {
    // String: a config diagnostic's message; the caller adds where it was written.
    pub fn parse(text: &str) -> Result<AllowPattern, String> {
        if text == "*" {
            return Ok(AllowPattern::All);
        }
        if let Some(group) = text.strip_prefix(GROUP_PREFIX) {
            let ok = !group.is_empty()
                && group.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
            if ok {
                return Ok(AllowPattern::Group(group.to_string()));
            }
            return Err(format!(
                "invalid tool group `{text}`: a group is written `group:<name>` with a lowercase name, as the catalog shows it (e.g. `group:git`)"
            ));
        }
        if let Some(ns) = text.strip_suffix(".*") {
            if !ns.is_empty() && crate::toolpack::is_valid_tool_name(ns) {
                return Ok(AllowPattern::Namespace(format!("{ns}.")));
            }
        } else if crate::toolpack::is_valid_tool_name(text) {
            return Ok(AllowPattern::Exact(text.to_string()));
        }
        Err(format!(
            "invalid tool pattern `{text}`: use an exact tool name, a namespace wildcard such as `file.*`, `*`, or a group such as `group:git`"
        ))
    }

    pub fn matches(&self, tool: &str) -> bool {
        match self {
            AllowPattern::Exact(name) => name == tool,
            AllowPattern::Namespace(prefix) => tool.starts_with(prefix.as_str()),
            AllowPattern::All => true,
            AllowPattern::Group(_) => false,
        }
    }
}

impl fmt::Display for AllowPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllowPattern::Exact(name) => f.write_str(name),
            AllowPattern::Namespace(prefix) => write!(f, "{prefix}*"),
            AllowPattern::All => f.write_str("*"),
            AllowPattern::Group(group) => write!(f, "{GROUP_PREFIX}{group}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountConfig {
    pub source: PathBuf,
    pub target: String,
    pub readonly: bool,
    pub description: Option<String>,
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr, strum::Display, strum::VariantNames,
)]
#[strum(serialize_all = "lowercase")]
pub enum BuiltinPack {
    Core,
    Shell,
    Web,
    Git,
}

impl BuiltinPack {
    pub const NAMES: &'static [&'static str] = <BuiltinPack as strum::VariantNames>::VARIANTS;

    pub fn id(self) -> &'static str {
        self.into()
    }

    pub fn from_name(name: &str) -> Option<BuiltinPack> {
        name.parse().ok()
    }
}

#[derive(Clone, Debug)]
pub enum ToolpackRef {
    Builtin {
        pack: BuiltinPack,
        loc: Loc,
    },
    /// A local pack directory (absolute), the id the config expects if it says one, and the
    /// limits of its JavaScript runtimes.
    Local {
        path: PathBuf,
        id: Option<String>,
        limits: PackLimits,
        loc: Loc,
    },
    /// `- mcp: {...}`: an MCP server whose tools become `<id>.<tool>`.
    Mcp(McpPackConfig),
}

/// `tools.toolpacks[].mcp`: an MCP server used as a toolpack.
#[derive(Clone, Debug, PartialEq)]
pub struct McpPackConfig {
    pub id: String,
    pub transport: McpTransport,
    /// `trusted: true`: the server's tool annotations count for permissions; otherwise they are
    /// shown but never make a tool look safer than an unannotated one.
    pub trusted: bool,
    /// `tools`: the pinned tool list (not discovered; a live list that differs is reported).
    pub pinned: Option<Vec<McpPinnedTool>>,
    /// Deadline of one call, and of starting the server and listing its tools.
    pub timeout_ms: u64,
    pub loc: Loc,
}

/// How an MCP server is reached.
#[derive(Clone, Debug, PartialEq)]
pub enum McpTransport {
    /// Started by the runner inside the agent's container, spoken to over its stdin/stdout.
    Stdio { command: String, args: Vec<String>, env: Vec<(String, String)>, cwd: Option<String> },
    /// Streamable HTTP, reached from the controller under the `web.fetch` egress rules.
    Http { url: String, headers: Vec<(String, String)> },
}

/// One tool of a pinned MCP tool list, as the server's `tools/list` would give it.
#[derive(Clone, Debug, PartialEq)]
pub struct McpPinnedTool {
    /// The server's own name (without the `<id>.` prefix).
    pub name: String,
    pub description: Option<String>,
    /// Absent: any object (the server checks its own input).
    pub input_schema: Option<serde_json::Value>,
    pub annotations: Option<serde_json::Value>,
    pub loc: Loc,
}

/// Limits of a local pack's JavaScript (per call deadline, heap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackLimits {
    pub timeout_ms: u64,
    pub memory_mb: u64,
}

impl Default for PackLimits {
    fn default() -> Self {
        PackLimits { timeout_ms: 10_000, memory_mb: 64 }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct NudgeConfig {
    pub enabled: bool,
    pub priority: Priority,
    pub max_consecutive: u64,
    pub initial_delay_ms: u64,
    pub backoff_factor: f64,
    pub max_delay_ms: u64,
    pub message: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AllQuietNudgeConfig {
    pub enabled: bool,
    pub target_agent: String,
    pub priority: Priority,
    pub cooldown_ms: u64,
    pub message: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MonitorRule {
    /// The rule's `id`, or `<index>:<agent>:<sender>-><recipient>`.
    pub key: String,
    pub enabled: bool,
    pub agent: String,
    pub recipient: String,
    pub sender: String,
    pub priority: Priority,
    pub initial_delay_ms: u64,
    pub repeat_delay_ms: u64,
    pub message: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct MonitorConfig {
    pub enabled: bool,
    pub rules: Vec<MonitorRule>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    pub max_signals_per_activation: u64,
    /// Period of the timer tick (events wake the scheduler earlier).
    pub tick_interval_ms: u64,
    /// Deadline of one pack's scheduler hook in a tick; a hook past it is reported and not
    /// called again until its JavaScript returns (hooks run concurrently, so nobody else waits).
    pub hook_timeout_ms: u64,
    pub no_effect_nudge: NudgeConfig,
    pub failed_nudge: NudgeConfig,
    pub all_quiet_nudge: AllQuietNudgeConfig,
    pub quiet_agent_monitor: MonitorConfig,
    pub failed_agent_monitor: MonitorConfig,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CommunicationConfig {
    /// `coordinatorAgent`, else an agent called `pm`; none without either: then nothing names a
    /// coordinator (prompts, nudges, policy), and a policy or nudge that needs one is an error.
    pub coordinator_agent: Option<String>,
    pub restrict_non_coordinator_to_coordinator: bool,
    pub non_coordinator_max_priority: Priority,
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr, strum::Display, strum::VariantNames,
)]
#[strum(serialize_all = "lowercase")]
pub enum BackendKind {
    Docker,
    /// Runner as a local child process: development only, no isolation.
    Process,
}

impl BackendKind {
    pub const NAMES: &'static [&'static str] = <BackendKind as strum::VariantNames>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// `backend`: which backend runs the runners, and one section per backend. Every section is
/// read whatever `kind` says, because `--backend` can choose another one at run time. The
/// `process` backend has no settings, so it has no section.
#[derive(Clone, Debug, PartialEq)]
pub struct BackendConfig {
    pub kind: BackendKind,
    pub docker: DockerConfig,
}

/// `backend.image` and `backend.docker`: how an agent's container is made.
#[derive(Clone, Debug, PartialEq)]
pub struct DockerConfig {
    pub image: String,
    /// Docker network mode; `none` unless the project opts in.
    pub network: String,
    /// Mounts for every agent.
    pub mounts: Vec<MountConfig>,
    pub memory_bytes: u64,
    pub cpus: f64,
    pub pids_limit: u64,
    /// `diskQuota`: what an agent's `/workspace` and own `/artifacts` may hold together
    /// (enforced by the controller, see `support::quota`).
    pub disk_quota_bytes: u64,
    /// Which runners start before their first tool call needs them.
    pub prewarm: Prewarm,
}

/// `backend.docker.prewarm`: which agents' runners are started ahead of their first tool call.
/// Only agents with a runner-side tool in their allowlist have a runner to start.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::Display,
    strum::VariantNames,
)]
#[strum(serialize_all = "lowercase")]
pub enum Prewarm {
    /// At `run`, the agents with pending signals; and every agent as its activation starts
    /// (the runner starts while the model thinks).
    #[default]
    Pending,
    /// At `run`, every agent; and as activations start.
    All,
    /// Each runner at its agent's first runner-side tool call.
    Off,
}

impl Prewarm {
    pub const NAMES: &'static [&'static str] = <Prewarm as strum::VariantNames>::VARIANTS;
}

pub const DEFAULT_IMAGE: &str = "suzumio-runner:minimal";

/// Bounds of one activation's model loop, which runs in the controller whatever the backend.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ActivationLimits {
    /// Model steps; `None` = the reference's "unbounded".
    pub max_iterations: Option<u64>,
    pub max_tool_calls: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr, strum::Display, strum::VariantNames)]
pub enum ProviderKind {
    #[strum(serialize = "openai-compatible")]
    OpenAiCompatible,
    #[strum(serialize = "openai")]
    OpenAi,
    #[strum(serialize = "anthropic")]
    Anthropic,
    /// Deterministic, plays a script; needs no key.
    #[strum(serialize = "scripted")]
    Scripted,
}

impl ProviderKind {
    pub const NAMES: &'static [&'static str] = <ProviderKind as strum::VariantNames>::VARIANTS;

    pub fn as_str(&self) -> &'static str {
        self.into()
    }

    pub fn from_name(name: &str) -> Option<ProviderKind> {
        name.parse().ok()
    }
}

#[derive(Clone, PartialEq)]
pub struct ProviderConfig {
    pub id: String,
    pub kind: ProviderKind,
    /// A literal key from the config. Never logged, never sent to a container.
    pub api_key: Option<String>,
    pub api_key_env: Option<String>,
    pub base_url: Option<String>,
    pub base_url_env: Option<String>,
    pub headers: BTreeMap<String, String>,
    /// `None` = no timeout (`timeoutMs: false`).
    pub timeout_ms: Option<u64>,
    /// `chunkTimeoutMs`: the longest wait for the next piece of a streamed answer. `None` = the
    /// same as `timeout_ms`.
    pub chunk_timeout_ms: Option<u64>,
    pub options: serde_json::Value,
    /// Scripted provider: the YAML script (absolute path), if any.
    pub script: Option<PathBuf>,
}

/// Written by hand so that a logged config never shows a key.
impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("api_key_env", &self.api_key_env)
            .field("base_url", &self.base_url)
            .field("base_url_env", &self.base_url_env)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout_ms", &self.timeout_ms)
            .field("chunk_timeout_ms", &self.chunk_timeout_ms)
            .field("script", &self.script)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum PresetTarget {
    Model {
        provider: String,
        model: String,
        api_model: Option<String>,
    },
    /// `model-list`: presets tried in order.
    List(Vec<String>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct PresetConfig {
    pub id: String,
    pub target: PresetTarget,
    pub reasoning_effort: Option<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u64>,
    pub max_output_tokens: Option<u64>,
    /// The model's context window in tokens (`contextWindow`, or the reference's `contextLimit`;
    /// 260 000 when neither is set).
    pub context_window: u64,
    /// The share of `context_window` at which the loop compacts older history before sending
    /// (`compactAt`, default 0.8).
    pub compact_at: f64,
    pub tool_choice: Option<String>,
    pub provider_options: serde_json::Value,
    pub headers: BTreeMap<String, String>,
    /// Scripted provider: a script for this preset (overrides the provider's).
    pub script: Option<PathBuf>,
    /// `stream` (default true): ask the provider for a streamed answer, whose text the WebUI
    /// shows as it arrives. `false` for servers that cannot stream. The scripted provider never
    /// streams.
    pub stream: bool,
    /// What its tokens cost (`inputPerMTok`, `outputPerMTok`, `cachedInputPerMTok`).
    pub prices: Prices,
}

/// Prices per million tokens, in whatever currency the user writes them in. Unset prices
/// count as free, so cost limits only bind models that have prices.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Prices {
    pub input_per_mtok: Option<f64>,
    pub output_per_mtok: Option<f64>,
    /// Cached input; the input price when unset.
    pub cached_input_per_mtok: Option<f64>,
}

impl Prices {
    pub fn is_set(&self) -> bool {
        self.input_per_mtok.is_some() || self.output_per_mtok.is_some() || self.cached_input_per_mtok.is_some()
    }

    /// The cost of one model call. `input` counts every input token, cached ones included.
    pub fn cost(&self, input: u64, cached_input: u64, output: u64) -> f64 {
        let per = |tokens: u64, price: Option<f64>| tokens as f64 * price.unwrap_or(0.0) / 1_000_000.0;
        let cached = cached_input.min(input);
        per(input - cached, self.input_per_mtok)
            + per(cached, self.cached_input_per_mtok.or(self.input_per_mtok))
            + per(output, self.output_per_mtok)
    }
}

/// Spending limits; `None` = no limit. Periods are UTC clock hours and UTC days.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BudgetLimits {
    pub max_activations_per_hour: Option<u64>,
    /// Input and output tokens of one activation (agents only).
    pub max_tokens_per_activation: Option<u64>,
    pub max_tokens_per_day: Option<u64>,
    pub max_cost_per_day: Option<f64>,
}

impl BudgetLimits {
    /// What an agent may spend unless the config says otherwise: enough for real work, small
    /// enough that a runaway agent stops within the hour.
    pub const AGENT_DEFAULT: BudgetLimits = BudgetLimits {
        max_activations_per_hour: Some(120),
        max_tokens_per_activation: Some(2_000_000),
        max_tokens_per_day: Some(20_000_000),
        max_cost_per_day: None,
    };
    /// The whole project, unless the config says otherwise.
    pub const PROJECT_DEFAULT: BudgetLimits = BudgetLimits {
        max_activations_per_hour: Some(1_000),
        max_tokens_per_activation: None,
        max_tokens_per_day: Some(100_000_000),
        max_cost_per_day: None,
    };
}

/// The wake-loop guard: an agent activated more than `max_activations` times within
/// `window_seconds` by other agents, while neither it nor they did anything but send messages,
/// wait or read, is paused together with the agents that woke it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoopGuardConfig {
    pub enabled: bool,
    pub max_activations: u64,
    pub window_seconds: u64,
}

impl Default for LoopGuardConfig {
    fn default() -> Self {
        LoopGuardConfig { enabled: true, max_activations: 30, window_seconds: 120 }
    }
}

/// `budgets`.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetsConfig {
    /// `budgets.project`: totals over every agent.
    pub project: BudgetLimits,
    /// `budgets.agents`: each agent's limits unless its own `budget` says otherwise (already
    /// applied to every [`AgentConfig::budget`]).
    pub agents: BudgetLimits,
    pub loop_guard: LoopGuardConfig,
}

impl Default for BudgetsConfig {
    fn default() -> Self {
        BudgetsConfig {
            project: BudgetLimits::PROJECT_DEFAULT,
            agents: BudgetLimits::AGENT_DEFAULT,
            loop_guard: LoopGuardConfig::default(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct ModelsConfig {
    pub providers: Vec<ProviderConfig>,
    pub presets: Vec<PresetConfig>,
    pub default_preset: Option<String>,
}

impl ModelsConfig {
    pub fn preset(&self, id: &str) -> Option<&PresetConfig> {
        self.presets.iter().find(|p| p.id == id)
    }

    pub fn provider(&self, id: &str) -> Option<&ProviderConfig> {
        self.providers.iter().find(|p| p.id == id)
    }
}

/// An agent's `permissionMode`: how calls no rule decides are treated.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::Display,
    strum::VariantNames,
)]
#[strum(serialize_all = "kebab-case")]
pub enum PermissionMode {
    /// Rules, then ask for anything marked (`requiresApproval`, `destructiveHint`).
    #[default]
    Default,
    /// Read-only and rule-allowed calls run; destructive or unknown ones ask.
    Auto,
    /// No ordinary asks; `deny` rules (and hooks' denials) still apply.
    FullAccess,
}

impl PermissionMode {
    pub const NAMES: &'static [&'static str] = <PermissionMode as strum::VariantNames>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What a permission rule decides.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::Display,
    strum::VariantNames,
)]
#[strum(serialize_all = "lowercase")]
pub enum RuleDecision {
    Allow,
    Ask,
    Deny,
}

impl RuleDecision {
    pub const NAMES: &'static [&'static str] = <RuleDecision as strum::VariantNames>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// `permissions.onAsk`: what an `ask` does when nobody may be there.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::Display,
    strum::VariantNames,
)]
#[strum(serialize_all = "lowercase")]
pub enum OnAskSetting {
    #[default]
    Wait,
    Deny,
}

impl OnAskSetting {
    pub const NAMES: &'static [&'static str] = <OnAskSetting as strum::VariantNames>::VARIANTS;
}

/// A permission rule: written in `suzumio.yaml` (a `permissions.rules` entry, the project's or an
/// agent's), remembered by an approval, or a hook's verdict. It matches a call when its tool
/// pattern matches and every argument matcher it has matches (an absent matcher matches
/// everything); the matching is the controller's permission engine.
#[derive(Clone, Debug, PartialEq)]
pub struct PermissionRule {
    pub tool: AllowPattern,
    pub decision: RuleDecision,
    pub reason: Option<String>,
    /// Globs over the paths a file tool touches, normalized as the runner does (relative to
    /// `/workspace`, `..` resolved); relative globs are relative to `/workspace`.
    pub paths: Vec<String>,
    /// Command patterns (`rm *`, `git push*`) over every simple command of a `shell.exec` line.
    pub commands: Vec<String>,
    /// Host patterns (`example.com`, `*.example.com`, `*`) for `web.fetch`.
    pub hosts: Vec<String>,
    /// Where the rule comes from, shown as a decision's source: `suzumio.yaml:14` as loaded
    /// (`project rule 2 (suzumio.yaml:14)` once [`in_scope`](Self::in_scope) numbered it),
    /// `remembered rule 7 (agent, by user)`, `hook policy.beforeToolCall`.
    pub source: String,
}

impl PermissionRule {
    /// A rule on a tool pattern alone (no argument matcher).
    pub fn for_tool(tool: AllowPattern, decision: RuleDecision, reason: Option<String>, source: String) -> Self {
        PermissionRule { tool, decision, reason, paths: Vec::new(), commands: Vec::new(), hosts: Vec::new(), source }
    }

    /// A rule of `suzumio.yaml` as it decides a call: `scope` is `project` or `agent <id>`, `n`
    /// its number in that scope's list.
    pub fn from_config(rule: &PermissionRule, scope: &str, n: usize) -> Self {
        PermissionRule { source: format!("{scope} rule {n} ({})", rule.source), ..rule.clone() }
    }

    /// The rule in one line, for sources and listings: `shell.exec deny commands [rm *]`.
    pub fn describe(&self) -> String {
        let matcher = if !self.paths.is_empty() {
            format!(" paths [{}]", self.paths.join(", "))
        } else if !self.commands.is_empty() {
            format!(" commands [{}]", self.commands.join(", "))
        } else if !self.hosts.is_empty() {
            format!(" hosts [{}]", self.hosts.join(", "))
        } else {
            String::new()
        };
        format!("{} {}{matcher}", self.tool, self.decision)
    }
}

/// `permissions.hooks` entry: the tools whose calls go through `beforeToolCall` and
/// `afterToolCall` of a pack's `controller.mjs` — the tool's own pack, or `pack` when given.
#[derive(Clone, Debug, PartialEq)]
pub struct HookTarget {
    pub tools: AllowPattern,
    pub pack: Option<String>,
    pub loc: Loc,
}

/// A `permissions` section (the project's, or an agent's, which adds its rules to the
/// project's and may override `onAsk` and `approvalTimeout`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PermissionsConfig {
    pub rules: Vec<PermissionRule>,
    pub on_ask: Option<OnAskSetting>,
    pub approval_timeout: Option<std::time::Duration>,
    /// Project level only.
    pub hooks: Vec<HookTarget>,
    /// Project level only: the reviewer model shown the calls `auto` mode would ask about.
    pub reviewer: Option<ReviewerConfig>,
}

/// `permissions.reviewer`: a model preset that sees the calls `auto` mode would ask about
/// and answers allow, ask or deny (it can only make a rule's decision stricter).
#[derive(Clone, Debug, PartialEq)]
pub struct ReviewerConfig {
    /// The preset of `backend.runner.models` that reviews.
    pub model: String,
    /// Where `model` was written (an unknown preset is reported there).
    pub model_loc: Loc,
    /// How long one review may take before the call falls back to ask.
    pub timeout: Option<std::time::Duration>,
    /// How long a verdict is reused for an identical call (same agent, tool and arguments).
    pub cache_ttl: Option<std::time::Duration>,
    /// How many verdicts are kept at most.
    pub cache_size: Option<usize>,
    /// How many of the activation's last history entries the reviewer sees.
    pub turns: Option<usize>,
}

impl ReviewerConfig {
    pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
    pub const DEFAULT_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(600);
    pub const DEFAULT_CACHE_SIZE: usize = 256;
    pub const DEFAULT_TURNS: usize = 6;

    pub fn timeout(&self) -> std::time::Duration {
        self.timeout.unwrap_or(Self::DEFAULT_TIMEOUT)
    }

    pub fn cache_ttl(&self) -> std::time::Duration {
        self.cache_ttl.unwrap_or(Self::DEFAULT_CACHE_TTL)
    }

    pub fn cache_size(&self) -> usize {
        self.cache_size.unwrap_or(Self::DEFAULT_CACHE_SIZE)
    }

    pub fn turns(&self) -> usize {
        self.turns.unwrap_or(Self::DEFAULT_TURNS)
    }
}

/// `approvalTimeout` when neither the project nor the agent sets it.
pub const DEFAULT_APPROVAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
