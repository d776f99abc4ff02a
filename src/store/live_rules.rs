//! Live permission rules and permission-mode overrides: what a person adds, removes or switches
//! while the project runs (`suzumio permissions add|rm|mode`, the API, the WebUI), with who did
//! it and when, and an event for each change (`permission.rule_added`, `permission.rule_removed`,
//! `permission.mode_changed`) in the same transaction.
//!
//! The rows are the shared state of every process of the project: the CLI writes them whether or
//! not `suzumio run` serves the project, and the controller reads them at each tool call, so a
//! change takes effect from the agent's next call. A rule's id is never reused (AUTOINCREMENT),
//! so `live rule 3` in an audit line always names the same rule. This module records; what a rule
//! may say, and what it decides, is `permissions`'.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Row, params};
use serde::Serialize;

use crate::store::{Event, Store, StoreError, time_column};

/// One live rule, as stored. `agent_id` None: it applies to every agent.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveRule {
    pub id: i64,
    pub agent_id: Option<String>,
    /// The tool pattern (`file.write`, `file.*`, `*`).
    pub tool: String,
    /// `allow`, `ask` or `deny`.
    pub decision: String,
    pub paths: Vec<String>,
    pub commands: Vec<String>,
    pub hosts: Vec<String>,
    pub reason: Option<String>,
    /// `cli (<OS user>)`, `webui` or `api`.
    pub created_by: String,
    #[serde(with = "crate::clock::iso_serde")]
    pub created_at: DateTime<Utc>,
}

/// A rule to add (already checked by `permissions::live`).
pub struct NewLiveRule<'a> {
    pub agent_id: Option<&'a str>,
    pub tool: &'a str,
    pub decision: &'a str,
    pub paths: &'a [String],
    pub commands: &'a [String],
    pub hosts: &'a [String],
    pub reason: Option<&'a str>,
    pub by: &'a str,
}

/// An agent's permission mode set at run time, over its config's `permissionMode`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModeOverride {
    pub agent_id: String,
    /// `default`, `auto` or `full-access`.
    pub mode: String,
    pub set_by: String,
    #[serde(with = "crate::clock::iso_serde")]
    pub set_at: DateTime<Utc>,
}

const LIVE_RULE_COLUMNS: &str =
    "id, agent_id, tool, decision, paths_json, commands_json, hosts_json, reason, created_by, created_at";

/// The rules that can decide a call of agent `?1`: the project's (agent `''`) and the agent's,
/// one index lookup each. Ordered in Rust (by id).
pub(super) fn live_rules_for_call() -> String {
    format!(
        "SELECT {LIVE_RULE_COLUMNS} FROM live_permission_rules WHERE agent_id = ''
         UNION ALL SELECT {LIVE_RULE_COLUMNS} FROM live_permission_rules WHERE agent_id = ?1"
    )
}

/// The agent's mode override, by its key.
pub(super) const MODE_OVERRIDE: &str =
    "SELECT agent_id, mode, set_by, set_at FROM permission_mode_overrides WHERE agent_id = ?1";

impl Store {
    /// Store a live rule and its `permission.rule_added` event.
    pub fn add_live_rule(&self, new: &NewLiveRule<'_>) -> Result<LiveRule, StoreError> {
        let list = |items: &[String]| serde_json::to_string(items).unwrap_or_else(|_| "[]".into());
        self.write(|w| {
            w.tx.execute(
                "INSERT INTO live_permission_rules (agent_id, tool, decision, paths_json, commands_json, hosts_json,
                                                    reason, created_by, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    new.agent_id.unwrap_or_default(),
                    new.tool,
                    new.decision,
                    list(new.paths),
                    list(new.commands),
                    list(new.hosts),
                    new.reason,
                    new.by,
                    w.now
                ],
            )?;
            let id = w.tx.last_insert_rowid();
            let rule =
                w.tx.query_row(
                    &format!("SELECT {LIVE_RULE_COLUMNS} FROM live_permission_rules WHERE id = ?1"),
                    [id],
                    live_rule_from_row,
                )
                .map_err(StoreError::from)?;
            w.event(Event::PermissionRuleAdded {
                rule_id: id,
                agent_id: rule.agent_id.clone(),
                tool: rule.tool.clone(),
                decision: rule.decision.clone(),
                by: rule.created_by.clone(),
            })?;
            Ok(rule)
        })
    }

    /// Remove a live rule (by `by`), with its `permission.rule_removed` event.
    pub fn remove_live_rule(&self, id: i64, by: &str) -> Result<LiveRule, StoreError> {
        self.write(|w| {
            let rule =
                w.tx.query_row(
                    &format!("SELECT {LIVE_RULE_COLUMNS} FROM live_permission_rules WHERE id = ?1"),
                    [id],
                    live_rule_from_row,
                )
                .optional()?
                .ok_or_else(|| StoreError::UnknownRule(id.to_string()))?;
            w.tx.execute("DELETE FROM live_permission_rules WHERE id = ?1", [id])?;
            w.event(Event::PermissionRuleRemoved {
                rule_id: id,
                agent_id: rule.agent_id.clone(),
                tool: rule.tool.clone(),
                decision: rule.decision.clone(),
                by: by.to_string(),
            })?;
            Ok(rule)
        })
    }

    /// Every live rule, oldest first, or those that can apply to `agent` (its own and the
    /// project's).
    pub fn live_rules(&self, agent: Option<&str>) -> Result<Vec<LiveRule>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {LIVE_RULE_COLUMNS} FROM live_permission_rules
                 WHERE ?1 IS NULL OR agent_id = '' OR agent_id = ?1 ORDER BY id"
            ))?;
            let rows = stmt.query_map([agent], live_rule_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The live rules that can decide a call of `agent` (the project's and its own), oldest
    /// first: what every tool call reads.
    pub fn live_rules_for_call(&self, agent: &str) -> Result<Vec<LiveRule>, StoreError> {
        let mut rules: Vec<LiveRule> = self.read(|conn| {
            let mut stmt = conn.prepare_cached(&live_rules_for_call())?;
            let rows = stmt.query_map([agent], live_rule_from_row)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })?;
        rules.sort_by_key(|r| r.id);
        Ok(rules)
    }

    /// Set (`Some`) or clear (`None`: back to the config's) the permission mode of `agent`, with
    /// a `permission.mode_changed` event that says what it was before (`previous`, None: the
    /// config's mode was in force). `config_mode` is the agent's configured mode, for the event.
    pub fn set_permission_mode(
        &self,
        agent: &str,
        mode: Option<&str>,
        config_mode: &str,
        by: &str,
    ) -> Result<Option<ModeOverride>, StoreError> {
        self.write(|w| {
            let previous = w.tx.query_row(MODE_OVERRIDE, [agent], mode_from_row).optional()?;
            match mode {
                Some(mode) => {
                    w.tx.execute(
                        "INSERT INTO permission_mode_overrides (agent_id, mode, set_by, set_at) VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT (agent_id) DO UPDATE SET mode = ?2, set_by = ?3, set_at = ?4",
                        params![agent, mode, by, w.now],
                    )?;
                }
                None => {
                    w.tx.execute("DELETE FROM permission_mode_overrides WHERE agent_id = ?1", [agent])?;
                }
            }
            let was = previous.as_ref().map_or(config_mode, |p| p.mode.as_str());
            w.event(Event::PermissionModeChanged {
                agent_id: agent.to_string(),
                mode: mode.unwrap_or(config_mode).to_string(),
                previous: was.to_string(),
                live: mode.is_some(),
                by: by.to_string(),
            })?;
            Ok(previous)
        })
    }

    /// The agent's mode override, if one is set: what every tool call reads.
    pub fn permission_mode_override(&self, agent: &str) -> Result<Option<ModeOverride>, StoreError> {
        self.read(|conn| Ok(conn.prepare_cached(MODE_OVERRIDE)?.query_row([agent], mode_from_row).optional()?))
    }

    /// Every mode override, by agent.
    pub fn permission_mode_overrides(&self) -> Result<Vec<ModeOverride>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT agent_id, mode, set_by, set_at FROM permission_mode_overrides ORDER BY agent_id",
            )?;
            let rows = stmt.query_map([], mode_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

fn list_column(r: &Row<'_>, index: usize) -> rusqlite::Result<Vec<String>> {
    let text: String = r.get(index)?;
    serde_json::from_str(&text)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(e)))
}

fn live_rule_from_row(r: &Row<'_>) -> rusqlite::Result<LiveRule> {
    let agent: String = r.get(1)?;
    Ok(LiveRule {
        id: r.get(0)?,
        agent_id: Some(agent).filter(|a| !a.is_empty()),
        tool: r.get(2)?,
        decision: r.get(3)?,
        paths: list_column(r, 4)?,
        commands: list_column(r, 5)?,
        hosts: list_column(r, 6)?,
        reason: r.get(7)?,
        created_by: r.get(8)?,
        created_at: time_column(r, 9)?,
    })
}

fn mode_from_row(r: &Row<'_>) -> rusqlite::Result<ModeOverride> {
    Ok(ModeOverride { agent_id: r.get(0)?, mode: r.get(1)?, set_by: r.get(2)?, set_at: time_column(r, 3)? })
}
