//! Nudges (reference §1.4): signals the scheduler creates itself when work stalls.
//! - no-effect nudge: after a completed activation that had no useful effect;
//! - failed nudge: for a failed agent with nothing pending, with backoff;
//! - all-quiet nudge: when every agent is quiet and nothing is pending, with a cooldown.

use chrono::Duration;
use serde_json::{Value, json};

use crate::clock::iso;
use crate::config::NudgeConfig;
use crate::store::{ActivationRecord, ActivationStatus, AgentStatus, SignalRecord, SignalRequest, Store, StoreError};
use crate::support::ToolHost;

use super::{Scheduler, TickReport};

pub const NO_EFFECT: &str = "scheduler.no_effect_nudge";
pub const FAILED: &str = "scheduler.failed_nudge";
pub const ALL_QUIET: &str = "scheduler.all_quiet_nudge";

/// `initial * factor^exponent`, capped at `max` (and safe against overflow).
fn backoff(config: &NudgeConfig, exponent: u64) -> u64 {
    let delay = config.initial_delay_ms as f64 * config.backoff_factor.powi(exponent.min(64) as i32);
    if delay.is_finite() { (delay as u64).min(config.max_delay_ms) } else { config.max_delay_ms }
}

/// The `attempt` in the payload of a nudge of `kind` that `activation` was given, if any.
fn delivered_attempt(store: &Store, activation_id: &str, kind: &str) -> Result<u64, StoreError> {
    Ok(store
        .signals_delivered_to(activation_id)?
        .iter()
        .filter(|sig| sig.kind == kind)
        .filter_map(|sig| sig.payload.get("attempt").and_then(Value::as_u64))
        .max()
        .unwrap_or(0))
}

pub fn no_effect_nudge(tools: &ToolHost, activation: &ActivationRecord) -> Result<Option<SignalRecord>, StoreError> {
    let config = &tools.project.config;
    let cfg = &config.scheduler.no_effect_nudge;
    if !cfg.enabled || activation.status != ActivationStatus::Completed {
        return Ok(None);
    }
    if tools.store.count_activation_useful_effects(&activation.id)? > 0 {
        return Ok(None);
    }
    let attempt = delivered_attempt(&tools.store, &activation.id, NO_EFFECT)? + 1;
    if cfg.max_consecutive > 0 && attempt > cfg.max_consecutive {
        return Ok(None);
    }
    let delay_ms = if attempt == 1 { 0 } else { backoff(cfg, attempt - 2) };
    let now = tools.store.now();
    let not_before = now + Duration::milliseconds(delay_ms as i64);
    let coordinator = config.communication.coordinator_agent.as_deref();
    // Report to the coordinator when there is one; else to whoever the work is for.
    let report_to = coordinator.map_or_else(|| "the agent (or user) your work is for".to_string(), str::to_string);
    let message = cfg.message.clone().unwrap_or_else(|| {
        if coordinator == Some(activation.agent_id.as_str()) {
            "Your last activation ended without an externally visible effect. Check the project state \
             (messages, plan, artifacts) and move the task forward: delegate or do the next piece of work, \
             report progress, submit the final report with completion.submit when the task is done, or call \
             coordination.wait_for_signal with a reason if you are waiting on others."
                .to_string()
        } else {
            format!(
                "Your last activation ended without an externally visible effect. Continue your assigned work \
                 and report progress to {report_to} with messages.send, or call coordination.wait_for_signal \
                 with a reason if you are blocked or waiting."
            )
        }
    });
    let payload = json!({
        "previousActivationId": activation.id,
        "attempt": attempt,
        "maxConsecutive": cfg.max_consecutive,
        "delayMs": delay_ms,
        "notBefore": iso(not_before),
        "message": message,
    });
    let signals = tools.store.record_signal(SignalRequest {
        kind: NO_EFFECT.into(),
        target_agent: Some(activation.agent_id.clone()),
        priority: Some(cfg.priority.as_str().into()),
        payload,
        not_before: (delay_ms > 0).then_some(not_before),
        ..Default::default()
    })?;
    Ok(signals.into_iter().next())
}

pub(super) fn failed_nudges(s: &Scheduler, report: &mut TickReport) -> Result<(), StoreError> {
    let config = &s.tools.project.config;
    let cfg = &config.scheduler.failed_nudge;
    if !cfg.enabled {
        return Ok(());
    }
    let store = s.store();
    for agent in store.agents()? {
        if agent.status != AgentStatus::Failed || config.agent(&agent.id).is_none() {
            continue;
        }
        if store.has_pending_signals_for_agent(&agent.id, true)? {
            continue;
        }
        let Some(failed) = store.latest_activation(&agent.id, Some(ActivationStatus::Failed))? else { continue };
        let attempt = delivered_attempt(store, &failed.id, FAILED)? + 1;
        if cfg.max_consecutive > 0 && attempt > cfg.max_consecutive {
            continue;
        }
        let delay_ms = backoff(cfg, attempt - 1);
        let not_before = store.now() + Duration::milliseconds(delay_ms as i64);
        let error = failed.error.clone().unwrap_or_default();
        let message = cfg.message.clone().unwrap_or_else(|| {
            format!(
                "Your previous activation {} failed: {error}\nRecover: check what was done, fix or work around the \
                 problem, and continue the task; report blockers to {} with messages.send.",
                failed.id,
                config.communication.coordinator_agent.as_deref().unwrap_or("whoever can help (an agent or user)")
            )
        });
        let payload = json!({
            "previousActivationId": failed.id,
            "attempt": attempt,
            "maxConsecutive": cfg.max_consecutive,
            "delayMs": delay_ms,
            "notBefore": iso(not_before),
            "error": error,
            "message": message,
        });
        let signals = store.record_signal(SignalRequest {
            kind: FAILED.into(),
            target_agent: Some(agent.id.clone()),
            priority: Some(cfg.priority.as_str().into()),
            payload,
            not_before: Some(not_before),
            ..Default::default()
        })?;
        report.due(Some(not_before));
        report.nudges.extend(signals);
    }
    Ok(())
}

pub(super) fn all_quiet_nudge(s: &Scheduler, report: &mut TickReport) -> Result<(), StoreError> {
    let config = &s.tools.project.config;
    let cfg = &config.scheduler.all_quiet_nudge;
    if !cfg.enabled || config.agent(&cfg.target_agent).is_none() {
        return Ok(());
    }
    let store = s.store();
    let agents = store.agents()?;
    let all_quiet = agents.iter().filter(|a| config.agent(&a.id).is_some()).all(|a| a.status == AgentStatus::Quiet);
    if !all_quiet || store.has_pending_signals(false)? {
        return Ok(());
    }
    let now = store.now();
    if let Some(last) = store.latest_signal_of_kind(ALL_QUIET, None)? {
        let at = last.created_at;
        let ready = at + Duration::milliseconds(cfg.cooldown_ms as i64);
        if now < ready {
            report.due(Some(ready));
            return Ok(());
        }
    }
    let message = cfg.message.clone().unwrap_or_else(|| {
        "Every agent is quiet and no work is pending. Review the task and the plan: assign the next piece of \
         work, or submit the final report with completion.submit if the task is done."
            .to_string()
    });
    let signals = store.record_signal(SignalRequest {
        kind: ALL_QUIET.into(),
        target_agent: Some(cfg.target_agent.clone()),
        priority: Some(cfg.priority.as_str().into()),
        payload: json!({ "message": message }),
        useful_effect: Some(true),
        ..Default::default()
    })?;
    report.nudges.extend(signals);
    Ok(())
}
