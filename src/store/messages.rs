//! Messages: `sendMessage` exactly as reference §4.2 (validation, the `messages` row, the
//! `message.created` event and signals), and the conversation queries the WebUI shows (§4.10).
//!
//! The sender is not checked here, nor the communication policy: `support::policy` and the
//! WebUI decide who may speak, this module only records what was said.

use rusqlite::{Connection, OptionalExtension, Row, params_from_iter, types::Value as SqlValue};
use serde_json::{Map, Value, json};

use crate::config::Priority;
use crate::store::model::priority_column;
use crate::store::signals::{PlannedSignal, plan_signals};
use crate::store::time_column;
use crate::store::{
    DirectPair, Event, MessageQuery, MessageRecord, MessageSent, SendMessage, Store, StoreError, clamp_limit, given,
    new_id, parse_priority,
};

/// The recipient that is a person, not an agent.
pub const USER: &str = "user";

impl Store {
    /// `store.sendMessage` (reference §4.2): one `messages` row, a `message.created` event and
    /// the `message.created` signals, in one transaction.
    pub fn send_message(&self, input: SendMessage) -> Result<MessageSent, StoreError> {
        self.send(input, true, false).map(|sent| sent.expect("sent unconditionally"))
    }

    /// [`Store::send_message`] only while the project has no message at all, decided in the
    /// same transaction: the project's first message (a kickoff), sent once. `None` when the
    /// project already had one.
    pub fn send_first_message(&self, input: SendMessage) -> Result<Option<MessageSent>, StoreError> {
        self.send(input, true, true)
    }

    /// [`Store::send_message`] for a note its recipients see without being woken by it: the
    /// message is recorded as usual, its signals are recorded `closed`.
    pub fn send_note(&self, input: SendMessage) -> Result<MessageSent, StoreError> {
        self.send(input, false, false).map(|sent| sent.expect("sent unconditionally"))
    }

    /// The message, unless `first_only` and the project already has one (`None`).
    fn send(&self, input: SendMessage, wake: bool, first_only: bool) -> Result<Option<MessageSent>, StoreError> {
        let recipient = given(&input.recipient);
        let channel = given(&input.channel);
        match (recipient, channel) {
            (None, None) => return Err(StoreError::MessageNeedsTarget),
            (Some(_), Some(_)) => return Err(StoreError::MessageBothTargets),
            _ => {}
        }
        if let Some(r) = recipient
            && r != USER
            && !self.is_roster_agent(r)
        {
            return Err(StoreError::UnknownAgent(r.to_string()));
        }
        if let Some(c) = channel
            && !self.inner.channels.iter().any(|known| known == c)
        {
            return Err(StoreError::UnknownChannel(c.to_string()));
        }
        let priority = match given(&input.priority) {
            Some(p) => parse_priority(p)?,
            None => Priority::P3,
        };

        let message_id = new_id("msg");
        let mut payload = Map::new();
        payload.insert("messageId".into(), json!(message_id));
        payload.insert("sender".into(), json!(input.sender));
        if let Some(r) = recipient {
            payload.insert("recipient".into(), json!(r));
        }
        if let Some(c) = channel {
            payload.insert("channel".into(), json!(c));
        }
        payload.insert("priority".into(), json!(priority.as_str()));
        payload.insert("body".into(), json!(input.body));

        // Attribute the signal to the sender when the caller gives no source, so the timeline
        // says who caused it; the channel fan-out always skips the sender.
        let source_agent = given(&input.source_agent).unwrap_or(&input.sender);
        let target_agent = recipient.filter(|r| *r != USER);
        let mut planned: Vec<PlannedSignal> =
            plan_signals(&self.inner.roster, target_agent, channel, Some(&input.sender), "message.created", None);
        if !wake {
            for plan in &mut planned {
                plan.status = crate::store::SignalStatus::Closed;
            }
        }

        self.write(|w| {
            if first_only && w.tx.query_row("SELECT EXISTS (SELECT 1 FROM messages)", [], |r| r.get::<_, bool>(0))? {
                return Ok(None);
            }
            w.tx.execute(
                "INSERT INTO messages (id, sender, recipient, channel, priority, body, source_agent, source_activation, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                rusqlite::params![
                    message_id,
                    input.sender,
                    recipient,
                    channel,
                    priority.as_str(),
                    input.body,
                    given(&input.source_agent),
                    given(&input.source_activation),
                    w.now
                ],
            )?;
            w.event(Event::MessageCreated {
                message_id: message_id.clone(),
                sender: input.sender.clone(),
                recipient: recipient.map(str::to_string),
                channel: channel.map(str::to_string),
                priority: priority.as_str().into(),
            })?;
            let mut signal_ids = Vec::with_capacity(planned.len());
            for plan in &planned {
                let record = w.insert_signal(
                    plan,
                    "message.created",
                    Some(source_agent),
                    given(&input.source_activation),
                    priority,
                    &Value::Object(payload.clone()),
                    None,
                )?;
                signal_ids.push(record.id);
            }
            Ok(Some(MessageSent { message_id: message_id.clone(), signal_ids }))
        })
    }

    /// Whether anyone ever sent a message in this project.
    pub fn has_messages(&self) -> Result<bool, StoreError> {
        self.read(|conn| Ok(conn.query_row("SELECT EXISTS (SELECT 1 FROM messages)", [], |r| r.get(0))?))
    }

    pub fn message(&self, id: &str) -> Result<Option<MessageRecord>, StoreError> {
        self.read(|conn| Ok(message_row(conn, id)?))
    }

    /// The newest `limit` messages matching `query` (older than `before_id` when given),
    /// returned oldest first, ready to show as a conversation.
    pub fn list_messages(&self, query: &MessageQuery) -> Result<Vec<MessageRecord>, StoreError> {
        let mut conditions: Vec<&str> = Vec::new();
        let mut args: Vec<SqlValue> = Vec::new();
        match (given(&query.participant_a), given(&query.participant_b)) {
            (Some(a), Some(b)) => {
                conditions.push("((sender = ? AND recipient = ?) OR (sender = ? AND recipient = ?))");
                args.extend([a, b, b, a].map(|s| SqlValue::Text(s.to_string())));
            }
            (Some(one), None) | (None, Some(one)) => {
                conditions.push("recipient IS NOT NULL AND (sender = ? OR recipient = ?)");
                args.extend([one, one].map(|s| SqlValue::Text(s.to_string())));
            }
            (None, None) => {}
        }
        if let Some(channel) = given(&query.channel) {
            conditions.push("channel = ?");
            args.push(SqlValue::Text(channel.to_string()));
        }
        self.read(|conn| {
            if let Some(before) = given(&query.before_id) {
                let rowid: Option<i64> =
                    conn.query_row("SELECT rowid FROM messages WHERE id = ?1", [before], |r| r.get(0)).optional()?;
                let rowid = rowid.ok_or_else(|| StoreError::UnknownMessage(before.to_string()))?;
                conditions.push("rowid < ?");
                args.push(SqlValue::Integer(rowid));
            }
            let filter =
                if conditions.is_empty() { String::new() } else { format!("WHERE {}", conditions.join(" AND ")) };
            args.push(SqlValue::Integer(clamp_limit(query.limit)));
            let sql = format!(
                "SELECT {MESSAGE_COLUMNS} FROM (SELECT rowid AS rid, * FROM messages {filter} ORDER BY rowid DESC LIMIT ?)
                 ORDER BY rid"
            );
            let mut stmt = conn.prepare(&sql)?;
            let rows = stmt.query_map(params_from_iter(args), message_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// Recent direct-message pairs (either direction counted together), newest first.
    pub fn direct_pairs(&self, limit: usize) -> Result<Vec<DirectPair>, StoreError> {
        let limit = clamp_limit(Some(limit));
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                // Two-argument MIN/MAX are scalar (they order the pair); MAX(rowid) is the one
                // aggregate, so SQLite takes the bare `id` and `created_at` from the newest row.
                "SELECT MIN(sender, recipient) AS a, MAX(sender, recipient) AS b, COUNT(*), id, created_at,
                        MAX(rowid) AS newest
                 FROM messages WHERE recipient IS NOT NULL
                 GROUP BY a, b ORDER BY newest DESC LIMIT ?1",
            )?;
            let rows = stmt.query_map([limit], |r| {
                Ok(DirectPair {
                    a: r.get(0)?,
                    b: r.get(1)?,
                    count: r.get::<_, i64>(2)? as u64,
                    last_message_id: r.get(3)?,
                    last_at: time_column(r, 4)?,
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

const MESSAGE_COLUMNS: &str =
    "id, sender, recipient, channel, priority, body, source_agent, source_activation, created_at";

fn message_from_row(r: &Row<'_>) -> rusqlite::Result<MessageRecord> {
    Ok(MessageRecord {
        id: r.get(0)?,
        sender: r.get(1)?,
        recipient: r.get(2)?,
        channel: r.get(3)?,
        priority: priority_column(r, 4)?,
        body: r.get(5)?,
        source_agent: r.get(6)?,
        source_activation: r.get(7)?,
        created_at: time_column(r, 8)?,
    })
}

fn message_row(conn: &Connection, id: &str) -> rusqlite::Result<Option<MessageRecord>> {
    conn.query_row(&format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?1"), [id], message_from_row).optional()
}
