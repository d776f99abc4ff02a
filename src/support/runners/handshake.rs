//! The hello of a new connection: read within a deadline and a size limit, checked (protocol,
//! one-time token or resume token, one session per agent), answered; on success the stream
//! becomes the agent's session and is loaded.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use subtle::ConstantTimeEq;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::resume::write_resume_token;
use super::session::SessionHandler;
use super::{AgentRunners, HELLO_DEADLINE, SessionState, Slot};
use crate::backend::TOKEN_FILE;
use crate::rpc::{self, Connection, HelloParams, HelloResult, IncomingRequest, RpcError};

impl AgentRunners {
    /// The hello of a new connection: read it (bounded, with a deadline), check it, answer, and
    /// on success hand the stream to a [`Connection`] and load the session.
    pub(super) async fn handshake(&self, slot: &Arc<Slot>, stream: UnixStream, uid: Option<u32>, pid: Option<i32>) {
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::with_capacity(4 << 10, read);
        let first =
            tokio::time::timeout(HELLO_DEADLINE, rpc::read_first_request(&mut reader, rpc::MAX_HELLO_FRAME_BYTES))
                .await;
        let request = match first {
            Err(_) => {
                tracing::info!(agent = %slot.agent, "closing a connection that sent no hello within {HELLO_DEADLINE:?}");
                return;
            }
            Ok(Err(e)) if e.is_connection_closed() => return,
            Ok(Err(e)) => {
                tracing::info!(agent = %slot.agent, "closing a connection before its hello: {}", e.message);
                let _ = write.write_all(rpc::response_line(Value::Null, Err(e)).as_bytes()).await;
                return;
            }
            Ok(Ok(request)) => request,
        };
        let id = request.id.clone().unwrap_or(Value::Null);
        let (answer, resumed) = match self.check_hello(slot, request) {
            Ok(answer) => answer,
            Err(refusal) => {
                if let Some(reason) = refusal.security {
                    self.refused(slot, reason, uid, pid);
                }
                let reply = rpc::response_line(id, Err(RpcError::application(refusal.message)));
                let _ = tokio::time::timeout(Duration::from_secs(1), write.write_all(reply.as_bytes())).await;
                return;
            }
        };
        let reply = rpc::response_line(id, Ok(answer));
        let sent = tokio::time::timeout(Duration::from_secs(1), write.write_all(reply.as_bytes())).await;
        if !matches!(sent, Ok(Ok(()))) {
            *slot.session.lock().unwrap_or_else(|e| e.into_inner()) = None;
            return;
        }
        let handler = Arc::new(SessionHandler { runners: self.me.clone(), slot: slot.clone() });
        let (conn, _driver) = Connection::spawn_halves(reader, write, handler);
        *slot.session.lock().unwrap_or_else(|e| e.into_inner()) = Some(SessionState::Loading(conn.clone()));
        tracing::info!(agent = %slot.agent, ?pid, "runner said hello");
        if self.load_session(slot, conn.clone()).await && resumed {
            // No `ensure_running` started this runner: watch it as if it had, when the backend
            // knows it (a kept container; a local runner of an earlier controller is no child of
            // this one, and its socket alone tells when it goes).
            match self.spec(&slot.agent) {
                Ok(spec) if matches!(self.backend.is_running(&spec).await, Ok(true)) => {
                    self.watch_runner(slot, spec, conn)
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(agent = %slot.agent, "cannot watch the resumed runner: {e}"),
            }
        }
    }

    /// Whether `request` is a hello this agent's socket accepts now; on success the one-time
    /// token is used up (and its file deleted) and the session is claimed for this connection,
    /// so that a hello racing it is refused.
    fn check_hello(&self, slot: &Slot, request: IncomingRequest) -> Result<(Value, bool), Refusal> {
        if request.method != rpc::method::HELLO {
            return Err(Refusal::quiet(format!("the first request must be hello, not {}", request.method)));
        }
        let hello: HelloParams =
            rpc::parse_params(&request.method, request.params).map_err(|e| Refusal::quiet(e.message))?;
        if hello.protocol != rpc::PROTOCOL_VERSION {
            return Err(Refusal::quiet(format!(
                "protocol {} is not supported (the controller speaks {})",
                hello.protocol,
                rpc::PROTOCOL_VERSION
            )));
        }
        let mut session = slot.session.lock().unwrap_or_else(|e| e.into_inner());
        if session.as_ref().is_some_and(SessionState::is_open) {
            return Err(Refusal::security(format!("a runner for {} is already connected", slot.agent)));
        }
        let resumed = hello.resume.is_some();
        if let Some(resume) = &hello.resume {
            let expected = std::fs::read_to_string(&slot.resume_file).unwrap_or_default();
            let expected = expected.trim();
            if expected.is_empty() || !bool::from(expected.as_bytes().ct_eq(resume.as_bytes())) {
                return Err(Refusal::security_as(
                    "Invalid resume token",
                    "a hello resuming with a resume token not (or no longer) valid",
                ));
            }
            *session = Some(SessionState::Claimed);
            drop(session);
            tracing::info!(agent = %slot.agent, "a runner resumes its session (it outlived the previous controller)");
        } else {
            let mut admissions = slot.admissions.lock().unwrap_or_else(|e| e.into_inner());
            let known = admissions
                .iter()
                .fold(false, |found, t| found | bool::from(t.as_bytes().ct_eq(hello.token.as_bytes())));
            if !known {
                return Err(Refusal::security_as(
                    "Invalid agent token",
                    "a hello with a token not (or no longer) valid",
                ));
            }
            admissions.clear();
            // Claimed until the connection exists, so that no second hello gets in between.
            *session = Some(SessionState::Claimed);
            drop(admissions);
            drop(session);
        }
        let token_file = slot.run_dir.join(TOKEN_FILE);
        if let Err(e) = std::fs::remove_file(&token_file)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(agent = %slot.agent, "cannot delete the used token file {}: {e}", token_file.display());
        }
        let resume = match write_resume_token(&slot.resume_file) {
            Ok(token) => Some(token),
            Err(e) => {
                tracing::warn!(agent = %slot.agent, "cannot keep a resume token (the runner will not outlive this controller): {e}");
                None
            }
        };
        let config = &self.tools.project.config;
        let answer = serde_json::to_value(HelloResult {
            project: config.name.clone(),
            agent_id: slot.agent.clone(),
            protocol: rpc::PROTOCOL_VERSION,
            resume,
        })
        .unwrap_or(Value::Null);
        Ok((answer, resumed))
    }
}

/// Why a hello was refused: the message the peer gets, and the reason recorded as a security
/// event (none for what a confused but honest runner does: a wrong protocol, a malformed hello).
struct Refusal {
    message: String,
    security: Option<String>,
}

impl Refusal {
    fn quiet(message: String) -> Refusal {
        Refusal { message, security: None }
    }

    fn security(message: String) -> Refusal {
        Refusal { security: Some(message.clone()), message }
    }

    fn security_as(message: &str, reason: &str) -> Refusal {
        Refusal { message: message.to_string(), security: Some(reason.to_string()) }
    }
}
