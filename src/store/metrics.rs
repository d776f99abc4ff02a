//! The store's numbers for `GET /metrics`: counts by status, tool call latencies in histogram
//! buckets, model usage by agent, pending signals by priority, pending approvals. Each is one
//! aggregate query, read at scrape time; the web layer encodes them. Reads only.
//!
//! A finished tool call's status is `completed` or `failed`, or `cancelled` when it was stopped
//! on purpose (its `error_kind`): a P0 or `suzumio cancel` is no failure of the tool.

use std::collections::BTreeMap;

use rusqlite::params;

use crate::config::Priority;
use crate::store::{Store, StoreError, TokenUsage};

/// Upper bounds (seconds) of the tool call latency buckets; `+Inf` follows.
pub const LATENCY_BUCKETS: &[f64] = &[0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

/// Finished tool calls of one tool with one status (`completed`, `failed`, `cancelled`).
#[derive(Clone, Debug, PartialEq)]
pub struct ToolLatency {
    pub tool: String,
    pub status: String,
    pub count: u64,
    pub sum_seconds: f64,
    /// Calls in each bucket of [`LATENCY_BUCKETS`] (not cumulative), then the ones above the
    /// last bound.
    pub buckets: Vec<u64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricCounts {
    /// `(agent, status) → activations`.
    pub activations: BTreeMap<(String, String), u64>,
    pub tool_latencies: Vec<ToolLatency>,
    /// Calls still running, by tool.
    pub tool_calls_running: BTreeMap<String, u64>,
    /// All model calls ever, by agent.
    pub model_usage: BTreeMap<String, TokenUsage>,
    /// Every priority, zero included.
    pub pending_signals: BTreeMap<String, u64>,
    pub approvals_pending: u64,
}

impl Store {
    pub fn metric_counts(&self) -> Result<MetricCounts, StoreError> {
        let mut counts = MetricCounts {
            pending_signals: Priority::ALL.iter().map(|p| (p.as_str().to_string(), 0)).collect(),
            ..MetricCounts::default()
        };
        self.read(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT agent_id, status, COUNT(*) FROM activations GROUP BY agent_id, status")?;
            for row in
                stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?)))?
            {
                let (agent, status, n) = row?;
                counts.activations.insert((agent, status), n.max(0) as u64);
            }

            // One column per bucket: how many calls took at most its bound.
            let le: Vec<String> = LATENCY_BUCKETS.iter().map(|b| format!("COALESCE(SUM(d <= {b}), 0)")).collect();
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT tool, status, COUNT(*), COALESCE(SUM(d), 0.0), {} FROM
                   (SELECT tool, CASE WHEN error_kind = 'cancelled' THEN 'cancelled' ELSE status END AS status,
                           MAX(0.0, (julianday(finished_at) - julianday(started_at)) * 86400.0) AS d
                    FROM tool_calls WHERE finished_at IS NOT NULL)
                 GROUP BY tool, status ORDER BY tool, status",
                le.join(", ")
            ))?;
            let rows = stmt.query_map([], |r| {
                let count = r.get::<_, i64>(2)?.max(0) as u64;
                let mut cumulative = Vec::with_capacity(LATENCY_BUCKETS.len());
                for i in 0..LATENCY_BUCKETS.len() {
                    cumulative.push(r.get::<_, i64>(4 + i)?.max(0) as u64);
                }
                let mut buckets = Vec::with_capacity(LATENCY_BUCKETS.len() + 1);
                let mut below = 0;
                for c in cumulative {
                    buckets.push(c.saturating_sub(below));
                    below = c;
                }
                buckets.push(count.saturating_sub(below));
                Ok(ToolLatency { tool: r.get(0)?, status: r.get(1)?, count, sum_seconds: r.get(3)?, buckets })
            })?;
            counts.tool_latencies = rows.collect::<Result<Vec<_>, _>>()?;

            let mut stmt = conn.prepare_cached(
                "SELECT tool, COUNT(*) FROM tool_calls WHERE status = 'running' GROUP BY tool ORDER BY tool",
            )?;
            for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
                let (tool, n) = row?;
                counts.tool_calls_running.insert(tool, n.max(0) as u64);
            }

            let mut stmt = conn.prepare_cached(
                "SELECT agent_id, COUNT(*), SUM(input_tokens), SUM(cached_input_tokens), SUM(output_tokens), SUM(cost)
                 FROM model_calls GROUP BY agent_id ORDER BY agent_id",
            )?;
            for row in stmt.query_map([], |r| {
                let n = |i: usize| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
                Ok((
                    r.get::<_, String>(0)?,
                    TokenUsage {
                        model_calls: n(1)?,
                        input_tokens: n(2)?,
                        cached_input_tokens: n(3)?,
                        output_tokens: n(4)?,
                        cost: r.get(5)?,
                    },
                ))
            })? {
                let (agent, usage) = row?;
                counts.model_usage.insert(agent, usage);
            }

            let mut stmt = conn.prepare_cached(
                "SELECT priority, COUNT(*) FROM signals WHERE status = ?1 GROUP BY priority ORDER BY priority",
            )?;
            for row in stmt.query_map(params!["pending"], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
                let (priority, n) = row?;
                counts.pending_signals.insert(priority, n.max(0) as u64);
            }
            Ok(())
        })?;
        counts.approvals_pending = self.approvals_pending()?;
        Ok(counts)
    }

    /// Tool calls waiting for a person's approval.
    fn approvals_pending(&self) -> Result<u64, StoreError> {
        self.read(|conn| {
            let n: i64 =
                conn.query_row("SELECT COUNT(*) FROM approval_requests WHERE status = 'pending'", [], |r| r.get(0))?;
            Ok(n.max(0) as u64)
        })
    }
}
