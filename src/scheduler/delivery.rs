//! Step 1 of a tick: hand pending signals to agents (reference §1.3 and §1.5).
//!
//! - `stopped` agents are skipped, and so are paused ones (a budget or the wake-loop guard):
//!   their signals stay pending until they resume.
//! - A running agent is left alone unless a P0 is ready: then its activation is cancelled
//!   (`Interrupted by P0 signal <id>`) and a new one starts at once with the pending P0 and P1.
//! - An idle (quiet or failed) agent with ready signals gets a new activation carrying its
//!   P0/P1 batch, or exactly one P2/P3 signal; with none, a non-failed agent is set `quiet`.
//!
//! The idle agents' activations of one tick start in one transaction (a first tick that wakes
//! 100 agents pays one fsync, not 100); a P0's cancel-and-restart is done at once, in its turn.

use crate::config::Priority;
use crate::store::{ActivationOutcome, ActivationStart, AgentStatus, StoreError};

use super::{Scheduler, TickReport};

pub(super) fn deliver(s: &Scheduler, report: &mut TickReport) -> Result<(), StoreError> {
    let store = s.store();
    let config = &s.tools.project.config;
    let limit = config.scheduler.max_signals_per_activation as usize;
    let ready = store.agents_with_ready_signals()?;
    let mut idle_starts = Vec::new();
    for record in store.agents()? {
        let Some(agent) = config.agent(&record.id) else { continue };
        if record.status == AgentStatus::Stopped || record.paused.is_some() {
            continue;
        }
        let most_urgent = ready.iter().find(|(id, _)| *id == record.id).map(|(_, p)| p.as_str());
        let busy = record.status == AgentStatus::Running || record.active_activation_id.is_some();
        if busy {
            if most_urgent != Some(Priority::P0.as_str()) {
                continue;
            }
            let signals = store.pending_signals(&record.id, limit)?;
            let Some(p0) = signals.iter().find(|sig| sig.priority == Priority::P0) else { continue };
            if let Some(current) = record.active_activation_id.as_deref() {
                let reason = format!("Interrupted by P0 signal {}", p0.id);
                match store.finish_activation(current, ActivationOutcome::Cancelled, None, Some(&reason)) {
                    Ok(cancelled) => {
                        s.launcher.cancel(&cancelled, &reason);
                        report.cancelled.push(cancelled);
                    }
                    // Already ended between our read and now: nothing to cancel.
                    Err(StoreError::ActivationNotRunning { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            start(s, agent, signals, report)?;
            continue;
        }
        if most_urgent.is_none() {
            if record.status != AgentStatus::Quiet && record.status != AgentStatus::Failed {
                store.set_agent_status(&record.id, AgentStatus::Quiet)?;
            }
            continue;
        }
        let signals = store.pending_signals(&record.id, limit)?;
        if !signals.is_empty() {
            idle_starts.push((agent, signals));
        }
    }
    start_all(s, idle_starts, report)
}

/// Start the idle agents' activations in one transaction, then hand each to the launcher.
fn start_all(
    s: &Scheduler,
    starts: Vec<(&crate::config::AgentConfig, Vec<crate::store::SignalRecord>)>,
    report: &mut TickReport,
) -> Result<(), StoreError> {
    if starts.is_empty() {
        return Ok(());
    }
    let prompts: Vec<String> = starts.iter().map(|(agent, signals)| s.launcher.prompt(agent, signals)).collect();
    let ids: Vec<Vec<String>> =
        starts.iter().map(|(_, signals)| signals.iter().map(|sig| sig.id.clone()).collect()).collect();
    let batch: Vec<ActivationStart<'_>> = starts
        .iter()
        .zip(&prompts)
        .zip(&ids)
        .map(|(((agent, _), prompt), ids)| ActivationStart { agent_id: &agent.id, prompt, signal_ids: ids })
        .collect();
    let outcomes = s.store().start_activations(&batch)?;
    for ((_, signals), outcome) in starts.into_iter().zip(outcomes) {
        match outcome {
            Ok(activation) => {
                s.launcher.start(activation.clone(), signals);
                report.started.push(activation);
            }
            // Another activation got there first (never two at once for one agent): next tick.
            Err(StoreError::AgentBusy { .. } | StoreError::SignalNotPending { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn start(
    s: &Scheduler,
    agent: &crate::config::AgentConfig,
    signals: Vec<crate::store::SignalRecord>,
    report: &mut TickReport,
) -> Result<(), StoreError> {
    let prompt = s.launcher.prompt(agent, &signals);
    let ids: Vec<String> = signals.iter().map(|sig| sig.id.clone()).collect();
    match s.store().start_activation(&agent.id, &prompt, &ids) {
        Ok(activation) => {
            s.launcher.start(activation.clone(), signals);
            report.started.push(activation);
            Ok(())
        }
        // Another activation got there first (never two at once for one agent): next tick.
        Err(StoreError::AgentBusy { .. } | StoreError::SignalNotPending { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}
