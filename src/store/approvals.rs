//! Durable approval requests and remembered permission rules: their rows, the activation's
//! `waiting_approval` status while one of its calls waits, and the events (`permission.decided`,
//! `approval.requested`, `approval.resolved`) written with each change.
//!
//! A request holds exactly the call that was asked about (tool and input), so allowing it runs
//! that call and nothing else. Resolving is one transaction that only a pending request passes:
//! the CLI, the API and the timeout can race, and exactly one of them decides. `consumed_at`
//! marks the request whose answer went back to the model: an activation resumed after a restart
//! adopts its unconsumed requests instead of asking again (each by its call: the model's id of
//! the call, `call_key`, with its tool and input), and never runs a consumed one twice. A request
//! whose call no one can continue after a restart is `expired` with the time of that restart,
//! and refused if someone tries to decide it.
//! This module records; it does not decide (that is `permissions`) and runs no tool.

use std::str::FromStr;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;
use serde_json::Value;

use chrono::{DateTime, Utc};

use crate::store::{
    ActivationRecord, Event, Store, StoreError, WriteTx, json_column, new_id, opt_time_column, time_column,
};

/// Where a request is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, strum::EnumString, strum::Display, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Allowed,
    Denied,
    /// Its activation ended first (a P0, a failure): nothing will run it.
    Cancelled,
    /// The call it asked for ended with the controller (a crash or a stop while it waited) and
    /// nothing can continue it: its caller had no model loop to resume (`suzumio tool call`, an
    /// MCP client), or its activation was running another call. Deciding it would run nothing.
    Expired,
}

/// Who `expire_pending_approvals` records as having ended a request.
const RESTART_RESOLVER: &str = "controller restart";

/// Why a request expired (its `resolutionReason`, and the text of refusing to decide it).
pub fn restart_reason(at: &str) -> String {
    format!("the call it asked for ended with the controller's restart at {at}")
}

/// How far a remembered decision reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, strum::EnumString, strum::Display, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RememberScope {
    /// The rest of this activation.
    Activation,
    /// Every later call of this agent.
    Agent,
    /// Every agent of the project.
    Project,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, strum::EnumString, strum::Display, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RuleDecision {
    Allow,
    Deny,
}

/// One approval request, input included (the person deciding must see what will run).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecord {
    pub id: String,
    pub agent_id: String,
    pub activation_id: String,
    /// The `tool_calls` row that waits on it (the latest, after a restart).
    pub tool_call_id: Option<String>,
    pub tool: String,
    pub input: Value,
    /// The decision that asked: `{behavior, source, reason, risk, code, categories, actions}`
    /// (the last three absent in requests of older builds).
    pub decision: Value,
    pub status: ApprovalStatus,
    #[serde(with = "crate::clock::iso_serde")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "crate::clock::iso_serde")]
    pub expires_at: DateTime<Utc>,
    #[serde(with = "crate::clock::iso_serde::option")]
    pub resolved_at: Option<DateTime<Utc>>,
    pub resolved_by: Option<String>,
    pub feedback: Option<String>,
    /// Why it was denied or cancelled when no person said (timeout, activation ended).
    pub resolution_reason: Option<String>,
    pub remember: Option<String>,
    #[serde(with = "crate::clock::iso_serde::option")]
    pub consumed_at: Option<DateTime<Utc>>,
    /// The call of a model turn it asks for (the model's tool-call id); none for a call from
    /// the CLI, an MCP client or the WebUI, which no one replays.
    pub call_key: Option<String>,
}

impl ApprovalRecord {
    pub fn reason(&self) -> &str {
        self.decision.get("reason").and_then(Value::as_str).unwrap_or_default()
    }

    pub fn risk(&self) -> &str {
        self.decision.get("risk").and_then(Value::as_str).unwrap_or_default()
    }
}

/// A request to record.
pub struct NewApproval<'a> {
    pub agent_id: &'a str,
    pub activation_id: &'a str,
    pub tool_call_id: Option<&'a str>,
    /// The model's id of the call in its turn (see [`ApprovalRecord::call_key`]).
    pub call_key: Option<&'a str>,
    pub tool: &'a str,
    pub input: &'a Value,
    /// `{behavior, source, reason, risk}` of the decision that asked.
    pub decision: Value,
    pub expires_at: String,
}

/// A person's (or the timeout's) answer to a pending request.
pub struct Resolution<'a> {
    pub allow: bool,
    /// Who decided: `cli (alice)`, `api`, `timeout`, `rule perm_…`.
    pub by: &'a str,
    pub feedback: Option<&'a str>,
    /// Also remember the decision for this tool at that scope (a rule with provenance).
    pub remember: Option<RememberScope>,
    /// Also decide every other pending request of the same activation ("allow all").
    pub whole_activation: bool,
}

/// A decision remembered from an approval, with its provenance. Applied with the same precedence
/// as configured rules (deny before allow).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RememberedRule {
    pub id: String,
    /// The exact tool name it covers.
    pub tool: String,
    pub decision: RuleDecision,
    pub scope: RememberScope,
    /// The agent (scope `agent` or `activation`).
    pub agent_id: Option<String>,
    /// The activation (scope `activation`).
    pub activation_id: Option<String>,
    pub created_by: String,
    #[serde(with = "crate::clock::iso_serde")]
    pub created_at: DateTime<Utc>,
    /// The approval request it was remembered from.
    pub request_id: Option<String>,
}

impl RememberedRule {
    /// Whether the rule covers a call of `tool` by `agent` in `activation`.
    pub fn applies_to(&self, agent: &str, activation: &str, tool: &str) -> bool {
        self.tool == tool
            && match self.scope {
                RememberScope::Project => true,
                RememberScope::Agent => self.agent_id.as_deref() == Some(agent),
                RememberScope::Activation => self.activation_id.as_deref() == Some(activation),
            }
    }
}

const APPROVAL_COLUMNS: &str = "id, agent_id, activation_id, tool_call_id, tool, input_json, decision_json, status, \
     created_at, expires_at, resolved_at, resolved_by, feedback, resolution_reason, remember, consumed_at, call_key";

const RULE_COLUMNS: &str = "id, tool, decision, scope, agent_id, activation_id, created_by, created_at, request_id";

// The statements an activation's calls run (`query_plans` holds each to a plan that does not
// grow with the history): each finds its rows through the activation, or the call's tool.

/// The request of one call that can be adopted, among the (few) of its activation: picked in
/// Rust (see `adoptable_approval`), so that no temporary B-tree orders them.
pub(super) fn adoptable_approvals() -> String {
    format!(
        "SELECT {APPROVAL_COLUMNS} FROM approval_requests
         WHERE activation_id = ?1 AND tool = ?2 AND input_json = ?3 AND consumed_at IS NULL
           AND status NOT IN ('cancelled', 'expired')
           AND (call_key IS NULL OR call_key = ?4)"
    )
}
/// An activation's pending requests (its end, a restart, `allow all`), oldest first.
pub(super) fn pending_of_activation() -> String {
    pending_approvals("activation_id = ?1")
}
/// The pending request of one call of a model turn, that a new ask supersedes.
pub(super) fn pending_of_call() -> String {
    pending_approvals("consumed_at IS NULL AND activation_id = ?1 AND call_key = ?2")
}
fn pending_approvals(filter: &str) -> String {
    format!(
        "SELECT {APPROVAL_COLUMNS} FROM approval_requests WHERE status = 'pending' AND {filter} ORDER BY created_at, id"
    )
}
pub(super) fn overdue_of_activation() -> String {
    format!(
        "SELECT {APPROVAL_COLUMNS} FROM approval_requests
         WHERE activation_id = ?1 AND status = 'pending' AND expires_at <= ?2 ORDER BY created_at, id"
    )
}
pub(super) fn approval_by_id() -> String {
    format!("SELECT {APPROVAL_COLUMNS} FROM approval_requests WHERE id = ?1")
}
pub(super) const ATTACH_APPROVAL: &str = "UPDATE approval_requests SET tool_call_id = ?2 WHERE id = ?1";
pub(super) const CONSUME_APPROVAL: &str =
    "UPDATE approval_requests SET consumed_at = ?2 WHERE id = ?1 AND consumed_at IS NULL";
pub(super) const DECIDE_APPROVAL: &str =
    "UPDATE approval_requests SET status = ?2, resolved_at = ?3, resolved_by = ?4, feedback = ?5,
                 resolution_reason = ?6, remember = ?7
             WHERE id = ?1";
pub(super) const ACTIVATION_STATUS: &str = "SELECT status FROM activations WHERE id = ?1";
pub(super) const SET_ACTIVATION_STATUS: &str = "UPDATE activations SET status = ?2 WHERE id = ?1";
/// The remembered rules that can decide a call of tool `?3` by agent `?1` in activation `?2`,
/// one index lookup per scope (rules remembered for past activations are never read). Ordered
/// in Rust, as `remembered_rules` orders them.
pub(super) fn rules_for_call() -> String {
    format!(
        "SELECT {RULE_COLUMNS} FROM permission_rules WHERE tool = ?3 AND scope = 'project'
         UNION ALL SELECT {RULE_COLUMNS} FROM permission_rules WHERE tool = ?3 AND scope = 'agent' AND agent_id = ?1
         UNION ALL SELECT {RULE_COLUMNS} FROM permission_rules
           WHERE activation_id = ?2 AND tool = ?3 AND scope = 'activation'"
    )
}

impl Store {
    /// Record a pending request (and the `ask` decision that made it). A call of a model turn
    /// has one pending request at most: one it had before with another input (a hook that
    /// changes the input differently on the resume) is cancelled in the same transaction.
    pub fn request_approval(&self, new: NewApproval<'_>) -> Result<ApprovalRecord, StoreError> {
        self.write(|w| {
            let id = new_id("apr");
            if let Some(key) = new.call_key {
                let superseded = format!("superseded by {id}: the same call asked again with another input");
                for old in pending_of(w.tx, &pending_of_call(), &[new.activation_id, key])? {
                    w.decide_approval(&old, ApprovalStatus::Cancelled, "controller", None, Some(&superseded), None)?;
                }
            }
            w.tx.execute(
                "INSERT INTO approval_requests (id, agent_id, activation_id, tool_call_id, tool, input_json,
                     decision_json, status, created_at, expires_at, call_key)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', ?8, ?9, ?10)",
                params![
                    id,
                    new.agent_id,
                    new.activation_id,
                    new.tool_call_id,
                    new.tool,
                    new.input.to_string(),
                    new.decision.to_string(),
                    w.now,
                    new.expires_at.as_str(),
                    new.call_key
                ],
            )?;
            let text = |key: &str| new.decision.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
            let list = |key: &str| -> Vec<String> {
                let items = new.decision.get(key).and_then(Value::as_array).into_iter().flatten();
                items.filter_map(Value::as_str).map(str::to_string).collect()
            };
            w.event(Event::PermissionDecided {
                agent_id: new.agent_id.into(),
                activation_id: new.activation_id.into(),
                tool_call_id: new.tool_call_id.map(str::to_string),
                tool: new.tool.into(),
                behavior: "ask".into(),
                source: text("source"),
                reason: text("reason"),
                risk: text("risk"),
                code: text("code"),
                categories: list("categories"),
                actions: list("actions"),
            })?;
            w.event(Event::ApprovalRequested {
                approval_id: id.clone(),
                agent_id: new.agent_id.into(),
                activation_id: new.activation_id.into(),
                tool: new.tool.into(),
                reason: text("reason"),
                risk: text("risk"),
                expires_at: new.expires_at.clone(),
            })?;
            approval_row(w.tx, &id)?.ok_or(StoreError::UnknownApproval(id))
        })
    }

    /// The request whose id is `id_or_prefix`, or the only one whose id starts with it (with
    /// or without the `apr_`), as `suzumio show` takes an activation's.
    pub fn resolve_approval_id(&self, id_or_prefix: &str) -> Result<String, StoreError> {
        let matches =
            self.read(|conn| Ok(super::ids_starting(conn, super::Shortened::ApprovalRequests, id_or_prefix)?))?;
        match matches.as_slice() {
            [] => Err(StoreError::UnknownApproval(id_or_prefix.to_string())),
            [one] => Ok(one.clone()),
            _ => Err(StoreError::AmbiguousApproval { prefix: id_or_prefix.to_string(), matches }),
        }
    }

    pub fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        self.read(|conn| Ok(approval_row(conn, id)?))
    }

    /// Requests, oldest first: only pending ones, or all (newest `limit`).
    pub fn approvals(&self, pending_only: bool, limit: usize) -> Result<Vec<ApprovalRecord>, StoreError> {
        let limit = limit.clamp(1, super::MAX_LIMIT) as i64;
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT * FROM (SELECT {APPROVAL_COLUMNS} FROM approval_requests
                   WHERE (?1 = 0 OR status = 'pending') ORDER BY created_at DESC, id DESC LIMIT ?2)
                 ORDER BY created_at, id"
            ))?;
            let rows = stmt.query_map(params![pending_only as i64, limit], approval_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The oldest request of `activation` for this exact call (tool and input) whose answer has
    /// not gone back to the model yet: asked before a restart, or announced with its turn. A
    /// call of a model turn (`call_key`, the model's id of the call) takes its own request, or
    /// one made without a key (before keys were recorded); a call without a key, one without.
    pub fn adoptable_approval(
        &self,
        activation_id: &str,
        call_key: Option<&str>,
        tool: &str,
        input: &Value,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let found: Vec<ApprovalRecord> = self.read(|conn| {
            let mut stmt = conn.prepare_cached(&adoptable_approvals())?;
            let rows = stmt.query_map(params![activation_id, tool, input.to_string(), call_key], approval_from_row)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })?;
        // Its own request (by key) first, then the oldest.
        Ok(found.into_iter().min_by(|a, b| {
            (a.call_key.is_none(), a.created_at, &a.id).cmp(&(b.call_key.is_none(), b.created_at, &b.id))
        }))
    }

    /// Pending requests of `activation` whose deadline has passed.
    pub fn overdue_approvals(&self, activation_id: &str) -> Result<Vec<ApprovalRecord>, StoreError> {
        let now = crate::clock::iso(self.now());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&overdue_of_activation())?;
            let rows = stmt.query_map(params![activation_id, now], approval_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The tool call that now waits on the request.
    pub fn attach_approval(&self, id: &str, tool_call_id: &str) -> Result<(), StoreError> {
        self.write(|w| {
            w.tx.execute(ATTACH_APPROVAL, params![id, tool_call_id])?;
            Ok(())
        })
    }

    /// The request's answer went back to the model (the call ran, or the denial was returned).
    pub fn consume_approval(&self, id: &str) -> Result<(), StoreError> {
        self.write(|w| {
            w.tx.execute(CONSUME_APPROVAL, params![id, w.now])?;
            Ok(())
        })
    }

    /// Allow or deny a pending request (and, with `whole_activation`, every other pending
    /// request of its activation); with `remember`, also record a rule for its tool and decide
    /// the other pending requests that rule covers. Returns the requests decided and the rule.
    pub fn resolve_approval(
        &self,
        id: &str,
        resolution: &Resolution<'_>,
    ) -> Result<(Vec<ApprovalRecord>, Option<RememberedRule>), StoreError> {
        self.write(|w| {
            let request = approval_row(w.tx, id)?.ok_or_else(|| StoreError::UnknownApproval(id.to_string()))?;
            if request.status == ApprovalStatus::Expired {
                let reason = request.resolution_reason.clone().unwrap_or_else(|| restart_reason("an unknown time"));
                return Err(StoreError::ApprovalExpired { id: id.to_string(), reason });
            }
            if request.status != ApprovalStatus::Pending {
                return Err(StoreError::ApprovalResolved { id: id.to_string(), status: request.status.to_string() });
            }
            let status = if resolution.allow { ApprovalStatus::Allowed } else { ApprovalStatus::Denied };
            let mut decided = vec![w.decide_approval(
                &request,
                status,
                resolution.by,
                resolution.feedback,
                None,
                resolution.remember,
            )?];
            if resolution.whole_activation {
                for other in pending_of(w.tx, &pending_of_activation(), &[&request.activation_id])? {
                    if other.id != request.id {
                        decided.push(w.decide_approval(
                            &other,
                            status,
                            resolution.by,
                            resolution.feedback,
                            None,
                            None,
                        )?);
                    }
                }
            }
            let Some(scope) = resolution.remember else { return Ok((decided, None)) };
            let rule = RememberedRule {
                id: new_id("perm"),
                tool: request.tool.clone(),
                decision: if resolution.allow { RuleDecision::Allow } else { RuleDecision::Deny },
                scope,
                agent_id: (scope != RememberScope::Project).then(|| request.agent_id.clone()),
                activation_id: (scope == RememberScope::Activation).then(|| request.activation_id.clone()),
                created_by: resolution.by.to_string(),
                created_at: w.at,
                request_id: Some(request.id.clone()),
            };
            w.tx.execute(
                &format!("INSERT INTO permission_rules ({RULE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
                params![
                    rule.id,
                    rule.tool,
                    <&str>::from(rule.decision),
                    <&str>::from(rule.scope),
                    rule.agent_id,
                    rule.activation_id,
                    rule.created_by,
                    w.now,
                    rule.request_id
                ],
            )?;
            let by = format!("rule {}", rule.id);
            for other in pending_of(w.tx, &pending_approvals("tool = ?1"), &[&request.tool])? {
                if rule.applies_to(&other.agent_id, &other.activation_id, &other.tool) {
                    decided.push(w.decide_approval(&other, status, &by, None, None, None)?);
                }
            }
            Ok((decided, Some(rule)))
        })
    }

    /// The pending requests of `activation_id` can no longer run: the controller that held
    /// its call stopped (a `tool call` or MCP call handed to a serving controller that died).
    /// They are `expired` as a restart would expire them, before the caller ends the activation.
    pub fn expire_approvals_of(&self, activation_id: &str) -> Result<(), StoreError> {
        self.write(|w| w.expire_pending_approvals(activation_id))
    }

    /// A pending request whose deadline passed is denied with `reason`; `None` when it was
    /// decided in the meantime.
    pub fn expire_approval(&self, id: &str, reason: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        self.write(|w| {
            let Some(request) = approval_row(w.tx, id)? else { return Ok(None) };
            if request.status != ApprovalStatus::Pending {
                return Ok(None);
            }
            Ok(Some(w.decide_approval(&request, ApprovalStatus::Denied, "timeout", None, Some(reason), None)?))
        })
    }

    /// Park a running activation (`waiting_approval`) or take it back to `running`.
    pub fn set_waiting_approval(&self, activation_id: &str, waiting: bool) -> Result<(), StoreError> {
        let (from, to) = if waiting { ("running", "waiting_approval") } else { ("waiting_approval", "running") };
        self.write(|w| {
            let status: Option<String> = w.tx.query_row(ACTIVATION_STATUS, [activation_id], |r| r.get(0)).optional()?;
            match status.as_deref() {
                None => Err(StoreError::UnknownActivation(activation_id.to_string())),
                Some(s) if s == to => Ok(()),
                Some(s) if s == from => {
                    w.tx.execute(SET_ACTIVATION_STATUS, params![activation_id, to])?;
                    Ok(())
                }
                Some(s) => Err(StoreError::ActivationNotRunning { id: activation_id.to_string(), status: s.into() }),
            }
        })
    }

    /// Activations a previous controller left parked (on an approval, or on a question to the
    /// user): each is resumed by the next run.
    pub fn parked_activations(&self) -> Result<Vec<ActivationRecord>, StoreError> {
        let ids: Vec<String> = self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id FROM activations WHERE status IN ('waiting_approval', 'waiting_user') ORDER BY started_at",
            )?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            Ok(rows.collect::<Result<Vec<String>, _>>()?)
        })?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.extend(self.activation(&id)?);
        }
        Ok(out)
    }

    /// Take a parked activation of a previous controller back to `running` for its resume: the
    /// tool call rows that waited are closed (the resume records the call again and adopts its
    /// request, so the call still runs at most once).
    pub fn reopen_parked(&self, activation_id: &str) -> Result<(), StoreError> {
        self.write(|w| {
            let agent: Option<String> = w
                .tx
                .query_row(
                    "SELECT agent_id FROM activations WHERE id = ?1 AND status IN ('waiting_approval', 'waiting_user')",
                    [activation_id],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(agent) = agent else {
                return Err(StoreError::ActivationNotRunning { id: activation_id.into(), status: "not parked".into() });
            };
            w.tx.execute("UPDATE activations SET status = 'running' WHERE id = ?1", [activation_id])?;
            w.close_open_tool_calls(
                activation_id,
                &agent,
                "the controller stopped while this call waited for approval; the resumed activation asks with the same request",
                "internal",
            )
        })
    }

    /// Remembered rules, oldest first: all of them, or those that can apply to `agent`.
    pub fn remembered_rules(&self, agent: Option<&str>) -> Result<Vec<RememberedRule>, StoreError> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {RULE_COLUMNS} FROM permission_rules
                 WHERE ?1 IS NULL OR scope = 'project' OR agent_id = ?1 ORDER BY created_at, id"
            ))?;
            let rows = stmt.query_map([agent], rule_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The remembered rules that can decide a call of `tool` by `agent` in `activation`
    /// (each [`RememberedRule::applies_to`] it), oldest first: what every call reads.
    pub fn rules_for_call(&self, agent: &str, activation: &str, tool: &str) -> Result<Vec<RememberedRule>, StoreError> {
        let mut rules: Vec<RememberedRule> = self.read(|conn| {
            let mut stmt = conn.prepare_cached(&rules_for_call())?;
            let rows = stmt.query_map(params![agent, activation, tool], rule_from_row)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })?;
        rules.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(rules)
    }

    pub fn delete_rule(&self, id: &str) -> Result<RememberedRule, StoreError> {
        self.write(|w| {
            let rule = w
                .tx
                .query_row(&format!("SELECT {RULE_COLUMNS} FROM permission_rules WHERE id = ?1"), [id], rule_from_row)
                .optional()?
                .ok_or_else(|| StoreError::UnknownRule(id.to_string()))?;
            w.tx.execute("DELETE FROM permission_rules WHERE id = ?1", [id])?;
            Ok(rule)
        })
    }
}

impl WriteTx<'_> {
    /// Pending requests of an activation whose call ended with a previous controller, found by
    /// this one at its start: `expired`, with the time of this restart. Runs before the
    /// activation is ended, so `cancel_pending_approvals` finds nothing left to cancel.
    pub(crate) fn expire_pending_approvals(&mut self, activation_id: &str) -> Result<(), StoreError> {
        let reason = restart_reason(&self.now);
        for request in pending_of(self.tx, &pending_of_activation(), &[activation_id])? {
            self.decide_approval(&request, ApprovalStatus::Expired, RESTART_RESOLVER, None, Some(&reason), None)?;
        }
        Ok(())
    }

    /// Pending requests of an activation that ended are cancelled: nothing will run them.
    pub(crate) fn cancel_pending_approvals(&mut self, activation_id: &str, reason: &str) -> Result<(), StoreError> {
        for request in pending_of(self.tx, &pending_of_activation(), &[activation_id])? {
            self.decide_approval(&request, ApprovalStatus::Cancelled, "controller", None, Some(reason), None)?;
        }
        Ok(())
    }

    fn decide_approval(
        &mut self,
        request: &ApprovalRecord,
        status: ApprovalStatus,
        by: &str,
        feedback: Option<&str>,
        reason: Option<&str>,
        remember: Option<RememberScope>,
    ) -> Result<ApprovalRecord, StoreError> {
        let remember = remember.map(<&str>::from);
        self.tx.execute(
            DECIDE_APPROVAL,
            params![request.id, <&str>::from(status), self.now, by, feedback, reason, remember],
        )?;
        self.event(Event::ApprovalResolved {
            approval_id: request.id.clone(),
            agent_id: request.agent_id.clone(),
            activation_id: request.activation_id.clone(),
            tool: request.tool.clone(),
            status: status.to_string(),
            resolved_by: by.to_string(),
            feedback: feedback.map(str::to_string),
            remember: remember.map(str::to_string),
        })?;
        approval_row(self.tx, &request.id)?.ok_or_else(|| StoreError::UnknownApproval(request.id.clone()))
    }
}

/// Pending requests that `sql` (one of the `pending_…` statements) selects, oldest first.
fn pending_of(conn: &Connection, sql: &str, values: &[&str]) -> Result<Vec<ApprovalRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(values), approval_from_row)?;
    Ok(rows.collect::<Result<Vec<_>, _>>()?)
}

fn approval_row(conn: &Connection, id: &str) -> rusqlite::Result<Option<ApprovalRecord>> {
    conn.query_row(&approval_by_id(), [id], approval_from_row).optional()
}

/// A text column holding one of a strum enum's names.
fn enum_column<T: FromStr>(r: &Row<'_>, index: usize) -> rusqlite::Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    let text: String = r.get(index)?;
    text.parse().map_err(|e| rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Text, Box::new(e)))
}

fn approval_from_row(r: &Row<'_>) -> rusqlite::Result<ApprovalRecord> {
    Ok(ApprovalRecord {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        activation_id: r.get(2)?,
        tool_call_id: r.get(3)?,
        tool: r.get(4)?,
        input: json_column(r, 5)?,
        decision: json_column(r, 6)?,
        status: enum_column(r, 7)?,
        created_at: time_column(r, 8)?,
        expires_at: time_column(r, 9)?,
        resolved_at: opt_time_column(r, 10)?,
        resolved_by: r.get(11)?,
        feedback: r.get(12)?,
        resolution_reason: r.get(13)?,
        remember: r.get(14)?,
        consumed_at: opt_time_column(r, 15)?,
        call_key: r.get(16)?,
    })
}

fn rule_from_row(r: &Row<'_>) -> rusqlite::Result<RememberedRule> {
    Ok(RememberedRule {
        id: r.get(0)?,
        tool: r.get(1)?,
        decision: enum_column(r, 2)?,
        scope: enum_column(r, 3)?,
        agent_id: r.get(4)?,
        activation_id: r.get(5)?,
        created_by: r.get(6)?,
        created_at: time_column(r, 7)?,
        request_id: r.get(8)?,
    })
}
