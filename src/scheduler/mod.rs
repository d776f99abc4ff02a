//! The scheduler: one tick per running project, woken by store events (a signal, a message, an
//! activation ending), by the next due time (a delayed signal, a pack's `wakeAt`, a monitor) and
//! by a periodic timer. A tick (reference §1.5, exact order):
//!
//! 0. resume paused agents whose budget period ended or whose limit was raised;
//! 1. for each agent: deliver pending signals (P0 pre-empts a running activation; otherwise an
//!    idle agent gets its P0/P1 batch or exactly one P2/P3 signal) — see `delivery.rs`;
//! 2. the local packs' scheduler hooks (isolated: one failing never stops the others; they run
//!    concurrently, each with `scheduler.hookTimeoutMs`; in [`Scheduler::run`] the tick does
//!    not wait for them, so a slow hook never delays a delivery);
//! 3. the failed nudge, the failed-agent monitor, the quiet-agent monitor, the all-quiet nudge.
//!
//! Starting and stopping the work of an activation goes through [`ActivationLauncher`], so the
//! rules are testable without the model loop. The no-effect nudge is created when an activation
//! completes: [`Scheduler::activation_finished`].

pub mod budgets;
mod delivery;
mod monitors;
pub mod nudges;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::clock::parse_iso;
use crate::config::AgentConfig;
use crate::store::{ActivationRecord, ProjectStatus, SignalRecord, Store, StoreError};
use crate::support::{HookOutcome, ToolHost};

/// What runs an activation's work (the model loop in the controller; a fake in tests).
pub trait ActivationLauncher: Send + Sync + 'static {
    /// The activation prompt for an agent and the signals it is given (reference §1.6).
    fn prompt(&self, agent: &AgentConfig, signals: &[SignalRecord]) -> String;
    /// Begin the work of an activation the scheduler has just recorded. Must not block.
    fn start(&self, activation: ActivationRecord, signals: Vec<SignalRecord>);
    /// Stop the work of an activation the scheduler has just marked cancelled (P0).
    fn cancel(&self, activation: &ActivationRecord, reason: &str);
}

/// What one tick did.
#[derive(Debug, Default)]
pub struct TickReport {
    /// False when the project is not `running` (nothing is scheduled then).
    pub ran: bool,
    pub started: Vec<ActivationRecord>,
    pub cancelled: Vec<ActivationRecord>,
    pub hooks: Vec<HookOutcome>,
    /// Nudge signals created (failed, all-quiet).
    pub nudges: Vec<SignalRecord>,
    /// Monitor messages sent (message ids).
    pub monitor_messages: Vec<String>,
    /// Problems met (logged); a tick never stops at the first one.
    pub errors: Vec<String>,
    /// The earliest time something becomes due (a delayed signal, a hook's `wakeAt`, a monitor).
    pub next_due: Option<DateTime<Utc>>,
}

impl TickReport {
    fn due(&mut self, at: Option<DateTime<Utc>>) {
        if let Some(at) = at {
            self.next_due = Some(self.next_due.map_or(at, |d| d.min(at)));
        }
    }
}

/// One of the rules run after the hooks, in the reference's order.
type TickStep = fn(&Scheduler, &mut TickReport) -> Result<(), StoreError>;

pub struct Scheduler {
    tools: Arc<ToolHost>,
    launcher: Arc<dyn ActivationLauncher>,
    /// The next due time the last tick found (for `--until-idle`).
    next_due: std::sync::Mutex<Option<DateTime<Utc>>>,
    /// Counts the ticks of [`Scheduler::run`]: `--until-idle` looks again after each one
    /// instead of polling.
    ticks: watch::Sender<u64>,
    hook_wakes: Arc<HookWakes>,
}

/// The `wakeAt` of each pack's last hook run in the background ([`Scheduler::run`]), and a
/// notice when one arrives so the loop can wake earlier.
#[derive(Default)]
struct HookWakes {
    at: std::sync::Mutex<HashMap<String, DateTime<Utc>>>,
    arrived: Notify,
    /// Background hooks that have not returned yet (what they return may be due at once).
    running: std::sync::atomic::AtomicUsize,
}

impl HookWakes {
    fn earliest(&self) -> Option<DateTime<Utc>> {
        self.at.lock().unwrap_or_else(|e| e.into_inner()).values().min().copied()
    }
}

/// Whether a tick waits for the scheduler hooks or leaves them running on their own.
#[derive(Clone, Copy)]
enum Hooks {
    Wait,
    Background,
}

impl Scheduler {
    pub fn new(tools: Arc<ToolHost>, launcher: Arc<dyn ActivationLauncher>) -> Scheduler {
        Scheduler {
            tools,
            launcher,
            next_due: std::sync::Mutex::new(None),
            ticks: watch::channel(0).0,
            hook_wakes: Arc::default(),
        }
    }

    fn store(&self) -> &Store {
        &self.tools.store
    }

    /// One tick (reference §1.5), waiting for the scheduler hooks (at most
    /// `scheduler.hookTimeoutMs`) before the rules that follow them.
    pub async fn tick(&self) -> TickReport {
        self.tick_with(Hooks::Wait).await
    }

    async fn tick_with(&self, hooks: Hooks) -> TickReport {
        let mut report = TickReport::default();
        match self.store().project() {
            Ok(p) if p.status == ProjectStatus::Running => report.ran = true,
            Ok(_) => return report,
            Err(e) => {
                report.errors.push(e.to_string());
                return report;
            }
        }
        match budgets::resume_due(&self.tools) {
            Ok(resumed) => report.due(resumed.next_due),
            Err(e) => report.errors.push(format!("budget resume: {e}")),
        }
        if let Err(e) = delivery::deliver(self, &mut report) {
            report.errors.push(format!("signal delivery: {e}"));
        }
        match hooks {
            Hooks::Wait => report.hooks = self.tools.run_scheduler_hooks().await,
            Hooks::Background => self.start_hooks_in_background(),
        }
        report.due(self.hook_wakes.earliest());
        for hook in &report.hooks {
            report.errors.extend(hook.errors.iter().map(|e| format!("toolpack {}: {e}", hook.pack)));
        }
        let wakes: Vec<_> = report.hooks.iter().filter_map(|h| h.wake_at).collect();
        for at in wakes {
            report.due(Some(at));
        }
        let steps: [(&str, TickStep); 4] = [
            ("failed nudge", nudges::failed_nudges),
            ("failed-agent monitor", monitors::failed_agent_monitor),
            ("quiet-agent monitor", monitors::quiet_agent_monitor),
            ("all-quiet nudge", nudges::all_quiet_nudge),
        ];
        for (name, step) in steps {
            if let Err(e) = step(self, &mut report) {
                report.errors.push(format!("{name}: {e}"));
            }
        }
        match self.store().next_signal_ready_at() {
            Ok(at) => report.due(at.as_deref().and_then(parse_iso)),
            Err(e) => report.errors.push(e.to_string()),
        }
        for e in &report.errors {
            tracing::warn!(project = %self.tools.name(), "scheduler: {e}");
        }
        *self.next_due.lock().unwrap_or_else(|e| e.into_inner()) = report.next_due;
        report
    }

    /// Start the hooks whose previous run has returned and let them finish on their own: a slow
    /// hook delays neither this tick's rules nor the next tick's deliveries. What they return
    /// is recorded when it comes (signals wake the loop as store events; a `wakeAt` through
    /// `hook_woke`).
    fn start_hooks_in_background(&self) {
        for (pack, outcome) in self.tools.start_scheduler_hooks() {
            self.hook_wakes.at.lock().unwrap_or_else(|e| e.into_inner()).remove(&pack);
            let wakes = self.hook_wakes.clone();
            wakes.running.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            tokio::spawn(async move {
                let outcome = outcome.await;
                wakes.running.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                let Ok(Some(outcome)) = outcome else { return };
                if let Some(at) = outcome.wake_at {
                    wakes.at.lock().unwrap_or_else(|e| e.into_inner()).insert(pack, at);
                    wakes.arrived.notify_one();
                }
            });
        }
    }

    /// Called when an activation has finished (its row already updated): a completed
    /// activation with no useful effect gets the no-effect nudge (reference §1.4).
    pub fn activation_finished(&self, activation: &ActivationRecord) -> Result<Option<SignalRecord>, StoreError> {
        nudges::no_effect_nudge(&self.tools, activation)
    }

    /// When the last tick said something would next be due, or a background hook since; now
    /// while a background hook has not returned (it may record signals or ask to continue).
    pub fn next_due(&self) -> Option<DateTime<Utc>> {
        if self.hook_wakes.running.load(std::sync::atomic::Ordering::Acquire) > 0 {
            return Some(self.store().now());
        }
        let last = *self.next_due.lock().unwrap_or_else(|e| e.into_inner());
        [last, self.hook_wakes.earliest()].into_iter().flatten().min()
    }

    /// P1 signals for a running activation, handed over at a tool boundary (reference §1.3).
    pub fn tool_boundary_signals(&self, agent_id: &str, activation_id: &str) -> Result<Vec<SignalRecord>, StoreError> {
        let limit = self.tools.project.config.scheduler.max_signals_per_activation as usize;
        self.store().deliver_at_tool_boundary(agent_id, activation_id, limit)
    }

    /// Told after every tick of [`Scheduler::run`].
    pub fn ticks(&self) -> watch::Receiver<u64> {
        self.ticks.subscribe()
    }

    /// Tick until `shutdown` is cancelled: after every relevant store event, at the next due
    /// time, and at least every `tickIntervalMs`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let interval = Duration::from_millis(self.tools.project.config.scheduler.tick_interval_ms);
        let mut events = self.store().subscribe();
        // A due time already past (a busy pack asking to continue) still leaves a breath
        // between ticks, so a misbehaving hook cannot spin the loop.
        let until = |due: DateTime<Utc>| {
            (due - self.store().now()).to_std().unwrap_or(Duration::ZERO).max(Duration::from_millis(50))
        };
        loop {
            let report = self.tick_with(Hooks::Background).await;
            self.ticks.send_modify(|n| *n += 1);
            let wait = report.next_due.map_or(interval, |due| interval.min(until(due)));
            let mut deadline = tokio::time::Instant::now() + wait;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = shutdown.cancelled() => return,
                    _ = self.hook_wakes.arrived.notified() => {
                        if let Some(due) = self.hook_wakes.earliest() {
                            deadline = deadline.min(tokio::time::Instant::now() + until(due));
                        }
                    }
                    event = events.recv() => match event {
                        Ok(e) if !e.event.wakes_scheduler() => continue,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                        _ => {
                            // Coalesce a burst of events into one tick.
                            while let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(2), events.recv()).await {}
                            break;
                        }
                    },
                }
            }
            if shutdown.is_cancelled() {
                return;
            }
        }
    }
}

/// The launcher of `suzumio tick`: one tick records the activations it would start and
/// delivers their signals, without running a model loop in the command's process.
pub struct RecordingLauncher;

impl ActivationLauncher for RecordingLauncher {
    fn prompt(&self, agent: &AgentConfig, signals: &[SignalRecord]) -> String {
        let ids: Vec<&str> = signals.iter().map(|s| s.id.as_str()).collect();
        format!("Activation of {} with signals {}", agent.id, ids.join(", "))
    }

    fn start(&self, activation: ActivationRecord, signals: Vec<SignalRecord>) {
        tracing::info!(
            agent = %activation.agent_id,
            activation = %activation.id,
            signals = signals.len(),
            "activation recorded"
        );
    }

    fn cancel(&self, activation: &ActivationRecord, reason: &str) {
        tracing::info!(agent = %activation.agent_id, activation = %activation.id, "activation cancelled: {reason}");
    }
}
