//! `suzumio approvals`: list pending approval requests, allow or deny one (or all of its
//! activation), and list or forget remembered rules. It writes to the project's store like
//! the API does; a running controller sees the decision within a second (the waiting call
//! looks at its request row, `permissions::approvals::POLL`).

use std::fmt::Write as _;
use std::path::Path;

use super::{CliError, Output};
use crate::clock::iso;
use crate::permissions::approvals::cli_user;
use crate::store::{ApprovalRecord, RememberScope, Resolution, StoreError};

/// `approvals list`: pending requests (or all, newest 200, with `all`).
pub fn list(dir: &Path, all: bool, json: bool) -> Result<Output, CliError> {
    let tools = crate::controller::open_read_only(dir)?;
    let requests = tools.store.approvals(!all, 200)?;
    if json {
        return Ok(format!("{}\n", serde_json::to_string_pretty(&requests).unwrap_or_default()).into());
    }
    if requests.is_empty() {
        return Ok(if all { "no approval requests\n" } else { "no pending approval requests\n" }.to_string().into());
    }
    let mut out = String::new();
    for r in &requests {
        let _ =
            writeln!(out, "{}  {}  {}  {}  risk {}  ({})", r.id, r.status, r.agent_id, r.tool, r.risk(), r.reason());
        let _ = writeln!(out, "    input {}", r.input);
        let _ = writeln!(
            out,
            "    activation {}, asked {}, expires {}",
            r.activation_id,
            iso(r.created_at),
            iso(r.expires_at)
        );
        if let Some(by) = &r.resolved_by {
            let feedback = r.feedback.as_deref().map(|f| format!(", feedback: {f}")).unwrap_or_default();
            let _ = writeln!(out, "    {} by {by}{feedback}", r.status);
        }
    }
    Ok(out.into())
}

/// `approvals allow|deny`: `id` may be any unique prefix of the request's id (with or without
/// `apr_`), as `show` takes an activation's.
pub fn resolve(
    dir: &Path,
    id: &str,
    allow: bool,
    remember: Option<RememberScope>,
    feedback: Option<&str>,
    whole_activation: bool,
) -> Result<Output, CliError> {
    let tools = crate::controller::open(dir)?;
    let by = cli_user();
    let resolution = Resolution { allow, by: &by, feedback, remember, whole_activation };
    let id = tools.store.resolve_approval_id(id).map_err(not_found)?;
    let (decided, rule) = tools.store.resolve_approval(&id, &resolution).map_err(not_found)?;
    let mut out = String::new();
    for r in &decided {
        let _ = writeln!(out, "{} {}: {} of {} ({})", r.status, r.id, r.tool, r.agent_id, r.activation_id);
    }
    if let Some(rule) = rule {
        let _ = writeln!(out, "remembered {}: {} {} for {} ({})", rule.id, rule.decision, rule.tool, rule.scope, by);
    }
    Ok(out.into())
}

/// `approvals rules`: the remembered rules with their provenance.
pub fn rules(dir: &Path, json: bool) -> Result<Output, CliError> {
    let tools = crate::controller::open_read_only(dir)?;
    let rules = tools.store.remembered_rules(None)?;
    if json {
        return Ok(format!("{}\n", serde_json::to_string_pretty(&rules).unwrap_or_default()).into());
    }
    if rules.is_empty() {
        return Ok("no remembered rules\n".to_string().into());
    }
    let mut out = String::new();
    for r in rules {
        let whose = r.activation_id.as_deref().or(r.agent_id.as_deref()).map(|w| format!(" {w}")).unwrap_or_default();
        let from = r.request_id.as_deref().map(|q| format!(", from {q}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "{}  {} {}  {}{whose}  (by {} at {}{from})",
            r.id,
            r.decision,
            r.tool,
            r.scope,
            r.created_by,
            iso(r.created_at)
        );
    }
    Ok(out.into())
}

/// `approvals forget <rule>`.
pub fn forget(dir: &Path, id: &str) -> Result<Output, CliError> {
    let tools = crate::controller::open(dir)?;
    let rule = tools.store.delete_rule(id).map_err(not_found)?;
    Ok(format!("forgot {}: {} {} for {}\n", rule.id, rule.decision, rule.tool, rule.scope).into())
}

/// The request ids and tools of `requests`, as `status` shows waiting calls.
pub fn waiting_line(r: &ApprovalRecord) -> String {
    format!("waiting for approval of {} (#{})", r.tool, r.id)
}

fn not_found(e: StoreError) -> CliError {
    match e {
        StoreError::UnknownApproval(_) => {
            CliError::Input(format!("{e} (suzumio approvals list shows the pending ones, with their ids)"))
        }
        StoreError::AmbiguousApproval { .. }
        | StoreError::UnknownRule(_)
        | StoreError::ApprovalResolved { .. }
        | StoreError::ApprovalExpired { .. } => CliError::Input(e.to_string()),
        other => other.into(),
    }
}
