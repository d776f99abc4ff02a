//! Validation: a located [`Node`] tree in, a [`ProjectConfig`] out, every problem collected.
//!
//! Each section has its own function that reads its keys with the `read.rs` helpers, applies the
//! reference defaults (§2) and records errors with file:line and key path. Cross-references
//! (agent models → presets, monitor agents, coordinator) are checked once all sections are read.
//! Toolpack manifests are not read here; that is the registry's job.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use crate::config::diag::Diagnostics;
use crate::config::load::base_dir;
use crate::config::model::*;
use crate::config::node::{Loc, Node, Value};
use crate::config::read::{Obj, index, join};

/// Container paths the controller owns; a configured mount may not land on or under them.
pub const RESERVED_MOUNT_TARGETS: [&str; 5] =
    ["/workspace", "/artifacts", "/toolpacks", "/run/suzumio", "/opt/suzumio"];

/// Senders and recipients that are not agents; no agent may take these ids.
pub const VIRTUAL_PARTICIPANTS: [&str; 3] = ["user", "scheduler", "monitor"];

const TOP_KEYS: &[&str] =
    &["name", "task", "agents", "tools", "scheduler", "communication", "channels", "backend", "observability"];
const TOP_RETIRED: &[(&str, &str)] = &[
    ("platforms", "Feishu platform bridges are not supported by this controller"),
    ("models", "models live under backend.runner.models"),
    ("mounts", "mounts live under backend.docker.mounts or agents.<id>.mounts"),
    ("imports", "use @import(path) values or an extends list"),
];

/// Validate a config tree. Also returns the toolpack list it could read, so the caller can
/// check the toolpacks (and report their errors too) even when other parts of the config failed.
pub fn validate(
    root: &Node,
    config_file: &Path,
    project_root: &Path,
    d: &mut Diagnostics,
) -> (Option<ProjectConfig>, Vec<ToolpackRef>) {
    let Some(top) = Obj::open(root, "", TOP_KEYS, TOP_RETIRED, d) else {
        return (None, Vec::new());
    };
    if root.value == Value::Null {
        d.error(
            Some(&root.loc),
            "",
            "the config file is empty: it needs at least name, task, agents and backend.runner.models",
        );
        return (None, Vec::new());
    }
    let name = project_name(&top, d);
    let task = match top.req_string("task", d) {
        Some(t) if t.trim().is_empty() => {
            d.error(Some(&top.key_loc("task")), "task", "must not be empty");
            None
        }
        other => other,
    };
    let config_dir = base_dir(config_file);
    let backend_node = top.get("backend");
    let (backend, models) = read_backend(backend_node, root, d);
    let agents = read_agents(&top, &models, d);
    let toolpacks = read_toolpacks(&top, &config_dir, d);
    let channels = read_channels(&top, d);
    let agent_ids: Vec<&str> = agents.iter().map(|a| a.id.as_str()).collect();
    let communication = read_communication(top.get("communication"), &agent_ids, d);
    let scheduler = read_scheduler(top.get("scheduler"), &agent_ids, d);
    let observability = read_observability(top.get("observability"), d);
    if d.has_errors() {
        return (None, toolpacks);
    }
    let config = (|| {
        Some(ProjectConfig {
            root: project_root.to_path_buf(),
            config_file: config_file.to_path_buf(),
            name: name?,
            task: task?,
            agents,
            toolpacks: toolpacks.clone(),
            scheduler: scheduler?,
            communication: communication?,
            channels,
            backend: backend?,
            models,
            observability: observability?,
            web_fetch: read_web_fetch(&top, d),
        })
    })();
    (config, Vec::new())
}

fn is_safe_id(id: &str) -> bool {
    id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn project_name(top: &Obj, d: &mut Diagnostics) -> Option<String> {
    let name = top.req_string("name", d)?;
    if !is_safe_id(&name) || name.len() > 64 {
        d.error(
            Some(&top.key_loc("name")),
            "name",
            format!("`{name}` is not a valid project name: use 1–64 of A-Z, a-z, 0-9, dot, underscore or dash, starting with a letter or digit"),
        );
        return None;
    }
    Some(name)
}

// ---------------------------------------------------------------------------------------------
// agents

const AGENT_KEYS: &[&str] = &["role", "displayName", "names", "count", "prompt", "model", "tools", "mounts", "env"];

fn read_agents(top: &Obj, models: &ModelsConfig, d: &mut Diagnostics) -> Vec<AgentConfig> {
    let Some(node) = top.get("agents") else {
        d.error(Some(&top.node.loc), "agents", "Project config needs at least one agent");
        return Vec::new();
    };
    let Some(agents) = Obj::open(node, "agents", &[], &[], &mut Diagnostics::default()) else {
        d.error(
            Some(&node.loc),
            "agents",
            format!("expected a mapping of agent id to agent, got {}", node.kind_name()),
        );
        return Vec::new();
    };
    if agents.entries().is_empty() {
        d.error(Some(&node.loc), "agents", "Project config needs at least one agent");
    }
    let mut out: Vec<AgentConfig> = Vec::new();
    let mut origin: BTreeMap<String, String> = BTreeMap::new();
    for (key, agent_node) in agents.entries() {
        let base_id = key.name.as_str();
        let path = join("agents", base_id);
        if !is_safe_id(base_id) || base_id.len() > 64 {
            d.error(Some(&key.loc), &path, format!("`{base_id}` is not a valid agent id: use 1–64 of A-Z, a-z, 0-9, dot, underscore or dash, starting with a letter or digit"));
            continue;
        }
        if VIRTUAL_PARTICIPANTS.contains(&base_id) {
            d.error(
                Some(&key.loc),
                &path,
                format!(
                    "`{base_id}` is reserved for a virtual participant ({}); choose another agent id",
                    VIRTUAL_PARTICIPANTS.join(", ")
                ),
            );
            continue;
        }
        let Some(agent) = Obj::open(agent_node, &path, AGENT_KEYS, &[], d) else {
            continue;
        };
        let count = agent.int_at_least("count", 1, d).unwrap_or(1) as usize;
        let role = agent.string("role", d).unwrap_or_else(|| base_id.to_string());
        let display_name = agent.string("displayName", d);
        let names = agent.string_list("names", d).unwrap_or_default();
        if !names.is_empty() && names.len() < count {
            d.warning(
                Some(&agent.key_loc("names")),
                agent.path_of("names"),
                format!("has {} name(s) for count {count}; the rest are numbered", names.len()),
            );
        }
        let prompt = agent.string("prompt", d).unwrap_or_default();
        let model = resolve_agent_model(&agent, base_id, models, d);
        let tools = read_allowlist(&agent, d);
        let mounts = agent.get("mounts").map(|n| read_mounts(n, &agent.path_of("mounts"), d)).unwrap_or_default();
        let env = read_agent_env(&agent, d);
        for i in 1..=count {
            let (id, display) = if count > 1 {
                let named = names.get(i - 1).map(|(n, _)| n.clone());
                let fallback = display_name.as_ref().map_or_else(|| format!("{base_id}-{i}"), |n| format!("{n} {i}"));
                (format!("{base_id}-{i}"), named.unwrap_or(fallback))
            } else {
                let named = names.first().map(|(n, _)| n.clone());
                (base_id.to_string(), display_name.clone().or(named).unwrap_or_else(|| base_id.to_string()))
            };
            if let Some(previous) = origin.get(&id) {
                d.error(
                    Some(&key.loc),
                    &path,
                    format!(
                        "agent id `{id}` is produced twice (by agents.{previous} and agents.{base_id}); rename one"
                    ),
                );
                continue;
            }
            origin.insert(id.clone(), base_id.to_string());
            out.push(AgentConfig {
                id,
                base_id: base_id.to_string(),
                role: role.clone(),
                display_name: display,
                prompt: prompt.clone(),
                model: model.clone().unwrap_or_default(),
                tools: tools.clone(),
                mounts: mounts.clone(),
                env: env.clone(),
                loc: key.loc.clone(),
            });
        }
    }
    out
}

fn resolve_agent_model(agent: &Obj, base_id: &str, models: &ModelsConfig, d: &mut Diagnostics) -> Option<String> {
    let own = agent.string("model", d);
    let model = own.clone().or_else(|| models.default_preset.clone());
    let loc = if own.is_some() { agent.key_loc("model") } else { agent.node.loc.clone() };
    match model {
        None if !models.presets.is_empty() => {
            d.error(
                Some(&loc),
                agent.path_of("model"),
                format!("Agent {base_id} needs an explicit model, or set backend.runner.model"),
            );
            None
        }
        Some(p) if !models.presets.is_empty() && models.preset(&p).is_none() => {
            d.error(Some(&loc), agent.path_of("model"), format!("Agent {base_id} selected unknown model preset: {p}"));
            None
        }
        other => other,
    }
}

fn read_allowlist(agent: &Obj, d: &mut Diagnostics) -> Allowlist {
    let mut out = Allowlist::default();
    for (i, (text, loc)) in agent.string_list("tools", d).unwrap_or_default().into_iter().enumerate() {
        match AllowPattern::parse(&text) {
            Ok(p) if out.entries.iter().any(|(q, _)| *q == p) => {
                d.warning(Some(&loc), index(&agent.path_of("tools"), i), format!("`{text}` is listed twice"))
            }
            Ok(p) => out.entries.push((p, loc)),
            Err(e) => d.error(Some(&loc), index(&agent.path_of("tools"), i), e),
        }
    }
    out
}

fn read_agent_env(agent: &Obj, d: &mut Diagnostics) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for (name, value, loc) in agent.string_map("env", d) {
        let path = join(&agent.path_of("env"), &name);
        let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            d.error(Some(&loc), path, format!("`{name}` is not a valid environment variable name"));
        } else if name.starts_with("SUZUMIO_") {
            d.error(
                Some(&loc),
                path,
                "variables starting with SUZUMIO_ are set by the controller and cannot be configured",
            );
        } else {
            env.insert(name, value);
        }
    }
    env
}

// ---------------------------------------------------------------------------------------------
// mounts

const MOUNT_KEYS: &[&str] = &["source", "target", "readonly", "description"];

fn read_mounts(node: &Node, path: &str, d: &mut Diagnostics) -> Vec<MountConfig> {
    let Value::Seq(items) = &node.value else {
        d.error(Some(&node.loc), path, format!("expected a list of mounts, got {}", node.kind_name()));
        return Vec::new();
    };
    let mut out: Vec<MountConfig> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = index(path, i);
        let Some(m) = Obj::open(item, &item_path, MOUNT_KEYS, &[], d) else {
            continue;
        };
        let source = m.req_string("source", d);
        let target = m.req_string("target", d);
        let readonly = m.bool("readonly", d).unwrap_or(true);
        let description = m.string("description", d);
        let source = source.and_then(|s| {
            // Relative sources are resolved against the file that declares them.
            let p = base_dir(&item.loc.file).join(&s);
            match p.canonicalize() {
                Ok(p) => Some(p),
                Err(_) => {
                    d.error(
                        Some(&m.key_loc("source")),
                        m.path_of("source"),
                        format!("Mount source does not exist: {}", crate::config::diag::display_path(&p)),
                    );
                    None
                }
            }
        });
        let target = target.and_then(|t| check_mount_target(&t, &m.key_loc("target"), &m.path_of("target"), d));
        if let (Some(source), Some(target)) = (source, target) {
            if out.iter().any(|o| o.target == target) {
                d.error(
                    Some(&m.key_loc("target")),
                    m.path_of("target"),
                    format!("Docker mount target is used twice: {target}"),
                );
                continue;
            }
            out.push(MountConfig { source, target, readonly, description });
        }
    }
    out
}

/// Targets must be absolute, normalized, and stay off the controller's reserved paths.
fn check_mount_target(target: &str, loc: &Loc, path: &str, d: &mut Diagnostics) -> Option<String> {
    if !target.starts_with('/') {
        d.error(Some(loc), path, format!("Docker mount target must be absolute: {target}"));
        return None;
    }
    let p = Path::new(target);
    if p.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)) {
        d.error(Some(loc), path, format!("Docker mount target must not contain . or .. segments: {target}"));
        return None;
    }
    let normalized: PathBuf = p.components().collect();
    // On or under a reserved path, or above one (a mount at /run would cover /run/suzumio).
    let is_reserved =
        RESERVED_MOUNT_TARGETS.iter().any(|r| normalized.starts_with(r) || Path::new(r).starts_with(&normalized));
    if is_reserved {
        d.error(Some(loc), path, format!("Docker mount target is reserved: {target}"));
        return None;
    }
    Some(normalized.display().to_string())
}

// ---------------------------------------------------------------------------------------------
// toolpacks

fn read_toolpacks(top: &Obj, config_dir: &Path, d: &mut Diagnostics) -> Vec<ToolpackRef> {
    let default = || {
        let loc = top.node.loc.clone();
        vec![
            ToolpackRef::Builtin { pack: BuiltinPack::Core, loc: loc.clone() },
            ToolpackRef::Builtin { pack: BuiltinPack::Web, loc },
        ]
    };
    let Some(tools_node) = top.get("tools") else {
        return default();
    };
    let Some(tools) = Obj::open(tools_node, "tools", &["toolpacks", "webFetch"], &[], d) else {
        return Vec::new();
    };
    let Some(list) = tools.get("toolpacks") else {
        return default();
    };
    let Value::Seq(items) = &list.value else {
        d.error(Some(&list.loc), "tools.toolpacks", format!("expected a list, got {}", list.kind_name()));
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = index("tools.toolpacks", i);
        match &item.value {
            Value::Str(name) => match BuiltinPack::from_name(name) {
                Some(pack) => out.push(ToolpackRef::Builtin { pack, loc: item.loc.clone() }),
                None => d.error(
                    Some(&item.loc),
                    path,
                    format!("Unknown built-in toolpack: {name}. Use {{ path: ... }} for local toolpacks."),
                ),
            },
            Value::Map(_) => {
                let keys = &["path", "id", "timeoutMs", "memoryMb"];
                let Some(entry) = Obj::open(item, &path, keys, &[], d) else { continue };
                let id = entry.string("id", d);
                let defaults = PackLimits::default();
                let limits = PackLimits {
                    timeout_ms: entry.int_at_least("timeoutMs", 1, d).map_or(defaults.timeout_ms, |v| v as u64),
                    memory_mb: entry.int_at_least("memoryMb", 4, d).map_or(defaults.memory_mb, |v| v as u64),
                };
                let Some(raw) = entry.req_string("path", d) else { continue };
                let loc = entry.key_loc("path");
                let lower = raw.to_ascii_lowercase();
                if lower.starts_with("http://") || lower.starts_with("https://") {
                    d.error(
                        Some(&loc),
                        entry.path_of("path"),
                        "HTTP(S) toolpack paths are disabled for reproducibility",
                    );
                    continue;
                }
                let dir = config_dir.join(&raw);
                match std::fs::metadata(&dir) {
                    Ok(m) if m.is_dir() => {
                        let dir = dir.canonicalize().unwrap_or(dir);
                        out.push(ToolpackRef::Local { path: dir, id, limits, loc: item.loc.clone() });
                    }
                    Ok(_) => d.error(
                        Some(&loc),
                        entry.path_of("path"),
                        format!("Local toolpack path must be a directory: {raw}"),
                    ),
                    Err(_) => {
                        d.error(Some(&loc), entry.path_of("path"), format!("Local toolpack path does not exist: {raw}"))
                    }
                }
            }
            _ => d.error(
                Some(&item.loc),
                path,
                format!("expected a built-in name (core, shell, web) or {{path, id}}, got {}", item.kind_name()),
            ),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// channels and communication

fn read_channels(top: &Obj, d: &mut Diagnostics) -> Vec<String> {
    let Some(list) = top.string_list("channels", d) else {
        return vec!["#project".to_string(), "#blocked".to_string()];
    };
    let mut out: Vec<String> = Vec::new();
    for (i, (channel, loc)) in list.into_iter().enumerate() {
        let path = index("channels", i);
        if channel.is_empty() || channel.chars().any(char::is_whitespace) {
            d.error(Some(&loc), path, format!("channel names must be non-empty and contain no spaces: `{channel}`"));
        } else if out.contains(&channel) {
            d.error(Some(&loc), path, format!("channel {channel} is declared twice"));
        } else {
            out.push(channel);
        }
    }
    out
}

fn priority(obj: &Obj, key: &str, default: Priority, d: &mut Diagnostics) -> Priority {
    let Some(node) = obj.get(key) else {
        return default;
    };
    match node.as_str().map(str::parse::<Priority>) {
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            d.error(Some(&node.loc), obj.path_of(key), e);
            default
        }
        None => {
            d.error(
                Some(&node.loc),
                obj.path_of(key),
                format!("expected one of P0, P1, P2, P3, got {}", node.kind_name()),
            );
            default
        }
    }
}

fn read_communication(node: Option<&Node>, agents: &[&str], d: &mut Diagnostics) -> Option<CommunicationConfig> {
    let keys = &[
        "coordinatorAgent",
        "restrictNonCoordinatorToCoordinator",
        "nonCoordinatorMaxPriority",
        "pmRoutineVerifierPriority",
    ];
    let null = Node::new(Value::Null, Loc::file(Path::new("").into()));
    let c = Obj::open(node.unwrap_or(&null), "communication", keys, &[], d)?;
    let coordinator = c.string("coordinatorAgent", d).unwrap_or_else(|| "pm".to_string());
    let restrict = c.bool("restrictNonCoordinatorToCoordinator", d).unwrap_or(false);
    if restrict && !agents.contains(&coordinator.as_str()) && !agents.is_empty() {
        d.warning(
            Some(&c.node.loc),
            "communication.coordinatorAgent",
            format!("restrictNonCoordinatorToCoordinator is on but the coordinator `{coordinator}` is not an agent: non-coordinators will be able to message no one"),
        );
    }
    Some(CommunicationConfig {
        coordinator_agent: coordinator,
        restrict_non_coordinator_to_coordinator: restrict,
        non_coordinator_max_priority: priority(&c, "nonCoordinatorMaxPriority", Priority::P2, d),
        pm_routine_verifier_priority: priority(&c, "pmRoutineVerifierPriority", Priority::P3, d),
    })
}

// ---------------------------------------------------------------------------------------------
// scheduler

const SCHEDULER_KEYS: &[&str] = &[
    "kind",
    "maxSignalsPerActivation",
    "maxPromptMessages",
    "tickIntervalMs",
    "noEffectNudge",
    "failedNudge",
    "allQuietNudge",
    "quietAgentMonitor",
    "failedAgentMonitor",
];
const SCHEDULER_RETIRED: &[(&str, &str)] = &[("intervalMs", "the timer period is tickIntervalMs")];
const NUDGE_KEYS: &[&str] =
    &["enabled", "priority", "maxConsecutive", "initialDelayMs", "backoffFactor", "maxDelayMs", "message"];

fn ms(obj: &Obj, key: &str, default: u64, d: &mut Diagnostics) -> u64 {
    obj.int_at_least(key, 0, d).map_or(default, |v| v as u64)
}

fn read_scheduler(node: Option<&Node>, agents: &[&str], d: &mut Diagnostics) -> Option<SchedulerConfig> {
    let null = Node::new(Value::Null, Loc::file(Path::new("").into()));
    let s = Obj::open(node.unwrap_or(&null), "scheduler", SCHEDULER_KEYS, SCHEDULER_RETIRED, d)?;
    s.one_of("kind", &["nonpreemptive-signals", "nonpreemptive-mailbox"], d);
    if s.get("maxSignalsPerActivation").is_some() && s.get("maxPromptMessages").is_some() {
        d.error(
            Some(&s.key_loc("maxPromptMessages")),
            "scheduler.maxPromptMessages",
            "is an alias of maxSignalsPerActivation; set only one",
        );
    }
    let max_signals = s
        .int_at_least("maxSignalsPerActivation", 1, d)
        .or_else(|| s.int_at_least("maxPromptMessages", 1, d))
        .unwrap_or(20) as u64;
    let tick_interval_ms = s.int_at_least("tickIntervalMs", 100, d).unwrap_or(2000) as u64;
    let no_effect = NudgeConfig {
        enabled: true,
        priority: Priority::P3,
        max_consecutive: 0,
        initial_delay_ms: 30_000,
        backoff_factor: 2.0,
        max_delay_ms: 300_000,
        message: None,
    };
    let failed = NudgeConfig {
        enabled: false,
        priority: Priority::P2,
        max_consecutive: 3,
        initial_delay_ms: 60_000,
        max_delay_ms: 900_000,
        ..no_effect.clone()
    };
    Some(SchedulerConfig {
        max_signals_per_activation: max_signals,
        tick_interval_ms,
        no_effect_nudge: read_nudge(&s, "noEffectNudge", no_effect, d),
        failed_nudge: read_nudge(&s, "failedNudge", failed, d),
        all_quiet_nudge: read_all_quiet(&s, agents, d),
        quiet_agent_monitor: read_monitor(&s, "quietAgentMonitor", Priority::P3, 1_800_000, agents, d),
        failed_agent_monitor: read_monitor(&s, "failedAgentMonitor", Priority::P2, 300_000, agents, d),
    })
}

fn read_nudge(s: &Obj, key: &str, defaults: NudgeConfig, d: &mut Diagnostics) -> NudgeConfig {
    let Some(node) = s.get(key) else {
        return defaults;
    };
    let Some(n) = Obj::open(node, &s.path_of(key), NUDGE_KEYS, &[], d) else {
        return defaults;
    };
    let backoff_factor = match n.number("backoffFactor", d) {
        Some(f) if f < 1.0 => {
            d.error(Some(&n.key_loc("backoffFactor")), n.path_of("backoffFactor"), format!("must be ≥ 1, got {f}"));
            defaults.backoff_factor
        }
        Some(f) => f,
        None => defaults.backoff_factor,
    };
    NudgeConfig {
        enabled: n.bool("enabled", d).unwrap_or(defaults.enabled),
        priority: priority(&n, "priority", defaults.priority, d),
        max_consecutive: ms(&n, "maxConsecutive", defaults.max_consecutive, d),
        initial_delay_ms: ms(&n, "initialDelayMs", defaults.initial_delay_ms, d),
        backoff_factor,
        max_delay_ms: ms(&n, "maxDelayMs", defaults.max_delay_ms, d),
        message: n.string("message", d),
    }
}

fn read_all_quiet(s: &Obj, agents: &[&str], d: &mut Diagnostics) -> AllQuietNudgeConfig {
    let defaults = AllQuietNudgeConfig {
        enabled: false,
        target_agent: "pm".into(),
        priority: Priority::P3,
        cooldown_ms: 300_000,
        message: None,
    };
    let Some(node) = s.get("allQuietNudge") else {
        return defaults;
    };
    let keys = &["enabled", "targetAgent", "priority", "cooldownMs", "message"];
    let Some(n) = Obj::open(node, "scheduler.allQuietNudge", keys, &[], d) else {
        return defaults;
    };
    let config = AllQuietNudgeConfig {
        enabled: n.bool("enabled", d).unwrap_or(false),
        target_agent: n.string("targetAgent", d).unwrap_or(defaults.target_agent),
        priority: priority(&n, "priority", Priority::P3, d),
        cooldown_ms: n.int_at_least("cooldownMs", 1, d).map_or(defaults.cooldown_ms, |v| v as u64),
        message: n.string("message", d),
    };
    if config.enabled && !agents.is_empty() && !agents.contains(&config.target_agent.as_str()) {
        d.error(
            Some(&n.node.loc),
            "scheduler.allQuietNudge.targetAgent",
            format!("Unknown agent: {}", config.target_agent),
        );
    }
    config
}

const RULE_KEYS: &[&str] =
    &["id", "enabled", "agent", "recipient", "sender", "priority", "initialDelayMs", "repeatDelayMs", "message"];

fn read_monitor(
    s: &Obj,
    key: &str,
    default_priority: Priority,
    default_initial: u64,
    agents: &[&str],
    d: &mut Diagnostics,
) -> MonitorConfig {
    let mut config = MonitorConfig { enabled: false, rules: Vec::new() };
    let Some(node) = s.get(key) else {
        return config;
    };
    let Some(m) = Obj::open(node, &s.path_of(key), &["enabled", "rules"], &[], d) else {
        return config;
    };
    config.enabled = m.bool("enabled", d).unwrap_or(false);
    let Some(rules) = m.get("rules") else {
        return config;
    };
    let Value::Seq(items) = &rules.value else {
        d.error(Some(&rules.loc), m.path_of("rules"), format!("expected a list of rules, got {}", rules.kind_name()));
        return config;
    };
    for (i, item) in items.iter().enumerate() {
        let Some(r) = Obj::open(item, &index(&m.path_of("rules"), i), RULE_KEYS, &[], d) else {
            continue;
        };
        let Some(agent) = r.req_string("agent", d) else {
            continue;
        };
        let recipient = r.string("recipient", d).unwrap_or_else(|| "pm".into());
        let sender = r.string("sender", d).unwrap_or_else(|| "monitor".into());
        let known = |id: &str| agents.is_empty() || agents.contains(&id);
        if !known(&agent) {
            d.error(Some(&r.key_loc("agent")), r.path_of("agent"), format!("Unknown agent: {agent}"));
        }
        if recipient != "user" && !known(&recipient) {
            d.error(Some(&r.key_loc("recipient")), r.path_of("recipient"), format!("Unknown recipient: {recipient}"));
        }
        config.rules.push(MonitorRule {
            key: r.string("id", d).unwrap_or_else(|| format!("{i}:{agent}:{sender}->{recipient}")),
            enabled: r.bool("enabled", d).unwrap_or(true),
            agent,
            recipient,
            sender,
            priority: priority(&r, "priority", default_priority, d),
            initial_delay_ms: ms(&r, "initialDelayMs", default_initial, d),
            repeat_delay_ms: ms(&r, "repeatDelayMs", 900_000, d),
            message: r.string("message", d),
        });
    }
    config
}

// ---------------------------------------------------------------------------------------------
// backend and models

const BACKEND_KEYS: &[&str] = &["kind", "image", "docker", "runner"];
const BACKEND_RETIRED: &[(&str, &str)] =
    &[("controllerUrl", "runners reach the controller over a Unix socket; no URL is needed")];
const DOCKER_KEYS: &[&str] = &["network", "mounts", "memory", "cpus", "pidsLimit"];
const DOCKER_RETIRED: &[(&str, &str)] =
    &[("proxy", "containers have no network by default; set backend.docker.network to give them one")];
const RUNNER_KEYS: &[&str] = &["mode", "model", "maxIterations", "maxToolCalls", "models"];

fn read_backend(node: Option<&Node>, root: &Node, d: &mut Diagnostics) -> (Option<BackendConfig>, ModelsConfig) {
    let null = Node::new(Value::Null, root.loc.clone());
    let Some(b) = Obj::open(node.unwrap_or(&null), "backend", BACKEND_KEYS, BACKEND_RETIRED, d) else {
        return (None, ModelsConfig::default());
    };
    let kind = match b.one_of("kind", &["docker", "process", "docker-chat"], d).as_deref() {
        Some("process") => BackendKind::Process,
        _ => BackendKind::Docker,
    };
    let image = b.string("image", d).unwrap_or_else(|| DEFAULT_IMAGE.to_string());
    let docker_null = Node::new(Value::Null, b.node.loc.clone());
    let docker = Obj::open(b.get("docker").unwrap_or(&docker_null), "backend.docker", DOCKER_KEYS, DOCKER_RETIRED, d);
    let (network, mounts, memory_bytes, cpus, pids_limit) = match &docker {
        Some(k) => (
            k.string("network", d).unwrap_or_else(|| "none".to_string()),
            k.get("mounts").map(|n| read_mounts(n, "backend.docker.mounts", d)).unwrap_or_default(),
            read_memory(k, d),
            match k.number("cpus", d) {
                Some(c) if c <= 0.0 => {
                    d.error(
                        Some(&k.key_loc("cpus")),
                        "backend.docker.cpus",
                        format!("must be greater than 0, got {c}"),
                    );
                    1.0
                }
                Some(c) => c,
                None => 1.0,
            },
            k.int_at_least("pidsLimit", 1, d).map_or(256, |v| v as u64),
        ),
        None => ("none".to_string(), Vec::new(), DEFAULT_MEMORY, 1.0, 256),
    };
    let runner_null = Node::new(Value::Null, b.node.loc.clone());
    let runner_node = b.get("runner").unwrap_or(&runner_null);
    let runner = Obj::open(runner_node, "backend.runner", RUNNER_KEYS, &[], d);
    let (max_iterations, max_tool_calls, models) = match &runner {
        Some(r) => {
            r.one_of("mode", &["ai"], d);
            let max_iterations = r.int_at_least("maxIterations", 1, d).map(|v| v as u64);
            let max_tool_calls = r.int_at_least("maxToolCalls", 1, d).map(|v| v as u64);
            (max_iterations, max_tool_calls, read_models(r, d))
        }
        None => (None, None, ModelsConfig::default()),
    };
    let backend =
        BackendConfig { kind, image, network, mounts, memory_bytes, cpus, pids_limit, max_iterations, max_tool_calls };
    (Some(backend), models)
}

pub const DEFAULT_MEMORY: u64 = 1024 * 1024 * 1024;

/// `memory: 512m` / `2g` / `1048576`.
fn read_memory(k: &Obj, d: &mut Diagnostics) -> u64 {
    let Some(node) = k.get("memory") else {
        return DEFAULT_MEMORY;
    };
    let parsed = match &node.value {
        Value::Int(i) if *i > 0 => Some(*i as u64),
        Value::Str(s) => parse_size(s),
        _ => None,
    };
    match parsed {
        Some(bytes) if bytes >= 6 * 1024 * 1024 => bytes,
        _ => {
            d.error(
                Some(&node.loc),
                "backend.docker.memory",
                "must be a size of at least 6m, such as 512m or 2g (or a number of bytes)",
            );
            DEFAULT_MEMORY
        }
    }
}

fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (digits, factor) = match t.chars().last()? {
        'k' => (&t[..t.len() - 1], 1u64 << 10),
        'm' => (&t[..t.len() - 1], 1 << 20),
        'g' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    digits.trim().parse::<u64>().ok().and_then(|n| n.checked_mul(factor))
}

const PROVIDER_KEYS: &[&str] = &[
    "type",
    "apiKey",
    "apiKeyEnv",
    "baseURL",
    "baseURLEnv",
    "headers",
    "timeoutMs",
    "chunkTimeoutMs",
    "options",
    "script",
];
const PRESET_KEYS: &[&str] = &[
    "provider",
    "model",
    "model-list",
    "modelList",
    "apiModel",
    "reasoningEffort",
    "temperature",
    "topP",
    "topK",
    "maxOutputTokens",
    "contextLimit",
    "toolChoice",
    "providerOptions",
    "headers",
    "script",
];

fn read_models(r: &Obj, d: &mut Diagnostics) -> ModelsConfig {
    let mut config = ModelsConfig { default_preset: r.string("model", d), ..Default::default() };
    let Some(node) = r.get("models") else {
        d.error(Some(&r.node.loc), "backend.runner.models", "backend.runner.models is required");
        return config;
    };
    let Some(m) = Obj::open(node, "backend.runner.models", &["providers", "presets"], &[], d) else {
        return config;
    };
    let providers = m
        .get("providers")
        .and_then(|n| Obj::open(n, "backend.runner.models.providers", &[], &[], &mut Diagnostics::default()));
    let provider_entries = providers.as_ref().map(|p| p.entries()).unwrap_or(&[]);
    if provider_entries.is_empty() {
        d.error(
            Some(&m.node.loc),
            "backend.runner.models.providers",
            "backend.runner.models.providers needs at least one provider",
        );
    }
    for (key, node) in provider_entries {
        if let Some(p) = read_provider(&key.name, node, d) {
            config.providers.push(p);
        }
    }
    let presets = m
        .get("presets")
        .and_then(|n| Obj::open(n, "backend.runner.models.presets", &[], &[], &mut Diagnostics::default()));
    let preset_entries = presets.as_ref().map(|p| p.entries()).unwrap_or(&[]);
    if preset_entries.is_empty() {
        d.error(
            Some(&m.node.loc),
            "backend.runner.models.presets",
            "backend.runner.models.presets needs at least one preset",
        );
    }
    let preset_names: Vec<&str> = preset_entries.iter().map(|(k, _)| k.name.as_str()).collect();
    for (key, node) in preset_entries {
        if let Some(p) = read_preset(&key.name, node, &config.providers, &preset_names, d) {
            config.presets.push(p);
        }
    }
    // model-list entries must be single-model presets.
    for (key, node) in preset_entries {
        let Some(preset) = config.preset(&key.name) else {
            continue;
        };
        if let PresetTarget::List(list) = &preset.target {
            for entry in list {
                if matches!(config.preset(entry).map(|p| &p.target), Some(PresetTarget::List(_))) {
                    d.error(
                        Some(&node.loc),
                        format!("backend.runner.models.presets.{}.model-list", key.name),
                        format!("model-list entry {entry} is itself a model-list; list single-model presets"),
                    );
                }
            }
        }
    }
    if let Some(default) = &config.default_preset
        && !preset_entries.is_empty()
        && !preset_names.contains(&default.as_str())
    {
        d.error(Some(&r.key_loc("model")), "backend.runner.model", format!("unknown model preset: {default}"));
    }
    config
}

fn read_provider(id: &str, node: &Node, d: &mut Diagnostics) -> Option<ProviderConfig> {
    let path = join("backend.runner.models.providers", id);
    let p = Obj::open(node, &path, PROVIDER_KEYS, &[], d)?;
    let kind_name = p.req_string("type", d)?;
    let Some(kind) = ProviderKind::from_name(&kind_name) else {
        d.error(
            Some(&p.key_loc("type")),
            p.path_of("type"),
            format!("must be one of {}, got `{kind_name}`", ProviderKind::NAMES.join(", ")),
        );
        return None;
    };
    if p.get("apiKey").is_some() {
        d.warning(
            Some(&p.key_loc("apiKey")),
            p.path_of("apiKey"),
            "an API key is written in the config file; prefer apiKeyEnv so the key stays out of files",
        );
    }
    let timeout_ms = match p.get("timeoutMs").map(|n| &n.value) {
        Some(Value::Bool(false)) => None,
        Some(_) => p.int_at_least("timeoutMs", 1, d).map(|v| v as u64),
        None => Some(120_000),
    };
    let script = p.string("script", d).and_then(|s| script_path(&s, &p, d));
    if script.is_some() && kind != ProviderKind::Scripted {
        d.error(Some(&p.key_loc("script")), p.path_of("script"), "only providers of type scripted take a script");
    }
    Some(ProviderConfig {
        id: id.to_string(),
        kind,
        api_key: p.string("apiKey", d),
        api_key_env: p.string("apiKeyEnv", d),
        base_url: p.string("baseURL", d),
        base_url_env: p.string("baseURLEnv", d),
        headers: p.string_map("headers", d).into_iter().map(|(k, v, _)| (k, v)).collect(),
        timeout_ms,
        chunk_timeout_ms: p.int_at_least("chunkTimeoutMs", 1, d).map(|v| v as u64),
        options: p.get("options").map_or(serde_json::json!({}), Node::to_json),
        script,
    })
}

fn script_path(raw: &str, obj: &Obj, d: &mut Diagnostics) -> Option<PathBuf> {
    let path = base_dir(&obj.key_loc("script").file).join(raw);
    match path.canonicalize() {
        Ok(p) if p.is_file() => Some(p),
        _ => {
            d.error(Some(&obj.key_loc("script")), obj.path_of("script"), format!("script file does not exist: {raw}"));
            None
        }
    }
}

fn read_preset(
    id: &str,
    node: &Node,
    providers: &[ProviderConfig],
    presets: &[&str],
    d: &mut Diagnostics,
) -> Option<PresetConfig> {
    let path = join("backend.runner.models.presets", id);
    let p = Obj::open(node, &path, PRESET_KEYS, &[], d)?;
    let list_key = if p.get("model-list").is_some() { "model-list" } else { "modelList" };
    let list = p.string_list(list_key, d);
    let provider = p.string("provider", d);
    let model = p.string("model", d);
    let api_model = p.string("apiModel", d);
    let target = match list {
        Some(_) if provider.is_some() || model.is_some() || api_model.is_some() => {
            d.error(Some(&p.node.loc), &path, "modelList presets cannot also set provider/model/apiModel");
            return None;
        }
        Some(list) if list.is_empty() => {
            d.error(Some(&p.key_loc(list_key)), p.path_of(list_key), "model-list cannot be empty");
            return None;
        }
        Some(list) => {
            for (entry, loc) in &list {
                if !presets.contains(&entry.as_str()) {
                    d.error(Some(loc), p.path_of(list_key), format!("model-list entry is not a preset: {entry}"));
                }
            }
            PresetTarget::List(list.into_iter().map(|(e, _)| e).collect())
        }
        None => {
            let Some(provider) = provider else {
                d.error(Some(&p.node.loc), &path, "model presets need provider and model, or model-list");
                return None;
            };
            let Some(provider_config) = providers.iter().find(|pc| pc.id == provider) else {
                d.error(
                    Some(&p.key_loc("provider")),
                    p.path_of("provider"),
                    format!("Preset {id} uses unknown provider: {provider}"),
                );
                return None;
            };
            let model = match (model, &provider_config.kind) {
                (Some(m), _) => m,
                (None, ProviderKind::Scripted) => "scripted".to_string(),
                (None, _) => {
                    d.error(Some(&p.node.loc), &path, "model presets need provider and model, or model-list");
                    return None;
                }
            };
            PresetTarget::Model { provider, model, api_model }
        }
    };
    let tool_choice = p.one_of("toolChoice", &["auto", "required", "none"], d);
    Some(PresetConfig {
        id: id.to_string(),
        target,
        reasoning_effort: p.string("reasoningEffort", d),
        temperature: p.number("temperature", d),
        top_p: p.number("topP", d),
        top_k: p.int_at_least("topK", 1, d).map(|v| v as u64),
        max_output_tokens: p.int_at_least("maxOutputTokens", 1, d).map(|v| v as u64),
        context_limit: p.int_at_least("contextLimit", 1, d).map_or(260_000, |v| v as u64),
        tool_choice,
        provider_options: p.get("providerOptions").map_or(serde_json::json!({}), Node::to_json),
        headers: p.string_map("headers", d).into_iter().map(|(k, v, _)| (k, v)).collect(),
        script: p.string("script", d).and_then(|s| script_path(&s, &p, d)),
    })
}

/// `tools.webFetch`: what the controller-side `web.fetch` may reach.
fn read_web_fetch(top: &Obj, d: &mut Diagnostics) -> WebFetchConfig {
    let mut config = WebFetchConfig::default();
    let Some(node) = top.get("tools").and_then(|t| t.get("webFetch")) else { return config };
    let keys = &["allowPrivateAddresses"];
    if let Some(w) = Obj::open(node, "tools.webFetch", keys, &[], d) {
        config.allow_private_addresses = w.bool("allowPrivateAddresses", d).unwrap_or(false);
    }
    config
}

// ---------------------------------------------------------------------------------------------
// observability

fn read_observability(node: Option<&Node>, d: &mut Diagnostics) -> Option<ObservabilityConfig> {
    let mut config = ObservabilityConfig {
        http_enabled: true,
        http_host: "127.0.0.1".into(),
        http_port: 39400,
        webui_enabled: true,
    };
    let Some(node) = node else {
        return Some(config);
    };
    let o = Obj::open(node, "observability", &["http", "webui"], &[], d)?;
    if let Some(h) =
        o.get("http").and_then(|n| Obj::open(n, "observability.http", &["enabled", "host", "port"], &[], d))
    {
        config.http_enabled = h.bool("enabled", d).unwrap_or(true);
        config.http_host = h.string("host", d).unwrap_or(config.http_host);
        if let Some(port) = h.int_at_least("port", 0, d) {
            match u16::try_from(port) {
                Ok(p) => config.http_port = p,
                Err(_) => d.error(
                    Some(&h.key_loc("port")),
                    "observability.http.port",
                    format!("must be a port number (0–65535), got {port}"),
                ),
            }
        }
    }
    if let Some(w) = o.get("webui").and_then(|n| Obj::open(n, "observability.webui", &["enabled"], &[], d)) {
        config.webui_enabled = w.bool("enabled", d).unwrap_or(true);
    }
    Some(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("64kb"), Some(64 << 10));
        assert_eq!(parse_size("lots"), None);
    }

    fn target(t: &str) -> Result<String, String> {
        let mut d = Diagnostics::default();
        let loc = Loc::file(Path::new("c.yaml").into());
        check_mount_target(t, &loc, "m", &mut d).ok_or_else(|| d.errors[0].message.clone())
    }

    #[test]
    fn mount_targets_are_checked() {
        assert_eq!(target("/mnt/data"), Ok("/mnt/data".into()));
        assert_eq!(target("/mnt//data/"), Ok("/mnt/data".into()));
        assert_eq!(target("data"), Err("Docker mount target must be absolute: data".into()));
        for reserved in
            ["/workspace", "/workspace/x", "/artifacts/pm", "/toolpacks", "/run/suzumio/s", "/", "/run", "/opt"]
        {
            assert_eq!(target(reserved), Err(format!("Docker mount target is reserved: {reserved}")), "{reserved}");
        }
        assert_eq!(target("/run/other"), Ok("/run/other".into()));
        assert_eq!(target("/workspacex"), Ok("/workspacex".into()));
        assert!(target("/mnt/../workspace").is_err());
    }
}
