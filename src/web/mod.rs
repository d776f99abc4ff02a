//! The HTTP API (axum): JSON in and out, one error body `{"error", "details"}`, loopback by
//! default and a bearer token whenever it listens elsewhere.
//!
//! Every request passes the guard first: a `Host` this server answers for (`host.rs`: DNS
//! rebinding), then the token (when one is set), then an `Origin` of its own.
//!
//! Handlers only translate HTTP to calls on [`ToolHost`] and back; no business rule lives here.
//! Request bodies are typed (`body.rs`), responses are `Serialize` views (`views.rs`), and every
//! failure is one [`ApiError`]: 4xx with the real message, 5xx hide internals and log the cause.

mod api;
mod approvals;
mod assets;
pub mod body;
mod extract;
mod host;
mod mcp;
mod metrics;
mod stream;
mod tool_switches;
pub mod views;

use host::HostPolicy;
pub use host::{AllowedHost, InvalidAllowedHost};
pub use stream::StreamLimits;

use std::collections::HashSet;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use crate::store::StoreError;
use crate::support::runners::AgentRunners;
use crate::support::{InvokeError, ToolHost, describe_input_errors};
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub host: IpAddr,
    pub port: u16,
    /// Required when `host` is not loopback; then every request but `/health` needs it.
    pub token: Option<String>,
    /// A one-time code for `/login/<code>` (browsers cannot send the bearer token).
    pub login_code: Option<String>,
    /// Host names (a reverse proxy's) answered besides the controller's own.
    pub allowed_hosts: Vec<AllowedHost>,
    /// Concurrent SSE streams.
    pub streams: StreamLimits,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "listening on {0} (not loopback) needs an API token: pass --token or set SUZUMIO_API_TOKEN, so that nobody else on the network can drive the project"
    )]
    TokenRequired(IpAddr),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
}

#[derive(Clone)]
pub struct AppState {
    pub tools: Arc<ToolHost>,
    token: Option<Arc<str>>,
    /// One-time login codes (printed by `suzumio run` as a link) and the sessions they opened.
    login_codes: Arc<Mutex<HashSet<String>>>,
    sessions: Arc<Mutex<HashSet<String>>>,
    hosts: Arc<HostPolicy>,
    streams: Arc<stream::StreamSlots>,
}

const SESSION_COOKIE: &str = "suzumio_session";

/// The router with every route and its guard, for a caller that bound a loopback socket itself:
/// loopback host names on any port, default stream limits.
pub fn router(tools: Arc<ToolHost>, token: Option<String>) -> Router {
    app(tools, token, None, HostPolicy::loopback_any_port(), StreamLimits::default(), None)
}

/// `/mcp/<agent>`: what it needs from the running controller.
struct McpRoutes {
    runners: Arc<AgentRunners>,
    /// Ends the MCP sessions (their streams would hold a graceful shutdown open).
    stopping: CancellationToken,
}

/// The router answering for `hosts`, with a one-time login code for browsers (`/login/<code>`
/// sets a session cookie).
fn app(
    tools: Arc<ToolHost>,
    token: Option<String>,
    login_code: Option<String>,
    hosts: HostPolicy,
    streams: StreamLimits,
    mcp: Option<McpRoutes>,
) -> Router {
    let mcp = mcp.map(|m| mcp::routes(&tools, m.runners, &m.stopping)).unwrap_or_default();
    let state = AppState {
        tools,
        token: token.map(Arc::from),
        login_codes: Arc::new(Mutex::new(login_code.into_iter().collect())),
        sessions: Arc::new(Mutex::new(HashSet::new())),
        hosts: Arc::new(hosts),
        streams: stream::StreamSlots::new(streams),
    };
    api::routes()
        .merge(approvals::routes())
        .merge(tool_switches::routes())
        .merge(assets::routes())
        .merge(metrics::routes())
        .merge(mcp)
        .route("/login/{code}", axum::routing::get(login))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Trade a one-time code for a session cookie, then go to the WebUI.
async fn login(State(state): State<AppState>, axum::extract::Path(code): axum::extract::Path<String>) -> Response {
    let known = state.login_codes.lock().unwrap_or_else(|e| e.into_inner()).remove(&code);
    if !known {
        return ApiError::Forbidden(
            "this login link was already used or is unknown; restart `suzumio run` for a new one".into(),
        )
        .into_response();
    }
    let session = crate::store::new_token();
    state.sessions.lock().unwrap_or_else(|e| e.into_inner()).insert(session.clone());
    let cookie = format!("{SESSION_COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/");
    (StatusCode::SEE_OTHER, [(header::LOCATION, "/".to_string()), (header::SET_COOKIE, cookie)]).into_response()
}

fn has_session(state: &AppState, headers: &HeaderMap) -> bool {
    let sessions = state.sessions.lock().unwrap_or_else(|e| e.into_inner());
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().strip_prefix(&format!("{SESSION_COOKIE}=")).map(str::to_string))
        .any(|sid| sessions.contains(&sid))
}

/// The API's listening socket, bound before anything else starts so that a port in use fails
/// the run with nothing left behind.
pub struct Listener {
    listener: tokio::net::TcpListener,
    options: ServeOptions,
}

/// Check the token rule and bind the address.
pub async fn bind(options: ServeOptions) -> Result<Listener, ServeError> {
    if !options.host.is_loopback() && options.token.is_none() {
        return Err(ServeError::TokenRequired(options.host));
    }
    let addr = SocketAddr::new(options.host, options.port);
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| ServeError::Bind { addr, source })?;
    Ok(Listener { listener, options })
}

impl Listener {
    pub fn local_addr(&self) -> Result<SocketAddr, ServeError> {
        self.listener.local_addr().map_err(ServeError::Serve)
    }

    /// Serve until `shutdown` resolves, then finish the requests in flight; `/mcp/<agent>`
    /// calls run in `runners`.
    pub async fn serve(
        self,
        tools: Arc<ToolHost>,
        runners: Arc<AgentRunners>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let Listener { listener, options } = self;
        // The real port (the options may say 0).
        let hosts = HostPolicy::new(listener.local_addr().map_err(ServeError::Serve)?, options.allowed_hosts);
        let stopping = CancellationToken::new();
        let mcp = McpRoutes { runners, stopping: stopping.clone() };
        let app = app(tools, options.token, options.login_code, hosts, options.streams, Some(mcp));
        // The peer address is what stream limits count per client.
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
            .with_graceful_shutdown(async move {
                shutdown.await;
                stopping.cancel();
            })
            .await
            .map_err(ServeError::Serve)
    }
}

/// Host check, token check (when configured), then same origin only: a page on another site
/// must not be able to read or drive the API from a user's browser.
async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Err(refusal) = state.hosts.check_host(request.headers(), request.uri()) {
        return ApiError::from(refusal).into_response();
    }
    let path = request.uri().path();
    if let Some(token) = &state.token
        && path != "/health"
        && !path.starts_with("/login/")
        && !has_session(&state, request.headers())
    {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
            return ApiError::Unauthorized.into_response();
        }
    }
    // Every method: a read is refused too, so that another site's page cannot even hold a
    // stream open. The WebUI's own requests are same-origin and carry no `Origin` or its own.
    if let Err(refusal) = state.hosts.check_origin(request.headers()) {
        return ApiError::from(refusal).into_response();
    }
    next.run(request).await
}

impl From<host::Refusal> for ApiError {
    fn from(refusal: host::Refusal) -> Self {
        match refusal {
            host::Refusal::BadHost(m) => ApiError::bad_request(m),
            host::Refusal::Misdirected(m) => ApiError::Misdirected(m),
            host::Refusal::ForeignOrigin(m) => ApiError::Forbidden(m),
        }
    }
}

/// Every error the API returns. 4xx carry the real message; a 5xx logs its cause and tells the
/// client only to look at the log.
#[derive(Debug)]
pub enum ApiError {
    NotFound(String),
    BadRequest {
        message: String,
        details: Vec<ErrorDetail>,
    },
    Unprocessable(String),
    /// 409: the resource is in a state that no longer allows the request (an expired approval).
    Conflict(String),
    UnsupportedMediaType,
    PayloadTooLarge(String),
    /// The machine's disk is full: the request was not recorded; retry after freeing space.
    InsufficientStorage(String),
    Unauthorized,
    Forbidden(String),
    /// 421: a `Host` this server does not answer for.
    Misdirected(String),
    /// 503 with `Retry-After` (seconds): a limit is reached; trying later may work.
    Unavailable {
        message: String,
        retry_after: u32,
    },
    Internal(String),
}

/// One problem with a request: where (a JSON pointer into the body or input) and what.
#[derive(Debug, serde::Serialize)]
pub struct ErrorDetail {
    pub path: String,
    pub message: String,
}

/// The error body of every route.
#[derive(serde::Serialize)]
struct ErrorBody {
    error: String,
    details: Vec<ErrorDetail>,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::BadRequest { message: message.into(), details: Vec::new() }
    }

    /// A 400 for one field of a request body (`""`: the body as a whole).
    pub fn invalid_field(pointer: &str, message: &str) -> ApiError {
        let at = if pointer.is_empty() { String::new() } else { format!("{pointer}: ") };
        ApiError::BadRequest {
            message: format!("the request body is invalid: {at}{message}"),
            details: vec![ErrorDetail { path: pointer.to_string(), message: message.to_string() }],
        }
    }
}

impl From<InvokeError> for ApiError {
    fn from(e: InvokeError) -> Self {
        match e {
            InvokeError::UnknownPack(_) | InvokeError::UnknownEntry { .. } | InvokeError::UnknownTool { .. } => {
                ApiError::NotFound(e.to_string())
            }
            InvokeError::InvalidInput(errors) => ApiError::BadRequest {
                message: format!("the input does not match the schema: {}", describe_input_errors(&errors)),
                details: errors.into_iter().map(|x| ErrorDetail { path: x.pointer, message: x.message }).collect(),
            },
            InvokeError::Rejected(m) | InvokeError::Handler(m) => ApiError::Unprocessable(m),
            InvokeError::Internal(m) => ApiError::Internal(m),
            InvokeError::DiskFull(m) => ApiError::InsufficientStorage(m),
        }
    }
}

// Tool execution's own error (`ToolError`) converts here too, next to the store's.

/// The store's own split: what the caller can fix is a 422, database and I/O failures a 500.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::DiskFull { .. } => ApiError::InsufficientStorage(e.to_string()),
            other => InvokeError::from(other).into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after = match &self {
            ApiError::Unavailable { retry_after, .. } => Some(*retry_after),
            _ => None,
        };
        let (status, error, details) = match self {
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, m, Vec::new()),
            ApiError::InsufficientStorage(m) => (StatusCode::INSUFFICIENT_STORAGE, m, Vec::new()),
            ApiError::BadRequest { message, details } => (StatusCode::BAD_REQUEST, message, details),
            ApiError::Unprocessable(m) => (StatusCode::UNPROCESSABLE_ENTITY, m, Vec::new()),
            ApiError::Conflict(m) => (StatusCode::CONFLICT, m, Vec::new()),
            ApiError::UnsupportedMediaType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "request bodies must be JSON (Content-Type: application/json)".into(),
                Vec::new(),
            ),
            ApiError::PayloadTooLarge(m) => (StatusCode::PAYLOAD_TOO_LARGE, m, Vec::new()),
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "missing or wrong API token (Authorization: Bearer <token>)".into(),
                Vec::new(),
            ),
            ApiError::Forbidden(m) => (StatusCode::FORBIDDEN, m, Vec::new()),
            ApiError::Misdirected(m) => (StatusCode::MISDIRECTED_REQUEST, m, Vec::new()),
            ApiError::Unavailable { message, .. } => (StatusCode::SERVICE_UNAVAILABLE, message, Vec::new()),
            ApiError::Internal(cause) => {
                tracing::error!("internal error serving a request: {cause}");
                (StatusCode::INTERNAL_SERVER_ERROR, "internal error; see the controller log".into(), Vec::new())
            }
        };
        let mut response = (status, axum::Json(ErrorBody { error, details })).into_response();
        if let Some(seconds) = retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            // A refused client keeps nothing open here: hyper closes the connection after this.
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}
