//! Extractors for the path segments the API's routes share: `{project}` (the project this
//! controller serves; any other name, traversal attempts included, is a 404), `{agent}` (one of
//! its configured agents, else a 404) and `{id}`. A handler names what it needs in its
//! arguments instead of looking it up again.

use std::ops::Deref;
use std::sync::Arc;

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;

use super::{ApiError, AppState};
use crate::config::AgentConfig;
use crate::support::ToolHost;

/// The project named by the route's `{project}` segment.
pub(super) struct Project(pub Arc<ToolHost>);

impl Deref for Project {
    type Target = ToolHost;

    fn deref(&self) -> &ToolHost {
        &self.0
    }
}

impl FromRequestParts<AppState> for Project {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let name = segment(parts, state, "project").await?;
        if state.tools.name() == name {
            Ok(Project(state.tools.clone()))
        } else {
            Err(ApiError::NotFound(format!("Unknown project: {name}")))
        }
    }
}

/// The project of `{project}` and one of its configured agents, named by `{agent}`.
pub(super) struct ProjectAgent {
    pub host: Arc<ToolHost>,
    pub agent: String,
}

impl ProjectAgent {
    /// The agent's configuration.
    pub fn config(&self) -> Result<&AgentConfig, ApiError> {
        self.host.project.config.agent(&self.agent).ok_or_else(|| unknown_agent(&self.agent))
    }
}

impl FromRequestParts<AppState> for ProjectAgent {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Project(host) = Project::from_request_parts(parts, state).await?;
        let found = ProjectAgent { host, agent: segment(parts, state, "agent").await? };
        found.config()?;
        Ok(found)
    }
}

fn unknown_agent(agent: &str) -> ApiError {
    ApiError::NotFound(format!("Unknown agent: {agent}"))
}

/// The route's `{id}` segment (a message, activation, request, rule or command id).
pub(super) struct Id(pub String);

impl FromRequestParts<AppState> for Id {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(Id(segment(parts, state, "id").await?))
    }
}

/// A named segment of the matched route, percent-decoded.
async fn segment(parts: &mut Parts, state: &AppState, name: &str) -> Result<String, ApiError> {
    let params =
        RawPathParams::from_request_parts(parts, state).await.map_err(|e| ApiError::bad_request(e.body_text()))?;
    params
        .iter()
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
        // A route without the segment is a programming error, not the client's.
        .ok_or_else(|| ApiError::Internal(format!("the route has no `{{{name}}}` segment")))
}
