//! The store side of budgets: what each model call used (totals per activation, and per agent
//! since a time), how many activations started since a time, the running counters of each UTC
//! day's usage and each UTC hour's activations (per agent and for the project, kept in the
//! transaction of the row they count, so a budget check reads one row), the wake-loop guard's
//! window, and pausing and resuming agents. It records and counts; which limit applies and when
//! to pause is `activation::budget`'s decision.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, params};
use serde_json::{Value, json};

use crate::config::Priority;
use crate::store::signals::plan_signals;
use crate::store::{Event, Pause, Store, StoreError, TokenUsage, WakeWindow, WriteTx};

/// The kind of the signal that tells an agent stopped mid-activation to continue.
pub const RESUMED_KIND: &str = "agent.resumed";

// The statements budgets and the wake-loop guard run at every activation (`query_plans` holds
// each to a plan that does not grow with the history). An optional agent is two statements, not
// `?1 IS NULL OR agent_id = ?1`, which no index serves.
pub(super) const AGENT_USAGE_SINCE: &str = "SELECT COUNT(*), COALESCE(SUM(input_tokens), 0),
        COALESCE(SUM(cached_input_tokens), 0), COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cost), 0.0)
    FROM model_calls WHERE agent_id = ?1 AND at >= ?2";
pub(super) const USAGE_SINCE: &str = "SELECT COUNT(*), COALESCE(SUM(input_tokens), 0),
        COALESCE(SUM(cached_input_tokens), 0), COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cost), 0.0)
    FROM model_calls WHERE at >= ?1";
pub(super) const ACTIVATION_USAGE: &str = "SELECT COUNT(*), COALESCE(SUM(input_tokens), 0),
        COALESCE(SUM(cached_input_tokens), 0), COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cost), 0.0)
    FROM model_calls WHERE activation_id = ?1";
pub(super) const AGENT_ACTIVATIONS_SINCE: &str =
    "SELECT COUNT(*) FROM activations WHERE agent_id = ?1 AND started_at >= ?2";
pub(super) const ACTIVATIONS_SINCE: &str = "SELECT COUNT(*) FROM activations WHERE started_at >= ?1";
/// The running counters (migration 13's `usage_counters`): a model call adds to its UTC day's
/// (`?2` is its time), an activation's start to its UTC hour's, each for the agent and for the
/// project (scope ''); budgets read the current period's row.
pub(super) const COUNT_MODEL_CALL: &str = "INSERT INTO usage_counters
        (scope, period, model_calls, input_tokens, cached_input_tokens, output_tokens, cost)
    VALUES (?1, substr(?2, 1, 10), 1, ?3, ?4, ?5, ?6), ('', substr(?2, 1, 10), 1, ?3, ?4, ?5, ?6)
    ON CONFLICT (scope, period) DO UPDATE SET model_calls = model_calls + 1,
        input_tokens = input_tokens + excluded.input_tokens,
        cached_input_tokens = cached_input_tokens + excluded.cached_input_tokens,
        output_tokens = output_tokens + excluded.output_tokens, cost = cost + excluded.cost";
pub(super) const COUNT_ACTIVATION: &str = "INSERT INTO usage_counters (scope, period, activations)
    VALUES (?1, substr(?2, 1, 13), 1), ('', substr(?2, 1, 13), 1)
    ON CONFLICT (scope, period) DO UPDATE SET activations = activations + 1";
pub(super) const PERIOD_USAGE: &str = "SELECT model_calls, input_tokens, cached_input_tokens, output_tokens, cost
    FROM usage_counters WHERE scope = ?1 AND period = ?2";
pub(super) const PERIOD_ACTIVATIONS: &str = "SELECT activations FROM usage_counters WHERE scope = ?1 AND period = ?2";
/// The counters' scope of the project.
const PROJECT_SCOPE: &str = "";

/// A model call's record reads and rewrites its activation's usage.
pub(super) const ACTIVATION_USAGE_JSON: &str = "SELECT usage_json FROM activations WHERE id = ?1";
pub(super) const SET_ACTIVATION_USAGE_JSON: &str = "UPDATE activations SET usage_json = ?2 WHERE id = ?1";
/// Whether the agent only waits (`coordination.*` tools, at each of their calls): its latest
/// activation by index, and that activation's signals.
pub(super) const IS_WAITING: &str = "SELECT EXISTS (SELECT 1 FROM agents g
                    JOIN activations a ON a.id = (SELECT id FROM activations WHERE agent_id = g.id
                                                  ORDER BY started_at DESC, rowid DESC LIMIT 1)
                    WHERE g.id = ?1 AND g.active_activation_id IS NULL
                      AND EXISTS (SELECT 1 FROM signals s WHERE s.source_activation = a.id
                                    AND s.kind = 'coordination.wait_for_signal'))";
/// Who woke the agent: one row per signal delivered to its activations in the window (few; made
/// distinct in Rust, where no temporary B-tree is needed).
pub(super) const WAKE_SOURCES: &str = "SELECT s.source_agent FROM activations a
    JOIN signals s ON s.delivered_activation_id = a.id
    WHERE a.agent_id = ?1 AND a.started_at >= ?2 AND s.source_agent IS NOT NULL AND s.source_agent != ?1";
pub(super) const WAKE_PROGRESS: &str = "SELECT COUNT(*) FROM activations a
    WHERE a.agent_id IN (SELECT value FROM json_each(?1)) AND a.started_at >= ?2
      AND (EXISTS (SELECT 1 FROM tool_calls t WHERE t.activation_id = a.id AND t.status = 'completed'
                     AND t.tool NOT IN (SELECT value FROM json_each(?3)))
           OR EXISTS (SELECT 1 FROM signals s WHERE s.source_activation = a.id AND s.useful_effect != 0
                     AND s.kind NOT IN ('message.created', 'coordination.wait_for_signal')))";

impl Store {
    /// Record one model call: a `model_calls` row, and the activation's `usage` JSON (kept
    /// current while it runs), in one transaction. `priced`: the model has prices, so the
    /// activation's usage shows a cost.
    pub fn record_model_usage(
        &self,
        activation_id: &str,
        agent_id: &str,
        model: &str,
        call: &TokenUsage,
        priced: bool,
    ) -> Result<(), StoreError> {
        self.write(|w| {
            let existing: Option<Option<String>> =
                w.tx.query_row(ACTIVATION_USAGE_JSON, [activation_id], |r| r.get(0)).optional()?;
            let Some(existing) = existing else {
                return Err(StoreError::UnknownActivation(activation_id.to_string()));
            };
            let mut usage = existing.and_then(|t| serde_json::from_str::<Value>(&t).ok()).unwrap_or_else(|| json!({}));
            let add = |usage: &mut Value, key: &str, n: u64| {
                usage[key] = json!(usage[key].as_u64().unwrap_or(0) + n);
            };
            add(&mut usage, "modelCalls", call.model_calls);
            add(&mut usage, "inputTokens", call.input_tokens);
            add(&mut usage, "cachedInputTokens", call.cached_input_tokens);
            add(&mut usage, "outputTokens", call.output_tokens);
            if priced || usage.get("cost").is_some() {
                usage["cost"] = json!(usage["cost"].as_f64().unwrap_or(0.0) + call.cost);
            }
            let mut models: Vec<Value> = usage["models"].as_array().cloned().unwrap_or_default();
            if !models.iter().any(|m| m.as_str() == Some(model)) {
                models.push(json!(model));
            }
            usage["models"] = Value::Array(models);
            w.tx.execute(SET_ACTIVATION_USAGE_JSON, params![activation_id, usage.to_string()])?;
            w.tx.execute(
                COUNT_MODEL_CALL,
                params![
                    agent_id,
                    w.now,
                    call.input_tokens as i64,
                    call.cached_input_tokens as i64,
                    call.output_tokens as i64,
                    call.cost
                ],
            )?;
            w.tx.execute(
                "INSERT INTO model_calls (activation_id, agent_id, model, input_tokens, cached_input_tokens,
                                          output_tokens, cost, at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    activation_id,
                    agent_id,
                    model,
                    call.input_tokens as i64,
                    call.cached_input_tokens as i64,
                    call.output_tokens as i64,
                    call.cost,
                    w.now
                ],
            )?;
            Ok(())
        })
    }

    /// What the model calls of one agent (or of all) used at or after `since` (ISO).
    pub fn usage_since(&self, agent_id: Option<&str>, since: &str) -> Result<TokenUsage, StoreError> {
        self.read(|conn| {
            Ok(match agent_id {
                Some(agent) => conn
                    .prepare_cached(AGENT_USAGE_SINCE)?
                    .query_row(params![agent, since], |r| usage_from_row(r, 0))?,
                None => conn.prepare_cached(USAGE_SINCE)?.query_row([since], |r| usage_from_row(r, 0))?,
            })
        })
    }

    /// What the model calls of one agent (or of all) used in the UTC day that starts at `day`,
    /// from the running counters: one row, however busy the day.
    pub fn usage_of_day(&self, agent_id: Option<&str>, day: DateTime<Utc>) -> Result<TokenUsage, StoreError> {
        let period = day.format("%Y-%m-%d").to_string();
        let scope = agent_id.unwrap_or(PROJECT_SCOPE);
        self.read(|conn| {
            Ok(conn
                .prepare_cached(PERIOD_USAGE)?
                .query_row(params![scope, period], |r| usage_from_row(r, 0))
                .optional()?
                .unwrap_or_default())
        })
    }

    /// How many activations of one agent (or of all) started in the UTC hour that starts at
    /// `hour`, from the running counters.
    pub fn activations_of_hour(&self, agent_id: Option<&str>, hour: DateTime<Utc>) -> Result<u64, StoreError> {
        let period = hour.format("%Y-%m-%dT%H").to_string();
        let scope = agent_id.unwrap_or(PROJECT_SCOPE);
        self.read(|conn| {
            let n: Option<i64> =
                conn.prepare_cached(PERIOD_ACTIVATIONS)?.query_row(params![scope, period], |r| r.get(0)).optional()?;
            Ok(n.unwrap_or(0) as u64)
        })
    }

    /// What one activation's model calls used.
    pub fn activation_usage(&self, activation_id: &str) -> Result<TokenUsage, StoreError> {
        self.read(|conn| {
            Ok(conn.prepare_cached(ACTIVATION_USAGE)?.query_row([activation_id], |r| usage_from_row(r, 0))?)
        })
    }

    /// How many activations (of one agent, or of all) started at or after `since` (ISO).
    pub fn count_activations_since(&self, agent_id: Option<&str>, since: &str) -> Result<u64, StoreError> {
        self.read(|conn| {
            let n: i64 = match agent_id {
                Some(agent) => {
                    conn.prepare_cached(AGENT_ACTIVATIONS_SINCE)?.query_row(params![agent, since], |r| r.get(0))?
                }
                None => conn.prepare_cached(ACTIVATIONS_SINCE)?.query_row([since], |r| r.get(0))?,
            };
            Ok(n as u64)
        })
    }

    /// The wake-loop guard's view of `agent_id` since `since`: its activations, the agents
    /// whose signals started them, and how many activations of all of these did more than talk
    /// — a completed call of a tool not in `talk_tools`, or a useful signal that is not a
    /// message or a wait.
    pub fn wake_window(&self, agent_id: &str, since: &str, talk_tools: &[String]) -> Result<WakeWindow, StoreError> {
        let activations = self.count_activations_since(Some(agent_id), since)?;
        let sources: std::collections::BTreeSet<String> = self.read(|conn| {
            let mut stmt = conn.prepare_cached(WAKE_SOURCES)?;
            let rows = stmt.query_map(params![agent_id, since], |r| r.get(0))?;
            Ok(rows.collect::<Result<_, _>>()?)
        })?;
        let woken_by: Vec<String> = sources.into_iter().filter(|a| self.is_roster_agent(a)).collect();
        let mut participants = woken_by.clone();
        participants.push(agent_id.to_string());
        let with_progress = self.read(|conn| {
            let n: i64 = conn
                .prepare_cached(WAKE_PROGRESS)?
                .query_row(params![json!(participants).to_string(), since, json!(talk_tools).to_string()], |r| {
                    r.get(0)
                })?;
            Ok(n as u64)
        })?;
        Ok(WakeWindow { activations, woken_by, with_progress })
    }

    /// Whether the agent is only waiting: no activation running, and its latest activation
    /// called `coordination.wait_for_signal`.
    pub fn is_waiting(&self, agent_id: &str) -> Result<bool, StoreError> {
        self.read(|conn| Ok(conn.prepare_cached(IS_WAITING)?.query_row([agent_id], |r| r.get(0))?))
    }

    /// Pending signals ready now for an agent that is not paused (what would start work).
    pub fn has_schedulable_signals(&self) -> Result<bool, StoreError> {
        let now = crate::clock::iso(self.now());
        self.read(|conn| {
            Ok(conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM signals s WHERE s.status = 'pending'
                    AND (s.not_before IS NULL OR s.not_before <= ?1)
                    AND NOT EXISTS (SELECT 1 FROM agents g WHERE g.id = s.target_agent AND g.paused_json IS NOT NULL))",
                [now],
                |r| r.get(0),
            )?)
        })
    }

    /// Pause an agent (its `paused_at` is set to now) with an `agent.paused` event. False
    /// when it was paused already: the first reason stays.
    pub fn pause_agent(&self, agent_id: &str, pause: &Pause) -> Result<bool, StoreError> {
        self.write(|w| {
            if w.paused(agent_id)?.is_some() {
                return Ok(false);
            }
            let pause = Pause { paused_at: w.at, ..pause.clone() };
            w.set_paused(agent_id, Some(&pause))?;
            w.event(Event::AgentPaused {
                agent_id: agent_id.to_string(),
                reason: pause.reason.clone(),
                limit: pause.limit.clone(),
                until: pause.until.map(crate::clock::iso),
            })?;
            Ok(true)
        })
    }

    /// Note that the pause stopped `activation_id` after its work had begun, so resuming
    /// tells the agent to continue it. Nothing happens when the agent is not paused.
    pub fn note_paused_activation(&self, agent_id: &str, activation_id: &str) -> Result<(), StoreError> {
        self.write(|w| {
            if let Some(mut pause) = w.paused(agent_id)?
                && pause.activation_id.is_none()
            {
                pause.activation_id = Some(activation_id.to_string());
                w.set_paused(agent_id, Some(&pause))?;
            }
            Ok(())
        })
    }

    /// Resume a paused agent, saying why (`agent.resumed`). When the pause had stopped an
    /// activation mid-work, the agent gets a P2 `agent.resumed` signal telling it to continue.
    /// Returns the pause it ended, or `None` when the agent was not paused.
    pub fn resume_agent(&self, agent_id: &str, reason: &str) -> Result<Option<Pause>, StoreError> {
        self.write(|w| {
            let Some(pause) = w.paused(agent_id)? else { return Ok(None) };
            w.set_paused(agent_id, None)?;
            w.tx.execute("UPDATE agents SET resumed_at = ?2 WHERE id = ?1", params![agent_id, w.now])?;
            w.event(Event::AgentResumed { agent_id: agent_id.to_string(), reason: reason.to_string() })?;
            if let Some(activation) = &pause.activation_id
                && self.is_roster_agent(agent_id)
            {
                let plan = plan_signals(&self.inner.roster, Some(agent_id), None, None, RESUMED_KIND, None);
                let message = format!(
                    "You were paused during activation {activation}: {}. You are resumed ({reason}). Continue the \
                     work where it stopped; what you did before the pause is in your history.",
                    pause.reason
                );
                let payload = json!({
                    "activationId": activation,
                    "pausedReason": pause.reason,
                    "reason": reason,
                    "message": message,
                });
                w.insert_signal(&plan[0], RESUMED_KIND, None, None, Priority::P2, &payload, None)?;
            }
            Ok(Some(pause))
        })
    }
}

impl WriteTx<'_> {
    fn paused(&self, agent_id: &str) -> Result<Option<Pause>, StoreError> {
        let text: Option<Option<String>> =
            self.tx.query_row("SELECT paused_json FROM agents WHERE id = ?1", [agent_id], |r| r.get(0)).optional()?;
        let text = text.ok_or_else(|| StoreError::UnknownAgent(agent_id.to_string()))?;
        text.map(|t| {
            serde_json::from_str(&t).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e)).into()
            })
        })
        .transpose()
    }

    fn set_paused(&mut self, agent_id: &str, pause: Option<&Pause>) -> Result<(), StoreError> {
        let text = pause.map(|p| serde_json::to_string(p).unwrap_or_default());
        self.tx.execute(
            "UPDATE agents SET paused_json = ?2, updated_at = ?3 WHERE id = ?1",
            params![agent_id, text, self.now],
        )?;
        Ok(())
    }
}

fn usage_from_row(r: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<TokenUsage> {
    Ok(TokenUsage {
        model_calls: r.get::<_, i64>(first)? as u64,
        input_tokens: r.get::<_, i64>(first + 1)? as u64,
        cached_input_tokens: r.get::<_, i64>(first + 2)? as u64,
        output_tokens: r.get::<_, i64>(first + 3)? as u64,
        cost: r.get(first + 4)?,
    })
}
