//! Routes of the HTTP API and their handlers.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;

use super::body::{self, JsonBody, JsonInput};
use super::extract::{Id, Project, ProjectAgent};
use super::stream::Full;
use super::{ApiError, AppState, views};
use crate::store::{Listing, ProjectStatus, SendMessage, ToolCallSummary};
use crate::support::ToolHost;
use crate::toolpack::redact::redact_secrets;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/health", get(health))
        .route("/api/projects", get(projects))
        .route("/api/event-types", get(event_types))
        .route("/api/projects/{project}/tool-ui", get(tool_ui))
        .route("/api/projects/{project}/tool-ui/{pack}/{entry}", post(invoke_tool_ui))
        .route("/api/projects/{project}/tool-status", get(tool_status))
        .route("/api/projects/{project}/tools", get(tool_catalog))
        .route("/api/projects/{project}/agents", get(agents))
        .route("/api/projects/{project}/messages", post(post_message).get(list_messages))
        .route("/api/projects/{project}", get(summary))
        .route("/api/projects/{project}/task", get(task))
        .route("/api/projects/{project}/messages/{id}", get(one_message))
        .route("/api/projects/{project}/agents/{agent}/history", get(history))
        .route("/api/projects/{project}/agents/{agent}/resume", post(resume_agent))
        .route("/api/projects/{project}/agents/{agent}/commands", get(background_commands))
        .route("/api/projects/{project}/agents/{agent}/commands/{id}/stop", post(stop_background_command))
        .route("/api/projects/{project}/events", get(events))
        .route("/api/projects/{project}/stream", get(stream))
        .route("/api/projects/{project}/activations", get(activations))
        .route("/api/projects/{project}/activations/{id}", get(one_activation))
        .route("/api/projects/{project}/activations/{id}/context", get(activation_context))
        .route("/api/projects/{project}/activations/{id}/timeline", get(activation_timeline))
        .route("/api/projects/{project}/message-graph", get(message_graph))
        .route("/api/projects/{project}/agents/{agent}/history-archive/{id}", get(history_archive))
        .route("/api/projects/{project}/config/resolved", get(config))
        .route("/api/projects/{project}/tool-calls", get(tool_calls))
        .route("/api/projects/{project}/signals", get(signals))
        .route("/api/projects/{project}/config", get(config))
        .route("/api/projects/{project}/report", get(report))
        .route("/api/projects/{project}/start", post(start))
        .route("/api/projects/{project}/stop", post(stop))
        .route("/api/projects/{project}/approve", post(approve))
        .route("/api/projects/{project}/request-changes", post(request_changes))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
}

async fn health() -> Json<views::Health> {
    Json(views::Health { ok: true, version: crate::VERSION })
}

/// Every event type and how a reader of the timeline treats it: the WebUI's one list of them.
async fn event_types() -> Json<views::EventTypes> {
    Json(views::EventTypes { types: crate::store::EVENT_TYPES })
}

async fn projects(State(state): State<AppState>, Query(q): Query<NoCursors>) -> Result<Response, ApiError> {
    q.refuse("projects")?;
    let p = state.tools.store.project()?;
    Ok(Json([views::ProjectItem::from(&p)]).into_response())
}

async fn tool_ui(host: Project) -> Result<Response, ApiError> {
    Ok(Json(views::webui_catalog(&host)).into_response())
}

async fn invoke_tool_ui(
    host: Project,
    Path((_, pack, entry)): Path<(String, String, String)>,
    JsonInput(input): JsonInput,
) -> Result<Response, ApiError> {
    let output = host.invoke_webui(&pack, &entry, input).await?;
    Ok(Json(output).into_response())
}

async fn tool_status(host: Project) -> Result<Response, ApiError> {
    Ok(Json(views::tool_status(&host)?).into_response())
}

/// The tool catalog (`suzumio tools --json` has the same shape).
async fn tool_catalog(host: Project) -> Result<Response, ApiError> {
    let switches = host.store.all_tool_switches()?;
    let live = crate::permissions::live::Snapshot::read(&host.store)?;
    Ok(Json(crate::catalog::catalog_in(&host.project.snapshot(), None, &live, &switches)).into_response())
}

async fn agents(host: Project, Query(q): Query<NoCursors>) -> Result<Response, ApiError> {
    q.refuse("agents")?;
    Ok(Json(views::agents(&host)?).into_response())
}

async fn post_message(host: Project, JsonBody(m): JsonBody<body::PostMessage>) -> Result<Response, ApiError> {
    let text = body::required(m.body, "body")?;
    let sent = host.post_message(SendMessage {
        sender: m.sender.unwrap_or_else(|| "user".into()),
        recipient: m.recipient,
        channel: m.channel,
        priority: m.priority,
        body: text,
        source_agent: None,
        source_activation: None,
    })?;
    Ok((StatusCode::CREATED, Json(sent)).into_response())
}

/// `?limit=&before=&after=&agent=&status=&tool=` of list routes.
/// The query of every list route, as text: each value is parsed here so that a bad one is a
/// 400 that names the parameter (an unknown cursor included), not a generic rejection.
///
/// Cursors, the same on every list: a list paged back in time (messages, signals, tool calls,
/// activations, history) takes `before=<next>`, an opaque id of that list (`msg_…`); the events
/// (and the stream) page forward with `after=<next>`, an event id (a number). A cursor is
/// refused with a 400 naming it when it is malformed (not an id of that list), unknown (an id of
/// that list naming no row; for events, past the newest event), or the other direction's (a
/// list never silently ignores a cursor). Lists that are not paged refuse both
/// ([`refuse_cursors`]).
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    limit: Option<String>,
    before: Option<String>,
    after: Option<String>,
    agent: Option<String>,
    status: Option<String>,
    tool: Option<String>,
}

/// What a list paged by an id cursor calls its rows, and the prefix of their ids.
fn id_shape(listing: Listing) -> (&'static str, &'static str) {
    match listing {
        Listing::Messages => ("messages", "msg"),
        Listing::Signals => ("signals", "sig"),
        Listing::ToolCalls => ("tool calls", "tc"),
        Listing::Activations => ("activations", "act"),
        Listing::History => ("history entries", "his"),
    }
}

/// An id the store could have made with `prefix`: `<prefix>_` and then letters, digits, `_`, `-`.
fn well_formed(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix).and_then(|rest| rest.strip_prefix('_')).is_some_and(|rest| {
        !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

/// A cursor given, empty counting as none.
fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// The cursors of a list that is not paged (it returns all of what it lists, or its newest
/// `limit`): any `before` or `after` is refused rather than ignored.
#[derive(Debug, Default, Deserialize)]
pub struct NoCursors {
    pub(super) before: Option<String>,
    pub(super) after: Option<String>,
}

impl NoCursors {
    /// `list` names what the route lists (`approval requests`).
    pub fn refuse(&self, list: &str) -> Result<(), ApiError> {
        for (name, value) in [("before", &self.before), ("after", &self.after)] {
            if let Some(value) = given(value) {
                return Err(ApiError::bad_request(format!(
                    "unsupported cursor {name}={value}: {list} are not paged, so this list takes no `before` or \
                     `after`; drop the parameter"
                )));
            }
        }
        Ok(())
    }
}

impl ListQuery {
    /// `limit`, defaulting to `default` and clamped to 1..=`max`.
    fn limit(&self, default: usize, max: usize) -> Result<usize, ApiError> {
        match self.limit.as_deref().map(str::trim) {
            None | Some("") => Ok(default),
            Some(text) => text
                .parse::<usize>()
                .map(|n| n.clamp(1, max))
                .map_err(|_| ApiError::bad_request(format!("limit must be a whole number, got `{text}`"))),
        }
    }

    /// `before`, which must be the id of a row of `listing` (the `next` of an earlier page);
    /// these lists page back in time only, so an `after` is refused.
    fn before(&self, host: &ToolHost, listing: Listing) -> Result<Option<String>, ApiError> {
        let (rows, prefix) = id_shape(listing);
        if let Some(after) = given(&self.after) {
            return Err(ApiError::bad_request(format!(
                "unsupported cursor after={after}: {rows} page back in time, newest first; \
                 pass before=<next> of an earlier page instead"
            )));
        }
        let Some(id) = given(&self.before) else { return Ok(None) };
        if !well_formed(id, prefix) {
            return Err(ApiError::bad_request(format!(
                "malformed cursor before={id}: the ids of {rows} look like {prefix}_…; \
                 use the `next` of an earlier page of this list"
            )));
        }
        if !host.store.has_id(listing, id)? {
            return Err(ApiError::bad_request(format!(
                "unknown cursor before={id}: none of the {rows} has this id; use the `next` of an earlier page of this list"
            )));
        }
        Ok(Some(id.to_string()))
    }

    /// `after`, an event id from 0 (the start) to the newest event's; the events page forward
    /// only, so a `before` is refused.
    fn after(&self, host: &ToolHost) -> Result<Option<i64>, ApiError> {
        if let Some(before) = given(&self.before) {
            return Err(ApiError::bad_request(format!(
                "unsupported cursor before={before}: events page forward, oldest first; \
                 pass after=<next> of an earlier page (or after=0 for the start) instead"
            )));
        }
        let Some(text) = given(&self.after) else { return Ok(None) };
        let id = text.parse::<i64>().ok().filter(|id| *id >= 0).ok_or_else(|| {
            ApiError::bad_request(format!("malformed cursor after={text}: event ids are whole numbers from 0"))
        })?;
        let newest = host.store.last_event_id()?;
        if id > newest {
            return Err(ApiError::bad_request(format!(
                "unknown cursor after={id}: the newest event is {newest}; use the `next` of an earlier page"
            )));
        }
        Ok(Some(id))
    }
}

/// One page, newest (or, for `after` lists, oldest) first: `fetched` holds up to `limit + 1`
/// items in page order; the extra one only says that there is more, and `next` is then the id
/// to pass as the cursor.
fn page_of<T: serde::Serialize>(mut fetched: Vec<T>, limit: usize, id: impl Fn(&T) -> String) -> Response {
    let more = fetched.len() > limit;
    fetched.truncate(limit);
    let next = fetched.last().filter(|_| more).map(id);
    page(fetched, next)
}

fn page<T: serde::Serialize>(items: Vec<T>, next: Option<String>) -> Response {
    Json(views::Page { items, next }).into_response()
}

async fn summary(host: Project) -> Result<Response, ApiError> {
    let p = host.store.project()?;
    let stats = host.store.project_stats()?;
    Ok(Json(views::Summary::new(&host, &p, stats)?).into_response())
}

/// End an agent's pause (a budget or the wake-loop guard); `resumed` is false when it was not
/// paused.
async fn resume_agent(ProjectAgent { host, agent }: ProjectAgent) -> Result<Response, ApiError> {
    let pause = host.store.resume_agent(&agent, "resumed by the user")?;
    Ok(Json(serde_json::json!({"agentId": agent, "resumed": pause.is_some(), "pause": pause})).into_response())
}

/// Characters of recent output the commands list carries per command.
const COMMAND_TAIL_CHARS: usize = 4_000;

/// Lost commands the list shows at most (the newest).
const LOST_COMMANDS_SHOWN: usize = 64;

/// The agent's background commands, as its runner knows them (none when it is not running),
/// and the lost ones the store keeps.
async fn background_commands(
    ProjectAgent { host, agent }: ProjectAgent,
    Query(q): Query<NoCursors>,
) -> Result<Response, ApiError> {
    q.refuse("background commands")?;
    let listed = match host.runners() {
        Some(runners) => runners.list_commands(&agent, COMMAND_TAIL_CHARS).await.map_err(tool_error)?,
        None => None,
    };
    let lost = host.store.lost_commands(&agent, LOST_COMMANDS_SHOWN)?;
    Ok(Json(views::BackgroundCommands::new(&agent, listed, lost)).into_response())
}

async fn stop_background_command(ProjectAgent { host, agent }: ProjectAgent, Id(id): Id) -> Result<Response, ApiError> {
    let runners =
        host.runners().ok_or_else(|| ApiError::Unprocessable(format!("the runner of {agent} is not running here")))?;
    let stopped = runners.stop_command(&agent, &id).await.map_err(tool_error)?;
    Ok(Json(views::BackgroundCommand::from(stopped)).into_response())
}

/// A runner's answer as an API error: an unknown command is a 404, an absent runner a 422.
fn tool_error(e: crate::toolpack::ToolError) -> ApiError {
    use crate::toolpack::ToolError;
    match e {
        ToolError::Rejected(m) if m.starts_with("No background command") => ApiError::NotFound(m),
        ToolError::Internal(m) => ApiError::Internal(m),
        other => ApiError::Unprocessable(other.to_string()),
    }
}

async fn task(host: Project) -> Result<Response, ApiError> {
    Ok(Json(views::Task { task: &host.project.config.task }).into_response())
}

async fn list_messages(host: Project, Query(q): Query<ListQuery>) -> Result<Response, ApiError> {
    let limit = q.limit(100, 500)?;
    let query = crate::store::MessageQuery {
        participant_a: q.agent.clone(),
        limit: Some(limit + 1),
        before_id: q.before(&host, Listing::Messages)?,
        ..Default::default()
    };
    let mut items = host.store.list_messages(&query)?;
    items.reverse();
    Ok(page_of(items, limit, |m| m.id.clone()))
}

async fn one_message(host: Project, Id(id): Id) -> Result<Response, ApiError> {
    let message = host.store.message(&id)?.ok_or_else(|| ApiError::NotFound(format!("Unknown message: {id}")))?;
    Ok(Json(message).into_response())
}

async fn history(of: ProjectAgent, Query(q): Query<ListQuery>) -> Result<Response, ApiError> {
    let (host, agent, config) = (&of.host, &of.agent, of.config()?);
    let limit = q.limit(80, 499)?;
    // Oldest first within the page; paging goes back in time, so the extra row is the oldest.
    let mut items = host.store.history_page(agent, q.before(host, Listing::History)?.as_deref(), limit + 1)?;
    let more = items.len() > limit;
    if more {
        items.remove(0);
    }
    let next = items.first().filter(|_| more).map(|h| h.id.clone());
    Ok(page(views::history_items(host, config, &items), next))
}

async fn events(host: Project, Query(q): Query<ListQuery>) -> Result<Response, ApiError> {
    let limit = q.limit(200, 999)?;
    let items = host.store.events_after(q.after(&host)?.unwrap_or(0), limit + 1)?;
    Ok(page_of(items, limit, |e| e.id.to_string()))
}

async fn stream(
    State(state): State<AppState>,
    host: Project,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
    client: Option<Extension<ConnectInfo<SocketAddr>>>,
) -> Result<Response, ApiError> {
    let slot = state.streams.acquire(client.map(|c| c.0.0.ip())).map_err(|full| {
        let message = match full {
            Full::Total(n) => format!("{n} event streams are open, the most this controller serves at once"),
            Full::Client(n) => format!("{n} event streams are open from this address, the most one client may hold"),
        };
        ApiError::Unavailable { message: format!("{message}; close one or try again later"), retry_after: 10 }
    })?;
    // Resume after Last-Event-ID (set by browsers on reconnect), or `?after=`; else from now.
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok())
        .or(q.after(&host)?);
    let after = match last {
        Some(id) => id,
        None => host.store.last_event_id()?,
    };
    Ok(super::stream::events(host.store.clone(), after, slot).into_response())
}

async fn activations(host: Project, Query(q): Query<ListQuery>) -> Result<Response, ApiError> {
    let limit = q.limit(50, 499)?;
    let before = q.before(&host, Listing::Activations)?;
    let items = host.store.list_activations(q.agent.as_deref(), before.as_deref(), Some(limit + 1))?;
    Ok(page_of(items, limit, |a| a.id.clone()))
}

async fn one_activation(host: Project, Id(id): Id) -> Result<Response, ApiError> {
    let activation =
        host.store.activation(&id)?.ok_or_else(|| ApiError::NotFound(format!("Unknown activation: {id}")))?;
    let tool_calls = redacted(host.store.activation_tool_calls(&id)?);
    Ok(Json(views::ActivationDetail { activation, tool_calls }).into_response())
}

async fn tool_calls(host: Project, Query(q): Query<ListQuery>) -> Result<Response, ApiError> {
    let limit = q.limit(100, 499)?;
    let before = q.before(&host, Listing::ToolCalls)?;
    let items = host.store.list_tool_calls(q.tool.as_deref(), q.agent.as_deref(), before.as_deref(), limit + 1)?;
    Ok(page_of(redacted(items), limit, |c| c.id.clone()))
}

/// Targets are masked when recorded; masking again on the way out covers rows recorded before
/// that (masking is idempotent).
fn redacted(mut calls: Vec<ToolCallSummary>) -> Vec<ToolCallSummary> {
    for call in &mut calls {
        call.target = call.target.as_deref().map(redact_secrets);
    }
    calls
}

async fn signals(host: Project, Query(q): Query<ListQuery>) -> Result<Response, ApiError> {
    let status = match &q.status {
        None => None,
        Some(s) => Some(s.parse::<crate::store::SignalStatus>().map_err(|e| ApiError::bad_request(e.to_string()))?),
    };
    let limit = q.limit(50, 499)?;
    let query = crate::store::SignalQuery {
        target_agent: q.agent.clone(),
        status,
        limit: Some(limit + 1),
        kind: None,
        before_id: q.before(&host, Listing::Signals)?,
    };
    let items = host.store.list_signals(&query)?;
    Ok(page_of(items, limit, |s| s.id.clone()))
}

async fn config(host: Project) -> Result<Response, ApiError> {
    Ok(Json(views::config(&host)).into_response())
}

async fn report(host: Project) -> Result<Response, ApiError> {
    let p = host.store.project()?;
    let content = p.submitted_report.as_ref().and_then(|path| std::fs::read_to_string(path).ok());
    Ok(Json(views::Report { status: p.status, path: p.submitted_report.as_deref(), content }).into_response())
}

async fn set_status(host: &ToolHost, to: ProjectStatus) -> Result<Response, ApiError> {
    let p = host.store.set_project_status(to)?;
    Ok(Json(views::StatusChange { name: &p.name, status: p.status }).into_response())
}

async fn start(host: Project) -> Result<Response, ApiError> {
    set_status(&host, ProjectStatus::Running).await
}

async fn stop(host: Project) -> Result<Response, ApiError> {
    set_status(&host, ProjectStatus::Stopped).await
}

async fn approve(host: Project) -> Result<Response, ApiError> {
    let p = host.store.project()?;
    if p.status != ProjectStatus::Submitted {
        return Err(ApiError::Unprocessable(format!(
            "project {} is {}; only a submitted project can be approved",
            p.name,
            p.status.as_str()
        )));
    }
    set_status(&host, ProjectStatus::Completed).await
}

/// Reference §7.1: a P2 message to the coordinator, and the project back to running.
async fn request_changes(
    host: Project,
    JsonBody(request): JsonBody<body::RequestChanges>,
) -> Result<Response, ApiError> {
    let text = body::required(request.body, "body")?;
    // Without a coordinator: the first agent.
    let config = &host.project.config;
    let coordinator = config
        .communication
        .coordinator_agent
        .clone()
        .or_else(|| config.agents.first().map(|a| a.id.clone()))
        .unwrap_or_else(|| "user".into());
    let sent = host.store.send_message(SendMessage {
        sender: "user".into(),
        recipient: Some(coordinator),
        priority: Some("P2".into()),
        body: format!("Changes requested:\n\n{text}"),
        ..Default::default()
    })?;
    host.store.set_project_status(ProjectStatus::Running)?;
    Ok((StatusCode::CREATED, Json(sent)).into_response())
}

/// What the model saw in one activation: its prompt and the conversation recorded for it
/// (assistant output, tool calls and results, signals handed over), in order.
async fn activation_context(host: Project, Id(id): Id) -> Result<Response, ApiError> {
    let activation =
        host.store.activation(&id)?.ok_or_else(|| ApiError::NotFound(format!("Unknown activation: {id}")))?;
    let history = host.store.activation_history(&id)?;
    Ok(Json(views::ActivationContext::new(&activation, &history)).into_response())
}

/// A compaction and the history it replaced (the rows since the previous compaction).
async fn history_archive(
    host: Project,
    Path((_, agent, id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let history = host.store.history(&agent, 5000)?;
    let at = history
        .iter()
        .position(|h| h.id == id && h.entry.is_compaction())
        .ok_or_else(|| ApiError::NotFound(format!("Unknown compaction of {agent}: {id}")))?;
    let from = history[..at].iter().rposition(|h| h.entry.is_compaction()).map_or(0, |p| p + 1);
    Ok(Json(views::HistoryArchive { compaction: &history[at], archive: &history[from..at] }).into_response())
}

/// One activation step by step: prompt and signals, model turns (text, tokens, cost), tool calls
/// (input, output or error, duration), signals at tool boundaries, its end.
async fn activation_timeline(host: Project, Id(id): Id) -> Result<Response, ApiError> {
    let timeline =
        host.store.activation_timeline(&id)?.ok_or_else(|| ApiError::NotFound(format!("Unknown activation: {id}")))?;
    Ok(Json(timeline).into_response())
}

/// `?hours=` of `GET message-graph`: the window, 1 to 720 hours (30 days), 24 by default.
#[derive(Debug, Default, Deserialize)]
struct GraphQuery {
    hours: Option<String>,
}

async fn message_graph(host: Project, Query(q): Query<GraphQuery>) -> Result<Response, ApiError> {
    let hours = match q.hours.as_deref().map(str::trim) {
        None | Some("") => 24,
        Some(text) => match text.parse::<u32>() {
            Ok(n @ 1..=720) => n,
            _ => {
                return Err(ApiError::bad_request(format!("hours must be a whole number from 1 to 720, got `{text}`")));
            }
        },
    };
    let since = crate::clock::iso(host.store.now() - chrono::Duration::hours(i64::from(hours)));
    let edges = host.store.message_graph(&since)?;
    Ok(Json(views::MessageGraph::new(&host, hours, since, edges)).into_response())
}
