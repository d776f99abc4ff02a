//! `scheduler`: signals per activation, the tick period, the scheduler hook deadline, the no-effect / failed / all-quiet
//! nudges and the quiet / failed agent monitors, with the reference defaults (§2.5). Monitor and
//! nudge agents are checked against the expanded agent ids.

use super::{ms, priority};
use crate::config::diag::Diagnostics;
use crate::config::model::*;
use crate::config::node::{Node, Value};
use crate::config::read::{Obj, Retired, index};

const SCHEDULER_KEYS: &[&str] = &[
    "maxSignalsPerActivation",
    "maxPromptMessages",
    "tickIntervalMs",
    "hookTimeoutMs",
    "noEffectNudge",
    "failedNudge",
    "allQuietNudge",
    "quietAgentMonitor",
    "failedAgentMonitor",
];
const SCHEDULER_RETIRED: Retired = &[
    ("intervalMs", "the timer period is tickIntervalMs"),
    ("kind", "there is one scheduler, non-preemptive signal delivery; remove it"),
];
const NUDGE_KEYS: &[&str] =
    &["enabled", "priority", "maxConsecutive", "initialDelayMs", "backoffFactor", "maxDelayMs", "message"];
const ALL_QUIET_KEYS: &[&str] = &["enabled", "targetAgent", "priority", "cooldownMs", "message"];
const MONITOR_KEYS: &[&str] = &["enabled", "rules"];
const RULE_KEYS: &[&str] =
    &["id", "enabled", "agent", "recipient", "sender", "priority", "initialDelayMs", "repeatDelayMs", "message"];

pub(super) fn read(
    node: &Node,
    agents: &[&str],
    coordinator: Option<&str>,
    d: &mut Diagnostics,
) -> Option<SchedulerConfig> {
    let s = Obj::open(node, "scheduler", SCHEDULER_KEYS, SCHEDULER_RETIRED, d)?;
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
    let hook_timeout_ms = s.int_at_least("hookTimeoutMs", 10, d).unwrap_or(1000) as u64;
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
        hook_timeout_ms,
        no_effect_nudge: read_nudge(&s, "noEffectNudge", no_effect, d),
        failed_nudge: read_nudge(&s, "failedNudge", failed, d),
        all_quiet_nudge: read_all_quiet(&s, agents, coordinator, d),
        quiet_agent_monitor: read_monitor(&s, "quietAgentMonitor", (Priority::P3, 1_800_000), agents, coordinator, d),
        failed_agent_monitor: read_monitor(&s, "failedAgentMonitor", (Priority::P2, 300_000), agents, coordinator, d),
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

/// `coordinator`: the nudge's default target (without one, `targetAgent` is needed: an empty
/// target wakes nobody, and is refused when the nudge is on).
fn read_all_quiet(s: &Obj, agents: &[&str], coordinator: Option<&str>, d: &mut Diagnostics) -> AllQuietNudgeConfig {
    let defaults = AllQuietNudgeConfig {
        enabled: false,
        target_agent: coordinator.unwrap_or_default().to_string(),
        priority: Priority::P3,
        cooldown_ms: 300_000,
        message: None,
    };
    let Some(node) = s.get("allQuietNudge") else {
        return defaults;
    };
    let Some(n) = Obj::open(node, "scheduler.allQuietNudge", ALL_QUIET_KEYS, &[], d) else {
        return defaults;
    };
    let config = AllQuietNudgeConfig {
        enabled: n.bool("enabled", d).unwrap_or(false),
        target_agent: n.string("targetAgent", d).unwrap_or(defaults.target_agent),
        priority: priority(&n, "priority", Priority::P3, d),
        cooldown_ms: n.int_at_least("cooldownMs", 1, d).map_or(defaults.cooldown_ms, |v| v as u64),
        message: n.string("message", d),
    };
    if config.enabled && !agents.is_empty() && config.target_agent.is_empty() {
        d.error(
            Some(&n.node.loc),
            "scheduler.allQuietNudge.targetAgent",
            format!(
                "the nudge wakes targetAgent, else the coordinator, and the project has neither: set targetAgent to \
                 one of {} (or communication.coordinatorAgent)",
                agents.join(", ")
            ),
        );
    } else if config.enabled && !agents.is_empty() && !agents.contains(&config.target_agent.as_str()) {
        d.error(
            Some(&n.node.loc),
            "scheduler.allQuietNudge.targetAgent",
            format!("Unknown agent: {}", config.target_agent),
        );
    }
    config
}

fn read_monitor(
    s: &Obj,
    key: &str,
    (default_priority, default_initial): (Priority, u64),
    agents: &[&str],
    coordinator: Option<&str>,
    d: &mut Diagnostics,
) -> MonitorConfig {
    let mut config = MonitorConfig { enabled: false, rules: Vec::new() };
    let Some(node) = s.get(key) else {
        return config;
    };
    let Some(m) = Obj::open(node, &s.path_of(key), MONITOR_KEYS, &[], d) else {
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
        // The coordinator by default; without one the rule must say whom it tells.
        let Some(recipient) = r.string("recipient", d).or_else(|| coordinator.map(str::to_string)) else {
            d.error(
                Some(&r.node.loc),
                r.path_of("recipient"),
                "the project has no coordinator (communication.coordinatorAgent) to tell: set recipient (an agent or user)",
            );
            continue;
        };
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
