//! Budgets and the wake-loop guard, checked before every model call of an activation, and the
//! usage each call records (tokens, cached tokens, cost from the preset's prices).
//!
//! Limits (`budgets.agents`, `agents.<id>.budget`, `budgets.project`) are checked against what
//! is already used, so one call can overshoot a limit by its own size; the next call does not
//! happen. Periods are UTC clock hours and UTC days, read from the store's `Clock`. After a
//! resume, an agent's budgets count from the moment it was resumed, so `suzumio resume` gives
//! it a fresh allowance for the current period.
//!
//! On a breach the agent is paused (`Store::pause_agent`, an `agent.paused` event) and the
//! activation ends cleanly: before its first model call it is cancelled and its signals go
//! back to pending (the model never saw them, so the agent gets them once it resumes); after
//! that it completes with a note, its signals stay delivered, and resuming sends the agent an
//! `agent.resumed` signal to continue. A pause ends with `suzumio resume`, the API, a raised
//! limit (a new config) or the end of the limit's period (`scheduler::budgets::resume_due`, a scheduler step).
//!
//! The guard: an agent activated more than `loopGuard.maxActivations` times within
//! `windowSeconds` by other agents' signals, while none of its activations nor theirs did more
//! than send messages, wait or call read-only tools, is paused together with the agents that
//! woke it.

use std::sync::Mutex;

use chrono::{DateTime, Duration, DurationRound, Utc};

use super::providers::ResolvedModel;
use crate::clock::iso;
use crate::config::{AgentConfig, BudgetLimits};
use crate::store::{Pause, Store, StoreError, TokenUsage};
use crate::support::ToolHost;
pub use crate::text::number;

/// What the model loop could not record; the activation fails with this text (a store error is
/// never dropped).
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot record the activation's history: {0}")]
    History(StoreError),
    #[error("cannot record the model call's usage: {0}")]
    Usage(StoreError),
}

/// Why an activation must stop before its next model call.
#[derive(Clone, Debug, PartialEq)]
pub struct Stop {
    pub reason: String,
    /// No model call of this activation happened yet: its signals go back to pending.
    pub before_work: bool,
}

/// One activation's budget: what it used so far, and the checks before each model call.
pub struct ActivationBudget<'a> {
    host: &'a ToolHost,
    agent: &'a AgentConfig,
    activation_id: &'a str,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    used: TokenUsage,
    guard_checked: bool,
}

impl<'a> ActivationBudget<'a> {
    pub fn new(host: &'a ToolHost, agent: &'a AgentConfig, activation_id: &'a str) -> Self {
        ActivationBudget { host, agent, activation_id, state: Mutex::new(State::default()) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What this activation's model calls used so far.
    pub fn used(&self) -> TokenUsage {
        self.state().used
    }

    /// Before a model call: `Some` when the agent is (or is now) paused and the activation
    /// must stop. An error means the budget could not be read; the caller fails the activation
    /// rather than spend unchecked.
    // String: the activation fails with this text (`Ending::Failed`), nothing decides on it.
    pub fn check(&self) -> Result<Option<Stop>, String> {
        self.check_inner().map_err(|e| format!("cannot check the budget: {e}"))
    }

    fn check_inner(&self) -> Result<Option<Stop>, StoreError> {
        let store = &self.host.store;
        let id = &self.agent.id;
        let record = store.agent(id)?.ok_or_else(|| StoreError::UnknownAgent(id.clone()))?;
        let mut pause = record.paused;
        let first = !std::mem::replace(&mut self.state().guard_checked, true);
        if pause.is_none() && first {
            pause = self.loop_guard(record.resumed_at)?;
        }
        if pause.is_none() {
            let used = self.used();
            if let Some(breach) = breach(self.host, self.agent, record.resumed_at, &used)? {
                store.pause_agent(id, &breach)?;
                // Paused elsewhere in the meantime: that reason is the one on record.
                pause = store.agent(id)?.and_then(|a| a.paused).or(Some(breach));
            }
        }
        let Some(pause) = pause else { return Ok(None) };
        let before_work = self.used().model_calls == 0;
        if !before_work {
            store.note_paused_activation(id, self.activation_id)?;
        }
        Ok(Some(Stop { reason: pause.reason, before_work }))
    }

    /// The guard, once per activation (its count does not change while it runs).
    fn loop_guard(&self, resumed_at: Option<DateTime<Utc>>) -> Result<Option<Pause>, StoreError> {
        let config = &self.host.project.config;
        let guard = config.budgets.loop_guard;
        if !guard.enabled {
            return Ok(None);
        }
        let store = &self.host.store;
        let now = store.now();
        let since = later(now - Duration::seconds(guard.window_seconds as i64), resumed_at);
        let window = store.wake_window(&self.agent.id, &since, &talk_tools(self.host))?;
        if window.activations <= guard.max_activations || window.with_progress > 0 || window.woken_by.is_empty() {
            return Ok(None);
        }
        let reason = format!(
            "wake loop: {} was activated {} times in {} s (loopGuard.maxActivations {}), woken by {}, and none of \
             these activations did more than send messages, wait or read",
            self.agent.id,
            window.activations,
            guard.window_seconds,
            guard.max_activations,
            window.woken_by.join(", ")
        );
        let pause = Pause {
            reason,
            limit: "loopGuard".into(),
            scope: "agent".into(),
            allowed: guard.max_activations as f64,
            used: window.activations as f64,
            until: None,
            activation_id: None,
            // The store sets it when it records the pause.
            paused_at: now,
        };
        tracing::warn!(agent = %self.agent.id, "{}", pause.reason);
        for partner in &window.woken_by {
            store.pause_agent(partner, &pause)?;
        }
        store.pause_agent(&self.agent.id, &pause)?;
        Ok(store.agent(&self.agent.id)?.and_then(|a| a.paused).or(Some(pause)))
    }

    /// Record one model call: its tokens, and its cost from the preset's prices. `input`
    /// counts every input token, `cached_input` the part of it the provider read from its cache.
    pub fn record(&self, model: &ResolvedModel, input: u64, cached_input: u64, output: u64) -> Result<(), RecordError> {
        let prices = &model.preset.prices;
        let call = TokenUsage {
            model_calls: 1,
            input_tokens: input,
            cached_input_tokens: cached_input.min(input),
            output_tokens: output,
            cost: prices.cost(input, cached_input, output),
        };
        let label = format!("{} ({})", model.preset_id(), model.api_model());
        self.host
            .store
            .record_model_usage(self.activation_id, &self.agent.id, &label, &call, prices.is_set())
            .map_err(RecordError::Usage)?;
        self.state().used.add(&call);
        Ok(())
    }
}

/// Tools whose calls are not work for the guard: coordination (talking, waiting, submitting)
/// and read-only tools.
fn talk_tools(host: &ToolHost) -> Vec<String> {
    host.project
        .snapshot()
        .registry
        .tools()
        .filter(|(_, tool)| tool.effects.coordination || tool.annotations.read_only_hint == Some(true))
        .map(|(_, tool)| tool.name.clone())
        .collect()
}

/// The later of two times (the start of a period, the agent's last resume), as the store
/// compares them.
fn later(period_start: DateTime<Utc>, resumed_at: Option<DateTime<Utc>>) -> String {
    iso(resumed_at.map_or(period_start, |r| r.max(period_start)))
}

/// The start of the UTC hour and of the UTC day of `now`, and when each ends.
struct Periods {
    hour: DateTime<Utc>,
    day: DateTime<Utc>,
}

impl Periods {
    fn of(now: DateTime<Utc>) -> Periods {
        Periods {
            hour: now.duration_trunc(Duration::hours(1)).unwrap_or(now),
            day: now.duration_trunc(Duration::days(1)).unwrap_or(now),
        }
    }
}

/// Today's usage and this hour's activations, of one agent or of the whole project, counted
/// from the period's start or the agent's last resume.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spent {
    pub today: TokenUsage,
    pub activations_this_hour: u64,
}

/// What an agent (`Some`) or the project (`None`) spent in the current periods.
pub fn spent(store: &Store, agent: Option<&str>, resumed_at: Option<DateTime<Utc>>) -> Result<Spent, StoreError> {
    let periods = Periods::of(store.now());
    // The period's running counters, unless the agent was resumed within it: then the rows since
    // the resume.
    let today = match resumed_at {
        Some(r) if r > periods.day => store.usage_since(agent, &iso(r))?,
        _ => store.usage_of_day(agent, periods.day)?,
    };
    let activations_this_hour = match resumed_at {
        Some(r) if r > periods.hour => store.count_activations_since(agent, &iso(r))?,
        _ => store.activations_of_hour(agent, periods.hour)?,
    };
    Ok(Spent { today, activations_this_hour })
}

/// One limit against what was used, and what ends its period.
struct Check {
    limit: &'static str,
    allowed: Option<f64>,
    used: f64,
    until: Option<DateTime<Utc>>,
    what: String,
}

/// The first limit the agent or the project is over, as the pause it causes.
fn breach(
    host: &ToolHost,
    agent: &AgentConfig,
    resumed_at: Option<DateTime<Utc>>,
    activation: &TokenUsage,
) -> Result<Option<Pause>, StoreError> {
    let store = &host.store;
    let periods = Periods::of(store.now());
    let next_hour = periods.hour + Duration::hours(1);
    let next_day = periods.day + Duration::days(1);
    // A period's totals are read only for a scope that limits one.
    let periodic = |l: &BudgetLimits| {
        l.max_activations_per_hour.is_some() || l.max_tokens_per_day.is_some() || l.max_cost_per_day.is_some()
    };
    let project_limits = &host.project.config.budgets.project;
    let mine = if periodic(&agent.budget) { spent(store, Some(&agent.id), resumed_at)? } else { Spent::default() };
    let project = if periodic(project_limits) { spent(store, None, resumed_at)? } else { Spent::default() };
    let scopes: [(&str, &BudgetLimits, &Spent); 2] =
        [("agent", &agent.budget, &mine), ("project", project_limits, &project)];
    for (scope, limits, spent) in scopes {
        let who = if scope == "agent" { agent.id.clone() } else { "the project".to_string() };
        let checks = [
            Check {
                limit: "maxTokensPerActivation",
                allowed: limits.max_tokens_per_activation.map(|v| v as f64).filter(|_| scope == "agent"),
                used: activation.tokens() as f64,
                until: None,
                what: format!("{who} used {} tokens in this activation", activation.tokens()),
            },
            Check {
                limit: "maxActivationsPerHour",
                allowed: limits.max_activations_per_hour.map(|v| v as f64),
                used: spent.activations_this_hour as f64,
                until: Some(next_hour),
                what: format!("{who} started {} activations this hour", spent.activations_this_hour),
            },
            Check {
                limit: "maxTokensPerDay",
                allowed: limits.max_tokens_per_day.map(|v| v as f64),
                used: spent.today.tokens() as f64,
                until: Some(next_day),
                what: format!("{who} used {} tokens today", spent.today.tokens()),
            },
            Check {
                limit: "maxCostPerDay",
                allowed: limits.max_cost_per_day,
                used: spent.today.cost,
                until: Some(next_day),
                what: format!("{who} spent {:.4} today", spent.today.cost),
            },
        ];
        for Check { limit, allowed, used, until, what } in checks {
            let Some(allowed) = allowed else { continue };
            // Activations count the one that is starting, so more than the limit is over it;
            // tokens and cost are what was already used, so reaching the limit is enough.
            let over = if limit == "maxActivationsPerHour" { used > allowed } else { used >= allowed };
            if !over {
                continue;
            }
            let key = if scope == "agent" { limit.to_string() } else { format!("budgets.project.{limit}") };
            return Ok(Some(Pause {
                reason: format!("budget: {what} ({key} {})", number(allowed)),
                limit: limit.to_string(),
                scope: scope.to_string(),
                allowed,
                used,
                until,
                activation_id: None,
                // The store sets it when it records the pause.
                paused_at: store.now(),
            }));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::parse_iso;
    use crate::config::Prices;

    #[test]
    fn cost_prices_cached_input_apart_and_falls_back_to_the_input_price() {
        let prices =
            Prices { input_per_mtok: Some(3.0), output_per_mtok: Some(15.0), cached_input_per_mtok: Some(0.3) };
        // 1M input of which 400k cached, 100k output.
        let cost = prices.cost(1_000_000, 400_000, 100_000);
        assert!((cost - (0.6 * 3.0 + 0.4 * 0.3 + 0.1 * 15.0)).abs() < 1e-9, "{cost}");
        let no_cache_price = Prices { cached_input_per_mtok: None, ..prices };
        assert!((no_cache_price.cost(1_000_000, 400_000, 0) - 3.0).abs() < 1e-9);
        assert_eq!(Prices::default().cost(1_000_000, 0, 1_000_000), 0.0);
    }

    #[test]
    fn periods_are_utc_hours_and_days() {
        let now = crate::clock::parse_iso("2026-03-01T12:34:56.789Z").unwrap();
        let p = Periods::of(now);
        assert_eq!((iso(p.hour), iso(p.day)), ("2026-03-01T12:00:00.000Z".into(), "2026-03-01T00:00:00.000Z".into()));
        assert_eq!(later(p.day, parse_iso("2026-03-01T12:30:00.000Z")), "2026-03-01T12:30:00.000Z");
        assert_eq!(later(p.hour, parse_iso("2026-02-28T00:00:00.000Z")), "2026-03-01T12:00:00.000Z");
    }
}
