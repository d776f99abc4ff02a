//! The controller ⇄ runner wire protocol: newline-delimited JSON-RPC 2.0 over one byte stream
//! (today the agent's Unix control socket; [`Connection`] takes any `AsyncRead + AsyncWrite`),
//! with requests in both directions. Both ends use this module; it knows nothing of tools,
//! agents or the store beyond the message shapes below, and never touches the filesystem.
//!
//! # Framing
//!
//! Each frame is one JSON-RPC 2.0 object (`"jsonrpc": "2.0"`) serialized on one line and ended by
//! `\n`; a frame is at most [`MAX_FRAME_BYTES`] (8 MiB) without its newline. Blank lines are
//! ignored. Batches are not used. Either end may send requests (`id` is a number or a string,
//! unique among its own in-flight requests), notifications (no `id`) and responses (`result` or
//! `error`, echoing the `id`). Many requests may be in flight in each direction; responses come
//! back in any order and are matched by `id`. Every incoming request is handled on its own task,
//! so a slow one (a long `shell.exec`) never holds up another (a `ping`, a `cancel`).
//!
//! A frame that is too long, not UTF-8, not JSON, or not a JSON-RPC 2.0 object is a protocol
//! violation: the receiving end sends one error response with `id: null` (code `-32700` or
//! `-32600`), logs the reason and closes the connection. Requests still waiting for an answer on
//! a closed connection fail locally with "connection closed" (code [`codes::CONNECTION_CLOSED`],
//! never sent on the wire).
//!
//! # Errors
//!
//! `error` is `{code, message, data?}` with the standard codes `-32700` parse error, `-32600`
//! invalid request, `-32601` method not found, `-32602` invalid params, `-32603` internal error,
//! and `-32000` for application errors. The message of an application error is the text a user
//! or a model sees, e.g. `Tool not allowed for pm: file.write` or `Patch search text not found in
//! /workspace/a.txt`; it is never wrapped or prefixed on the way. A failing tool call (`invoke`,
//! `callSupport`, `recordSignal`) carries its kind in `data.kind`: one of `rejected`, `denied`,
//! `failed`, `runner_lost`, `cancelled`, `timed_out`, `too_large`, `internal`
//! ([`crate::toolpack::ToolError`] makes and reads it); the receiving end takes the kind from
//! there, never from the message.
//!
//! # Handshake
//!
//! The runner connects to `/run/suzumio/control.sock` (the controller created it; the runner
//! retries for about 10 s) and its first frame is the request `hello {version, protocol, token}`.
//! The controller reads that frame with [`read_first_request`] under [`MAX_HELLO_FRAME_BYTES`]
//! (64 KiB) and a deadline, before a [`Connection`] takes the stream over; it answers
//! `{project, agentId, protocol}`, or an error (`Invalid agent token`, `a runner for <agent> is
//! already connected`, a protocol message, "the first request must be hello") and closes the
//! connection. The token is the one-time token of the runner the controller started (the socket
//! *is* the identity; the token says which process may hold it). The controller sends nothing
//! before the hello.
//!
//! # Methods
//!
//! Runner → controller:
//!
//! | method | params | result |
//! |---|---|---|
//! | `hello` | [`HelloParams`] `{version, protocol, token}` | [`HelloResult`] `{project, agentId, protocol}` |
//! | `callSupport` | [`CallSupportParams`] `{activationId, toolpackId, tool, input}` | [`ToolOutput`] `{output, title?, metadata?}`; `-32000` with the verification or handler message |
//! | `recordSignal` | [`RecordSignalParams`] `{activationId, signal: {kind, targetAgent?, targetChannel?, priority?, payload?, usefulEffect?}}` | array of the recorded signals; `-32000` with the store's message |
//! | `commandFinished` | [`CommandFinishedParams`] `{commandId, name?, command, status, exitCode?, signal?, outputTail, truncated, startedAt, endedAt}` | [`CommandFinishedResult`] `{signalId, recorded}`: one `shell.command_finished` signal per command id, however often it is sent |
//!
//! Controller → runner:
//!
//! | method | params | result |
//! |---|---|---|
//! | `load` | [`LoadParams`] `{project, agentId, packs: [{id, root, module, tools, timeoutMs, memoryMb}], builtinTools, artifactsDir?}` | [`LoadResult`] `{tools}`: every tool name the runner now serves. `-32000` with e.g. `Runner module for <id> must export createRunnerToolpack`, `Runner module for <id> did not register <name>`, `Duplicate runner tool: <name>`; a failed load changes nothing. A later `load` replaces the whole tool set. |
//! | `invoke` | [`InvokeParams`] `{activationId, tool, input?, callId}` | [`ToolOutput`]; `-32000` with the tool's message (`Unknown tool: <name>` when it is not loaded) |
//! | `cancel` | [`CancelParams`] `{callId}` | [`CancelResult`] `{cancelled}`: best effort; a running `shell.exec` is killed (its `invoke` then fails with kind `cancelled`), other tools run to their end |
//! | `ping` | none | `{}` |
//! | `shutdown` | none | `{}`, then running commands are killed, the runner closes the connection and exits 0 |
//! | `listCommands` | [`ListCommandsParams`] `{tailChars}` | [`ListCommandsResult`] `{commands: [CommandInfo]}`: the agent's background commands |
//! | `stopCommand` | [`StopCommandParams`] `{commandId}` | [`CommandInfo`] after the stop (no `commandFinished` follows); `-32000` for an unknown id |
//!
//! # Losing the controller
//!
//! A runner whose connection closes without a `shutdown` keeps its background commands and
//! reconnects to the same socket (a restarted controller binds it again) for a while, saying
//! `hello` with `resume`: the token the last hello was answered with, which only this runner's
//! (non-dumpable) memory and a controller-only file hold. A resumed session is loaded again,
//! and the runner then resends `commandFinished` for every command whose end was not yet
//! acknowledged.
//!
//! Paths in `load.packs[].root`/`module` are as the runner sees them (`/toolpacks/<id>/...` in a
//! container). Tool inputs and outputs use the container's paths (`/workspace`, `/artifacts`,
//! `/mnt`) whatever directories the runner maps them to. `artifactsDir` is the agent's writable
//! artifacts directory in those terms (default `/artifacts/<agentId>`).

mod connection;
mod messages;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use connection::{Connection, HandlerFuture, IncomingRequest, RequestHandler, read_first_request, response_line};
pub use messages::*;

/// Version of this protocol; both ends announce it in the hello and refuse another.
pub const PROTOCOL_VERSION: u32 = 1;

/// Longest frame accepted or sent, without its newline.
pub const MAX_FRAME_BYTES: usize = 8 << 20;

/// Longest frame the controller reads before a `hello` succeeded: a hello is a few hundred
/// bytes, and a peer not yet known must not make it buffer more.
pub const MAX_HELLO_FRAME_BYTES: usize = 64 << 10;

/// JSON-RPC error codes used on the wire (and one local code).
pub mod codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// An application error: the message is for the user or the model.
    pub const APPLICATION: i64 = -32000;
    /// Local only: the connection closed before an answer came.
    pub const CONNECTION_CLOSED: i64 = -32099;
}

/// A JSON-RPC error object; its `Display` is the bare message.
#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("{message}")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError { code, message: message.into(), data: None }
    }

    /// An error whose message is meant for the user or model (`-32000`).
    pub fn application(message: impl Into<String>) -> Self {
        RpcError::new(codes::APPLICATION, message)
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        RpcError::new(codes::INVALID_PARAMS, message)
    }

    pub fn method_not_found(method: &str) -> Self {
        RpcError::new(codes::METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        RpcError::new(codes::INTERNAL_ERROR, message)
    }

    pub fn connection_closed() -> Self {
        RpcError::new(codes::CONNECTION_CLOSED, "connection closed")
    }

    pub fn is_connection_closed(&self) -> bool {
        self.code == codes::CONNECTION_CLOSED
    }
}

/// Read typed params; absent params read as `{}`. A mismatch is `-32602` naming the method.
pub fn parse_params<T: DeserializeOwned>(method: &str, params: Value) -> Result<T, RpcError> {
    let params = if params.is_null() { Value::Object(Default::default()) } else { params };
    serde_json::from_value(params).map_err(|e| RpcError::invalid_params(format!("Invalid params for {method}: {e}")))
}
