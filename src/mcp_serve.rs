//! An agent's allowed tools, and its artifacts as read-only resources, as an MCP server (the
//! official Rust SDK, `rmcp`): the one [`McpServer`] that `suzumio mcp` serves over stdio and
//! `suzumio run` at `/mcp/<agent>` (Streamable HTTP, [`http_service`]). Every call takes the
//! path of `suzumio tool call`: a short activation around `execute_tool`, so the allowlist, the
//! schema, the permission engine, the records and the audit all apply, and it runs as the agent
//! (in `suzumio run`, in the agent's running container).
//!
//! An `ask` becomes the usual durable approval request; while the call waits on it, a client that
//! declared the `elicitation` capability is asked in place: tool, redacted arguments, reason,
//! allow or not — by an `elicitation/create` request on protocols up to 2025-11-25, and on
//! 2026-07-28 (which forbids requests to the client) as an "input required" result whose retry
//! carries the answer, the call waiting meanwhile in a task of its own. The answer resolves the
//! stored request like `suzumio approvals allow|deny` does, as `mcp:<client name>` (the name the
//! client gave), so the waiting call, the records and the audit go the one way of
//! `permissions::approvals`. A client that cannot be asked (or does not answer) leaves the
//! request to the CLI, the API and the WebUI, and to its deadline.
//!
//! A question the call asks the user (`ask_user`) is put to such a client the same way: the
//! question, with its choices as the answer's options (or a free-text answer), answered as
//! `mcp:<client name>` through `Store::answer_question` (an answer not among the choices is
//! refused there and the question stays open); declining closes it unanswered (its default
//! applies, if it has one).
//!
//! Served as an [`McpService`]: every peer answers `ping` whatever protocol it negotiated (rmcp's
//! dispatch refuses it on 2026-07-28, which fastmcp's clients use over Streamable HTTP), and the
//! client is logged by the name and version it gives, as `serverInfo` names Suzumio.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientNotification, ClientRequest,
    ContentBlock as McpBlock, DiscoverResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, EnumSchema, Implementation, InitializeRequestParams, InitializeResult, InputRequest,
    InputRequests, InputRequiredResult, InputResponses, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource, ResourceContents,
    ServerCapabilities, ServerConfig, ServerResult, Tool, ToolAnnotations,
};
use rmcp::service::{ElicitationMode, NotificationContext, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, Service};
use rustix::fs::{CWD, Mode, OFlags};
use serde_json::Value;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio_util::sync::CancellationToken;

use crate::calls::cli::CliCalls;
use crate::store::{Answer, ApprovalStatus, Event, EventRecord, QuestionStatus, Resolution, StoreError};
use crate::support::ToolHost;
use crate::support::runners::AgentRunners;
use crate::toolpack::ToolError;
use crate::toolpack::output::{ContentBlock, ToolOutput};

/// At most this many bytes of one artifact returned by `resources/read`.
const MAX_RESOURCE_BYTES: u64 = 4 << 20;

/// At most this many bytes in one POST to `/mcp/<agent>`: axum's JSON limit, the API's own.
const MAX_REQUEST_BYTES: usize = 2 << 20;

/// Where the agent's calls run.
pub enum Runners {
    /// `suzumio run`'s runners, already listening: calls run in the agent's running container.
    Running(Arc<AgentRunners>),
    /// `suzumio mcp`: handed to the serving controller when a `run` serves the project, else
    /// run by this session with a runner it starts at the first call that needs one.
    OnDemand(CliCalls),
}

impl Runners {
    pub fn on_demand(calls: CliCalls) -> Arc<Runners> {
        Arc::new(Runners::OnDemand(calls))
    }

    /// Stops runners this session started (a running controller stops its own).
    pub async fn shutdown(&self) {
        if let Runners::OnDemand(calls) = self {
            calls.shutdown().await;
        }
    }
}

#[derive(Clone)]
pub struct McpServer {
    host: Arc<ToolHost>,
    agent: String,
    runners: Arc<Runners>,
    /// Calls of clients on protocol 2026-07-28 (no requests to the client) that returned
    /// "input required" for an approval, by the handle the client echoes as `requestState`.
    /// Shared by every session of the agent: each request may come on a new one.
    parked: Arc<std::sync::Mutex<HashMap<String, Parked>>>,
}

/// What a call waits for a person about: an approval request, or a question (`ask_user`).
#[derive(Clone, Debug, PartialEq)]
enum Asked {
    Approval(String),
    Question(String),
}

/// A call that waits for the client's answer to its approval request or question.
struct Parked {
    /// The request or question the client was last asked about.
    approval: Option<Asked>,
    /// Who answers: `mcp:<client name>`.
    resolver: String,
    activation: String,
    call: tokio::task::JoinHandle<Result<ToolOutput, ToolError>>,
    events: broadcast::Receiver<EventRecord>,
}

/// The key of the approval question in an "input required" result.
const APPROVAL_INPUT: &str = "approval";

/// `/mcp/<agent>` for `agent`: a Streamable HTTP endpoint with sessions in memory, closed when
/// `stopping` is cancelled. The API's guard in front of it checks `Host`, `Origin` and the token
/// (with the bound port and `--allowed-host`, stricter than `rmcp`'s own loopback-name list,
/// which would refuse a reverse proxy's name the user allowed), so `rmcp`'s checks are off.
pub fn http_service(
    host: Arc<ToolHost>,
    agent: String,
    runners: Arc<Runners>,
    stopping: CancellationToken,
) -> StreamableHttpService<McpServer, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(MAX_REQUEST_BYTES)
        .with_cancellation_token(stopping);
    let server = McpServer::new(host, agent, runners);
    let factory = move || Ok(server.clone());
    StreamableHttpService::new(factory, Arc::new(LocalSessionManager::default()), config)
}

impl McpServer {
    pub fn new(host: Arc<ToolHost>, agent: String, runners: Arc<Runners>) -> McpServer {
        McpServer { host, agent, runners, parked: Arc::default() }
    }

    /// The server as the MCP service `suzumio mcp` and `/mcp/<agent>` serve.
    pub fn into_service(self) -> McpService {
        McpService(self)
    }

    fn tools(&self) -> Vec<Tool> {
        let project = self.host.project.snapshot();
        let registry = &project.registry;
        let Some(agent) = self.host.project.config.agent(&self.agent) else { return Vec::new() };
        // Tools switched off for the agent are not offered (a call of one is refused anyway).
        let off: Vec<String> = match self.host.store.tool_switches(&self.agent) {
            Ok(switches) => switches.into_iter().filter(|s| !s.enabled).map(|s| s.tool).collect(),
            Err(e) => {
                tracing::warn!(agent = %self.agent, "cannot read the agent's tool switches: {e}");
                Vec::new()
            }
        };
        registry
            .resolve_agent(agent)
            .tools
            .iter()
            .filter(|name| !off.contains(name))
            .filter_map(|name| registry.tool(name))
            .map(|(_, def)| {
                let schema = match &def.input_schema {
                    Value::Object(map) => map.clone(),
                    _ => serde_json::Map::new(),
                };
                let a = &def.annotations;
                let mut annotations = ToolAnnotations::new();
                annotations.title = a.title.clone();
                annotations.read_only_hint = a.read_only_hint;
                annotations.destructive_hint = a.destructive_hint;
                annotations.idempotent_hint = a.idempotent_hint;
                annotations.open_world_hint = a.open_world_hint;
                let mut tool = Tool::new(def.name.clone(), def.description.clone(), Arc::new(schema))
                    .with_annotations(annotations);
                // What the result's `structuredContent` matches (checked before it is returned):
                // a client may rely on it, as it could on the pack's own server.
                tool.output_schema = def.output_schema.as_ref().and_then(Value::as_object).cloned().map(Arc::new);
                if let Some(label) = def.presentation.as_ref().and_then(|p| p.label.clone()).or(a.title.clone()) {
                    tool = tool.with_title(label);
                }
                tool
            })
            .collect()
    }

    /// Refused before a runner (or a Docker engine) is asked for, as `suzumio tool call` does;
    /// then the call's own activation.
    // String: shown to the MCP client as the call's error text, before any call exists.
    async fn begin(&self, tool: &str) -> Result<String, String> {
        let host = &self.host;
        if host.project.snapshot().registry.tool(tool).is_none() {
            return Err(format!("Unknown tool: {tool}"));
        }
        if host.project.config.agent(&self.agent).is_none_or(|a| !a.tools.allows(tool)) {
            return Err(format!("Tool not allowed for {}: {tool}", self.agent));
        }
        let activation =
            host.store.start_activation(&self.agent, &format!("suzumio mcp {tool}"), &[]).map_err(|e| e.to_string())?;
        Ok(activation.id)
    }

    /// The call through `execute_tool` in its activation, which it then ends: as `suzumio tool
    /// call` does it. Owned, so that it can outlive the request that started it.
    async fn run(self, activation: String, tool: String, input: Value) -> Result<ToolOutput, ToolError> {
        let host = &self.host;
        let result = match self.runners.as_ref() {
            Runners::Running(runners) => {
                crate::calls::execute_tool(host, runners.as_ref(), &self.agent, &activation, &tool, input).await
            }
            Runners::OnDemand(calls) => calls.execute(&self.agent, &activation, &tool, input).await,
        };
        if let Err(e) =
            host.store.finish_activation(&activation, crate::store::ActivationOutcome::Completed, None, None)
        {
            tracing::warn!("recording the end of the call's activation: {e}");
        }
        result
    }

    /// One `tools/call`; an `ask` on the way is put to the client the way its protocol allows.
    async fn call(&self, request: CallToolRequestParams, context: &RequestContext<RoleServer>) -> CallToolResponse {
        if let Some(handle) = request.request_state {
            return self.resume(&handle, request.input_responses).await;
        }
        let activation = match self.begin(&request.name).await {
            Ok(activation) => activation,
            Err(message) => return CallToolResult::error(vec![McpBlock::text(message)]).into(),
        };
        // Subscribed before the call starts, so that its approval request cannot be missed.
        let events = self.host.store.subscribe();
        let input = Value::Object(request.arguments.unwrap_or_default());
        let call = self.clone().run(activation.clone(), request.name.to_string(), input);
        let resolver =
            crate::permissions::approvals::mcp_resolver(context.client_info().as_ref().map(|c| c.name.as_str()));
        let modern = context.meta.protocol_version().is_some_and(|v| !v.has_initialize());
        if modern {
            // 2026-07-28 forbids requests to the client: the call goes on in a task, and an ask
            // is returned as "input required", answered by the client's retry.
            if !context.meta.client_capabilities().is_some_and(|c| asks_forms(c.elicitation.as_ref())) {
                return finished(Ok(call.await));
            }
            let parked = Parked { approval: None, resolver, activation, call: tokio::spawn(call), events };
            return self.until_asked(parked).await;
        }
        let asking = peer_asks(&context.peer);
        // The call ends on its own (whoever decided its request); an elicitation still open
        // then is dropped with it.
        let result = tokio::select! {
            result = call => result,
            never = self.answer_asks(&context.peer, &activation, &resolver, events), if asking => match never {},
        };
        finished(Ok(result))
    }

    /// Puts each approval request of `activation` to the client, one at a time, for as long as
    /// the call runs (`elicitation/create`, protocols before 2026-07-28).
    async fn answer_asks(
        &self,
        peer: &Peer<RoleServer>,
        activation: &str,
        resolver: &str,
        mut events: broadcast::Receiver<EventRecord>,
    ) -> std::convert::Infallible {
        loop {
            let asked = next_request(&self.host.store, activation, &mut events).await;
            // Asked until it is decided: an answer the store refused (not one of a question's
            // choices) leaves it open, and the client is asked again.
            while let Some(params) = self.elicitation(&asked) {
                match peer.create_elicitation(params).await {
                    Ok(answer) => self.record_answer(&asked, resolver, answer),
                    // The request stays open for a person (CLI, API, WebUI) or its deadline.
                    Err(e) => {
                        tracing::warn!(agent = %self.agent, "asking the MCP client about {asked:?}: {e}");
                        break;
                    }
                }
            }
        }
    }

    /// Waits for the parked call to end or to ask; an ask is returned to the client as "input
    /// required" (an elicitation), and the call is parked under the handle it gets back.
    async fn until_asked(&self, mut parked: Parked) -> CallToolResponse {
        loop {
            // A request still open (its answer missing or unreadable) is asked again.
            let open = parked.approval.as_ref().and_then(|asked| self.elicitation(asked));
            let params = match open {
                Some(params) => params,
                None => {
                    let id = tokio::select! {
                        joined = &mut parked.call => return finished(joined),
                        id = next_request(&self.host.store, &parked.activation, &mut parked.events) => id,
                    };
                    let Some(params) = self.elicitation(&id) else { continue };
                    parked.approval = Some(id);
                    params
                }
            };
            let handle = crate::store::new_token();
            let mut calls = self.parked.lock().unwrap_or_else(|e| e.into_inner());
            // Calls whose client never came back ended on their own (decided elsewhere, or
            // their deadline): nothing is left to resume.
            calls.retain(|_, p| !p.call.is_finished());
            calls.insert(handle.clone(), parked);
            let asked = InputRequest::Elicitation(ElicitRequest::new(params));
            return InputRequiredResult::new(
                Some(InputRequests::from([(APPROVAL_INPUT.to_string(), asked)])),
                Some(handle),
            )
            .into();
        }
    }

    /// The client's retry of a call that returned "input required": its answer decides the
    /// request, then the call is waited for (or asks again).
    async fn resume(&self, handle: &str, responses: Option<InputResponses>) -> CallToolResponse {
        let parked = self.parked.lock().unwrap_or_else(|e| e.into_inner()).remove(handle);
        let Some(parked) = parked else {
            let message = "This call is no longer waiting for an answer (unknown requestState): it ended, or the server restarted. Call the tool again.";
            return CallToolResult::error(vec![McpBlock::text(message)]).into();
        };
        let answer = responses.and_then(|mut r| r.remove(APPROVAL_INPUT)).and_then(|v| serde_json::from_value(v).ok());
        if let (Some(asked), Some(answer)) = (parked.approval.as_ref(), answer) {
            self.record_answer(asked, &parked.resolver, answer);
        }
        self.until_asked(parked).await
    }

    /// What the client is asked about one pending request or question; `None` once it is
    /// decided or answered.
    fn elicitation(&self, asked: &Asked) -> Option<ElicitRequestParams> {
        let id = match asked {
            Asked::Approval(id) => id,
            Asked::Question(id) => return self.question_elicitation(id),
        };
        let request = match self.host.store.approval(id) {
            Ok(Some(r)) if r.status == ApprovalStatus::Pending => r,
            Ok(_) => return None,
            Err(e) => {
                tracing::warn!("reading approval request {id}: {e}");
                return None;
            }
        };
        let arguments = self.host.audit.redacted(&request.input);
        let message = format!(
            "The agent `{}` asks to run {}.\nArguments: {arguments}\nWhy it needs approval: {}\n\
             Allow this call? (Approval request {id}; it can also be decided with `suzumio approvals`.)",
            self.agent,
            request.tool,
            request.reason(),
        );
        let schema = ElicitationSchema::builder()
            .required_bool_property("allow", |b| b.title("Allow this call").with_default(true))
            .string_property("feedback", |s| s.title("Feedback for the agent (optional)"))
            .build_unchecked();
        Some(ElicitRequestParams::FormElicitationParams { meta: None, message, requested_schema: schema })
    }

    /// What the client is asked about one open question: the question, and its choices as the
    /// answer's options (else a free-text answer).
    fn question_elicitation(&self, id: &str) -> Option<ElicitRequestParams> {
        let question = match self.host.store.question(id) {
            Ok(Some(q)) if q.status == QuestionStatus::Pending => q,
            Ok(_) => return None,
            Err(e) => {
                tracing::warn!("reading question {id}: {e}");
                return None;
            }
        };
        let default = question.default.as_deref().map(|d| format!("\nIf nobody answers: {d}")).unwrap_or_default();
        let message = format!(
            "The agent `{}` asks you: {}{default}\n(Question {id}; it can also be answered with `suzumio answer`.)",
            self.agent, question.question,
        );
        let builder = ElicitationSchema::builder();
        let builder = if question.choices.is_empty() {
            builder.required_string_property("answer", |s| s.title("Your answer"))
        } else {
            let choices = EnumSchema::builder(question.choices.clone()).title("Your answer").build();
            builder.required_enum_schema("answer", choices)
        };
        let schema = builder.build_unchecked();
        Some(ElicitRequestParams::FormElicitationParams { meta: None, message, requested_schema: schema })
    }

    /// The client's answer to what it was asked: an approval's decision or a question's answer.
    fn record_answer(&self, asked: &Asked, resolver: &str, answer: ElicitResult) {
        match asked {
            Asked::Approval(id) => self.record_decision(id, resolver, answer),
            Asked::Question(id) => self.record_question_answer(id, resolver, answer),
        }
    }

    /// The client's answer to a question, as `suzumio answer` gives one, by `resolver`;
    /// declined or cancelled, the question closes unanswered (its default applies).
    fn record_question_answer(&self, id: &str, resolver: &str, answer: ElicitResult) {
        let store = &self.host.store;
        let text = answer.content.as_ref().and_then(|c| c.get("answer")).and_then(Value::as_str).map(str::to_string);
        let result = match answer.action {
            ElicitationAction::Accept => {
                store.answer_question(id, &Answer { text: text.as_deref(), choice: None, by: resolver }).map(drop)
            }
            ElicitationAction::Decline => store.close_unanswered(id, resolver, "declined in the MCP client").map(drop),
            _ => store.close_unanswered(id, resolver, "cancelled in the MCP client").map(drop),
        };
        match result {
            Ok(()) => {}
            // Somebody answered first: theirs stands.
            Err(StoreError::QuestionClosed { .. }) => {}
            // Not among the choices: the question stays open (asked again, or for a person).
            Err(e) => tracing::warn!(agent = %self.agent, "recording the MCP client's answer to question {id}: {e}"),
        }
    }

    /// The client's answer as the request's decision, like `suzumio approvals allow|deny`, made
    /// by `resolver` (`mcp:<client name>`).
    fn record_decision(&self, id: &str, resolver: &str, answer: ElicitResult) {
        let content = answer.content.unwrap_or(Value::Null);
        let feedback = content.get("feedback").and_then(Value::as_str).map(str::trim).filter(|f| !f.is_empty());
        let (allow, feedback) = match answer.action {
            ElicitationAction::Accept if content.get("allow").and_then(Value::as_bool) != Some(false) => {
                (true, feedback.map(str::to_string))
            }
            ElicitationAction::Accept => (false, Some(feedback.unwrap_or("not allowed in the MCP client").to_string())),
            ElicitationAction::Decline => (false, Some(with_feedback("declined in the MCP client", feedback))),
            // Cancel, and whatever a later protocol adds: not an allow.
            _ => (false, Some(with_feedback("cancelled in the MCP client", feedback))),
        };
        let resolution =
            Resolution { allow, by: resolver, feedback: feedback.as_deref(), remember: None, whole_activation: false };
        match self.host.store.resolve_approval(id, &resolution) {
            Ok(_) => {}
            // Somebody decided first (the CLI, the WebUI, the deadline): theirs stands.
            Err(StoreError::ApprovalResolved { .. }) => {}
            Err(e) => tracing::warn!(agent = %self.agent, "recording the MCP client's answer to request {id}: {e}"),
        }
    }

    fn artifacts_dir(&self) -> PathBuf {
        crate::backend::spec::artifacts_dir(&self.host.project.config.root, &self.agent)
    }

    fn uri_prefix(&self) -> String {
        format!("suzumio://artifacts/{}/", self.agent)
    }
}

/// The next approval request or question of `activation`: from its event, or, when this
/// receiver fell behind, from the store.
async fn next_request(
    store: &crate::store::Store,
    activation: &str,
    events: &mut broadcast::Receiver<EventRecord>,
) -> Asked {
    loop {
        match events.recv().await {
            Ok(record) => match record.event {
                Event::ApprovalRequested { approval_id, activation_id, .. } if activation_id == activation => {
                    return Asked::Approval(approval_id);
                }
                Event::QuestionAsked { question_id, activation_id, .. } if activation_id == activation => {
                    return Asked::Question(question_id);
                }
                _ => {}
            },
            Err(RecvError::Lagged(_)) => {
                match store.approvals(true, crate::store::MAX_LIMIT) {
                    Ok(open) => {
                        if let Some(r) = open.into_iter().find(|r| r.activation_id == activation) {
                            return Asked::Approval(r.id);
                        }
                    }
                    Err(e) => tracing::warn!("reading the open approval requests: {e}"),
                }
                match store.questions(true, crate::store::MAX_LIMIT) {
                    Ok(open) => {
                        if let Some(q) = open.into_iter().find(|q| q.activation_id == activation) {
                            return Asked::Question(q.id);
                        }
                    }
                    Err(e) => tracing::warn!("reading the open questions: {e}"),
                }
            }
            Err(RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}

/// Whether an `elicitation` capability includes forms (none named: forms, as before modes).
fn asks_forms(capability: Option<&rmcp::model::ElicitationCapability>) -> bool {
    capability.is_some_and(|c| c.form.is_some() || c.url.is_none())
}

/// Whether the client of a session declared form elicitation at `initialize`.
fn peer_asks(peer: &Peer<RoleServer>) -> bool {
    peer.supported_elicitation_modes().contains(&ElicitationMode::Form)
}

/// A call's end as its MCP result: a refusal, denial or failure is a tool error with its text.
fn finished(joined: Result<Result<ToolOutput, ToolError>, tokio::task::JoinError>) -> CallToolResponse {
    let result = match joined {
        Ok(Ok(out)) => to_result(out),
        Ok(Err(e)) => CallToolResult::error(vec![McpBlock::text(e.message())]),
        Err(e) => CallToolResult::error(vec![McpBlock::text(format!("the call stopped: {e}"))]),
    };
    result.into()
}

/// Why a request was not allowed, with what the person added.
fn with_feedback(what: &str, feedback: Option<&str>) -> String {
    match feedback {
        Some(f) => format!("{what}: {f}"),
        None => what.to_string(),
    }
}

/// A tool's result as MCP content: its blocks when it has them, else its text.
fn to_result(out: ToolOutput) -> CallToolResult {
    let blocks: Vec<McpBlock> = if out.content.is_empty() {
        vec![McpBlock::text(out.output)]
    } else {
        out.content
            .into_iter()
            .map(|b| match b {
                ContentBlock::Text { text } => McpBlock::text(text),
                ContentBlock::Image { data, mime_type } => McpBlock::image(data, mime_type),
                ContentBlock::ResourceLink { uri, name } => McpBlock::resource_link(Resource::new(uri, name)),
            })
            .collect()
    };
    let mut result = if out.is_error { CallToolResult::error(blocks) } else { CallToolResult::success(blocks) };
    result.structured_content = out.structured_content;
    result
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools().enable_resources().build();
        ServerConfig::new(capabilities).with_server_info(server_info()).with_instructions(format!(
            "The Suzumio agent `{}`: its allowed tools, and its artifacts as resources.",
            self.agent
        ))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        log_client(&self.agent, &request.client_info, &request.protocol_version);
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    /// The stateless protocol's opener: its client is named in the request's `_meta`.
    async fn discover(&self, context: RequestContext<RoleServer>) -> Result<DiscoverResult, ErrorData> {
        if let (Some(client), Some(protocol)) = (context.meta.client_info(), context.meta.protocol_version()) {
            log_client(&self.agent, &client, &protocol);
        }
        let versions = ServerHandler::supported_protocol_versions(self).into_owned();
        Ok(DiscoverResult::from_server_info(versions, ServerHandler::get_info(self)))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(self.call(request, &context).await)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut files = Vec::new();
        list_files(&self.artifacts_dir(), Path::new(""), &mut files);
        files.sort();
        let prefix = self.uri_prefix();
        let resources = files
            .into_iter()
            .map(|(rel, size)| {
                let rel = rel.to_string_lossy().into_owned();
                let resource = Resource::new(format!("{prefix}{rel}"), rel.clone()).with_size(size);
                match known_mime_type(&rel) {
                    Some(mime) => resource.with_mime_type(mime),
                    None => resource,
                }
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let refused =
            || ErrorData::resource_not_found(format!("No such artifact of {}: {}", self.agent, request.uri), None);
        let rel = request.uri.strip_prefix(&self.uri_prefix()).ok_or_else(refused)?;
        let bytes = read_artifact(&self.artifacts_dir(), Path::new(rel)).map_err(|e| match e {
            ReadError::Refused => refused(),
            ReadError::Io(e) => ErrorData::internal_error(format!("reading {}: {e}", request.uri), None),
        })?;
        // Text as text; anything else (the saved images of rich results) as a base64 blob. Each
        // with the type its name gives, as listed (text of no known type is text/plain).
        let known = known_mime_type(rel);
        let contents = match String::from_utf8(bytes) {
            Ok(text) if known.is_none_or(is_text_type) => {
                ResourceContents::text(text, request.uri.clone()).with_mime_type(known.unwrap_or("text/plain"))
            }
            Ok(text) => blob(text.into_bytes(), &request.uri, known),
            Err(e) => blob(e.into_bytes(), &request.uri, known),
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

/// The regular files under `dir` (relative paths and sizes); links are not followed.
fn list_files(dir: &Path, rel: &Path, out: &mut Vec<(PathBuf, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir.join(rel)) else { return };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else { continue };
        let path = rel.join(entry.file_name());
        if kind.is_dir() {
            list_files(dir, &path, out);
        } else if kind.is_file() {
            out.push((path, entry.metadata().map(|m| m.len()).unwrap_or(0)));
        }
    }
}

enum ReadError {
    Refused,
    Io(std::io::Error),
}

/// An artifact's bytes as a base64 blob of type `known` (else `application/octet-stream`).
fn blob(bytes: Vec<u8>, uri: &str, known: Option<&'static str>) -> ResourceContents {
    let blob = base64::engine::general_purpose::STANDARD.encode(bytes);
    ResourceContents::blob(blob, uri).with_mime_type(known.unwrap_or("application/octet-stream"))
}

/// The type of an artifact from its name's extension, when it is one agents commonly write.
fn known_mime_type(name: &str) -> Option<&'static str> {
    let ext = Path::new(name).extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    Some(match ext.as_str() {
        "md" | "markdown" => "text/markdown",
        "txt" | "log" => "text/plain",
        "csv" => "text/csv",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "js" | "mjs" => "text/javascript",
        "json" => "application/json",
        "yaml" | "yml" => "application/yaml",
        "xml" => "application/xml",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        _ => return None,
    })
}

/// Whether content of type `mime` is sent as text (else as a blob, even when it decodes).
fn is_text_type(mime: &str) -> bool {
    mime.starts_with("text/")
        || matches!(mime, "application/json" | "application/yaml" | "application/xml" | "image/svg+xml")
}

/// Who answers: Suzumio, with the version of this build (rmcp would name itself).
fn server_info() -> Implementation {
    Implementation::new("suzumio", env!("CARGO_PKG_VERSION")).with_title("Suzumio")
}

/// A client as it names itself, with the protocol it speaks, in the log.
fn log_client(agent: &str, client: &Implementation, protocol: &ProtocolVersion) {
    tracing::info!(agent, "MCP client {} {} connected (protocol {protocol})", client.name, client.version);
}

/// [`McpServer`] as the MCP service of `suzumio mcp` (stdio). rmcp's dispatch of a
/// [`ServerHandler`] refuses `ping` on protocol 2026-07-28 ("method not found"), but every peer
/// must answer it, so it is answered here whatever the protocol. (rmcp's Streamable HTTP service
/// takes only a `ServerHandler`: `/mcp/<agent>` answers a stateless `ping` in front of it, in
/// `web::mcp`.)
#[derive(Clone)]
pub struct McpService(McpServer);

impl Service<RoleServer> for McpService {
    async fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        if let ClientRequest::PingRequest(_) = request {
            return Ok(ServerResult::empty(()));
        }
        <McpServer as Service<RoleServer>>::handle_request(&self.0, request, context).await
    }

    async fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        <McpServer as Service<RoleServer>>::handle_notification(&self.0, notification, context).await
    }

    fn get_info(&self) -> ServerConfig {
        ServerHandler::get_info(&self.0)
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        <McpServer as Service<RoleServer>>::supported_protocol_versions(&self.0)
    }
}

/// The bytes of `rel` under `dir`: plain components only, each directory opened from its parent
/// with `O_NOFOLLOW`, so neither `..` nor a link leads out of the agent's artifacts.
fn read_artifact(dir: &Path, rel: &Path) -> Result<Vec<u8>, ReadError> {
    let parts: Vec<&std::ffi::OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(p) => Ok(p),
            _ => Err(ReadError::Refused),
        })
        .collect::<Result<_, _>>()?;
    let Some((file, dirs)) = parts.split_last() else { return Err(ReadError::Refused) };
    let nofollow = |e: rustix::io::Errno| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR | rustix::io::Errno::NOENT => ReadError::Refused,
        e => ReadError::Io(e.into()),
    };
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut fd = rustix::fs::openat(CWD, dir, dir_flags, Mode::empty()).map_err(nofollow)?;
    for part in dirs {
        fd = rustix::fs::openat(&fd, *part, dir_flags, Mode::empty()).map_err(nofollow)?;
    }
    let file_flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd = rustix::fs::openat(&fd, *file, file_flags, Mode::empty()).map_err(nofollow)?;
    let file = std::fs::File::from(fd);
    if !file.metadata().map_err(ReadError::Io)?.is_file() {
        return Err(ReadError::Refused);
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_RESOURCE_BYTES), &mut bytes)
        .map_err(ReadError::Io)?;
    Ok(bytes)
}
