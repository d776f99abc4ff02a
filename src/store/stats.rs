//! Read-only aggregates for status views: project stats (the `core/project.stats` panel), per-tool
//! status (reference §3.9) and recent tool activity (the `*.activity` panels, §4.10).
//!
//! Must never expose tool inputs or outputs: activity shows *what* was touched (a path, a command,
//! a URL), capped in length, and never file contents or fetched bodies.

use std::collections::BTreeMap;

use rusqlite::params_from_iter;
use rusqlite::types::Value as SqlValue;
use serde_json::Value;

use crate::store::{
    ActivationCounts, AgentCounts, ProjectStats, Store, StoreError, ToolCallSummary, ToolStat, clamp_limit, project_row,
};

/// `lastError` is capped at this many characters (reference §3.9).
pub const LAST_ERROR_CAP: usize = 600;
/// A recent call's `target` summary is capped at this many characters: a shell command can carry
/// a whole heredoc.
pub const TARGET_CAP: usize = 300;

impl Store {
    /// Counts for the project stats panel, read in one snapshot.
    pub fn project_stats(&self) -> Result<ProjectStats, StoreError> {
        self.read(|conn| {
            // One read transaction, so the numbers agree with each other.
            let tx = conn.unchecked_transaction()?;
            let project = project_row(&tx)?;
            let count = |sql: &str| -> rusqlite::Result<u64> {
                tx.query_row(sql, [], |r| r.get::<_, i64>(0)).map(|n| n as u64)
            };

            let mut agents = AgentCounts { total: 0, by_status: BTreeMap::new() };
            {
                let mut stmt = tx.prepare("SELECT status, COUNT(*) FROM agents GROUP BY status")?;
                let mut rows = stmt.query([])?;
                while let Some(row) = rows.next()? {
                    let n = row.get::<_, i64>(1)? as u64;
                    agents.total += n;
                    agents.by_status.insert(row.get(0)?, n);
                }
            }
            let stats = ProjectStats {
                name: project.name,
                status: project.status,
                agents,
                messages: count("SELECT COUNT(*) FROM messages")?,
                activations: ActivationCounts {
                    total: count("SELECT COUNT(*) FROM activations")?,
                    running: count("SELECT COUNT(*) FROM activations WHERE status = 'running'")?,
                    failed: count("SELECT COUNT(*) FROM activations WHERE status = 'failed'")?,
                },
                tool_calls: count("SELECT COUNT(*) FROM tool_calls")?,
                history_compactions: count("SELECT COUNT(*) FROM history WHERE kind = 'history_compaction'")?,
                events: count("SELECT COUNT(*) FROM events")?,
            };
            tx.commit()?;
            Ok(stats)
        })
    }

    /// Per-tool aggregates over every recorded call, sorted by tool name. The `last*` fields
    /// describe the most recently started call.
    pub fn tool_stats(&self) -> Result<Vec<ToolStat>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT agg.tool, agg.calls, agg.running, agg.completed, agg.failed,
                        t.toolpack_id, t.status, t.agent_id, COALESCE(t.finished_at, t.started_at), t.error
                 FROM (SELECT tool, COUNT(*) AS calls,
                              SUM(status = 'running') AS running,
                              SUM(status = 'completed') AS completed,
                              SUM(status = 'failed') AS failed,
                              MAX(rowid) AS last_rowid
                       FROM tool_calls GROUP BY tool) AS agg
                 JOIN tool_calls t ON t.rowid = agg.last_rowid
                 ORDER BY agg.tool",
            )?;
            let rows = stmt.query_map([], |r| {
                let last_error: Option<String> = r.get(9)?;
                Ok(ToolStat {
                    tool: r.get(0)?,
                    call_count: r.get::<_, i64>(1)? as u64,
                    running_count: r.get::<_, i64>(2)? as u64,
                    completed_count: r.get::<_, i64>(3)? as u64,
                    failed_count: r.get::<_, i64>(4)? as u64,
                    toolpack_id: r.get(5)?,
                    last_status: r.get(6)?,
                    last_agent_id: r.get(7)?,
                    last_at: r.get(8)?,
                    last_error: last_error.map(|e| cap_chars(&e, LAST_ERROR_CAP)),
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The newest `limit` calls of the given tools (all tools when `tools` is empty), newest
    /// first, each with a short `target` summary instead of its input.
    pub fn recent_tool_calls(&self, tools: &[&str], limit: usize) -> Result<Vec<ToolCallSummary>, StoreError> {
        let mut args: Vec<SqlValue> = tools.iter().map(|t| SqlValue::Text(t.to_string())).collect();
        let filter = if tools.is_empty() {
            String::new()
        } else {
            format!("WHERE tool IN ({})", vec!["?"; tools.len()].join(", "))
        };
        args.push(SqlValue::Integer(clamp_limit(Some(limit))));
        self.read(|conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT id, tool, agent_id, activation_id, status, started_at, finished_at, error, input_json
                 FROM tool_calls {filter} ORDER BY rowid DESC LIMIT ?"
            ))?;
            let rows = stmt.query_map(params_from_iter(args), summary_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

/// The calls of one activation, oldest first (same summaries, never inputs).
impl Store {
    pub fn activation_tool_calls(&self, activation_id: &str) -> Result<Vec<ToolCallSummary>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, tool, agent_id, activation_id, status, started_at, finished_at, error, input_json
                 FROM tool_calls WHERE activation_id = ?1 ORDER BY rowid",
            )?;
            let rows = stmt.query_map([activation_id], summary_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

fn summary_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ToolCallSummary> {
    let tool: String = r.get(1)?;
    let error: Option<String> = r.get(7)?;
    // Parse failures only lose the summary; the input itself is never returned.
    let input: Option<Value> = r.get::<_, String>(8).ok().and_then(|t| serde_json::from_str(&t).ok());
    Ok(ToolCallSummary {
        target: input.as_ref().and_then(|i| target_summary(&tool, i)),
        id: r.get(0)?,
        tool,
        agent_id: r.get(2)?,
        activation_id: r.get(3)?,
        status: r.get(4)?,
        started_at: r.get(5)?,
        finished_at: r.get(6)?,
        error: error.map(|e| cap_chars(&e, LAST_ERROR_CAP)),
    })
}

/// What a call touched, from its input: `file.*` → the path (all paths for `file.patch`),
/// `shell.exec` → `command (cwd: dir)`, `web.fetch` → the URL. Other tools have none.
pub(crate) fn target_summary(tool: &str, input: &Value) -> Option<String> {
    let text = |key: &str| input.get(key).and_then(Value::as_str).filter(|s| !s.is_empty());
    let summary = if tool.starts_with("file.") {
        match text("path") {
            Some(path) => path.to_string(),
            None => {
                let paths: Vec<&str> = input
                    .get("operations")
                    .and_then(Value::as_array)?
                    .iter()
                    .filter_map(|op| op.get("path").and_then(Value::as_str))
                    .collect();
                if paths.is_empty() {
                    return None;
                }
                paths.join(", ")
            }
        }
    } else if tool == "shell.exec" {
        let command = text("command")?;
        match text("cwd") {
            Some(cwd) => format!("{command} (cwd: {cwd})"),
            None => command.to_string(),
        }
    } else if tool == "web.fetch" {
        text("url")?.to_string()
    } else {
        return None;
    };
    Some(cap_chars(&summary, TARGET_CAP))
}

/// Cut `text` to at most `max` characters (not bytes, so multi-byte text stays valid), marking
/// the cut with `…`.
pub(crate) fn cap_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some(_) => {
            let kept: String = text.chars().take(max.saturating_sub(1)).collect();
            format!("{kept}…")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn targets_name_what_was_touched_never_contents() {
        let cases = [
            ("file.write", json!({"path": "/workspace/a.txt", "content": "SECRET"}), Some("/workspace/a.txt")),
            ("file.read", json!({"path": "notes.md"}), Some("notes.md")),
            (
                "file.patch",
                json!({"operations": [{"op": "add", "path": "a", "content": "SECRET"}, {"op": "delete", "path": "b"}]}),
                Some("a, b"),
            ),
            ("shell.exec", json!({"command": "ls -la", "cwd": "/tmp"}), Some("ls -la (cwd: /tmp)")),
            ("shell.exec", json!({"command": "make"}), Some("make")),
            ("web.fetch", json!({"url": "https://example.com/x"}), Some("https://example.com/x")),
            ("messages.send", json!({"recipient": "pm", "body": "hi"}), None),
            ("file.write", json!({"content": "SECRET"}), None),
        ];
        for (tool, input, expected) in cases {
            assert_eq!(target_summary(tool, &input).as_deref(), expected, "{tool} {input}");
        }
    }

    #[test]
    fn long_targets_and_errors_are_capped_by_chars() {
        let long = "é".repeat(1000);
        let capped = cap_chars(&long, 600);
        assert_eq!(capped.chars().count(), 600);
        assert!(capped.ends_with('…'));
        assert_eq!(cap_chars("short", 600), "short");
        assert_eq!(cap_chars(&"x".repeat(600), 600), "x".repeat(600));
        let summary = target_summary("shell.exec", &json!({"command": "y".repeat(5000)})).unwrap_or_default();
        assert_eq!(summary.chars().count(), TARGET_CAP);
    }
}
