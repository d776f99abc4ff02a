//! `budgets` and `agents.<id>.budget`: spending limits (activations per hour, tokens per
//! activation and per day, cost per day) for every agent and for the whole project, and the
//! wake-loop guard, with their defaults. A limit is a positive number, or `false` for none.
//! Prices live with the model presets (`validate/models.rs`).

use crate::config::diag::Diagnostics;
use crate::config::model::*;
use crate::config::node::{Node, Value};
use crate::config::read::Obj;

const BUDGETS_KEYS: &[&str] = &["project", "agents", "loopGuard"];
pub(super) const AGENT_LIMIT_KEYS: &[&str] =
    &["maxActivationsPerHour", "maxTokensPerActivation", "maxTokensPerDay", "maxCostPerDay"];
const PROJECT_LIMIT_KEYS: &[&str] = &["maxActivationsPerHour", "maxTokensPerDay", "maxCostPerDay"];
const PROJECT_RETIRED: &[(&str, &str)] =
    &[("maxTokensPerActivation", "an activation belongs to one agent: set it under budgets.agents")];
const LOOP_GUARD_KEYS: &[&str] = &["enabled", "maxActivations", "windowSeconds"];

pub(super) fn read(node: Option<&Node>, d: &mut Diagnostics) -> BudgetsConfig {
    let mut config = BudgetsConfig::default();
    let Some(node) = node else { return config };
    let Some(b) = Obj::open(node, "budgets", BUDGETS_KEYS, &[], d) else { return config };
    if let Some(p) =
        b.get("project").and_then(|n| Obj::open(n, "budgets.project", PROJECT_LIMIT_KEYS, PROJECT_RETIRED, d))
    {
        config.project = limits(&p, config.project, d);
    }
    if let Some(a) = b.get("agents").and_then(|n| Obj::open(n, "budgets.agents", AGENT_LIMIT_KEYS, &[], d)) {
        config.agents = limits(&a, config.agents, d);
    }
    if let Some(g) = b.get("loopGuard").and_then(|n| Obj::open(n, "budgets.loopGuard", LOOP_GUARD_KEYS, &[], d)) {
        let guard = &mut config.loop_guard;
        guard.enabled = g.bool("enabled", d).unwrap_or(guard.enabled);
        guard.max_activations = g.int_at_least("maxActivations", 1, d).map_or(guard.max_activations, |v| v as u64);
        guard.window_seconds = g.int_at_least("windowSeconds", 1, d).map_or(guard.window_seconds, |v| v as u64);
    }
    config
}

/// An agent's `budget` mapping over the defaults of `budgets.agents`.
pub(super) fn read_agent(node: &Node, path: &str, defaults: BudgetLimits, d: &mut Diagnostics) -> BudgetLimits {
    match Obj::open(node, path, AGENT_LIMIT_KEYS, &[], d) {
        Some(o) => limits(&o, defaults, d),
        None => defaults,
    }
}

fn limits(o: &Obj, defaults: BudgetLimits, d: &mut Diagnostics) -> BudgetLimits {
    BudgetLimits {
        max_activations_per_hour: count(o, "maxActivationsPerHour", defaults.max_activations_per_hour, d),
        max_tokens_per_activation: count(o, "maxTokensPerActivation", defaults.max_tokens_per_activation, d),
        max_tokens_per_day: count(o, "maxTokensPerDay", defaults.max_tokens_per_day, d),
        max_cost_per_day: cost(o, "maxCostPerDay", defaults.max_cost_per_day, d),
    }
}

/// A positive integer, `false` (no limit), or the default when absent or wrong (wrong is
/// reported).
fn count(o: &Obj, key: &str, default: Option<u64>, d: &mut Diagnostics) -> Option<u64> {
    match o.get(key).map(|n| &n.value) {
        None => default,
        Some(Value::Bool(false)) => None,
        Some(Value::Int(_)) => o.int_at_least(key, 1, d).map(|v| v as u64).or(default),
        Some(_) => {
            not_a_limit(o, key, "a positive integer", d);
            default
        }
    }
}

fn cost(o: &Obj, key: &str, default: Option<f64>, d: &mut Diagnostics) -> Option<f64> {
    match o.get(key).map(|n| &n.value) {
        None => default,
        Some(Value::Bool(false)) => None,
        Some(Value::Int(_) | Value::Float(_)) => match o.number(key, d) {
            Some(v) if v > 0.0 => Some(v),
            Some(v) => {
                let loc = o.get(key).map(|n| n.loc.clone());
                d.error(loc.as_ref(), o.path_of(key), format!("must be greater than 0, got {v}"));
                default
            }
            None => default,
        },
        Some(_) => {
            not_a_limit(o, key, "a number greater than 0", d);
            default
        }
    }
}

fn not_a_limit(o: &Obj, key: &str, what: &str, d: &mut Diagnostics) {
    if let Some(node) = o.get(key) {
        let message = format!("expected {what} or false (no limit), got {}", node.kind_name());
        d.error(Some(&node.loc), o.path_of(key), message);
    }
}

/// A preset's prices: each a number ≥ 0 per million tokens.
pub(super) fn prices(p: &Obj, d: &mut Diagnostics) -> Prices {
    let price = |key: &str, d: &mut Diagnostics| match p.number(key, d) {
        Some(v) if v < 0.0 => {
            let loc = p.get(key).map(|n| n.loc.clone());
            d.error(loc.as_ref(), p.path_of(key), format!("must not be negative, got {v}"));
            None
        }
        other => other,
    };
    Prices {
        input_per_mtok: price("inputPerMTok", d),
        output_per_mtok: price("outputPerMTok", d),
        cached_input_per_mtok: price("cachedInputPerMTok", d),
    }
}
