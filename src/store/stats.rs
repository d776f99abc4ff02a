//! Read-only aggregates for status views: project stats (the `core/project.stats` panel), per-tool
//! status (reference §3.9) and recent tool activity (the `*.activity` panels, §4.10).
//!
//! Must never expose tool inputs or outputs: activity shows *what* was touched (a path, a command,
//! a URL), capped in length, and never file contents or fetched bodies.

use std::collections::BTreeMap;

use rusqlite::params_from_iter;
use rusqlite::types::Value as SqlValue;

use crate::store::{
    ActivationCounts, AgentCounts, ProjectStats, Store, StoreError, ToolCallSummary, ToolStat, clamp_limit, project_row,
};
use crate::store::{opt_time_column, time_column};
use crate::text::cap_chars;

/// `lastError` is capped at this many characters (reference §3.9).
pub const LAST_ERROR_CAP: usize = 600;

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
                    waiting_approval: count("SELECT COUNT(*) FROM activations WHERE status = 'waiting_approval'")?,
                    waiting_user: count("SELECT COUNT(*) FROM activations WHERE status = 'waiting_user'")?,
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
                    last_at: time_column(r, 8)?,
                    last_error: last_error.map(|e| cap_chars(&e, LAST_ERROR_CAP)),
                })
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The newest `limit` calls of the given tools (all tools when `tools` is empty), newest
    /// first, each with a short `target` summary instead of its input.
    /// Tool calls newest first, optionally of one tool and one agent, recorded before the call
    /// `before` (paging back), at most `limit` (capped).
    pub fn list_tool_calls(
        &self,
        tool: Option<&str>,
        agent: Option<&str>,
        before: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ToolCallSummary>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, tool, agent_id, activation_id, status, started_at, finished_at, error, target
                 FROM tool_calls
                 WHERE (?1 IS NULL OR tool = ?1) AND (?2 IS NULL OR agent_id = ?2)
                   AND (?3 IS NULL OR rowid < (SELECT rowid FROM tool_calls WHERE id = ?3))
                 ORDER BY rowid DESC LIMIT ?4",
            )?;
            let rows =
                stmt.query_map(rusqlite::params![tool, agent, before, clamp_limit(Some(limit))], summary_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

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
                "SELECT id, tool, agent_id, activation_id, status, started_at, finished_at, error, target
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
                "SELECT id, tool, agent_id, activation_id, status, started_at, finished_at, error, target
                 FROM tool_calls WHERE activation_id = ?1 ORDER BY rowid",
            )?;
            let rows = stmt.query_map([activation_id], summary_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

fn summary_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ToolCallSummary> {
    let error: Option<String> = r.get(7)?;
    Ok(ToolCallSummary {
        id: r.get(0)?,
        tool: r.get(1)?,
        agent_id: r.get(2)?,
        activation_id: r.get(3)?,
        status: r.get(4)?,
        started_at: time_column(r, 5)?,
        finished_at: opt_time_column(r, 6)?,
        error: error.map(|e| cap_chars(&e, LAST_ERROR_CAP)),
        target: r.get(8)?,
    })
}
