//! The database schema as an ordered list of migrations, and the code that applies them.
//!
//! `PRAGMA user_version` records how many steps a database has seen; opening applies the missing
//! ones, each in its own transaction together with the version bump, so a crash never leaves a
//! half-migrated file. Steps are append-only: never edit a released step, add a new one.
//! A database from a newer build (more steps than we know) is refused rather than guessed at.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use crate::store::StoreError;

/// Each entry is one migration step; index `i` brings a database from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    r#"
    CREATE TABLE project (
        id               INTEGER PRIMARY KEY CHECK (id = 1),
        name             TEXT NOT NULL,
        task             TEXT NOT NULL,
        status           TEXT NOT NULL DEFAULT 'initialized',
        config_json      TEXT,
        submitted_report TEXT,
        created_at       TEXT NOT NULL,
        updated_at       TEXT NOT NULL
    );

    CREATE TABLE agents (
        id                   TEXT PRIMARY KEY,
        position             INTEGER NOT NULL,
        role                 TEXT NOT NULL,
        display_name         TEXT NOT NULL,
        status               TEXT NOT NULL DEFAULT 'quiet',
        token                TEXT NOT NULL UNIQUE,
        active_activation_id TEXT,
        created_at           TEXT NOT NULL,
        updated_at           TEXT NOT NULL
    );

    CREATE TABLE activations (
        id              TEXT PRIMARY KEY,
        agent_id        TEXT NOT NULL REFERENCES agents(id),
        status          TEXT NOT NULL,
        prompt          TEXT NOT NULL,
        signal_ids_json TEXT NOT NULL DEFAULT '[]',
        started_at      TEXT NOT NULL,
        ended_at        TEXT,
        error           TEXT,
        text            TEXT,
        usage_json      TEXT
    );
    CREATE INDEX activations_by_agent ON activations(agent_id, started_at);
    CREATE INDEX activations_by_status ON activations(status);

    CREATE TABLE messages (
        id                TEXT PRIMARY KEY,
        sender            TEXT NOT NULL,
        recipient         TEXT,
        channel           TEXT,
        priority          TEXT NOT NULL,
        body              TEXT NOT NULL,
        source_agent      TEXT,
        source_activation TEXT,
        created_at        TEXT NOT NULL
    );
    CREATE INDEX messages_by_pair ON messages(sender, recipient);
    CREATE INDEX messages_by_recipient ON messages(recipient);
    CREATE INDEX messages_by_channel ON messages(channel);

    CREATE TABLE signals (
        id                      TEXT PRIMARY KEY,
        kind                    TEXT NOT NULL,
        source_agent            TEXT,
        source_activation       TEXT,
        target_agent            TEXT,
        target_channel          TEXT,
        priority                TEXT NOT NULL,
        payload_json            TEXT NOT NULL,
        status                  TEXT NOT NULL,
        useful_effect           INTEGER NOT NULL,
        created_at              TEXT NOT NULL,
        not_before              TEXT,
        delivered_at            TEXT,
        delivered_activation_id TEXT
    );
    CREATE INDEX signals_ready ON signals(target_agent, status, priority, not_before);
    CREATE INDEX signals_by_status ON signals(status, not_before);
    CREATE INDEX signals_by_source_activation ON signals(source_activation);

    CREATE TABLE tool_calls (
        id            TEXT PRIMARY KEY,
        activation_id TEXT NOT NULL REFERENCES activations(id),
        agent_id      TEXT NOT NULL REFERENCES agents(id),
        tool          TEXT NOT NULL,
        toolpack_id   TEXT,
        status        TEXT NOT NULL,
        input_json    TEXT NOT NULL,
        output_json   TEXT,
        error         TEXT,
        started_at    TEXT NOT NULL,
        finished_at   TEXT
    );
    CREATE INDEX tool_calls_by_tool ON tool_calls(tool);
    CREATE INDEX tool_calls_by_activation ON tool_calls(activation_id);

    CREATE TABLE events (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        type       TEXT NOT NULL,
        data_json  TEXT NOT NULL,
        created_at TEXT NOT NULL
    );
    CREATE INDEX events_by_type ON events(type, id);

    CREATE TABLE history (
        id            TEXT PRIMARY KEY,
        agent_id      TEXT NOT NULL REFERENCES agents(id),
        activation_id TEXT REFERENCES activations(id),
        kind          TEXT NOT NULL,
        content_json  TEXT NOT NULL,
        created_at    TEXT NOT NULL
    );
    CREATE INDEX history_by_agent ON history(agent_id, created_at);
    CREATE INDEX history_by_kind ON history(kind);
    "#,
    // 2: an activation's own history rows (activation context view).
    "CREATE INDEX history_by_activation ON history(activation_id);",
    // 3: what a call touched, computed once when it starts from the tool's declared
    // `presentation.target` (the store no longer knows tool names), and the kind of a failure.
    // Earlier rows of the built-in tools get their targets from their inputs.
    r#"
    ALTER TABLE tool_calls ADD COLUMN target TEXT;
    ALTER TABLE tool_calls ADD COLUMN error_kind TEXT;
    UPDATE tool_calls SET target = substr(json_extract(input_json, '$.path'), 1, 600)
        WHERE tool LIKE 'file.%' AND json_valid(input_json) AND json_type(input_json, '$.path') = 'text';
    UPDATE tool_calls SET target = substr(json_extract(input_json, '$.command')
            || coalesce(' · ' || json_extract(input_json, '$.cwd'), ''), 1, 600)
        WHERE tool = 'shell.exec' AND json_valid(input_json) AND json_type(input_json, '$.command') = 'text';
    UPDATE tool_calls SET target = substr(json_extract(input_json, '$.url'), 1, 600)
        WHERE tool = 'web.fetch' AND json_valid(input_json) AND json_type(input_json, '$.url') = 'text';
    "#,
    // 4: budgets. Why an agent is paused (the scheduler skips it while set) and when it was
    // last resumed (its budgets count from then), and one row per model call with what it
    // used, so totals per activation, per agent and per period are sums over one table.
    r#"
    ALTER TABLE agents ADD COLUMN paused_json TEXT;
    ALTER TABLE agents ADD COLUMN resumed_at TEXT;
    CREATE TABLE model_calls (
        id                  INTEGER PRIMARY KEY AUTOINCREMENT,
        activation_id       TEXT NOT NULL REFERENCES activations(id),
        agent_id            TEXT NOT NULL REFERENCES agents(id),
        model               TEXT NOT NULL,
        input_tokens        INTEGER NOT NULL,
        cached_input_tokens INTEGER NOT NULL,
        output_tokens       INTEGER NOT NULL,
        cost                REAL NOT NULL,
        at                  TEXT NOT NULL
    );
    CREATE INDEX model_calls_by_time ON model_calls(at, agent_id);
    CREATE INDEX model_calls_by_activation ON model_calls(activation_id);
    "#,
    // 5: how many times a signal was delivered. More than once means the activation it went to
    // was interrupted (a controller crash) and it was delivered again: work is at least once,
    // and the prompt and the API say so.
    r#"
    ALTER TABLE signals ADD COLUMN deliveries INTEGER NOT NULL DEFAULT 0;
    UPDATE signals SET deliveries = 1 WHERE status = 'delivered';
    "#,
    // 6: durable approvals. A request is the stored call (tool, input) an `ask` decision parked,
    // with the decision, its deadline and, once decided, who decided what; `consumed_at` marks
    // the request whose answer went back to the model, so a resumed activation never runs a
    // call twice. Remembered rules carry their provenance (who, when, which request).
    r#"
    CREATE TABLE approval_requests (
        id                TEXT PRIMARY KEY,
        agent_id          TEXT NOT NULL REFERENCES agents(id),
        activation_id     TEXT NOT NULL REFERENCES activations(id),
        tool_call_id      TEXT,
        tool              TEXT NOT NULL,
        input_json        TEXT NOT NULL,
        decision_json     TEXT NOT NULL,
        status            TEXT NOT NULL,
        created_at        TEXT NOT NULL,
        expires_at        TEXT NOT NULL,
        resolved_at       TEXT,
        resolved_by       TEXT,
        feedback          TEXT,
        resolution_reason TEXT,
        remember          TEXT,
        consumed_at       TEXT
    );
    CREATE INDEX approval_requests_by_status ON approval_requests(status, created_at);
    CREATE INDEX approval_requests_by_activation ON approval_requests(activation_id);
    CREATE TABLE permission_rules (
        id            TEXT PRIMARY KEY,
        tool          TEXT NOT NULL,
        decision      TEXT NOT NULL,
        scope         TEXT NOT NULL,
        agent_id      TEXT,
        activation_id TEXT,
        created_by    TEXT NOT NULL,
        created_at    TEXT NOT NULL,
        request_id    TEXT
    );
    "#,
    // 7: the deferred tools an agent activated with tool_search; they stay loaded.
    r#"
    CREATE TABLE activated_tools (
        agent_id      TEXT NOT NULL,
        tool          TEXT NOT NULL,
        activation_id TEXT,
        created_at    TEXT NOT NULL,
        PRIMARY KEY (agent_id, tool)
    );
    "#,
    // 8: the signal each finished background command sent its agent, so that a runner
    // reporting the same end twice (a lost answer, a controller restart) records one signal.
    r#"
    CREATE TABLE command_signals (
        command_id  TEXT PRIMARY KEY,
        agent_id    TEXT NOT NULL REFERENCES agents(id),
        signal_id   TEXT NOT NULL REFERENCES signals(id),
        recorded_at TEXT NOT NULL
    );
    "#,
    // 9: what budgets and the wake-loop guard read at every activation, found without going
    // through the history (`store::query_plans` checks each statement's plan): an agent's model
    // calls since a time, all activations since a time, and the activation a signal woke.
    r#"
    CREATE INDEX model_calls_by_agent ON model_calls(agent_id, at);
    CREATE INDEX activations_by_start ON activations(started_at);
    CREATE INDEX signals_by_delivered_activation ON signals(delivered_activation_id);
    "#,
    // 10 (branch q-lost): the agents' background commands as the controller last knew them,
    // so that one whose runner died (even while no controller ran) is found, marked `lost`
    // with the cause, and signalled once.
    r#"
    CREATE TABLE background_commands (
        command_id TEXT PRIMARY KEY,
        agent_id   TEXT NOT NULL REFERENCES agents(id),
        name       TEXT,
        command    TEXT NOT NULL,
        cwd        TEXT NOT NULL,
        status     TEXT NOT NULL,
        exit_code  INTEGER,
        signal     TEXT,
        cause      TEXT,
        reason     TEXT,
        started_at TEXT NOT NULL,
        ended_at   TEXT
    );
    CREATE INDEX background_commands_by_agent ON background_commands(agent_id, status, command_id);
    "#,
    // 11 (branch q-approvals): the call an approval request asks for, as the model named it in
    // its turn (its tool-call id), so a resumed activation finds the request of each call and
    // asks at most once per call, identical calls of one turn included.
    r#"
    ALTER TABLE approval_requests ADD COLUMN call_key TEXT;
    "#,
    // 12: what the scheduler reads at every tick and tool boundary, found without going through
    // the history (`store::query_plans`): the agents with pending signals, grouped in index
    // order; the newest signal of a kind (nudges); an agent's pending P1 signals in order.
    r#"
    CREATE INDEX signals_pending_by_agent ON signals(status, target_agent, priority, not_before);
    CREATE INDEX signals_by_kind ON signals(kind, created_at);
    CREATE INDEX signals_boundary ON signals(target_agent, status, priority, created_at);
    "#,
    // 13 (branch s-plans): what the model loop and the tool path read at every activation and
    // call, found without going through the history (`store::query_plans`): replay's last
    // compaction and its rows in order, an agent's deferred tools in order, an activation's
    // pending approval requests in order, the remembered rules of a call's tool (project and
    // agent scope) and of its activation, and an agent's newest activation of a status (the
    // failure nudges look for at every tick).
    // And running counters of what budgets limit per period, so that checking a budget reads one
    // row however busy the day: per agent and for the project (scope ''), each UTC day's model
    // calls (period `YYYY-MM-DD`) and each UTC hour's activations (`YYYY-MM-DDTHH`), updated in
    // the transaction that records the model call or starts the activation; filled here from
    // the rows already recorded.
    r#"
    CREATE INDEX history_compactions ON history(agent_id, kind);
    CREATE INDEX history_in_order ON history(agent_id);
    CREATE INDEX activated_tools_in_order ON activated_tools(agent_id);
    CREATE INDEX approval_requests_pending ON approval_requests(activation_id, status, created_at, id);
    CREATE INDEX permission_rules_by_tool ON permission_rules(tool, scope, agent_id);
    CREATE INDEX permission_rules_by_activation ON permission_rules(activation_id, tool);
    CREATE INDEX activations_by_agent_status ON activations(agent_id, status, started_at);
    CREATE TABLE usage_counters (
        scope               TEXT NOT NULL,
        period              TEXT NOT NULL,
        model_calls         INTEGER NOT NULL DEFAULT 0,
        input_tokens        INTEGER NOT NULL DEFAULT 0,
        cached_input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens       INTEGER NOT NULL DEFAULT 0,
        cost                REAL NOT NULL DEFAULT 0,
        activations         INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (scope, period)
    ) WITHOUT ROWID;
    INSERT INTO usage_counters (scope, period, model_calls, input_tokens, cached_input_tokens, output_tokens, cost)
        SELECT agent_id, substr(at, 1, 10), COUNT(*), SUM(input_tokens), SUM(cached_input_tokens),
               SUM(output_tokens), SUM(cost)
        FROM model_calls GROUP BY 1, 2
        UNION ALL
        SELECT '', substr(at, 1, 10), COUNT(*), SUM(input_tokens), SUM(cached_input_tokens), SUM(output_tokens),
               SUM(cost)
        FROM model_calls GROUP BY 2;
    INSERT INTO usage_counters (scope, period, activations)
        SELECT agent_id, substr(started_at, 1, 13), COUNT(*) FROM activations GROUP BY 1, 2
        UNION ALL
        SELECT '', substr(started_at, 1, 13), COUNT(*) FROM activations GROUP BY 2;
    "#,
    // 14 (branch u1): the model's id of the call a tool-call row records (its turn's call id),
    // so a timeline pairs each row with its call and result; and the calls of an activation
    // refused before they were recorded (an unknown tool, one the agent may not use), counted.
    r#"
    ALTER TABLE tool_calls ADD COLUMN call_key TEXT;
    ALTER TABLE activations ADD COLUMN rejected_tool_calls INTEGER NOT NULL DEFAULT 0;
    "#,
    // 15: the tools a person switched off (or back on) for one agent
    // while the project runs; read by every tool call and every request's tool list, by its
    // primary key (`store::query_plans`).
    r#"
    CREATE TABLE tool_switches (
        agent_id   TEXT NOT NULL,
        tool       TEXT NOT NULL,
        enabled    INTEGER NOT NULL,
        group_name TEXT,
        changed_by TEXT NOT NULL,
        changed_at TEXT NOT NULL,
        PRIMARY KEY (agent_id, tool)
    ) WITHOUT ROWID;
    "#,
    // 16: permission rules added while the project runs (agent '' for
    // every agent; ids never reused), and agents' permission modes switched at run time.
    r#"
    CREATE TABLE live_permission_rules (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        agent_id      TEXT NOT NULL DEFAULT '',
        tool          TEXT NOT NULL,
        decision      TEXT NOT NULL,
        paths_json    TEXT NOT NULL DEFAULT '[]',
        commands_json TEXT NOT NULL DEFAULT '[]',
        hosts_json    TEXT NOT NULL DEFAULT '[]',
        reason        TEXT,
        created_by    TEXT NOT NULL,
        created_at    TEXT NOT NULL
    );
    CREATE INDEX live_permission_rules_by_agent ON live_permission_rules(agent_id);
    CREATE TABLE permission_mode_overrides (
        agent_id TEXT PRIMARY KEY,
        mode     TEXT NOT NULL,
        set_by   TEXT NOT NULL,
        set_at   TEXT NOT NULL
    ) WITHOUT ROWID;
    "#,
    // 17: the questions agents ask the user (`ask_user`), each parking its
    // activation (`waiting_user`) until it is answered, its deadline passes or it ends. A table
    // of its own rather than a kind of approval request: a question has choices, a default and
    // an answer instead of a call to run, and approvals' listings, rules and "allow all" must
    // never see one.
    r#"
    CREATE TABLE questions (
        id                TEXT PRIMARY KEY,
        agent_id          TEXT NOT NULL,
        activation_id     TEXT NOT NULL,
        tool_call_id      TEXT,
        question          TEXT NOT NULL,
        choices_json      TEXT,
        default_answer    TEXT,
        input_json        TEXT NOT NULL,
        status            TEXT NOT NULL,
        created_at        TEXT NOT NULL,
        expires_at        TEXT NOT NULL,
        answered_at       TEXT,
        answered_by       TEXT,
        answer            TEXT,
        choice            INTEGER,
        resolution_reason TEXT,
        consumed_at       TEXT
    );
    CREATE INDEX questions_by_activation ON questions(activation_id, status, created_at, id);
    CREATE INDEX questions_by_status ON questions(status, created_at);
    "#,
];

/// The schema version this build writes.
pub fn latest_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// Bring `conn` to the latest version; returns the version the file had before.
pub fn migrate(conn: &mut Connection, path: &Path) -> Result<i64, StoreError> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    let known = latest_version();
    if found > known {
        return Err(StoreError::SchemaTooNew { path: path.to_path_buf(), found, known });
    }
    for (index, step) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        // IMMEDIATE: take the write lock up front, so two processes opening the same fresh
        // project cannot both decide to run the same step.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let current: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
        if current > index as i64 {
            // Another process migrated while we waited for the lock.
            continue;
        }
        tx.execute_batch(step)?;
        tx.pragma_update(None, "user_version", index as i64 + 1)?;
        tx.commit()?;
    }
    Ok(found)
}
