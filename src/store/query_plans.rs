//! The statements run at every activation, tick or call, held to plans whose cost does not grow
//! with the project's history: each is explained against a store with 100 000 rows in every
//! table that grows, and a full scan of one of those tables or a temporary B-tree fails the test;
//! each is also run with keys that match nothing, and one that steps through rows anyway (an
//! index keyed by a constant most rows share, which `EXPLAIN` shows as a search) fails it too.
//! A statement added to those paths is added to [`HOT_PATH`] (or [`built_hot_path`]).
//!
//! Covered: the scheduler (ticks, tool boundaries), an activation's start and end (the signals it
//! takes, replaying its history, its end, nudges), each model call's record, budgets and the
//! wake-loop guard, and each tool call (its start and end, the remembered permission rules that
//! decide it, the live rules and the permission mode set at run time, an `ask`'s approval
//! request, background commands, the deferred tools it loaded, whether it is switched off) and
//! each request's tool list (the agent's switches).
//!
//! Deliberately not listed:
//! - plain `INSERT … VALUES` (activations, tool calls, model calls, history, events, signals,
//!   messages, requests) and the budget counters' upserts (by primary key): there is no plan to
//!   choose, and their cost is the indexes' upkeep, logarithmic in the table;
//! - statements on `project` and `agents`, whose rows are the configuration (one per agent), not
//!   the history;
//! - what runs once per `run` or per person's command, not per activation, tick or call:
//!   recovery after a crash, parked activations at a start, resolving a request, listings and
//!   pages (CLI, API, WebUI, `events_after`), timelines, and statistics (`store.projectStats`,
//!   the WebUI's tool and signal counts, `/metrics`), which count the whole history by definition;
//! - the permission audit, which is a JSONL file (`permissions::audit`), not the store.
//!
//! Replay's cost stays proportional to something other than the history's length, by design:
//! it reads the agent's rows since its last compaction (what the model is given; compaction
//! bounds it). Budgets read running counters (`usage_counters`, one row per scope and UTC day
//! or hour, updated in the transaction that records the model call or starts the activation):
//! a sum over the period's rows through an index on time would not grow with the project's age
//! but would with a busy day (at hundreds of activations a second an hour is a million rows).
//! Only after an agent was resumed within the period do they sum the rows since the resume.

use super::{
    activations, approvals, commands, history, live_rules, questions, scheduling, signals, tool_loading, tool_switches,
    usage,
};

/// Where each statement runs, and the statement.
const HOT_PATH: &[(&str, &str)] = &[
    ("budgets: an agent's or the project's usage today (Store::usage_of_day)", usage::PERIOD_USAGE),
    (
        "budgets: an agent's or the project's activations this hour (Store::activations_of_hour)",
        usage::PERIOD_ACTIVATIONS,
    ),
    ("budgets after a resume today: an agent's usage since (Store::usage_since)", usage::AGENT_USAGE_SINCE),
    ("budgets after a resume today: the project's usage since (Store::usage_since)", usage::USAGE_SINCE),
    ("budgets: an activation's usage (Store::activation_usage)", usage::ACTIVATION_USAGE),
    (
        "budgets after a resume this hour: an agent's activations since (Store::count_activations_since)",
        usage::AGENT_ACTIVATIONS_SINCE,
    ),
    (
        "budgets after a resume this hour: the project's activations since (Store::count_activations_since)",
        usage::ACTIVATIONS_SINCE,
    ),
    ("wake-loop guard: who woke the agent (Store::wake_window)", usage::WAKE_SOURCES),
    ("wake-loop guard: activations that did work (Store::wake_window)", usage::WAKE_PROGRESS),
    ("an activation's end: its open tool calls (close_open_tool_calls)", scheduling::OPEN_TOOL_CALLS),
    ("an activation's end: closing one (close_open_tool_calls)", scheduling::CLOSE_TOOL_CALL),
    ("a runner's start and end: its running background commands (Store::running_commands)", commands::RUNNING_COMMANDS),
    ("a tool boundary: the activation still runs (Store::deliver_at_tool_boundary)", scheduling::RUNNING_ACTIVATION_OF),
    ("a tool boundary: delivering a signal (Store::deliver_at_tool_boundary)", scheduling::DELIVER_SIGNAL),
    ("an activation's start: the agent's latest activation (Store::latest_activation)", scheduling::LATEST_ACTIVATION),
    (
        "every tick, nudges: the agent's latest failed activation (Store::latest_activation)",
        scheduling::LATEST_ACTIVATION_WITH_STATUS,
    ),
    ("every tick: when the next delayed signal is ready (Store::next_signal_ready_at)", scheduling::NEXT_SIGNAL_READY),
    ("every tick: the latest events of a kind (Store::events_of_kind)", scheduling::EVENTS_OF_KIND),
    ("every tick: agents with ready signals (Store::agents_with_ready_signals)", scheduling::AGENTS_WITH_READY_SIGNALS),
    ("every tick, nudges: whether signals are pending (Store::has_pending_signals)", signals::ANY_PENDING),
    // The model loop.
    ("an activation's start: delivering a signal it takes (Store::start_activation)", activations::DELIVER_AT_START),
    ("an activation's start: replay's last compaction (Store::replay_history)", history::LAST_COMPACTION),
    ("an activation's start: replay's kept tail (Store::replay_history)", history::HISTORY_ROW_OF),
    ("an activation's start: the rows replayed (Store::replay_history)", history::REPLAYED_HISTORY),
    ("a reviewed call: the agent's last turns (Store::last_history)", history::LAST_ROWS_OF_AGENT),
    ("every model call: the activation's usage (Store::record_model_usage)", usage::ACTIVATION_USAGE_JSON),
    ("every model call: the activation's usage updated (Store::record_model_usage)", usage::SET_ACTIVATION_USAGE_JSON),
    ("an activation's end: recording it (Store::finish_activation)", activations::END_ACTIVATION),
    ("an activation's end: deciding its pending requests (decide_approval)", approvals::DECIDE_APPROVAL),
    (
        "an activation's end, nudges: its useful effects (Store::count_activation_useful_effects)",
        signals::ACTIVATION_USEFUL_EFFECTS,
    ),
    ("an activation paused or stopped: its agent (Store::interrupt_activation)", scheduling::RUNNING_AGENT_OF),
    ("an activation paused or stopped: its end (end_interrupted)", scheduling::END_INTERRUPTED),
    ("an activation paused or stopped: its signals back to pending (end_interrupted)", scheduling::RETURN_DELIVERED),
    ("every tool list: the agent's deferred tools loaded (Store::activated_tools)", tool_loading::ACTIVATED_TOOLS),
    (
        "every request's tool list: the agent's tool switches (Store::tool_switches)",
        tool_switches::TOOL_SWITCHES_OF_AGENT,
    ),
    // The tool path.
    ("every tool call: whether it is switched off for the agent (Store::tool_switch)", tool_switches::TOOL_SWITCH),
    ("a tool call's end: the call (Store::finish_tool_call)", activations::TOOL_CALL_BY_ID),
    ("a tool call's end: recording it (Store::finish_tool_call)", activations::FINISH_TOOL_CALL),
    ("an ask: the call's tool call attached (Store::attach_approval)", approvals::ATTACH_APPROVAL),
    ("an ask: its answer given to the model (Store::consume_approval)", approvals::CONSUME_APPROVAL),
    ("an ask parked: the activation's status (Store::set_waiting_approval)", approvals::ACTIVATION_STATUS),
    ("an ask parked: the activation parked or resumed (Store::set_waiting_approval)", approvals::SET_ACTIVATION_STATUS),
    (
        "every tool call: the agent's permission mode set at run time (Store::permission_mode_override)",
        live_rules::MODE_OVERRIDE,
    ),
    ("ask_user: its answer given to the model (Store::consume_question)", questions::CONSUME_QUESTION),
    ("ask_user: answered or closed (close_question)", questions::ANSWER_QUESTION),
    ("coordination tools: whether the agent only waits (Store::is_waiting)", usage::IS_WAITING),
    ("shell.check, shell.stop: a command's end read (Store::record_command_read)", commands::RECORD_COMMAND_READ),
    ("a runner's end: a lost command marked (Store::record_commands_lost)", commands::LOSE_COMMAND),
    ("a command's end or loss: its signal (Store::record_command_finished)", commands::COMMAND_SIGNAL),
    ("shell.check: the command's pending signal (Store::withdraw_command_signal)", commands::PENDING_COMMAND_SIGNAL),
    ("shell.check: closing it (Store::withdraw_command_signal)", commands::CLOSE_SIGNAL),
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
        ("an activation's start: the signals it takes (Store::pending_signals)", signals::ready_signals_sql()),
        (
            "an activation's start and end, a model call, a tool call's start, a callSupport: the activation (activation_row)",
            activations::activation_by_id(),
        ),
        (
            "an activation's end: its pending approval requests (cancel_pending_approvals)",
            approvals::pending_of_activation(),
        ),
        (
            "every tool call: the remembered rules that can decide it (Store::rules_for_call)",
            approvals::rules_for_call(),
        ),
        (
            "every tool call: the live rules that can decide it (Store::live_rules_for_call)",
            live_rules::live_rules_for_call(),
        ),
        ("an ask: the request the call already holds (Store::adoptable_approval)", approvals::adoptable_approvals()),
        ("an ask: the call's earlier request it supersedes (Store::request_approval)", approvals::pending_of_call()),
        ("an ask: the request (approval_row)", approvals::approval_by_id()),
        (
            "an ask waiting: the activation's overdue requests (Store::overdue_approvals)",
            approvals::overdue_of_activation(),
        ),
        ("a runner's end: a command still running (Store::record_commands_lost)", commands::running_command()),
        (
            "an activation's end: its pending questions (cancel_pending_questions)",
            questions::pending_questions_of_activation(),
        ),
        ("ask_user: the question the call already holds (Store::adoptable_question)", questions::adoptable_questions()),
        ("ask_user: the question (question_row)", questions::question_by_id()),
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
    "permission_rules",
    "live_permission_rules",
    "usage_counters",
    // Bounded by agents × tools, not by the history; filled anyway, so its lookups are shown
    // to go through its key.
    "tool_switches",
    "questions",
];

const ROWS: u32 = 100_000;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::clock::ManualClock;
    use crate::store::Store;

    /// The agent of activation `act_<n>`, for `n` an SQL expression: four agents take turns.
    fn agent_of(n: &str) -> String {
        format!("CASE ({n}) % 4 WHEN 0 THEN 'pm' WHEN 1 THEN 'worker' WHEN 2 THEN 'tester' ELSE 'writer' END")
    }

    /// A store of four agents whose history has `ROWS` rows in each growing table, spread as a
    /// project's is: each activation has a few tool calls, model calls, history rows and signals,
    /// a compaction every forty history rows, an approval request per activation, and remembered
    /// rules: one per activation after the first few, which are for an agent or the project (a
    /// rule for those scopes ends the asks it would be remembered from, so they stay few).
    fn aged_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::Builder::new().prefix("suzumio-plans-").tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("suzumio.yaml"),
            "name: t\ntask: T.\nagents:\n  pm: {}\n  worker: {}\n  tester: {}\n  writer: {}\nbackend:\n  runner:\n    \
             model: main\n    models:\n      providers: {local: {type: scripted}}\n      presets: {main: {provider: local}}\n",
        )
        .expect("config written");
        let loaded = crate::config::load_config(dir.path(), &crate::config::load::ProcessEnv).expect("config");
        let config = loaded.config.expect("a valid config");
        let clock = Arc::new(ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).single().expect("a time")));
        let store = Store::open(&config, clock).expect("store");
        let n = format!("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {ROWS})");
        let at =
            |minutes: &str| format!("strftime('%Y-%m-%dT%H:%M:%SZ', '2026-01-01', '+' || ({minutes}) || ' minutes')");
        let (of_i, of_next) = (agent_of("i"), agent_of("i + 1"));
        // Rows of activation `a`: two tool calls and two model calls each, four history rows.
        let (two, four) = ("1 + (i - 1) / 2", "1 + (i - 1) / 4");
        let (of_two, of_four) = (agent_of(two), agent_of(four));
        let (at_i, at_two, at_four) = (at("i"), at(two), at(four));
        let fill = format!(
            "{n} INSERT INTO activations (id, agent_id, status, prompt, started_at)
               SELECT 'act_' || i, {of_i}, 'completed', '', {at_i} FROM n;
             {n} INSERT INTO signals (id, kind, source_agent, source_activation, target_agent, priority, payload_json,
                                  status, useful_effect, created_at, delivered_activation_id, deliveries)
               SELECT 'sig_' || i, CASE i % 7 WHEN 0 THEN 'coordination.wait_for_signal' ELSE 'message.created' END,
                      {of_i}, 'act_' || i, {of_next}, CASE i % 5 WHEN 0 THEN 'P1' ELSE 'P3' END, '{{}}', 'delivered',
                      1, {at_i}, 'act_' || (i + 1), 1 FROM n;
             {n} INSERT INTO tool_calls (id, activation_id, agent_id, tool, status, input_json, started_at)
               SELECT 'call_' || i, 'act_' || ({two}), {of_two}, CASE i % 3 WHEN 0 THEN 'shell.exec' ELSE 'file.write' END,
                      'completed', '{{}}', {at_two} FROM n;
             {n} INSERT INTO model_calls (activation_id, agent_id, model, input_tokens, cached_input_tokens,
                                      output_tokens, cost, at)
               SELECT 'act_' || ({two}), {of_two}, 'm', 10, 0, 5, 0.01, {at_two} FROM n;
             {n} INSERT INTO history (id, agent_id, activation_id, kind, content_json, created_at)
               SELECT 'his_' || i, {of_four}, 'act_' || ({four}),
                      CASE WHEN i % 40 = 0 THEN 'history_compaction'
                           ELSE CASE i % 4 WHEN 1 THEN 'prompt' WHEN 2 THEN 'assistant_output' ELSE 'tool_result' END
                      END, '{{}}', {at_four} FROM n;
             {n} INSERT INTO events (type, data_json, created_at)
               SELECT CASE i % 4 WHEN 0 THEN 'activation.started' WHEN 1 THEN 'tool_call.started'
                                 WHEN 2 THEN 'tool_call.finished' ELSE 'history.appended' END, '{{}}', {at_four} FROM n;
             {n} INSERT INTO approval_requests (id, agent_id, activation_id, tool_call_id, tool, input_json,
                                            decision_json, status, created_at, expires_at, resolved_at, consumed_at,
                                            call_key)
               SELECT 'apr_' || i, {of_i}, 'act_' || i, 'call_' || (2 * i), 'shell.exec', '{{}}', '{{}}',
                      CASE i % 10 WHEN 0 THEN 'denied' WHEN 1 THEN 'expired' ELSE 'allowed' END, {at_i}, {at_i},
                      {at_i}, {at_i}, 'key_' || i FROM n;
             {n} INSERT INTO questions (id, agent_id, activation_id, tool_call_id, question, input_json, status,
                                     created_at, expires_at, answered_at, consumed_at)
               SELECT 'q_' || i, {of_i}, 'act_' || i, 'call_' || (2 * i), 'Which?', '{{}}',
                      CASE i % 10 WHEN 0 THEN 'unanswered' WHEN 1 THEN 'expired' ELSE 'answered' END, {at_i}, {at_i},
                      {at_i}, {at_i} FROM n;
             {n} INSERT INTO permission_rules (id, tool, decision, scope, agent_id, activation_id, created_by,
                                           created_at, request_id)
               SELECT 'perm_' || i, CASE i % 3 WHEN 0 THEN 'file.write' ELSE 'shell.exec' END, 'allow',
                      CASE WHEN i <= 4 THEN 'project' WHEN i <= 40 THEN 'agent' ELSE 'activation' END,
                      CASE WHEN i <= 4 THEN NULL ELSE {of_i} END,
                      CASE WHEN i <= 40 THEN NULL ELSE 'act_' || i END, 'cli (t)', {at_i}, 'apr_' || i FROM n;
             {n} INSERT INTO live_permission_rules (agent_id, tool, decision, created_by, created_at)
               SELECT CASE WHEN i <= 4 THEN '' ELSE {of_i} END, 'shell.exec', 'deny', 'cli (t)', {at_i} FROM n;
             {n} INSERT INTO background_commands (command_id, agent_id, command, cwd, status, exit_code, started_at,
                                              ended_at)
               SELECT 'cmd_' || i, {of_i}, 'make', '/work', 'exited', 0, {at_i}, {at_i} FROM n;
             {n} INSERT INTO messages (id, sender, recipient, priority, body, source_agent, source_activation,
                                   created_at)
               SELECT 'msg_' || i, {of_i}, {of_next}, 'P3', 'hi', {of_i}, 'act_' || i, {at_i} FROM n;
             {n} INSERT INTO command_signals (command_id, agent_id, signal_id, recorded_at)
               SELECT 'cmd_' || i, {of_i}, 'sig_' || i, {at_i} FROM n;
             {n} INSERT INTO usage_counters (scope, period, model_calls, input_tokens, cached_input_tokens,
                                         output_tokens, cost, activations)
               SELECT CASE i % 5 WHEN 0 THEN '' ELSE {of_i} END,
                      strftime('%Y-%m-%dT%H', '2026-01-01', '+' || i || ' hours'), 20, 200, 0, 100, 0.2, 10 FROM n;
             {n} INSERT INTO tool_switches (agent_id, tool, enabled, group_name, changed_by, changed_at)
               SELECT {of_i}, 'tool_' || i, i % 2, NULL, 'cli (t)', {at_i} FROM n;
             INSERT INTO activated_tools (agent_id, tool, activation_id, created_at)
               VALUES ('pm', 'web.fetch', 'act_4', '2026-01-01T00:04:00Z'),
                      ('worker', 'browser.open', 'act_1', '2026-01-01T00:01:00Z');"
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

    /// How many virtual-machine steps the statement takes run with every parameter NULL (which
    /// matches no key) but its limit: a plan can search an index and still go through the history, when the
    /// index it picked is keyed by a constant of the statement (`status = 'delivered'`, a kind)
    /// that most rows share. Its writes change nothing (NULL keys), so they are committed.
    fn steps_with_no_match(store: &Store, sql: &str) -> i32 {
        store
            .write(|w| {
                let mut stmt = w.tx.prepare(sql)?;
                // A limit is a number (a large one, so that it hides no walk).
                let values: Vec<Option<i64>> = (1..=stmt.parameter_count())
                    .map(|i| sql.contains(&format!("LIMIT ?{i}")).then_some(1_000_000))
                    .collect();
                let mut rows = stmt.query(rusqlite::params_from_iter(values))?;
                while rows.next()?.is_some() {}
                drop(rows);
                Ok(stmt.get_status(rusqlite::StatementStatus::VmStep))
            })
            .expect("run")
    }

    /// More steps than this for a statement that matches nothing means it went through rows:
    /// a few hundred are its own fixed cost, against `ROWS` per growing table.
    const MAX_STEPS: i32 = 1_000;

    #[test]
    fn no_hot_path_statement_scans_the_history_or_sorts_it() {
        let (_dir, store) = aged_store();
        for table in GROWING {
            let count: i64 = store
                .read(|c| Ok(c.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))?))
                .expect("count");
            // Opening the store records a few events of its own.
            assert!(count >= i64::from(ROWS), "{table} has {count} rows, fewer than {ROWS}");
        }
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
        let walking: Vec<String> = HOT_PATH
            .iter()
            .map(|(what, sql)| (*what, *sql))
            .chain(built.iter().map(|(what, sql)| (*what, sql.as_str())))
            .filter_map(|(what, sql)| {
                let steps = steps_with_no_match(&store, sql);
                (steps > MAX_STEPS).then(|| format!("{what}: {steps} steps"))
            })
            .collect();
        assert!(walking.is_empty(), "statements that go through the history to match nothing:\n{}", walking.join("\n"));
    }
}
