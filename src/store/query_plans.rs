//! The statements run at every activation, tick or call, held to plans whose cost does not grow
//! with the project's history: each is explained against a store with 100 000 rows in every
//! table that grows, and a full scan of one of those tables or a temporary B-tree fails the test.
//! A statement added to those paths is added to [`HOT_PATH`].

use super::{commands, scheduling, usage};

/// Where each statement runs, and the statement.
const HOT_PATH: &[(&str, &str)] = &[
    ("budgets: an agent's usage today (Store::usage_since)", usage::AGENT_USAGE_SINCE),
    ("budgets: the project's usage today (Store::usage_since)", usage::USAGE_SINCE),
    ("budgets: an activation's usage (Store::activation_usage)", usage::ACTIVATION_USAGE),
    ("budgets: an agent's activations this hour (Store::count_activations_since)", usage::AGENT_ACTIVATIONS_SINCE),
    ("budgets: the project's activations this hour (Store::count_activations_since)", usage::ACTIVATIONS_SINCE),
    ("wake-loop guard: who woke the agent (Store::wake_window)", usage::WAKE_SOURCES),
    ("wake-loop guard: activations that did work (Store::wake_window)", usage::WAKE_PROGRESS),
    ("an activation's end: its open tool calls (close_open_tool_calls)", scheduling::OPEN_TOOL_CALLS),
    ("an activation's end: closing one (close_open_tool_calls)", scheduling::CLOSE_TOOL_CALL),
    ("a runner's start and end: its running background commands (Store::running_commands)", commands::RUNNING_COMMANDS),
    ("a tool boundary: the activation still runs (Store::deliver_at_tool_boundary)", scheduling::RUNNING_ACTIVATION_OF),
    ("a tool boundary: delivering a signal (Store::deliver_at_tool_boundary)", scheduling::DELIVER_SIGNAL),
    ("an activation's start: the agent's latest activation (Store::latest_activation)", scheduling::LATEST_ACTIVATION),
    ("every tick: when the next delayed signal is ready (Store::next_signal_ready_at)", scheduling::NEXT_SIGNAL_READY),
    ("every tick: the latest events of a kind (Store::events_of_kind)", scheduling::EVENTS_OF_KIND),
    ("every tick: agents with ready signals (Store::agents_with_ready_signals)", scheduling::AGENTS_WITH_READY_SIGNALS),
];

/// [`HOT_PATH`]'s statements that are built from a column list.
fn built_hot_path() -> Vec<(&'static str, String)> {
    vec![
        (
            "a tool boundary: the P1 signals to deliver (Store::deliver_at_tool_boundary)",
            scheduling::boundary_signals(),
        ),
        (
            "an activation's prompt: the signals it was given (Store::signals_delivered_to)",
            scheduling::signals_delivered_to(),
        ),
        (
            "every tick: the latest signal of a kind, nudges (Store::latest_signal_of_kind)",
            scheduling::latest_signal_of_kind(),
        ),
    ]
}

/// The tables a project's history grows.
const GROWING: &[&str] = &[
    "activations",
    "signals",
    "tool_calls",
    "model_calls",
    "messages",
    "events",
    "history",
    "approval_requests",
    "command_signals",
    "background_commands",
];

const ROWS: u32 = 100_000;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::clock::ManualClock;
    use crate::store::Store;

    /// A store of agents `pm` and `worker` whose activations, signals, tool calls and model calls
    /// have `ROWS` rows each.
    fn aged_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::Builder::new().prefix("suzumio-plans-").tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("suzumio.yaml"),
            "name: t\ntask: T.\nagents:\n  pm: {}\n  worker: {}\nbackend:\n  runner:\n    model: main\n    models:\n      \
             providers: {local: {type: scripted}}\n      presets: {main: {provider: local}}\n",
        )
        .expect("config written");
        let loaded = crate::config::load_config(dir.path(), &crate::config::load::ProcessEnv).expect("config");
        let config = loaded.config.expect("a valid config");
        let clock = Arc::new(ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).single().expect("a time")));
        let store = Store::open(&config, clock).expect("store");
        let fill = format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})
             INSERT INTO activations (id, agent_id, status, prompt, started_at)
               SELECT 'act_' || i, CASE i % 2 WHEN 0 THEN 'pm' ELSE 'worker' END, 'completed', '',
                      strftime('%Y-%m-%dT%H:%M:%SZ', '2026-01-01', '+' || i || ' minutes') FROM n;
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})
             INSERT INTO signals (id, kind, source_agent, source_activation, target_agent, priority, payload_json,
                                  status, useful_effect, created_at, delivered_activation_id)
               SELECT 'sig_' || i, 'message.created', CASE i % 2 WHEN 0 THEN 'worker' ELSE 'pm' END, 'act_' || i,
                      CASE i % 2 WHEN 0 THEN 'pm' ELSE 'worker' END, 'P3', '{{}}', 'delivered', 1,
                      strftime('%Y-%m-%dT%H:%M:%SZ', '2026-01-01', '+' || i || ' minutes'), 'act_' || (i + 1) FROM n;
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})
             INSERT INTO tool_calls (id, activation_id, agent_id, tool, status, input_json, started_at)
               SELECT 'call_' || i, 'act_' || i, CASE i % 2 WHEN 0 THEN 'pm' ELSE 'worker' END, 'file.write',
                      'completed', '{{}}', strftime('%Y-%m-%dT%H:%M:%SZ', '2026-01-01', '+' || i || ' minutes') FROM n;
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})
             INSERT INTO model_calls (activation_id, agent_id, model, input_tokens, cached_input_tokens,
                                      output_tokens, cost, at)
               SELECT 'act_' || i, CASE i % 2 WHEN 0 THEN 'pm' ELSE 'worker' END, 'm', 10, 0, 5, 0.01,
                      strftime('%Y-%m-%dT%H:%M:%SZ', '2026-01-01', '+' || i || ' minutes') FROM n;"
        );
        store.write(|w| Ok(w.tx.execute_batch(&fill)?)).expect("history written");
        (dir, store)
    }

    /// The names a statement gives the growing tables: their own, and their aliases
    /// (`activations a`), which the plan shows instead.
    fn growing_names(sql: &str) -> Vec<String> {
        let words: Vec<&str> = sql.split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',').collect();
        let mut names: Vec<String> = GROWING.iter().map(|t| t.to_string()).collect();
        for pair in words.windows(2) {
            let alias = pair[1];
            let keyword =
                ["WHERE", "JOIN", "ON", "AS", "GROUP", "ORDER", "LIMIT", ""].contains(&alias.to_uppercase().as_str());
            if GROWING.contains(&pair[0]) && !keyword && alias.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                names.push(alias.to_string());
            }
        }
        names
    }

    /// The plan's lines that make its cost grow with a table's history.
    fn growing_steps(store: &Store, sql: &str) -> Vec<String> {
        let growing = growing_names(sql);
        store
            .read(|conn| {
                let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
                // The plan does not depend on the values (no statistics are kept).
                let nulls = vec![rusqlite::types::Null; stmt.parameter_count()];
                let rows = stmt.query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .expect("explain")
            .into_iter()
            .filter(|step| {
                let scans_history = step
                    .strip_prefix("SCAN ")
                    .and_then(|rest| rest.split_whitespace().next())
                    .is_some_and(|table| growing.iter().any(|g| g == table));
                scans_history || step.contains("TEMP B-TREE")
            })
            .collect()
    }

    #[test]
    fn no_hot_path_statement_scans_the_history_or_sorts_it() {
        let (_dir, store) = aged_store();
        let count: i64 =
            store.read(|c| Ok(c.query_row("SELECT COUNT(*) FROM model_calls", [], |r| r.get(0))?)).expect("count");
        assert_eq!(count, i64::from(ROWS));
        let built = built_hot_path();
        let offending: Vec<String> = HOT_PATH
            .iter()
            .map(|(what, sql)| (*what, *sql))
            .chain(built.iter().map(|(what, sql)| (*what, sql.as_str())))
            .filter_map(|(what, sql)| {
                let steps = growing_steps(&store, sql);
                (!steps.is_empty()).then(|| format!("{what}: {}", steps.join("; ")))
            })
            .collect();
        assert!(offending.is_empty(), "statements whose cost grows with the history:\n{}", offending.join("\n"));
    }
}
