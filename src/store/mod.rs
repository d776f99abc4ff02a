//! The project store: SQLite (WAL, one writer, versioned migrations) for the project, agents,
//! activations, messages, signals, tool calls, events and history; plus atomic toolpack state
//! files ([`state_files`]). The only module that writes SQL.
//!
//! Shape: [`Store`] is a cheap handle (an `Arc`) over two connections to
//! `<root>/.suzumio/state.db` — one writer behind a mutex, through which every state change runs
//! as one all-or-nothing unit together with the events it appends, and one read connection for
//! queries. After a commit the new events go out on a broadcast channel ([`Store::subscribe`]);
//! ephemeral events (live model text) go out on another without being written
//! ([`Store::publish_ephemeral`]).
//! The API is synchronous: every call is one short transaction (or one indexed read), so async
//! callers call it in place; nothing here waits on the network or a lock held across an await.
//!
//! Group commit: writes that arrive while a commit is on disk share the next one (one fsync for
//! all of them, with `synchronous=FULL`'s guarantee kept). Each caller's closure still runs on its own thread
//! (closures borrow from their callers), under the writer lock, inside its own SAVEPOINT of the
//! batch's one transaction; the last caller in — the one that sees nobody else queued for the
//! lock, or the [`MAX_BATCH`]th — commits, broadcasts the batch's events in id order and only
//! then answers the others, who waited without holding the lock. A failing closure rolls back
//! its own savepoint alone; a failing commit fails every caller of the batch. Nobody is
//! answered before the commit of their data returned. A lone writer finds nobody queued and
//! commits at once, as before.
//!
//! How a commit reaches the disk: the writer runs with `synchronous = NORMAL` and, after the
//! COMMIT of a batch with at least one durable member, syncs the WAL file itself before anyone is
//! answered — what `synchronous = FULL` does at every commit in WAL mode (SQLite's own syncs
//! around checkpoints are the same in both modes). Doing it here lets one batch hold durable and
//! deferred writes alike: the sync is decided when the batch ends, not when it begins.
//!
//! Deferred durability ([`Durability::WithNextCommit`]): a few writes lose nothing when a power
//! failure takes them back — an activation's start and its prompt row: without them its signals
//! are simply pending again and delivered to a new activation, which is what the restart does
//! with an interrupted one anyway. A batch of only such writes commits without the sync (a
//! kill -9 of the process still loses nothing, only the machine's crash can), and they reach the
//! disk with the next synced commit (the WAL is written in order, so that sync carries every
//! earlier commit), which always comes before the activation's first effect outside the model
//! call (its model call record, a tool call's start). [`Store::make_durable`] syncs them on
//! demand.
//!
//! It enforces the data rules of the reference (signal targets, statuses, priorities, useful
//! effects, signal selection) but makes no scheduling decisions and never talks to containers,
//! models or the network. Who may send what (communication policy, callSupport checks) is the
//! callers' business.

mod activation_list;
mod activations;
pub use activations::ActivationStart;
mod approvals;
mod commands;
mod error;
mod events;
#[cfg(test)]
mod group_commit_tests;
mod history;
mod live_rules;
mod messages;
pub mod metrics;
mod model;
mod observe;
#[cfg(test)]
mod query_plans;
mod questions;
mod scheduling;
mod schema;
mod signals;
pub mod state_files;
mod stats;
mod timeline;
mod tool_loading;
mod tool_switches;
mod usage;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rusqlite::types::Type;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, params};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::clock::{Clock, iso};
use crate::config::ProjectConfig;

pub use activation_list::{ActivationLookup, ActivationQuery, ActivationSummary};
pub use approvals::{
    ApprovalRecord, ApprovalStatus, NewApproval, RememberScope, RememberedRule, Resolution, RuleDecision,
};
pub use commands::{COMMAND_FINISHED_KIND, CommandRecord, LossCause, ReadEnd, StartedCommand};
pub use error::StoreError;
pub use events::{ActivationEnded, EVENT_TYPES, Event, EventRecord, EventType, MonitorSent, fallback_cause};
pub use history::{HistoryEntry, HistoryRecord, RecordedCall, RecordedUsage, ToolImage};
pub use live_rules::{LiveRule, ModeOverride, NewLiveRule};
pub use model::*;
pub use observe::{EventQuery, FOLLOW_INTERVAL};
pub use questions::{Answer, MAX_ANSWER_CHARS, NewQuestion, QuestionRecord, QuestionStatus, check_answer};
pub use schema::latest_version as schema_version;
pub use state_files::{StateError, StateFiles, StateLock};
pub use stats::LAST_ERROR_CAP;
pub use timeline::{
    ActivationTimeline, MessageEdge, TimelineHead, TimelineItem, TimelineSignal, TimelineToolCall, ToolCallCounts,
};
pub use tool_switches::{SwitchTarget, ToolSwitch};
pub use usage::RESUMED_KIND;

/// The directory (under the project root) that holds the controller's own state.
pub const STATE_DIR: &str = ".suzumio";
pub const DB_FILE: &str = "state.db";
/// Broadcast buffer: a subscriber that falls further behind gets `Lagged` and should resume from
/// [`Store::events_after`].
pub const EVENT_CHANNEL_CAPACITY: usize = 1024;
/// The lists the API pages through by id.
#[derive(Clone, Copy, Debug)]
pub enum Listing {
    Messages,
    Signals,
    ToolCalls,
    Activations,
    History,
}

/// Upper bound for every list query, whatever the caller asks for.
pub const MAX_LIMIT: usize = 500;
const DEFAULT_LIMIT: usize = 50;
const BUSY_TIMEOUT: Duration = Duration::from_millis(5000);
/// The most callers one commit answers: under a steady stream somebody is always queued, and
/// the batch (which holds SQLite's write lock, so CLI processes wait) must still end.
const MAX_BATCH: usize = 32;

/// A handle on one project's state. Clone it freely; all clones share the connections.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
    /// How this handle's writes reach the disk ([`Store::deferring`]).
    durability: Durability,
}

struct Inner {
    path: PathBuf,
    clock: Arc<dyn Clock>,
    /// Agent ids of the current config, in config order: the recipients and channel members.
    /// Rows of agents removed from the config stay in the table (status `stopped`) but are not
    /// addressable.
    roster: Vec<String>,
    channels: Vec<String>,
    /// Opened by [`Store::open_read_only`]: every write is refused before it starts.
    read_only: bool,
    writer: Mutex<Writer>,
    /// Callers between "wants to write" and "holds the writer": while any is queued, the holder
    /// leaves the batch open for them (group commit, see the module header).
    queued: AtomicUsize,
    /// Transactions this handle committed ([`Store::commits`]).
    commits: AtomicU64,
    reader: Mutex<Connection>,
    events: broadcast::Sender<EventRecord>,
    /// Ephemeral events ([`Store::publish_ephemeral`]): never written, no id.
    ephemeral: broadcast::Sender<Event>,
    /// Set while [`Store::follow_other_writers`] runs: other processes' rows are broadcast too.
    follow: AtomicBool,
    /// The highest event id broadcast (what following resumes after).
    published: AtomicI64,
    /// The last commit was not synced ([`Durability::WithNextCommit`]): what
    /// [`Store::make_durable`] has to sync. Commits are serialized, so a synced one clears it.
    unsynced: AtomicBool,
    /// Syncs of the WAL this handle made ([`Store::syncs`]).
    syncs: AtomicU64,
    /// What replay last read of each agent's history (see `Store::replay_history`).
    replays: Mutex<std::collections::HashMap<String, history::ReplayCache>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.inner.path).finish_non_exhaustive()
    }
}

impl Store {
    /// Open (creating if needed) `<config.root>/.suzumio/state.db`, migrate it, and sync the
    /// project row and agent rows with `config`.
    pub fn open(config: &ProjectConfig, clock: Arc<dyn Clock>) -> Result<Store, StoreError> {
        Store::open_with_config_json(config, clock, None)
    }

    /// [`Store::open`], also recording the resolved config as JSON on the project row
    /// (`None` keeps what is stored).
    pub fn open_with_config_json(
        config: &ProjectConfig,
        clock: Arc<dyn Clock>,
        config_json: Option<&str>,
    ) -> Result<Store, StoreError> {
        let dir = config.root.join(STATE_DIR);
        std::fs::create_dir_all(&dir).map_err(|source| StoreError::CreateDir { path: dir.clone(), source })?;
        let path = dir.join(DB_FILE);

        let full = |e: StoreError| match e {
            StoreError::Database(db) if db.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) => {
                StoreError::DiskFull { dir: dir.clone() }
            }
            other => other,
        };
        let mut writer = Connection::open(&path)?;
        configure(&writer, &path).map_err(full)?;
        schema::migrate(&mut writer, &path).map_err(full)?;
        // The writer syncs the WAL itself after a durable batch (see the module header).
        writer.pragma_update(None, "synchronous", "NORMAL")?;

        // Opened read-only after the writer put the file in WAL mode: the "one writer" rule is
        // then enforced by SQLite, not only by convention.
        let reader = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        reader.busy_timeout(BUSY_TIMEOUT)?;

        let (events, _) = broadcast::channel(EVENT_CHANNEL_CAPACITY);
        let store = Store {
            inner: Arc::new(Inner {
                path,
                clock,
                roster: config.agents.iter().map(|a| a.id.clone()).collect(),
                channels: config.channels.clone(),
                read_only: false,
                writer: Mutex::new(Writer { conn: writer, wal: None, batch: None }),
                queued: AtomicUsize::new(0),
                commits: AtomicU64::new(0),
                reader: Mutex::new(reader),
                events,
                ephemeral: broadcast::channel(EVENT_CHANNEL_CAPACITY).0,
                follow: AtomicBool::new(false),
                published: AtomicI64::new(0),
                unsynced: AtomicBool::new(false),
                syncs: AtomicU64::new(0),
                replays: Mutex::new(std::collections::HashMap::new()),
            }),
            durability: Durability::Now,
        };
        store.sync_config(config, config_json)?;
        Ok(store)
    }

    /// Open an existing project's state for reading only: no directory is created, no
    /// migration or config sync runs, and every write is refused. What read-only commands use,
    /// so they work on a full disk. A project without state yet (or one this build must migrate)
    /// is opened the normal way.
    pub fn open_read_only(config: &ProjectConfig, clock: Arc<dyn Clock>) -> Result<Store, StoreError> {
        let path = config.root.join(STATE_DIR).join(DB_FILE);
        if !path.is_file() {
            return Store::open(config, clock);
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let open = || -> Result<Connection, StoreError> {
            let conn = Connection::open_with_flags(&path, flags)?;
            conn.busy_timeout(BUSY_TIMEOUT)?;
            Ok(conn)
        };
        let reader = open()?;
        let version: i64 = reader.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version != schema::latest_version() {
            drop(reader);
            return Store::open(config, clock);
        }
        let (events, _) = broadcast::channel(EVENT_CHANNEL_CAPACITY);
        Ok(Store {
            inner: Arc::new(Inner {
                path: path.clone(),
                clock,
                roster: config.agents.iter().map(|a| a.id.clone()).collect(),
                channels: config.channels.clone(),
                read_only: true,
                writer: Mutex::new(Writer { conn: open()?, wal: None, batch: None }),
                queued: AtomicUsize::new(0),
                commits: AtomicU64::new(0),
                reader: Mutex::new(reader),
                events,
                ephemeral: broadcast::channel(EVENT_CHANNEL_CAPACITY).0,
                follow: AtomicBool::new(false),
                published: AtomicI64::new(0),
                unsynced: AtomicBool::new(false),
                syncs: AtomicU64::new(0),
                replays: Mutex::new(std::collections::HashMap::new()),
            }),
            durability: Durability::Now,
        })
    }

    /// How many transactions (each one fsync) this handle has committed. Under concurrent
    /// writers it grows slower than the writes: they share commits (see the module header).
    pub fn commits(&self) -> u64 {
        self.inner.commits.load(Ordering::Relaxed)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The store's clock reading (the time every write stamps).
    pub fn now(&self) -> DateTime<Utc> {
        self.inner.clock.now()
    }

    /// Channels declared in the config.
    pub fn channels(&self) -> &[String] {
        &self.inner.channels
    }

    /// Events committed from now on. Events are sent in id order, after their transaction
    /// committed, so a receiver never sees a change it cannot read back.
    pub fn subscribe(&self) -> broadcast::Receiver<EventRecord> {
        self.inner.events.subscribe()
    }

    /// Send an event to the [`Store::subscribe_ephemeral`] receivers without writing it: it
    /// gets no id, is not in the timeline and is never replayed. For what is only worth seeing
    /// live and would flood the timeline if stored (`activation.delta`, the model's text as it
    /// streams in).
    pub fn publish_ephemeral(&self, event: Event) {
        // No receivers is not an error: nobody is watching.
        let _ = self.inner.ephemeral.send(event);
    }

    /// Ephemeral events published from now on (a receiver that falls behind loses some).
    pub fn subscribe_ephemeral(&self) -> broadcast::Receiver<Event> {
        self.inner.ephemeral.subscribe()
    }

    /// Events with `id > after_id`, oldest first, at most `limit` (capped at 1000).
    pub fn events_after(&self, after_id: i64, limit: usize) -> Result<Vec<EventRecord>, StoreError> {
        let limit = limit.clamp(1, 1000) as i64;
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, type, data_json, created_at FROM events WHERE id > ?1 ORDER BY id LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![after_id, limit], event_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Whether `id` names a row of `listing` (what a paging cursor must do).
    pub fn has_id(&self, listing: Listing, id: &str) -> Result<bool, StoreError> {
        let table = match listing {
            Listing::Messages => "messages",
            Listing::Signals => "signals",
            Listing::ToolCalls => "tool_calls",
            Listing::Activations => "activations",
            Listing::History => "history",
        };
        self.read(|conn| {
            let found =
                conn.query_row(&format!("SELECT 1 FROM {table} WHERE id = ?1"), [id], |_| Ok(())).optional()?.is_some();
            Ok(found)
        })
    }

    /// Fold the write-ahead log into the database file (at shutdown: the file alone is then
    /// complete, and the log does not grow across runs).
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        let writer = self.idle_writer()?;
        writer.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }

    /// Append a timeline event that goes with no other change (monitors record their dedupe
    /// keys this way).
    pub fn append_event(&self, event: Event) -> Result<EventRecord, StoreError> {
        self.write(|w| w.event(event))
    }

    // -----------------------------------------------------------------------------------------
    // project and agents

    pub fn project(&self) -> Result<ProjectRecord, StoreError> {
        self.read(|conn| Ok(project_row(conn)?))
    }

    pub fn set_project_status(&self, status: ProjectStatus) -> Result<ProjectRecord, StoreError> {
        self.write(|w| {
            let previous = project_row(w.tx)?.status;
            w.tx.execute("UPDATE project SET status = ?1, updated_at = ?2 WHERE id = 1", params![status, w.now])?;
            if previous != status {
                w.event(Event::ProjectStatus { status: status.as_str().into(), previous: previous.as_str().into() })?;
            }
            Ok(project_row(w.tx)?)
        })
    }

    /// `completion.submit`'s store side (reference §4.4): the project becomes `submitted` with
    /// `submitted_report` = `report_path`, plus a `project.submitted` event and a closed, useful
    /// `completion.submitted` signal attributed to the submitting activation. Writing the report
    /// file is the caller's job.
    pub fn submit_project(
        &self,
        report_path: &str,
        source_agent: Option<&str>,
        source_activation: Option<&str>,
    ) -> Result<SignalRecord, StoreError> {
        self.write(|w| {
            let previous = project_row(w.tx)?.status;
            w.tx.execute(
                "UPDATE project SET status = 'submitted', submitted_report = ?1, updated_at = ?2 WHERE id = 1",
                params![report_path, w.now],
            )?;
            if previous != ProjectStatus::Submitted {
                w.event(Event::ProjectStatus { status: "submitted".into(), previous: previous.as_str().into() })?;
            }
            w.event(Event::ProjectSubmitted {
                report_path: report_path.to_string(),
                agent_id: source_agent.map(str::to_string),
            })?;
            let kind = "completion.submitted";
            let plan = signals::plan_signals(&self.inner.roster, None, None, None, kind, None);
            w.insert_signal(
                &plan[0],
                kind,
                source_agent,
                source_activation,
                crate::config::Priority::P2,
                &json!({"reportPath": report_path}),
                None,
            )
        })
    }

    /// Every agent row, current config agents first in config order, then removed ones.
    pub fn agents(&self) -> Result<Vec<AgentRecord>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!("SELECT {AGENT_COLUMNS} FROM agents ORDER BY position, id"))?;
            let rows = stmt.query_map([], agent_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    pub fn agent(&self, id: &str) -> Result<Option<AgentRecord>, StoreError> {
        self.read(|conn| Ok(agent_row(conn, id)?))
    }

    /// Set an agent's status (the scheduler sets idle agents `quiet`). Adds `agent.status` when
    /// it changes.
    pub fn set_agent_status(&self, id: &str, status: AgentStatus) -> Result<AgentRecord, StoreError> {
        self.write(|w| {
            w.set_agent_status(id, status)?;
            agent_row(w.tx, id)?.ok_or_else(|| StoreError::UnknownAgent(id.to_string()))
        })
    }

    /// Make the project row and agent rows match the config. Tokens are created once and kept.
    fn sync_config(&self, config: &ProjectConfig, config_json: Option<&str>) -> Result<(), StoreError> {
        self.write(|w| {
            let exists = w.tx.query_row("SELECT COUNT(*) FROM project", [], |r| r.get::<_, i64>(0))? > 0;
            if exists {
                w.tx.execute(
                    "UPDATE project SET name = ?1, task = ?2, config_json = COALESCE(?3, config_json), updated_at = ?4
                     WHERE id = 1",
                    params![config.name, config.task, config_json, w.now],
                )?;
            } else {
                w.tx.execute(
                    "INSERT INTO project (id, name, task, status, config_json, created_at, updated_at)
                     VALUES (1, ?1, ?2, 'initialized', ?3, ?4, ?4)",
                    params![config.name, config.task, config_json, w.now],
                )?;
                w.event(Event::ProjectInitialized { name: config.name.clone() })?;
            }

            for (position, agent) in config.agents.iter().enumerate() {
                match agent_row(w.tx, &agent.id)? {
                    Some(existing) => {
                        w.tx.execute(
                            "UPDATE agents SET position = ?2, role = ?3, display_name = ?4 WHERE id = ?1",
                            params![agent.id, position as i64, agent.role, agent.display_name],
                        )?;
                        // An agent put back into the config comes back to life.
                        if existing.status == AgentStatus::Stopped {
                            w.set_agent_status(&agent.id, AgentStatus::Quiet)?;
                        }
                    }
                    None => {
                        w.tx.execute(
                            "INSERT INTO agents (id, position, role, display_name, status, token, created_at, updated_at)
                             VALUES (?1, ?2, ?3, ?4, 'quiet', ?5, ?6, ?6)",
                            params![agent.id, position as i64, agent.role, agent.display_name, new_token(), w.now],
                        )?;
                        w.event(Event::AgentAdded { agent_id: agent.id.clone() })?;
                    }
                }
            }

            // Removed agents keep their rows (their messages and history still point at them)
            // but stop: the scheduler skips `stopped` agents.
            let removed: Vec<String> = {
                let mut stmt = w.tx.prepare("SELECT id FROM agents WHERE status != 'stopped'")?;
                let ids = stmt.query_map([], |r| r.get::<_, String>(0))?.collect::<Result<Vec<_>, _>>()?;
                ids.into_iter().filter(|id| config.agent(id).is_none()).collect()
            };
            for (offset, id) in removed.iter().enumerate() {
                w.tx.execute(
                    "UPDATE agents SET position = ?2 WHERE id = ?1",
                    params![id, (config.agents.len() + offset) as i64],
                )?;
                w.set_agent_status(id, AgentStatus::Stopped)?;
            }
            Ok(())
        })
    }

    // -----------------------------------------------------------------------------------------
    // plumbing

    /// Run `f` as one IMMEDIATE transaction on the writer; publish its events after commit.
    fn write<T>(&self, f: impl FnOnce(&mut WriteTx<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.write_with(self.durability, f)
    }

    /// A handle on the same store whose writes do not wait for the disk
    /// ([`Durability::WithNextCommit`]), for a caller that calls [`Store::make_durable`] before it
    /// acknowledges them: a pack's support call, whose signals and messages are durable before
    /// the runner gets the answer, while the fsyncs of concurrent calls are shared even though
    /// the pack's thread writes them one at a time.
    pub fn deferring(&self) -> Store {
        Store { inner: self.inner.clone(), durability: Durability::WithNextCommit }
    }

    /// Put on disk every commit made so far: nothing to do when the last one was synced, else
    /// an empty durable member of the next batch (concurrent callers share it, group commit),
    /// whose sync of the WAL carries every earlier commit.
    pub fn make_durable(&self) -> Result<(), StoreError> {
        if !self.inner.unsynced.load(Ordering::Acquire) {
            return Ok(());
        }
        self.write_with(Durability::Now, |_| Ok(()))
    }

    /// How many times this handle synced the WAL (a durable batch's commit).
    pub fn syncs(&self) -> u64 {
        self.inner.syncs.load(Ordering::Relaxed)
    }

    /// [`Store::write`] with the given durability (see the module's "Deferred durability").
    fn write_with<T>(
        &self,
        durability: Durability,
        f: impl FnOnce(&mut WriteTx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if self.inner.read_only {
            return Err(StoreError::ReadOnly);
        }
        self.write_tx(durability, f).map_err(|e| self.classify(e))
    }

    /// A full file system is the machine's problem, not a database error: say so, and where.
    fn classify(&self, e: StoreError) -> StoreError {
        match e {
            StoreError::Database(db) if db.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) => {
                StoreError::DiskFull { dir: self.inner.path.parent().unwrap_or(Path::new(".")).to_path_buf() }
            }
            other => other,
        }
    }

    /// Add `f` to the open batch (or begin one), each caller in its own SAVEPOINT; commit when
    /// nobody else is queued, else leave the commit to the last one in and wait for it.
    fn write_tx<T>(
        &self,
        durability: Durability,
        f: impl FnOnce(&mut WriteTx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let inner = &*self.inner;
        inner.queued.fetch_add(1, Ordering::SeqCst);
        let mut guard = lock_writer(&inner.writer);
        inner.queued.fetch_sub(1, Ordering::SeqCst);
        let writer = &mut *guard;
        if writer.batch.is_none() {
            // IMMEDIATE takes the write lock at BEGIN, so a CLI process writing to the same file
            // waits (busy_timeout) instead of failing on a read-to-write upgrade.
            writer.conn.execute_batch("BEGIN IMMEDIATE")?;
            writer.batch = Some(Batch::default());
        }
        if durability == Durability::Now
            && let Some(batch) = writer.batch.as_mut()
        {
            batch.durable = true;
        }
        // Milliseconds, as the store writes times: a row it returns equals the row read back.
        let at = chrono::SubsecRound::trunc_subsecs(inner.clock.now(), 3);
        let (own, panic) = run_member(writer, at, f);
        let outcome = writer.batch.as_ref().map(|b| b.outcome.clone());
        let full = writer.batch.as_ref().is_some_and(|b| b.members >= MAX_BATCH);
        if outcome.is_some() && (full || inner.queued.load(Ordering::SeqCst) == 0) {
            let committed = self.commit_batch(writer);
            drop(guard);
            if let Some(panic) = panic {
                std::panic::resume_unwind(panic);
            }
            return own.and_then(|out| committed.map(|()| out));
        }
        drop(guard);
        if let Some(panic) = panic {
            std::panic::resume_unwind(panic);
        }
        let out = own?;
        match outcome {
            Some(outcome) => outcome.wait().map(|()| out),
            // The batch is gone already: this caller's own part was the failure that ended it.
            None => Ok(out),
        }
    }

    /// Commit the open batch (if any), publish its events in id order, then answer the callers
    /// waiting on it. Called with the writer held, so no other commit's events can go out
    /// between ours.
    fn commit_batch(&self, writer: &mut Writer) -> Result<(), StoreError> {
        let Some(batch) = writer.batch.take() else { return Ok(()) };
        let mut events = batch.events;
        let committed = (|| {
            // Another process's rows before ours go out first, so subscribers see ids in order.
            // None can sit between ours: the batch has held SQLite's write lock since BEGIN.
            if self.inner.follow.load(Ordering::Acquire)
                && let Some(first) = events.first()
            {
                let published = self.inner.published.load(Ordering::Acquire);
                if first.id > published + 1 {
                    let mut foreign = observe::rows_between(&writer.conn, published, first.id)?;
                    foreign.append(&mut events);
                    events = foreign;
                }
            }
            writer.conn.execute_batch("COMMIT")?;
            self.inner.commits.fetch_add(1, Ordering::Relaxed);
            if batch.durable {
                writer.sync_wal(&self.inner.path)?;
                self.inner.syncs.fetch_add(1, Ordering::Relaxed);
            }
            self.inner.unsynced.store(!batch.durable, Ordering::Release);
            Ok(())
        })();
        match committed {
            Ok(()) => {
                if let Some(last) = events.last() {
                    self.inner.published.fetch_max(last.id, Ordering::AcqRel);
                }
                for event in events {
                    // No receivers is not an error: nobody is watching.
                    let _ = self.inner.events.send(event);
                }
                batch.outcome.finish(Ok(()));
                Ok(())
            }
            Err(e) => {
                abandon(&writer.conn);
                batch.outcome.finish(Err(SharedFailure::from(&e)));
                Err(e)
            }
        }
    }

    /// The writer with no batch open (what needs the connection outside a transaction, or the
    /// events table as committed): an open batch is committed first, for its callers.
    fn idle_writer(&self) -> Result<MutexGuard<'_, Writer>, StoreError> {
        let mut guard = lock_writer(&self.inner.writer);
        self.commit_batch(&mut guard)?;
        Ok(guard)
    }

    /// Run `f` on the read connection.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let conn = lock(&self.inner.reader);
        f(&conn)
    }

    fn is_roster_agent(&self, id: &str) -> bool {
        self.inner.roster.iter().any(|a| a == id)
    }
}

/// A poisoned mutex only means another thread panicked mid-call; the connection itself is
/// still consistent (SQLite rolled back the unfinished transaction), so keep using it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// [`lock`] on the writer. A caller that has to wait (a commit is on disk) does so without
/// holding up its tokio worker's other tasks: those can then reach the writer too and join the
/// next batch, instead of queueing behind this thread.
fn lock_writer(m: &Mutex<Writer>) -> MutexGuard<'_, Writer> {
    match m.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => blocking(|| lock(m)),
    }
}

/// Run `f`, which blocks, handing this tokio worker's other tasks to another thread meanwhile
/// (only a multi-thread runtime can; elsewhere `f` just runs).
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// When a write's commit must be on disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Before the caller is answered (its batch's commit syncs the WAL): every write but the
    /// few below.
    #[default]
    Now,
    /// With the next durable commit: for writes a power failure may take back without losing
    /// anything (see the module's "Deferred durability").
    WithNextCommit,
}

impl Writer {
    /// `fdatasync` of the WAL: every frame written so far is on disk when it returns. (An fd
    /// opened read-only syncs the file as well; the WAL keeps its inode while the writer's
    /// connection is open, even when a checkpoint truncates it.)
    fn sync_wal(&mut self, db: &Path) -> Result<(), StoreError> {
        if self.wal.is_none() {
            let mut path = db.as_os_str().to_owned();
            path.push("-wal");
            self.wal = Some(std::fs::File::open(path)?);
        }
        match &self.wal {
            Some(wal) => Ok(wal.sync_data()?),
            None => Ok(()),
        }
    }
}

/// The writer connection and the transaction callers are adding to.
struct Writer {
    conn: Connection,
    /// The WAL file, opened at the first sync (it exists once the first commit wrote to it).
    wal: Option<std::fs::File>,
    /// Open from the first caller's BEGIN to the last one's COMMIT.
    batch: Option<Batch>,
}

/// One transaction shared by the callers that queued for the writer while the last commit was
/// on disk.
#[derive(Default)]
struct Batch {
    /// A member asked for [`Durability::Now`]: the commit syncs the WAL before anyone is
    /// answered.
    durable: bool,
    /// Callers whose closure ran in it (failed ones too: they still took their turn).
    members: usize,
    /// The events of the members whose part stands, in id order.
    events: Vec<EventRecord>,
    outcome: Arc<BatchOutcome>,
}

/// What the callers of a batch wait for, without the writer: its commit, or why it failed.
#[derive(Default)]
struct BatchOutcome {
    result: Mutex<Option<Result<(), SharedFailure>>>,
    done: Condvar,
}

impl BatchOutcome {
    fn finish(&self, result: Result<(), SharedFailure>) {
        *lock(&self.result) = Some(result);
        self.done.notify_all();
    }

    fn wait(&self) -> Result<(), StoreError> {
        blocking(|| {
            let mut result = lock(&self.result);
            loop {
                match &*result {
                    Some(Ok(())) => return Ok(()),
                    Some(Err(failure)) => return Err(failure.error()),
                    None => result = self.done.wait(result).unwrap_or_else(PoisonError::into_inner),
                }
            }
        })
    }
}

/// A batch's failure, handed to each of its callers as their own error (`rusqlite::Error` is
/// not `Clone`). SQLite's code is kept, so [`Store::classify`] still tells a full disk.
#[derive(Clone, Debug)]
struct SharedFailure {
    code: rusqlite::ffi::Error,
    message: String,
}

impl SharedFailure {
    fn from(e: &StoreError) -> SharedFailure {
        match e {
            StoreError::Database(rusqlite::Error::SqliteFailure(code, message)) => {
                SharedFailure { code: *code, message: message.clone().unwrap_or_else(|| code.to_string()) }
            }
            other => SharedFailure {
                code: rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
                message: format!("the transaction this write shared failed: {other}"),
            },
        }
    }

    fn error(&self) -> StoreError {
        StoreError::Database(rusqlite::Error::SqliteFailure(self.code, Some(self.message.clone())))
    }
}

type Panic = Box<dyn std::any::Any + Send>;

/// Run one caller's closure in its own SAVEPOINT of the open batch: its rows and events stand
/// together or not at all. The batch's first caller needs none (undoing its part is rolling
/// back the transaction), so a lone writer runs exactly BEGIN, its statements, COMMIT.
/// A panic is caught (and handed back to be resumed once the batch is settled), so the batch's
/// other callers are still answered. When SQLite ended the whole transaction (it does on some
/// I/O and disk-full errors), the batch is failed for everyone.
fn run_member<T>(
    writer: &mut Writer,
    at: DateTime<Utc>,
    f: impl FnOnce(&mut WriteTx<'_>) -> Result<T, StoreError>,
) -> (Result<T, StoreError>, Option<Panic>) {
    let mut first = false;
    if let Some(batch) = writer.batch.as_mut() {
        first = batch.members == 0;
        batch.members += 1;
    }
    if !first && let Err(e) = writer.conn.execute_batch("SAVEPOINT member") {
        let e = StoreError::from(e);
        fail_batch(writer, &e);
        return (Err(e), None);
    }
    let mut w = WriteTx { tx: &writer.conn, now: iso(at), at, events: Vec::new() };
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut w)));
    let events = w.events;
    let (own, panic) = match ran {
        Ok(own) => (own, None),
        Err(panic) => (Err(StoreError::Io(std::io::Error::other("a write to the store panicked"))), Some(panic)),
    };
    match own {
        Ok(out) => {
            let released = if first { Ok(()) } else { writer.conn.execute_batch("RELEASE member") };
            match released {
                Ok(()) => {
                    if let Some(batch) = writer.batch.as_mut() {
                        batch.events.extend(events);
                    }
                    (Ok(out), panic)
                }
                Err(e) => {
                    let e = StoreError::from(e);
                    fail_batch(writer, &e);
                    (Err(e), panic)
                }
            }
        }
        Err(e) => {
            if first {
                // Nobody else is in the batch yet: it ends here, with nobody to answer.
                fail_batch(writer, &e);
            } else {
                undo_member(writer, &e);
            }
            (Err(e), panic)
        }
    }
}

/// Roll back one caller's part, leaving the rest of the batch as it was.
fn undo_member(writer: &mut Writer, cause: &StoreError) {
    if writer.conn.is_autocommit() {
        // SQLite ended the whole transaction: every part of the batch is gone.
        fail_batch(writer, cause);
        return;
    }
    if let Err(e) = writer.conn.execute_batch("ROLLBACK TO member; RELEASE member") {
        fail_batch(writer, &StoreError::from(e));
    }
}

/// End a batch that cannot commit: roll back what is left of it and fail its callers.
fn fail_batch(writer: &mut Writer, e: &StoreError) {
    abandon(&writer.conn);
    if let Some(batch) = writer.batch.take() {
        batch.outcome.finish(Err(SharedFailure::from(e)));
    }
}

/// Roll back the connection's transaction if SQLite has not already, so the next batch begins
/// on a clean connection.
fn abandon(conn: &Connection) {
    if !conn.is_autocommit()
        && let Err(e) = conn.execute_batch("ROLLBACK")
    {
        tracing::warn!("rolling back a failed write batch: {e}");
    }
}

fn configure(conn: &Connection, path: &Path) -> Result<(), StoreError> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::NotWal { path: path.to_path_buf(), mode });
    }
    // FULL: a commit is on disk before we report it, so no acknowledged signal is lost on a crash.
    // (The store's own writer then syncs the WAL itself, see the module header: the same.)
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

/// One write transaction in progress: the rows it writes and the events it will publish.
pub(crate) struct WriteTx<'a> {
    /// The writer, inside this caller's SAVEPOINT of the batch's transaction.
    tx: &'a Connection,
    /// The timestamp of everything this transaction writes, as the store writes it ([`iso`]).
    now: String,
    /// The same time, for the rows it returns.
    at: DateTime<Utc>,
    events: Vec<EventRecord>,
}

impl WriteTx<'_> {
    fn event(&mut self, event: Event) -> Result<EventRecord, StoreError> {
        let (kind, data) = event.to_parts();
        self.tx.execute(
            "INSERT INTO events (type, data_json, created_at) VALUES (?1, ?2, ?3)",
            params![kind, data.to_string(), self.now],
        )?;
        let record = EventRecord { id: self.tx.last_insert_rowid(), event, created_at: self.at };
        self.events.push(record.clone());
        Ok(record)
    }

    /// Set the status (no-op when unchanged), adding `agent.status`.
    fn set_agent_status(&mut self, id: &str, status: AgentStatus) -> Result<(), StoreError> {
        let previous: Option<AgentStatus> =
            self.tx.query_row("SELECT status FROM agents WHERE id = ?1", [id], |r| r.get(0)).optional()?;
        let previous = previous.ok_or_else(|| StoreError::UnknownAgent(id.to_string()))?;
        if previous != status {
            self.tx.execute(
                "UPDATE agents SET status = ?2, updated_at = ?3 WHERE id = ?1",
                params![id, status, self.now],
            )?;
            self.event(Event::AgentStatus {
                agent_id: id.to_string(),
                status: status.as_str().into(),
                previous: previous.as_str().into(),
            })?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// ids, tokens, row mapping

/// `<prefix>_<uuid v7>`: unique, and roughly time-ordered within a process.
fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// The tables whose ids a person may shorten (`show`, `approvals allow|deny`), with the
/// `<prefix>_` of their ids.
#[derive(Clone, Copy)]
enum Shortened {
    Activations,
    ApprovalRequests,
    Questions,
}

/// The id of `table` that is `wanted`, else the ids (at most 6) that start with it, with or
/// without their `<prefix>_`: one is the id meant, more make the prefix ambiguous.
fn ids_starting(conn: &Connection, table: Shortened, wanted: &str) -> rusqlite::Result<Vec<String>> {
    let (exact, starting, kind) = match table {
        Shortened::Activations => (
            "SELECT id FROM activations WHERE id = ?1",
            "SELECT id FROM activations WHERE id GLOB ?1 ORDER BY id LIMIT 6",
            "act_",
        ),
        Shortened::ApprovalRequests => (
            "SELECT id FROM approval_requests WHERE id = ?1",
            "SELECT id FROM approval_requests WHERE id GLOB ?1 ORDER BY id LIMIT 6",
            "apr_",
        ),
        Shortened::Questions => (
            "SELECT id FROM questions WHERE id = ?1",
            "SELECT id FROM questions WHERE id GLOB ?1 ORDER BY id LIMIT 6",
            "q_",
        ),
    };
    let wanted = wanted.trim();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    if let Some(id) = conn.prepare_cached(exact)?.query_row([wanted], |r| r.get::<_, String>(0)).optional()? {
        return Ok(vec![id]);
    }
    let prefix = if wanted.starts_with(kind) { wanted.to_string() } else { format!("{kind}{wanted}") };
    // `glob` with a pattern free of glob characters: ids are the prefix and hex digits.
    if !prefix.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(starting)?;
    let rows = stmt.query_map([format!("{prefix}*")], |r| r.get::<_, String>(0))?;
    rows.collect()
}

/// A secret for an agent, a web session or a login link: 32 bytes from the OS random source
/// (256 bits), base64url without padding (43 characters).
pub fn new_token() -> String {
    use base64::Engine;
    let mut bytes = [0u8; 32];
    // Without an OS random source nothing here is safe to run (uuid::new_v4 panics the same way).
    getrandom::fill(&mut bytes).expect("the OS random source failed");
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A timestamp column ([`iso`] text, as the store writes every time), reporting text that is
/// not a time as a conversion error of that column.
pub(crate) fn time_column(row: &Row<'_>, index: usize) -> rusqlite::Result<DateTime<Utc>> {
    let text: String = row.get(index)?;
    parse_time(index, &text)
}

pub(crate) fn opt_time_column(row: &Row<'_>, index: usize) -> rusqlite::Result<Option<DateTime<Utc>>> {
    let text: Option<String> = row.get(index)?;
    text.map(|t| parse_time(index, &t)).transpose()
}

fn parse_time(index: usize, text: &str) -> rusqlite::Result<DateTime<Utc>> {
    crate::clock::parse_iso(text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(index, Type::Text, format!("not an RFC 3339 time: `{text}`").into())
    })
}

/// Parse a JSON text column, reporting a corrupt value as a conversion error of that column.
fn json_column(row: &Row<'_>, index: usize) -> rusqlite::Result<Value> {
    let text: String = row.get(index)?;
    serde_json::from_str(&text).map_err(|e| rusqlite::Error::FromSqlConversionFailure(index, Type::Text, Box::new(e)))
}

fn opt_json_column(row: &Row<'_>, index: usize) -> rusqlite::Result<Option<Value>> {
    let text: Option<String> = row.get(index)?;
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| rusqlite::Error::FromSqlConversionFailure(index, Type::Text, Box::new(e)))
    })
    .transpose()
}

pub(crate) fn event_from_row(row: &Row<'_>) -> rusqlite::Result<EventRecord> {
    let kind: String = row.get(1)?;
    Ok(EventRecord {
        id: row.get(0)?,
        event: Event::from_parts(&kind, json_column(row, 2)?),
        created_at: time_column(row, 3)?,
    })
}

fn project_row(conn: &Connection) -> rusqlite::Result<ProjectRecord> {
    conn.query_row(
        "SELECT name, task, status, config_json, submitted_report, created_at, updated_at FROM project WHERE id = 1",
        [],
        |r| {
            Ok(ProjectRecord {
                name: r.get(0)?,
                task: r.get(1)?,
                status: r.get(2)?,
                config_json: r.get(3)?,
                submitted_report: r.get(4)?,
                created_at: time_column(r, 5)?,
                updated_at: time_column(r, 6)?,
            })
        },
    )
}

const AGENT_COLUMNS: &str =
    "id, role, display_name, status, token, active_activation_id, created_at, updated_at, paused_json, resumed_at";

fn agent_from_row(r: &Row<'_>) -> rusqlite::Result<AgentRecord> {
    Ok(AgentRecord {
        id: r.get(0)?,
        role: r.get(1)?,
        display_name: r.get(2)?,
        status: r.get(3)?,
        token: r.get(4)?,
        active_activation_id: r.get(5)?,
        created_at: time_column(r, 6)?,
        updated_at: time_column(r, 7)?,
        paused: opt_json_column(r, 8)?
            .map(|v| {
                serde_json::from_value(v)
                    .map_err(|e| rusqlite::Error::FromSqlConversionFailure(8, Type::Text, Box::new(e)))
            })
            .transpose()?,
        resumed_at: opt_time_column(r, 9)?,
    })
}

fn agent_row(conn: &Connection, id: &str) -> rusqlite::Result<Option<AgentRecord>> {
    conn.query_row(&format!("SELECT {AGENT_COLUMNS} FROM agents WHERE id = ?1"), [id], agent_from_row).optional()
}

/// Clamp a caller's limit to `1..=MAX_LIMIT` (default when absent).
pub(crate) fn clamp_limit(limit: Option<usize>) -> i64 {
    limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT) as i64
}

/// An absent or empty string is "not given" (JS callers send `""` for unset form fields).
fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_43_url_safe_chars_and_differ() {
        let a = new_token();
        let b = new_token();
        assert_eq!(a.len(), 43);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn ids_have_prefix_and_are_unique() {
        let a = new_id("sig");
        let b = new_id("sig");
        assert!(a.starts_with("sig_") && a.len() == 4 + 32, "{a}");
        assert_ne!(a, b);
    }
}
