//! The approvals routes: pending requests, allowing or denying one (or all of its activation)
//! with optional feedback and a remembered scope, the remembered rules (listed, deleted), and
//! what a person changes while the project runs: live rules (added, listed, removed) and an
//! agent's permission mode (switched, or back to its config's). What a decision does is the
//! store's (`Store::resolve_approval`); the parked call notices it on its own
//! (`permissions::approvals`); a live change is checked, stored and audited by
//! `permissions::live`, and the next tool call reads it. And the questions agents ask
//! (`ask_user`): listed, answered.
//!
//! Unlike other listings, a request shows its tool input: the person deciding must see exactly
//! what will run.

use axum::extract::Query;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::api::NoCursors;
use super::body::JsonBody;
use super::extract::{Id, Project, ProjectAgent};
use super::{ApiError, AppState};
use crate::permissions::approvals::{API_RESOLVER, WEBUI_RESOLVER};
use crate::permissions::live::{self, LiveError, RuleSpec};
use crate::store::{RememberScope, Resolution, StoreError};
use crate::support::ToolHost;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/projects/{project}/approvals", get(list))
        .route("/api/projects/{project}/approvals/{id}/allow", post(allow))
        .route("/api/projects/{project}/approvals/{id}/deny", post(deny))
        .route("/api/projects/{project}/permissions/rules", get(rules).post(add_rule))
        .route("/api/projects/{project}/permissions/rules/{id}", get(one_rule).delete(delete_rule))
        .route("/api/projects/{project}/agents/{agent}/permission-mode", put(set_mode).get(get_mode))
        .route("/api/projects/{project}/audit", get(audit))
        .route("/api/projects/{project}/questions", get(questions))
        .route("/api/projects/{project}/questions/{id}", get(one_question))
        .route("/api/projects/{project}/questions/{id}/answer", post(answer))
}

/// The questions agents asked (`ask_user`): the open ones, or all with `?all=true`.
async fn questions(host: Project, Query(q): Query<ListQuery>) -> Result<Response, ApiError> {
    NoCursors { before: q.before, after: q.after }.refuse("questions")?;
    Ok(Json(json!({ "questions": host.store.questions(!q.all, 200)? })).into_response())
}

async fn one_question(host: Project, Id(id): Id) -> Result<Response, ApiError> {
    let question = host.store.question(&id)?.ok_or_else(|| ApiError::NotFound(format!("Unknown question: {id}")))?;
    Ok(Json(question).into_response())
}

/// `{answer?: text, choice?: number from 1}`: one of the choices (by text or number) when the
/// question has choices, any text otherwise.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct AnswerBody {
    answer: Option<String>,
    choice: Option<u32>,
}

async fn answer(
    host: Project,
    Id(id): Id,
    headers: HeaderMap,
    JsonBody(body): JsonBody<AnswerBody>,
) -> Result<Response, ApiError> {
    let by = decider(&headers);
    let answer = crate::store::Answer { text: body.answer.as_deref(), choice: body.choice, by };
    let answered = host.store.answer_question(&id, &answer).map_err(|e| match e {
        StoreError::UnknownQuestion(_) => ApiError::NotFound(e.to_string()),
        StoreError::QuestionClosed { .. } => ApiError::Conflict(e.to_string()),
        StoreError::BadAnswer { field, ref reason, .. } => ApiError::invalid_field(field, reason),
        other => other.into(),
    })?;
    Ok(Json(json!({ "answered": answered })).into_response())
}

/// `?agent=&since=&limit=`: `since` an RFC 3339 time or a duration back (`2h`, `30m`).
#[derive(Deserialize)]
struct AuditParams {
    agent: Option<String>,
    since: Option<String>,
    limit: Option<String>,
    #[serde(flatten)]
    cursors: NoCursors,
}

/// The permission audit trail (`.suzumio/audit/permissions.jsonl`, arguments already redacted
/// when written): its newest `limit` entries (default 500, at most 5 000), oldest first.
async fn audit(host: Project, Query(q): Query<AuditParams>) -> Result<Response, ApiError> {
    q.cursors.refuse("audit entries")?;
    let since = match q.since.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => Some(match chrono::DateTime::parse_from_rfc3339(text) {
            Ok(t) => t.with_timezone(&chrono::Utc),
            Err(_) => {
                let ago = humantime::parse_duration(text).map_err(|_| {
                    ApiError::bad_request(format!(
                        "since must be an RFC 3339 time or a duration (2h, 30m), got `{text}`"
                    ))
                })?;
                host.store.now() - chrono::Duration::from_std(ago).unwrap_or(chrono::Duration::MAX)
            }
        }),
    };
    let limit = match q.limit.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        None => 500,
        Some(text) => text
            .parse::<usize>()
            .map(|n| n.clamp(1, 5_000))
            .map_err(|_| ApiError::bad_request(format!("limit must be a whole number, got `{text}`")))?,
    };
    let query = crate::permissions::audit::AuditQuery { agent: q.agent.filter(|a| !a.is_empty()), since };
    let root = host.project.config.root.clone();
    let mut entries = tokio::task::spawn_blocking(move || crate::permissions::audit::read(&root, &query))
        .await
        .map_err(|e| ApiError::Internal(format!("reading the permission audit: {e}")))?
        .map_err(|e| ApiError::Internal(format!("reading the permission audit: {e}")))?;
    let total = entries.len();
    entries.drain(..total.saturating_sub(limit));
    Ok(Json(json!({ "entries": entries, "total": total })).into_response())
}

#[derive(Deserialize)]
struct ListQuery {
    /// Decided requests too (newest first within the limit).
    #[serde(default)]
    all: bool,
    before: Option<String>,
    after: Option<String>,
}

async fn list(host: Project, Query(q): Query<ListQuery>) -> Result<Response, ApiError> {
    NoCursors { before: q.before, after: q.after }.refuse("approval requests")?;
    let approvals = host.store.approvals(!q.all, 200)?;
    Ok(Json(json!({ "approvals": approvals })).into_response())
}

/// `{remember?: "activation"|"agent"|"project", feedback?, allOfActivation?}`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Decide {
    remember: Option<String>,
    feedback: Option<String>,
    #[serde(default)]
    all_of_activation: bool,
}

async fn allow(
    host: Project,
    Id(id): Id,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Decide>,
) -> Result<Response, ApiError> {
    decide(&host, &id, body, decider(&headers), true)
}

async fn deny(
    host: Project,
    Id(id): Id,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Decide>,
) -> Result<Response, ApiError> {
    decide(&host, &id, body, decider(&headers), false)
}

/// The header the WebUI sends with its requests (`X-Suzumio-Client: webui`).
const CLIENT_HEADER: &str = "x-suzumio-client";

/// Who a decision is recorded as made by: `webui` for the WebUI's own page, `api` for any other
/// client. A label, not a credential: who may decide at all is the guard's (token, `Host`,
/// `Origin`), and any client it lets through may decide under either name.
pub(super) fn decider(headers: &HeaderMap) -> &'static str {
    match headers.get(CLIENT_HEADER).and_then(|v| v.to_str().ok()) {
        Some(WEBUI_RESOLVER) => WEBUI_RESOLVER,
        _ => API_RESOLVER,
    }
}

fn decide(host: &ToolHost, id: &str, body: Decide, by: &str, allow: bool) -> Result<Response, ApiError> {
    let remember = match body.remember.as_deref().filter(|r| !r.is_empty()) {
        None => None,
        Some(text) => Some(
            text.parse::<RememberScope>()
                .map_err(|_| ApiError::invalid_field("/remember", "must be one of activation, agent, project"))?,
        ),
    };
    let feedback = body.feedback.as_deref().map(str::trim).filter(|f| !f.is_empty());
    let resolution = Resolution { allow, by, feedback, remember, whole_activation: body.all_of_activation };
    let (decided, rule) = host.store.resolve_approval(id, &resolution).map_err(not_found)?;
    Ok(Json(json!({ "decided": decided, "rule": rule })).into_response())
}

/// The remembered rules (`rules`), the live ones (`liveRules`, each with its `source` as
/// decisions name it) and the agents' modes in force (`modes`).
async fn rules(host: Project, Query(q): Query<NoCursors>) -> Result<Response, ApiError> {
    q.refuse("permission rules")?;
    let snapshot = live::Snapshot::read(&host.store)?;
    let live_rules: Vec<serde_json::Value> = snapshot.rules.iter().map(live_view).collect();
    let modes: Vec<serde_json::Value> =
        host.project.config.agents.iter().map(|a| mode_view(a, snapshot.override_of(&a.id))).collect();
    Ok(Json(json!({ "rules": host.store.remembered_rules(None)?, "liveRules": live_rules, "modes": modes }))
        .into_response())
}

/// A live rule's id is a number; a remembered rule's `perm_…`.
fn live_id(id: &str) -> Option<i64> {
    id.parse().ok().filter(|_| id.bytes().all(|b| b.is_ascii_digit()))
}

fn live_view(rule: &crate::store::LiveRule) -> serde_json::Value {
    let mut value = serde_json::to_value(rule).unwrap_or_default();
    if let Some(o) = value.as_object_mut() {
        o.insert("source".into(), json!(live::source_of(rule)));
    }
    value
}

fn mode_view(agent: &crate::config::AgentConfig, set: Option<&crate::store::ModeOverride>) -> serde_json::Value {
    json!({
        "agent": agent.id,
        "mode": set.map_or(agent.permission_mode.as_str(), |o| o.mode.as_str()),
        "configMode": agent.permission_mode.as_str(),
        "live": set.is_some(),
        "setBy": set.map(|o| o.set_by.clone()),
        "setAt": set.map(|o| crate::clock::iso(o.set_at)),
    })
}

async fn one_rule(host: Project, Id(id): Id) -> Result<Response, ApiError> {
    if let Some(n) = live_id(&id) {
        let rule = host.store.live_rules(None)?.into_iter().find(|r| r.id == n);
        return rule
            .map(|r| Json(live_view(&r)).into_response())
            .ok_or_else(|| ApiError::NotFound(format!("Unknown permission rule: {id}")));
    }
    let rule = host.store.remembered_rules(None)?.into_iter().find(|r| r.id == id);
    rule.map(|r| Json(r).into_response()).ok_or_else(|| ApiError::NotFound(format!("Unknown permission rule: {id}")))
}

async fn delete_rule(host: Project, Id(id): Id, headers: HeaderMap) -> Result<Response, ApiError> {
    if live_id(&id).is_some() {
        let rule = live::remove(&host.store, &host.audit, &id, decider(&headers)).map_err(live_error)?;
        return Ok(Json(json!({ "deleted": live_view(&rule) })).into_response());
    }
    let rule = host.store.delete_rule(&id).map_err(not_found)?;
    Ok(Json(json!({ "deleted": rule })).into_response())
}

/// `POST permissions/rules`: `{agent?, tool, decision, paths?, commands?, hosts?, reason?}`, as
/// `suzumio permissions add` takes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewRule {
    agent: Option<String>,
    tool: Option<String>,
    decision: Option<String>,
    paths: Option<Vec<String>>,
    commands: Option<Vec<String>>,
    hosts: Option<Vec<String>>,
    reason: Option<String>,
}

async fn add_rule(host: Project, headers: HeaderMap, JsonBody(body): JsonBody<NewRule>) -> Result<Response, ApiError> {
    let spec = RuleSpec {
        agent: body.agent,
        tool: super::body::required(body.tool, "tool")?,
        decision: super::body::required(body.decision, "decision")?,
        paths: body.paths,
        commands: body.commands,
        hosts: body.hosts,
        reason: body.reason,
    };
    let project = host.project.snapshot();
    let rule = live::add(&project, &host.store, &host.audit, spec, decider(&headers)).map_err(live_error)?;
    Ok((StatusCode::CREATED, Json(json!({ "rule": live_view(&rule) }))).into_response())
}

/// `PUT agents/:a/permission-mode`: `{mode: "default"|"auto"|"full-access"}`, or `{mode: null}`
/// (or `"config"`) for the agent's mode in suzumio.yaml.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetMode {
    #[serde(default)]
    mode: Option<String>,
}

async fn set_mode(
    of: ProjectAgent,
    headers: HeaderMap,
    JsonBody(body): JsonBody<SetMode>,
) -> Result<Response, ApiError> {
    let project = of.host.project.snapshot();
    let by = decider(&headers);
    let change = live::set_mode(&project, &of.host.store, &of.host.audit, &of.agent, body.mode.as_deref(), by)
        .map_err(live_error)?;
    Ok(Json(change).into_response())
}

async fn get_mode(of: ProjectAgent) -> Result<Response, ApiError> {
    let set = of.host.store.permission_mode_override(&of.agent)?;
    Ok(Json(mode_view(of.config()?, set.as_ref())).into_response())
}

/// A refused change is a 400 naming each bad field of the body as a JSON pointer; an unknown
/// rule a 404.
fn live_error(e: LiveError) -> ApiError {
    match e {
        LiveError::Invalid(problems) => {
            let each: Vec<String> =
                problems.iter().map(|(at, m)| if at.is_empty() { m.clone() } else { format!("{at}: {m}") }).collect();
            let message = format!("the request body is invalid: {}", each.join("; "));
            let details = problems.into_iter().map(|(path, message)| super::ErrorDetail { path, message }).collect();
            ApiError::BadRequest { message, details }
        }
        LiveError::UnknownRule(_) => ApiError::NotFound(e.to_string()),
        LiveError::Store(s) => s.into(),
    }
}

/// An unknown id is a 404, a request decided already a 409-like 422 with the store's text, and
/// a request that expired with a restart a 409: its call is gone, so no decision can apply.
fn not_found(e: StoreError) -> ApiError {
    match e {
        StoreError::UnknownApproval(_) | StoreError::UnknownRule(_) => ApiError::NotFound(e.to_string()),
        StoreError::ApprovalExpired { .. } => ApiError::Conflict(e.to_string()),
        other => other.into(),
    }
}
