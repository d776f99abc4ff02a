//! Validation: a located [`Node`] tree in, a [`ProjectConfig`] out, every problem collected.
//!
//! One submodule per section of `suzumio.yaml`; each declares its key lists (known and retired)
//! once, at its top, reads them with the `read.rs` helpers, applies the reference defaults (§2)
//! and records errors with file:line and key path. A key that would be read and then ignored is
//! not accepted: it is retired, with the reason in the error. Cross-references (agent models →
//! presets, monitor agents, coordinator) are checked once the sections they need are read.
//! Toolpack manifests are not read here; that is the registry's job.

mod agents;
mod backend;
mod budgets;
mod communication;
mod models;
mod mounts;
pub mod permissions;
mod scheduler;
mod tools;

use std::path::Path;

use crate::config::diag::Diagnostics;
use crate::config::load::base_dir;
use crate::config::model::*;
use crate::config::node::{Node, Value};
use crate::config::read::{Obj, Retired};

pub use agents::VIRTUAL_PARTICIPANTS;
pub use mounts::RESERVED_MOUNT_TARGETS;
pub use permissions::{check_command_pattern, check_host_pattern, check_path_glob, rule_from_parts};

const TOP_KEYS: &[&str] = &[
    "name",
    "task",
    "kickoff",
    "agents",
    "tools",
    "scheduler",
    "communication",
    "channels",
    "backend",
    "budgets",
    "permissions",
];
const TOP_RETIRED: Retired = &[
    ("platforms", "Feishu platform bridges are not supported by this controller"),
    ("models", "models live under backend.runner.models"),
    ("mounts", "mounts live under backend.docker.mounts or agents.<id>.mounts"),
    ("imports", "use @import(path) values or an extends list"),
    ("observability", "nothing reads it: the API and WebUI address is set with `suzumio run --host/--port`"),
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
    let null = Node::new(Value::Null, root.loc.clone());
    let (backend, activation, models) = backend::read(top.get("backend").unwrap_or(&null), d);
    let budgets = budgets::read(top.get("budgets"), d);
    let agents = agents::read(&top, &models, budgets.agents, d);
    let permissions = permissions::read(top.get("permissions"), "permissions", false, d);
    if let Some(r) = &permissions.reviewer
        && models.preset(&r.model).is_none()
    {
        let known: Vec<&str> = models.presets.iter().map(|p| p.id.as_str()).collect();
        d.error(
            Some(&r.model_loc),
            "permissions.reviewer.model",
            format!("unknown model preset: {} (backend.runner.models has: {})", r.model, known.join(", ")),
        );
    }
    let toolpacks = tools::read_toolpacks(&top, &base_dir(config_file), d);
    let web_fetch = tools::read_web_fetch(&top, d);
    let channels = communication::read_channels(&top, d);
    let agent_ids: Vec<&str> = agents.iter().map(|a| a.id.as_str()).collect();
    let communication = communication::read(top.get("communication").unwrap_or(&null), &agent_ids, d);
    let coordinator = communication.as_ref().and_then(|c| c.coordinator_agent.clone());
    let scheduler = scheduler::read(top.get("scheduler").unwrap_or(&null), &agent_ids, coordinator.as_deref(), d);
    let kickoff = top.bool("kickoff", d).unwrap_or(false);
    if kickoff
        && communication.is_some()
        && let Err(why) = kickoff_recipient(&agent_ids, coordinator.as_deref())
    {
        d.error(Some(&top.key_loc("kickoff")), "kickoff", why);
    }
    if d.has_errors() {
        return (None, toolpacks);
    }
    let config = (|| {
        Some(ProjectConfig {
            root: project_root.to_path_buf(),
            config_file: config_file.to_path_buf(),
            name: name?,
            task: task?,
            kickoff,
            agents,
            toolpacks: toolpacks.clone(),
            scheduler: scheduler?,
            communication: communication?,
            channels,
            backend: backend?,
            activation,
            models,
            web_fetch,
            budgets,
            permissions,
        })
    })();
    (config, toolpacks)
}

/// Who `kickoff` sends the task to: the coordinator, when it is an agent. The error says why
/// not, for `kickoff: true` (located at the key) and for `suzumio run --kickoff` alike.
pub fn kickoff_recipient<'a>(agents: &[&str], coordinator: Option<&'a str>) -> Result<&'a str, String> {
    match coordinator {
        Some(c) if agents.contains(&c) => Ok(c),
        Some(c) => Err(format!(
            "kickoff sends the project's task to the coordinator, but the coordinator `{c}` is not an agent: \
             name one with communication.coordinatorAgent (agents: {})",
            agents.join(", ")
        )),
        None => Err(format!(
            "kickoff sends the project's task to the coordinator, but the project has none: \
             name one with communication.coordinatorAgent (agents: {})",
            agents.join(", ")
        )),
    }
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

/// A priority key (`P0`–`P3`), or `default` when it is absent or wrong (wrong is reported).
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
            let names: Vec<&str> = Priority::ALL.iter().map(|p| p.as_str()).collect();
            d.error(
                Some(&node.loc),
                obj.path_of(key),
                format!("expected one of {}, got {}", names.join(", "), node.kind_name()),
            );
            default
        }
    }
}

/// A duration in milliseconds (an integer ≥ 0), or `default`.
fn ms(obj: &Obj, key: &str, default: u64, d: &mut Diagnostics) -> u64 {
    obj.int_at_least(key, 0, d).map_or(default, |v| v as u64)
}
