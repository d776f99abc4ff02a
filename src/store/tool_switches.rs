//! Per-agent tool switches: a person switched a tool (or a whole group of them) off for one
//! agent while the project runs, or back on. One row per agent and tool that was ever switched,
//! holding its state, who switched it (`cli (alice)`, `webui`, `api`), when, and the group it
//! was switched with; a tool without a row is on. Each switch writes its `tools.switched` event
//! in the same transaction. A row that says "on" is kept: when a tool came back is what orders
//! it at the end of the agent's tool list (`activation::tool_list`).
//!
//! This module records; which names an agent may switch (its allowlist, the catalog's groups)
//! is `catalog`'s, and refusing a call of a switched-off tool is the call pipeline's.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Row, params};

use crate::store::{Event, Store, StoreError, time_column};

/// A call's lookup: is this tool switched for this agent (`query_plans`).
pub(super) const TOOL_SWITCH: &str = "SELECT agent_id, tool, enabled, group_name, changed_by, changed_at
     FROM tool_switches WHERE agent_id = ?1 AND tool = ?2";

/// Every request's tool list: the agent's switched tools (`query_plans`).
pub(super) const TOOL_SWITCHES_OF_AGENT: &str = "SELECT agent_id, tool, enabled, group_name, changed_by, changed_at
     FROM tool_switches WHERE agent_id = ?1";

/// One agent's switch of one tool, as last set.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSwitch {
    pub agent_id: String,
    pub tool: String,
    pub enabled: bool,
    /// The group it was switched with (`group:web`), when it was switched as one.
    pub group: Option<String>,
    /// Who switched it: `cli (<user>)`, `webui`, `api`.
    pub by: String,
    #[serde(with = "crate::clock::iso_serde")]
    pub at: DateTime<Utc>,
}

/// One thing switched at once: a tool, or a group's tools.
#[derive(Clone, Debug)]
pub struct SwitchTarget {
    /// The group's name when the user named a group.
    pub group: Option<String>,
    pub tools: Vec<String>,
}

fn switch_from_row(row: &Row<'_>) -> rusqlite::Result<ToolSwitch> {
    Ok(ToolSwitch {
        agent_id: row.get(0)?,
        tool: row.get(1)?,
        enabled: row.get::<_, i64>(2)? != 0,
        group: row.get(3)?,
        by: row.get(4)?,
        at: time_column(row, 5)?,
    })
}

impl Store {
    /// Switch `targets` on or off for `agent_id`, all in one transaction, with one
    /// `tools.switched` event per target that changed something. Returns, per target, the tools
    /// whose state changed (a tool already in that state is left as it is, its time included).
    pub fn switch_tools(
        &self,
        agent_id: &str,
        targets: &[SwitchTarget],
        enabled: bool,
        by: &str,
    ) -> Result<Vec<Vec<String>>, StoreError> {
        self.write(|w| {
            let exists: Option<String> =
                w.tx.query_row("SELECT id FROM agents WHERE id = ?1", [agent_id], |r| r.get(0)).optional()?;
            if exists.is_none() {
                return Err(StoreError::UnknownAgent(agent_id.to_string()));
            }
            let mut changed_all = Vec::with_capacity(targets.len());
            for target in targets {
                let mut changed = Vec::new();
                for tool in &target.tools {
                    let current: Option<i64> =
                        w.tx.query_row(
                            "SELECT enabled FROM tool_switches WHERE agent_id = ?1 AND tool = ?2",
                            params![agent_id, tool],
                            |r| r.get(0),
                        )
                        .optional()?;
                    // No row: the tool is on, as the config says.
                    if current.map(|e| e != 0).unwrap_or(true) == enabled {
                        continue;
                    }
                    w.tx.execute(
                        "INSERT INTO tool_switches (agent_id, tool, enabled, group_name, changed_by, changed_at)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                         ON CONFLICT (agent_id, tool) DO UPDATE SET
                           enabled = excluded.enabled, group_name = excluded.group_name,
                           changed_by = excluded.changed_by, changed_at = excluded.changed_at",
                        params![agent_id, tool, enabled as i64, target.group, by, w.now],
                    )?;
                    changed.push(tool.clone());
                }
                if !changed.is_empty() {
                    w.event(Event::ToolsSwitched {
                        agent_id: agent_id.to_string(),
                        enabled,
                        group: target.group.clone(),
                        tools: changed.clone(),
                        by: by.to_string(),
                    })?;
                }
                changed_all.push(changed);
            }
            Ok(changed_all)
        })
    }

    /// How `tool` is switched for `agent_id`, if it ever was: what every tool call reads.
    pub fn tool_switch(&self, agent_id: &str, tool: &str) -> Result<Option<ToolSwitch>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(TOOL_SWITCH)?;
            Ok(stmt.query_row(params![agent_id, tool], switch_from_row).optional()?)
        })
    }

    /// The tools switched for `agent_id`, in the order they were last switched.
    pub fn tool_switches(&self, agent_id: &str) -> Result<Vec<ToolSwitch>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(TOOL_SWITCHES_OF_AGENT)?;
            let rows = stmt.query_map([agent_id], switch_from_row)?;
            let mut switches = rows.collect::<Result<Vec<_>, _>>()?;
            // Sorted here, not by SQL: the key's order needs no temporary B-tree.
            switches.sort_by(|a, b| (a.at, &a.tool).cmp(&(b.at, &b.tool)));
            Ok(switches)
        })
    }

    /// Every agent's switched tools (the catalog's listing).
    pub fn all_tool_switches(&self) -> Result<Vec<ToolSwitch>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT agent_id, tool, enabled, group_name, changed_by, changed_at
                 FROM tool_switches ORDER BY agent_id, changed_at, tool",
            )?;
            let rows = stmt.query_map([], switch_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}
