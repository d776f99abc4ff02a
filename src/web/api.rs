//! Routes of the HTTP API and their handlers.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::{ApiError, AppState};
use crate::support::{InvokeError, ToolHost};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/health", get(health))
        .route("/api/projects", get(projects))
        .route("/api/projects/{project}/tool-ui", get(tool_ui))
        .route("/api/projects/{project}/tool-ui/{pack}/{entry}", post(invoke_tool_ui))
        .route("/api/projects/{project}/tool-status", get(tool_status))
        .route("/api/projects/{project}/agents", get(agents))
        .route("/api/projects/{project}/messages", post(post_message))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
}

async fn health() -> Response {
    axum::Json(json!({ "ok": true, "version": crate::VERSION })).into_response()
}

/// The project named in the path; anything else (including traversal attempts) is a 404.
fn project<'a>(state: &'a AppState, name: &str) -> Result<&'a ToolHost, ApiError> {
    if state.tools.name() == name {
        Ok(&state.tools)
    } else {
        Err(ApiError::NotFound(format!("Unknown project: {name}")))
    }
}

async fn projects(State(state): State<AppState>) -> Result<Response, ApiError> {
    let p = state.tools.store.project().map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(axum::Json(json!([{ "name": p.name, "status": p.status, "task": p.task, "updatedAt": p.updated_at }]))
        .into_response())
}

async fn tool_ui(State(state): State<AppState>, Path(name): Path<String>) -> Result<Response, ApiError> {
    let host = project(&state, &name)?;
    Ok(axum::Json(host.webui_catalog()).into_response())
}

async fn invoke_tool_ui(
    State(state): State<AppState>,
    Path((name, pack, entry)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let host = project(&state, &name)?;
    let input = json_body(&headers, &body)?;
    let output = host.invoke_webui(&pack, &entry, input).await.map_err(to_api_error)?;
    Ok(axum::Json(output).into_response())
}

async fn tool_status(State(state): State<AppState>, Path(name): Path<String>) -> Result<Response, ApiError> {
    let host = project(&state, &name)?;
    Ok(axum::Json(host.tool_status().map_err(to_api_error)?).into_response())
}

async fn agents(State(state): State<AppState>, Path(name): Path<String>) -> Result<Response, ApiError> {
    let host = project(&state, &name)?;
    Ok(axum::Json(host.agents_view().map_err(to_api_error)?).into_response())
}

async fn post_message(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let host = project(&state, &name)?;
    let input = json_body(&headers, &body)?;
    let sent = host.post_message(&input).map_err(to_api_error)?;
    Ok((StatusCode::CREATED, axum::Json(sent)).into_response())
}

/// A JSON request body: empty means `{}`, anything but JSON is refused with the parser's reason.
fn json_body(headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json")));
    if !is_json {
        return Err(ApiError::UnsupportedMediaType);
    }
    serde_json::from_slice(body).map_err(|e| ApiError::BadRequest {
        message: format!("the request body is not valid JSON: {e}"),
        details: Vec::new(),
    })
}

fn to_api_error(e: InvokeError) -> ApiError {
    match e {
        InvokeError::UnknownPack(_) | InvokeError::UnknownEntry { .. } | InvokeError::UnknownTool { .. } => {
            ApiError::NotFound(e.to_string())
        }
        InvokeError::InvalidInput(errors) => ApiError::BadRequest {
            message: e_message(&errors),
            details: errors.iter().map(|x| json!({ "path": x.pointer, "message": x.message })).collect(),
        },
        InvokeError::Rejected(m) | InvokeError::Handler(m) => ApiError::Unprocessable(m),
        InvokeError::Internal(m) => ApiError::Internal(m),
    }
}

fn e_message(errors: &[crate::toolpack::schema::InputError]) -> String {
    format!("the input does not match the schema: {}", crate::support::describe_input_errors(errors))
}
