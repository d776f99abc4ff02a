//! Watching the timeline from outside the transaction that wrote it: listing events with
//! filters (`suzumio logs`), and following what *other processes* write to the same database.
//!
//! Every `suzumio` command that changes state (`send`, `wake`, `cancel`, `tool call`) writes
//! to the project's SQLite file from its own process; a running controller sees nothing of it
//! on its in-process broadcast ([`Store::subscribe`]). [`Store::follow_other_writers`] closes
//! that gap: it looks for event rows it has not broadcast every [`FOLLOW_INTERVAL`], and the
//! writer fills gaps before it broadcasts its own events, so subscribers get every event of
//! the file — whoever wrote it — once and in id order. The scheduler then wakes on a CLI's
//! message at once, the WebUI's stream shows it, and a `suzumio cancel` reaches the running
//! activation within a second.

use std::sync::atomic::Ordering;
use std::time::Duration;

use rusqlite::{Connection, params};
use tokio_util::sync::CancellationToken;

use crate::store::{EventRecord, Store, StoreError, event_from_row};

/// How often a following store looks for rows other processes committed.
pub const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);

/// Which events [`Store::list_events`] returns.
#[derive(Clone, Debug, Default)]
pub struct EventQuery {
    /// Only events about this agent ([`crate::store::Event::agent_id`]).
    pub agent_id: Option<String>,
    /// Only events of this type, or of every type under it: `tool_call` matches
    /// `tool_call.started` and `tool_call.finished`.
    pub kind: Option<String>,
    /// Only events after this id.
    pub after_id: Option<i64>,
    /// The newest this many (oldest first); default 50, at most 1000.
    pub limit: Option<usize>,
}

impl EventQuery {
    pub fn matches(&self, event: &EventRecord) -> bool {
        let kind_ok = self.kind.as_deref().is_none_or(|k| {
            let actual = event.kind();
            actual == k || actual.strip_prefix(k).is_some_and(|rest| rest.starts_with('.'))
        });
        let agent_ok = self.agent_id.as_deref().is_none_or(|a| event.event.agent_id() == Some(a));
        kind_ok && agent_ok
    }
}

impl Store {
    /// The newest events that match `query`, oldest first.
    pub fn list_events(&self, query: &EventQuery) -> Result<Vec<EventRecord>, StoreError> {
        let limit = query.limit.unwrap_or(50).clamp(1, 1000);
        let mut found = Vec::new();
        let mut before = i64::MAX;
        // Pages back from the newest; the filters need the typed event, so they run here.
        loop {
            let page = self.read(|conn| {
                let mut stmt = conn.prepare_cached(
                    "SELECT id, type, data_json, created_at FROM events
                     WHERE id < ?1 AND id > ?2 AND (?3 IS NULL OR type = ?3 OR type GLOB ?3 || '.*')
                     ORDER BY id DESC LIMIT 500",
                )?;
                let rows = stmt.query_map(params![before, query.after_id.unwrap_or(0), query.kind], event_from_row)?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })?;
            let Some(last) = page.last() else { break };
            before = last.id;
            found.extend(page.into_iter().filter(|e| query.matches(e)));
            if found.len() >= limit {
                break;
            }
        }
        found.truncate(limit);
        found.reverse();
        Ok(found)
    }

    /// Broadcast what other processes write to this database, until `stop` is cancelled (see
    /// the module header). Events this store committed before the call are not sent again.
    pub async fn follow_other_writers(&self, stop: CancellationToken) {
        match self.last_event_id() {
            Ok(last) => {
                self.inner.published.fetch_max(last, Ordering::AcqRel);
            }
            Err(e) => tracing::warn!("cannot follow other processes' writes: {e}"),
        }
        self.inner.follow.store(true, Ordering::Release);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(FOLLOW_INTERVAL) => {}
            }
            if let Err(e) = self.publish_foreign() {
                tracing::warn!("reading events other processes wrote: {e}");
            }
        }
        self.inner.follow.store(false, Ordering::Release);
    }

    /// Broadcast the rows after the last one broadcast. Holds the writer, so no commit of this
    /// process can slip between the read and the send; with no batch open, so every row it
    /// reads is committed (an open one is committed first: its callers get their answer sooner).
    fn publish_foreign(&self) -> Result<(), StoreError> {
        let writer = self.idle_writer()?;
        let after = self.inner.published.load(Ordering::Acquire);
        for event in rows_between(&writer.conn, after, i64::MAX)? {
            self.inner.published.fetch_max(event.id, Ordering::AcqRel);
            // No receivers is not an error: nobody is watching.
            let _ = self.inner.events.send(event);
        }
        Ok(())
    }
}

/// Event rows with `after < id < before`, oldest first (what other processes wrote between two
/// of ours).
pub(crate) fn rows_between(conn: &Connection, after: i64, before: i64) -> Result<Vec<EventRecord>, StoreError> {
    let mut stmt = conn
        .prepare_cached("SELECT id, type, data_json, created_at FROM events WHERE id > ?1 AND id < ?2 ORDER BY id")?;
    let rows = stmt.query_map(params![after, before], event_from_row)?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}
