//! The in-container runner: connects to the controller's socket, says hello, then serves
//! `load`, `invoke`, `cancel`, `ping` and `shutdown` (see [`crate::rpc`]). It runs the built-in
//! runner tools ([`tools`]) and hosts the `runner.mjs` of local packs ([`packs`]).
//!
//! Its identity is a one-time token: read from `token` next to the socket (the controller writes
//! it there just before the runner starts and deletes it at the hello), or from `SUZUMIO_TOKEN`
//! for a runner started by hand. The binary turns off `PR_SET_DUMPABLE` first ([`harden`]), so
//! processes its tools start, which run as the same user, cannot read its memory, environment or
//! descriptors through `/proc`, nor ptrace it.
//!
//! A runner with background commands survives losing its controller: it reconnects and resumes
//! its session with the resume token the controller gave it at the last hello (see
//! [`run_until`] and "Losing the controller" in [`crate::rpc`]).
//!
//! It must not reach the controller's modules (store, web, support, scheduler): this crate
//! depends only on `suzumio-core` (`rpc`, `js`, the toolpack output types), so the build keeps
//! them out. Everything it knows about the project comes from the hello and `load`.

mod mcp;
mod mcp_stdio;
mod pack_context;
mod packs;
pub mod paths;
pub mod quota;
pub mod reaper;
mod service;
pub mod tools;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::UnixStream;
use tokio::sync::watch;

use crate::rpc::{Connection, HelloParams, HelloResult, PROTOCOL_VERSION, method};
pub use paths::Roots;
use service::{RunnerService, Session};
pub(crate) use suzumio_core::{VERSION, js, rpc, toolpack};
pub use tools::{BuiltinTool, BuiltinTools};

pub const DEFAULT_SOCKET: &str = "/run/suzumio/control.sock";
/// The token file's name, in the socket's directory.
pub const TOKEN_FILE: &str = "token";

/// How long to keep trying to connect: the container may start before the socket exists.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the controller has to answer the hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a runner that lost its controller while background commands run waits for the next
/// one (then it stops, and its commands with it).
pub const RECONNECT_WINDOW: Duration = Duration::from_secs(600);

#[derive(Clone, Debug)]
pub struct RunnerConfig {
    /// The controller's socket (default `/run/suzumio/control.sock`).
    pub socket: PathBuf,
    /// The agent's token, sent in the hello.
    pub token: String,
    /// The directories behind `/workspace`, `/artifacts` and `/mnt`.
    pub roots: Roots,
    pub connect_timeout: Duration,
}

impl RunnerConfig {
    pub fn new(token: impl Into<String>) -> Self {
        RunnerConfig {
            socket: DEFAULT_SOCKET.into(),
            token: token.into(),
            roots: Roots::default(),
            connect_timeout: CONNECT_TIMEOUT,
        }
    }

    /// From the optional `SUZUMIO_SOCKET`, `SUZUMIO_WORKSPACE`, `SUZUMIO_ARTIFACTS` and
    /// `SUZUMIO_MNT`; the token from `SUZUMIO_TOKEN`, else from the [`TOKEN_FILE`] next to the
    /// socket. `env` looks a variable up.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Self, RunnerError> {
        let set = |name: &str| env(name).filter(|v| !v.is_empty());
        let socket: PathBuf = set("SUZUMIO_SOCKET").map_or_else(|| DEFAULT_SOCKET.into(), PathBuf::from);
        let token = match set("SUZUMIO_TOKEN") {
            Some(token) => token,
            None => {
                let file = socket.parent().unwrap_or(std::path::Path::new("/")).join(TOKEN_FILE);
                let token = std::fs::read_to_string(&file).unwrap_or_default().trim().to_string();
                if token.is_empty() {
                    return Err(RunnerError::MissingToken { file: file.display().to_string() });
                }
                token
            }
        };
        let mut config = RunnerConfig::new(token);
        config.socket = socket;
        if let Some(dir) = set("SUZUMIO_WORKSPACE") {
            config.roots.workspace = dir.into();
        }
        if let Some(dir) = set("SUZUMIO_ARTIFACTS") {
            config.roots.artifacts = dir.into();
        }
        if let Some(dir) = set("SUZUMIO_MNT") {
            config.roots.mnt = dir.into();
        }
        Ok(config)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error(
        "no agent token: {file} is missing or empty and SUZUMIO_TOKEN is not set (the controller writes a one-time token to that file just before it starts the runner)"
    )]
    MissingToken { file: String },
    #[error(
        "cannot connect to the controller at {socket} (tried for {waited:?}): {source}; is the controller running and the socket directory mounted?"
    )]
    Connect { socket: String, waited: Duration, source: std::io::Error },
    #[error("the controller refused the hello: {0}")]
    HelloRefused(String),
    #[error(
        "the controller closed the connection during the hello (a wrong SUZUMIO_TOKEN, or a runner started for another agent?)"
    )]
    HelloClosed,
    #[error("the controller did not answer the hello within {0:?}")]
    HelloTimeout(Duration),
    #[error(
        "the controller speaks protocol {theirs}, this runner speaks {ours}; use the runner of the same suzumio build"
    )]
    ProtocolMismatch { ours: u32, theirs: u32 },
    #[error("the connection to the controller closed unexpectedly")]
    Disconnected,
}

/// Make this process non-dumpable (`PR_SET_DUMPABLE` 0): its `/proc/<pid>/{mem,environ,fd,…}`
/// then belong to root, and processes of the same uid without `CAP_SYS_PTRACE` (everything a
/// tool starts) can neither read them nor ptrace it. A process started through `execve` is
/// dumpable again, so tools are unaffected.
pub fn harden() -> Result<(), std::io::Error> {
    nix::sys::prctl::set_dumpable(false).map_err(std::io::Error::from)
}

/// Serve until the controller says `shutdown` or closes the connection.
pub async fn run(config: RunnerConfig) -> Result<(), RunnerError> {
    run_until(config, std::future::pending()).await
}

/// [`run`], also stopping (cleanly: running commands are killed) when `stop` resolves, e.g. on
/// SIGTERM.
///
/// A connection that closes without a `shutdown` ends the runner, unless it has background
/// commands running or ends not yet acknowledged: then it keeps them, connects again to the same
/// socket (a restarted controller binds it anew) for up to [`RECONNECT_WINDOW`], and says hello
/// with the resume token the last hello was answered with.
pub async fn run_until(config: RunnerConfig, stop: impl Future<Output = ()>) -> Result<(), RunnerError> {
    let mut stream = connect(&config.socket, config.connect_timeout).await?;
    let (session_tx, session_rx) = watch::channel(None);
    let (shutdown_tx, mut shutdown_rx) = watch::channel(false);
    let service = Arc::new(RunnerService::new(config.roots.clone(), session_rx, shutdown_tx));
    let reporter = tokio::spawn(service.clone().report_ended_commands());
    let mut stop = std::pin::pin!(stop);
    let mut resume: Option<String> = None;
    // Set while reconnecting after a lost connection: until when to keep trying.
    let mut reconnect_until: Option<Instant> = None;
    let result = loop {
        let (connection, driver) = Connection::spawn(stream, service.clone().handler());
        let hello = HelloParams {
            version: crate::VERSION.to_string(),
            protocol: PROTOCOL_VERSION,
            token: if resume.is_some() { String::new() } else { config.token.clone() },
            resume: resume.clone(),
        };
        let hello = say_hello(&connection, &hello).await;
        let hello = match hello {
            Ok(hello) => hello,
            Err(e) => {
                connection.abort();
                let _ = driver.await;
                // Reconnecting, a controller that goes away during the hello (the dying one's
                // socket may still take a connection) is waited out like one not there yet.
                let retry = matches!(e, RunnerError::HelloClosed | RunnerError::HelloTimeout(_));
                match reconnect_until {
                    Some(deadline) if retry && Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        stream = tokio::select! {
                            stream = connect(&config.socket, deadline.saturating_duration_since(Instant::now())) => match stream {
                                Ok(stream) => stream,
                                Err(e) => break Err(e),
                            },
                            _ = &mut stop => break Ok(()),
                        };
                        continue;
                    }
                    _ => break Err(e),
                }
            }
        };
        tracing::info!(project = %hello.project, agent = %hello.agent_id, resumed = resume.is_some(), "connected to the controller");
        resume = hello.resume.clone();
        session_tx.send_replace(Some(Session {
            connection: connection.clone(),
            project: hello.project,
            agent_id: hello.agent_id,
        }));

        let stopped = tokio::select! {
            _ = connection.closed() => false,
            _ = shutdown_rx.wait_for(|s| *s) => true,
            _ = &mut stop => true,
        };
        service.cancel_all();
        session_tx.send_replace(None);
        connection.close().await;
        let _ = driver.await;
        if stopped {
            tracing::info!("runner stopped");
            break Ok(());
        }
        if resume.is_none() || !service.commands().need_controller() {
            break Err(RunnerError::Disconnected);
        }
        tracing::warn!(
            "lost the controller: keeping the background commands and connecting again for up to {} s",
            RECONNECT_WINDOW.as_secs()
        );
        reconnect_until = Some(Instant::now() + RECONNECT_WINDOW);
        stream = tokio::select! {
            stream = connect(&config.socket, RECONNECT_WINDOW) => match stream {
                Ok(stream) => stream,
                Err(e) => break Err(e),
            },
            _ = &mut stop => {
                tracing::info!("runner stopped");
                break Ok(());
            }
        };
    };
    service.commands().kill_all();
    service.stop_mcp_servers().await;
    reporter.abort();
    result
}

/// The hello, answered within [`HELLO_TIMEOUT`] and in our protocol.
async fn say_hello(connection: &Connection, hello: &HelloParams) -> Result<HelloResult, RunnerError> {
    let answer = tokio::time::timeout(HELLO_TIMEOUT, connection.call::<_, HelloResult>(method::HELLO, hello)).await;
    match answer {
        Err(_) => Err(RunnerError::HelloTimeout(HELLO_TIMEOUT)),
        Ok(Err(e)) if e.is_connection_closed() => Err(RunnerError::HelloClosed),
        Ok(Err(e)) => Err(RunnerError::HelloRefused(e.message)),
        Ok(Ok(hello)) if hello.protocol != PROTOCOL_VERSION => {
            Err(RunnerError::ProtocolMismatch { ours: PROTOCOL_VERSION, theirs: hello.protocol })
        }
        Ok(Ok(hello)) => Ok(hello),
    }
}

/// Connect to `socket`, trying for `timeout` (every 100 ms, then less often).
async fn connect(socket: &std::path::Path, timeout: Duration) -> Result<UnixStream, RunnerError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(100);
    loop {
        match UnixStream::connect(socket).await {
            Ok(stream) => return Ok(stream),
            Err(source) if started.elapsed() >= timeout => {
                return Err(RunnerError::Connect { socket: socket.display().to_string(), waited: timeout, source });
            }
            Err(source) => {
                tracing::debug!(socket = %socket.display(), "the controller's socket does not answer yet ({source}); trying again in {pause:?}");
                tokio::time::sleep(pause).await;
                if started.elapsed() > Duration::from_secs(10) {
                    pause = Duration::from_secs(1);
                }
            }
        }
    }
}
