//! The permission audit trail: `.suzumio/audit/permissions.jsonl`, one JSON line per decision
//! (and per resolution of an approval, per hook verdict), rotated by size.
//!
//! Recording never blocks a tool call: [`Audit::record`] redacts and bounds the entry, then
//! hands it to a bounded channel read by a writer thread that appends and fsyncs once per batch.
//! When the channel is full (a stalled disk, a FIFO nobody reads) the entry is dropped and
//! counted, and the writer records how many were dropped as soon as it can. [`Audit::flush`]
//! (the controller's shutdown, the end of `suzumio tool call`) waits, with a deadline, until
//! everything recorded before it is on disk.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{Behavior, Decision, Risk};
use crate::config::ProjectConfig;
use crate::toolpack::redact::{MASK, is_secret_name, redact_secrets};

pub const AUDIT_FILE: &str = "permissions.jsonl";
/// Entries waiting for the writer; past this, entries are dropped (and counted).
const CHANNEL_CAPACITY: usize = 4096;
/// A string argument longer than this is cut.
const MAX_STRING_CHARS: usize = 2_000;
/// An entry's arguments longer than this (as JSON) are replaced by their cut text.
const MAX_ARGUMENTS_BYTES: usize = 16 * 1024;
/// At most this many entries are written between two fsyncs.
const BATCH: usize = 256;

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// The decision point decided a call.
    Decision,
    /// A person (or a timeout) resolved an approval request.
    Resolution,
    /// A `beforeToolCall`/`afterToolCall` hook changed or refused a call.
    Hook,
    /// A person switched tools off or back on for an agent (`tool` is what they named: a tool
    /// or `group:<name>`; `arguments.tools` the tools it changed).
    Switch,
    /// A live permission rule was added or removed while the project runs.
    Rule,
    /// An agent's permission mode was switched at run time (or back to its config's).
    Mode,
    /// A person (or the deadline, or `onAsk: deny`) answered an agent's `ask_user` question;
    /// the answer is the entry's `feedback`.
    Answer,
}

/// One line of the audit. Arguments and feedback are redacted and bounded by [`Audit::record`].
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    #[serde(serialize_with = "iso")]
    pub time: DateTime<Utc>,
    pub kind: EntryKind,
    pub agent: String,
    pub activation: Option<String>,
    /// The `tool_calls` row of the call.
    pub call_id: Option<String>,
    pub tool: String,
    /// The agent's permission mode.
    pub mode: String,
    pub decision: Behavior,
    pub source: String,
    pub reason: String,
    pub risk: Option<Risk>,
    /// For resolutions: `allow`, `deny`, `timeout`, with the remember scope if any.
    pub user_action: Option<String>,
    pub feedback: Option<String>,
    pub arguments: Value,
}

/// One line for a change of the permissions made while the project runs (`permissions::live`):
/// who added or removed which live rule, who switched which agent's mode. `agent` is `*` for a
/// rule of every agent.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeEntry {
    #[serde(serialize_with = "iso")]
    pub time: DateTime<Utc>,
    pub kind: EntryKind,
    pub agent: String,
    /// The rule's tool pattern.
    pub tool: Option<String>,
    /// The rule's decision.
    pub decision: Option<String>,
    /// The mode in force after the change.
    pub mode: Option<String>,
    /// `live rule 3`, `permission mode`.
    pub source: String,
    pub reason: String,
    /// `add`, `remove`, `set <mode>`, `reset`.
    pub user_action: String,
    /// `cli (<user>)`, `webui`, `api`.
    pub by: String,
    /// The rule as stored.
    pub rule: Option<Value>,
}

fn iso<S: serde::Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::clock::iso(*t))
}

/// Where the audit goes and how big its files may grow.
#[derive(Debug, Clone)]
pub struct AuditLimits {
    /// A file past this size is rotated (`permissions.jsonl.1`, …).
    pub max_bytes: u64,
    /// Rotated files kept.
    pub keep: usize,
}

impl Default for AuditLimits {
    fn default() -> Self {
        AuditLimits { max_bytes: 10 << 20, keep: 5 }
    }
}

enum Msg {
    Line(String),
    Flush(mpsc::Sender<()>),
}

/// The handle every recorder holds (cheap to clone).
#[derive(Clone)]
pub struct Audit {
    tx: SyncSender<Msg>,
    dropped: Arc<AtomicU64>,
    secrets: Arc<Vec<String>>,
}

impl Audit {
    /// The audit of a project: its file is created on the first entry.
    pub fn for_project(config: &ProjectConfig) -> Audit {
        Audit::open(&audit_dir(&config.root), secrets_of(config), AuditLimits::default())
    }

    /// An audit writing under `dir`, masking every value in `secrets`.
    pub fn open(dir: &Path, secrets: Vec<String>, limits: AuditLimits) -> Audit {
        let (tx, rx) = mpsc::sync_channel(CHANNEL_CAPACITY);
        let dropped = Arc::new(AtomicU64::new(0));
        let writer = Writer { dir: dir.to_path_buf(), limits, file: None, size: 0, dropped: dropped.clone() };
        // A thread, not a task: a write that blocks (a full disk, a FIFO) must block nothing else.
        let spawned = std::thread::Builder::new().name("audit-writer".into()).spawn(move || writer.run(rx));
        if let Err(e) = spawned {
            tracing::error!("cannot start the audit writer: {e}; permission decisions will not be audited");
        }
        let mut secrets: Vec<String> = secrets.into_iter().filter(|s| s.len() >= 6).collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Audit { tx, dropped, secrets: Arc::new(secrets) }
    }

    /// Queues one entry (redacted and bounded); never waits.
    pub fn record(&self, entry: AuditEntry) {
        self.record_with(entry, None)
    }

    /// [`Audit::record`] for an entry about `decision`: the line carries its reason code, the
    /// risk categories it saw and the actions a person may take (`code`, `categories`,
    /// `actions`).
    pub fn record_decided(&self, entry: AuditEntry, decision: &Decision) {
        self.record_with(entry, Some(decision))
    }

    fn record_with(&self, mut entry: AuditEntry, decision: Option<&Decision>) {
        entry.arguments = self.redacted(&entry.arguments);
        entry.feedback = entry.feedback.map(|f| cap(&self.redact_text(&f)));
        entry.reason = self.redact_text(&entry.reason);
        let mut value = match serde_json::to_value(&entry) {
            Ok(value) => value,
            Err(e) => {
                tracing::error!("an audit entry does not serialize: {e}");
                return;
            }
        };
        if let (Some(d), Some(line)) = (decision, value.as_object_mut()) {
            line.insert("code".into(), json!(d.code));
            line.insert("categories".into(), json!(d.categories));
            line.insert("actions".into(), json!(d.actions));
        }
        self.send(serde_json::to_string(&value));
    }

    /// Queues a change's line (its reason and rule redacted); never waits.
    pub fn record_change(&self, mut entry: ChangeEntry) {
        entry.reason = self.redact_text(&entry.reason);
        entry.rule = entry.rule.map(|r| self.redacted(&r));
        self.send(serde_json::to_string(&entry));
    }

    fn send(&self, line: serde_json::Result<String>) {
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                tracing::error!("an audit entry does not serialize: {e}");
                return;
            }
        };
        match self.tx.try_send(Msg::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!("the permission audit cannot keep up; entries are dropped and counted");
                }
            }
        }
    }

    /// Entries dropped since the writer last recorded a drop.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Waits until everything recorded so far is written and synced, at most `deadline`.
    /// Blocking: call it from a blocking context. False when the deadline passed.
    pub fn flush(&self, deadline: Duration) -> bool {
        let until = Instant::now() + deadline;
        let (ack, done) = mpsc::channel();
        let mut msg = Msg::Flush(ack);
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return false,
                Err(TrySendError::Full(m)) => {
                    if Instant::now() >= until {
                        return false;
                    }
                    msg = m;
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        done.recv_timeout(until.saturating_duration_since(Instant::now())).is_ok()
    }

    /// [`Audit::flush`] from async code.
    pub async fn flush_async(&self, deadline: Duration) -> bool {
        let audit = self.clone();
        tokio::task::spawn_blocking(move || audit.flush(deadline)).await.unwrap_or(false)
    }

    /// A call's arguments as the audit writes them (secrets masked, strings and size bounded):
    /// also what is shown of them outside the project, e.g. in an MCP client's approval prompt.
    pub fn redacted(&self, arguments: &Value) -> Value {
        bound(self.redact_value(arguments))
    }

    fn redact_text(&self, text: &str) -> String {
        let mut out = redact_secrets(text);
        for secret in self.secrets.iter() {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), MASK);
            }
        }
        out
    }

    fn redact_value(&self, value: &Value) -> Value {
        match value {
            // Cut before masking too (a file's whole content would be scanned on the call's
            // thread), but with room, so that a cut does not split a secret from its name.
            Value::String(s) => Value::String(cap(&self.redact_text(cut(s, 4 * MAX_STRING_CHARS)))),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.redact_value(v)).collect()),
            Value::Object(map) => {
                let redacted: Map<String, Value> = map
                    .iter()
                    .map(|(k, v)| {
                        let v = if is_secret_name(k) && !v.is_object() && !v.is_array() && !v.is_null() {
                            Value::String(MASK.into())
                        } else {
                            self.redact_value(v)
                        };
                        (k.clone(), v)
                    })
                    .collect();
                Value::Object(redacted)
            }
            other => other.clone(),
        }
    }
}

fn cut(text: &str, max: usize) -> &str {
    text.char_indices().nth(max).map_or(text, |(i, _)| &text[..i])
}

fn cap(text: &str) -> String {
    if text.chars().count() <= MAX_STRING_CHARS {
        return text.to_string();
    }
    let cut: String = text.chars().take(MAX_STRING_CHARS).collect();
    format!("{cut}… [cut]")
}

fn bound(value: Value) -> Value {
    let text = value.to_string();
    if text.len() <= MAX_ARGUMENTS_BYTES {
        return value;
    }
    let mut end = MAX_ARGUMENTS_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    json!({ "truncated": format!("{}…", &text[..end]), "bytes": text.len() })
}

/// Values the audit must never show: model API keys (literal or from their environment
/// variables), provider and preset headers, and the agents' configured environment.
pub fn secrets_of(config: &ProjectConfig) -> Vec<String> {
    let mut out = Vec::new();
    for p in &config.models.providers {
        out.extend(p.api_key.clone());
        out.extend(p.api_key_env.as_ref().and_then(|v| std::env::var(v).ok()));
        out.extend(p.headers.values().cloned());
    }
    for p in &config.models.presets {
        out.extend(p.headers.values().cloned());
    }
    for a in &config.agents {
        out.extend(a.env.values().cloned());
    }
    out
}

pub fn audit_dir(root: &Path) -> PathBuf {
    root.join(".suzumio").join("audit")
}

struct Writer {
    dir: PathBuf,
    limits: AuditLimits,
    file: Option<File>,
    size: u64,
    dropped: Arc<AtomicU64>,
}

impl Writer {
    fn run(mut self, rx: Receiver<Msg>) {
        let mut failed = false;
        while let Ok(first) = rx.recv() {
            let mut acks = Vec::new();
            let mut lines = Vec::new();
            let mut next = Some(first);
            while let Some(msg) = next {
                match msg {
                    Msg::Line(line) => lines.push(line),
                    Msg::Flush(ack) => acks.push(ack),
                }
                next = if lines.len() < BATCH { rx.try_recv().ok() } else { None };
            }
            let dropped = self.dropped.swap(0, Ordering::Relaxed);
            if dropped > 0 {
                let now = crate::clock::iso(Utc::now());
                lines.push(json!({ "time": now, "kind": "dropped", "dropped": dropped }).to_string());
            }
            match self.write(&lines) {
                Ok(()) => failed = false,
                Err(e) => {
                    if !failed {
                        tracing::error!("writing the permission audit in {}: {e}", self.dir.display());
                    }
                    failed = true;
                    self.file = None;
                    if !lines.is_empty() {
                        self.dropped.fetch_add(lines.len() as u64, Ordering::Relaxed);
                    }
                }
            }
            for ack in acks {
                let _ = ack.send(());
            }
        }
    }

    /// Appends the lines (rotating before a line that would make the file too big), then
    /// syncs once.
    fn write(&mut self, lines: &[String]) -> std::io::Result<()> {
        for line in lines {
            let len = line.len() as u64 + 1;
            if self.file.is_some() && self.size > 0 && self.size + len > self.limits.max_bytes {
                self.sync();
                self.rotate()?;
            }
            let file = match &mut self.file {
                Some(f) => f,
                None => {
                    std::fs::create_dir_all(&self.dir)?;
                    let f = OpenOptions::new().create(true).append(true).open(self.dir.join(AUDIT_FILE))?;
                    self.size = f.metadata().map(|m| m.len()).unwrap_or(0);
                    self.file.insert(f)
                }
            };
            file.write_all(format!("{line}\n").as_bytes())?;
            self.size += len;
        }
        self.sync();
        Ok(())
    }

    fn sync(&self) {
        // A FIFO or a character device cannot sync; what matters is that the lines left us.
        if let Some(f) = &self.file {
            let _ = f.sync_data();
        }
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.file = None;
        let path = |n: usize| self.dir.join(if n == 0 { AUDIT_FILE.to_string() } else { format!("{AUDIT_FILE}.{n}") });
        let _ = std::fs::remove_file(path(self.limits.keep));
        for n in (0..self.limits.keep).rev() {
            if path(n).exists() {
                std::fs::rename(path(n), path(n + 1))?;
            }
        }
        self.size = 0;
        Ok(())
    }
}

/// What `suzumio audit` shows.
#[derive(Debug, Default, Clone)]
pub struct AuditQuery {
    pub agent: Option<String>,
    pub since: Option<DateTime<Utc>>,
}

/// The audit's entries, oldest first (rotated files first), filtered. Lines that do not parse
/// are skipped; drop markers are kept (they say entries are missing).
pub fn read(root: &Path, query: &AuditQuery) -> std::io::Result<Vec<Value>> {
    let dir = audit_dir(root);
    let mut files: Vec<PathBuf> = (1..=32).rev().map(|n| dir.join(format!("{AUDIT_FILE}.{n}"))).collect();
    files.push(dir.join(AUDIT_FILE));
    let mut out = Vec::new();
    for path in files {
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for line in BufReader::new(file).lines() {
            let Ok(entry) = serde_json::from_str::<Value>(&line?) else { continue };
            let dropped = entry.get("kind").and_then(Value::as_str) == Some("dropped");
            if let Some(agent) = &query.agent
                && !dropped
                && entry.get("agent").and_then(Value::as_str) != Some(agent.as_str())
            {
                continue;
            }
            if let Some(since) = query.since {
                let time = entry.get("time").and_then(Value::as_str).and_then(crate::clock::parse_iso);
                if time.is_none_or(|t| t < since) {
                    continue;
                }
            }
            out.push(entry);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(arguments: Value) -> AuditEntry {
        AuditEntry {
            time: Utc::now(),
            kind: EntryKind::Decision,
            agent: "a".into(),
            activation: None,
            call_id: None,
            tool: "shell.exec".into(),
            mode: "default".into(),
            decision: Behavior::Allow,
            source: "mode default".into(),
            reason: String::new(),
            risk: None,
            user_action: None,
            feedback: None,
            arguments,
        }
    }

    #[test]
    fn rotates_by_size_and_keeps_the_newest_files() {
        let dir = tempfile::tempdir().unwrap();
        let audit = Audit::open(dir.path(), Vec::new(), AuditLimits { max_bytes: 2_000, keep: 2 });
        for i in 0..100 {
            audit.record(entry(json!({ "i": i })));
        }
        assert!(audit.flush(Duration::from_secs(10)));
        let mut names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        names.sort();
        assert_eq!(names, ["permissions.jsonl", "permissions.jsonl.1", "permissions.jsonl.2"]);
        for name in &names {
            assert!(std::fs::metadata(dir.path().join(name)).unwrap().len() <= 2_000, "{name}");
        }
    }

    #[test]
    fn secrets_are_masked_and_long_values_cut() {
        let dir = tempfile::tempdir().unwrap();
        let audit = Audit::open(dir.path(), vec!["planted-secret-value".into()], AuditLimits::default());
        audit.record(entry(json!({
            "command": "curl -H 'Authorization: Bearer abcdef123456' https://u:pw@x.test/?token=zzz9 planted-secret-value",
            "apiKey": "k-123",
            "body": "x".repeat(5000),
        })));
        assert!(audit.flush(Duration::from_secs(10)));
        let text = std::fs::read_to_string(dir.path().join(AUDIT_FILE)).unwrap();
        for secret in ["abcdef123456", "pw@", "zzz9", "planted-secret-value", "k-123"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("[cut]"));
    }
}
