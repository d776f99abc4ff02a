//! The tool-switch routes: one agent's tools, with which are switched off, and switching a tool
//! (`PUT …/agents/{agent}/tools/{tool}`) or a group (`PUT …/agents/{agent}/tool-groups/{group}`)
//! off or back on with `{"enabled": bool}`. What may be switched, the store's record and the
//! audit line are `catalog::switch`'s; the agent's next request and call see it.

use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use serde::Deserialize;

use super::approvals::decider;
use super::body::JsonBody;
use super::extract::ProjectAgent;
use super::{ApiError, AppState};
use crate::catalog::{GROUP_PREFIX, SwitchError};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/projects/{project}/agents/{agent}/tools", get(agent_tools))
        .route("/api/projects/{project}/agents/{agent}/tools/{tool}", put(switch_tool))
        .route("/api/projects/{project}/agents/{agent}/tool-groups/{group}", put(switch_group))
}

/// `{"enabled": bool}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Switch {
    enabled: Option<bool>,
}

/// The agent's tools as the catalog shows them (`switchedOffFor` names the agent when it has
/// the tool switched off).
async fn agent_tools(at: ProjectAgent) -> Result<Response, ApiError> {
    let agent = at.config()?;
    let switches = at.host.store.tool_switches(&at.agent)?;
    let live = crate::permissions::live::Snapshot::read(&at.host.store)?;
    Ok(Json(crate::catalog::catalog_in(&at.host.project.snapshot(), Some(agent), &live, &switches)).into_response())
}

async fn switch_tool(
    at: ProjectAgent,
    axum::extract::Path((_, _, tool)): axum::extract::Path<(String, String, String)>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Switch>,
) -> Result<Response, ApiError> {
    switch(&at, tool, body, decider(&headers))
}

async fn switch_group(
    at: ProjectAgent,
    axum::extract::Path((_, _, group)): axum::extract::Path<(String, String, String)>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<Switch>,
) -> Result<Response, ApiError> {
    switch(&at, format!("{GROUP_PREFIX}{group}"), body, decider(&headers))
}

fn switch(at: &ProjectAgent, name: String, body: Switch, by: &str) -> Result<Response, ApiError> {
    let enabled = body.enabled.ok_or_else(|| ApiError::invalid_field("/enabled", "required: true or false"))?;
    let report = crate::catalog::switch(&at.host, &at.agent, &[name], enabled, by).map_err(|e| match e {
        SwitchError::UnknownAgent { .. } => ApiError::NotFound(e.to_string()),
        // A tool or group the agent does not have: the request names something that is not its.
        SwitchError::NotAllowed(message) => ApiError::NotFound(message),
        SwitchError::Store(e) => e.into(),
    })?;
    Ok(Json(report).into_response())
}
