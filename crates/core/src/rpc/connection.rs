//! One JSON-RPC connection over any byte stream (a Unix socket today; a TCP or exec stream for a
//! remote backend): a reader task that parses frames, matches responses to pending requests and
//! starts a task per incoming request, and a writer task that owns the write half, so frames from
//! concurrent tasks never interleave. The [`Connection`] handle does not carry the stream's type.
//!
//! [`read_first_request`] reads the one request a listener wants before it trusts a peer (the
//! hello), under a smaller frame limit, before a [`Connection`] takes the stream over.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::FutureExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::{MAX_FRAME_BYTES, RpcError, codes};

/// A frame buffer grown past this by one large frame is given back after it (one session must
/// not keep its largest frame's memory for its whole life).
const KEEP_FRAME_CAPACITY: usize = 1 << 20;

/// Frames waiting for the writer; senders wait when it is full (back-pressure from a slow peer).
const OUTGOING_QUEUE: usize = 1024;
/// How long a graceful close waits for running handlers and queued frames.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, RpcError>> + Send>>;

/// Answers the requests (and notifications) the peer sends. Each call runs on its own task.
pub trait RequestHandler: Send + Sync + 'static {
    fn handle(&self, method: String, params: Value) -> HandlerFuture;
}

type Pending = HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>;

struct Shared {
    outgoing: mpsc::Sender<String>,
    pending: Mutex<Pending>,
    next_id: AtomicU64,
    closed: AtomicBool,
    closed_tx: watch::Sender<bool>,
    /// Incoming requests whose handler has not queued its response yet.
    in_flight: watch::Sender<usize>,
}

impl Shared {
    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Close now: stop both tasks (the writer still flushes what is queued) and fail every
    /// pending request.
    fn shut(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.closed_tx.send_replace(true);
        let pending: Vec<_> = self.pending().drain().collect();
        for (_, reply) in pending {
            let _ = reply.send(Err(RpcError::connection_closed()));
        }
    }
}

/// Handle to a connection. Cheap to clone; the connection lives until [`Connection::close`] is
/// called, the peer closes, or a protocol violation.
#[derive(Clone)]
pub struct Connection {
    shared: Arc<Shared>,
}

impl Connection {
    /// A connection over a Unix socket (the control socket of an agent). Its owned halves need no
    /// lock between reader and writer, unlike [`Connection::spawn_stream`].
    pub fn spawn(stream: UnixStream, handler: Arc<dyn RequestHandler>) -> (Connection, JoinHandle<()>) {
        let (read, write) = stream.into_split();
        Connection::spawn_halves(read, write, handler)
    }

    /// A connection over one bidirectional byte stream of any kind.
    pub fn spawn_stream<S>(stream: S, handler: Arc<dyn RequestHandler>) -> (Connection, JoinHandle<()>)
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (read, write) = tokio::io::split(stream);
        Connection::spawn_halves(read, write, handler)
    }

    /// A connection over a separate reader and writer (e.g. a process's stdout and stdin). Starts
    /// the reader and writer tasks; the handle resolves when both have ended.
    pub fn spawn_halves<R, W>(read: R, write: W, handler: Arc<dyn RequestHandler>) -> (Connection, JoinHandle<()>)
    where
        R: AsyncRead + Send + Unpin + 'static,
        W: AsyncWrite + Send + Unpin + 'static,
    {
        let (outgoing, queue) = mpsc::channel(OUTGOING_QUEUE);
        let shared = Arc::new(Shared {
            outgoing,
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            closed_tx: watch::channel(false).0,
            in_flight: watch::channel(0).0,
        });
        let connection = Connection { shared };
        let driver = {
            let connection = connection.clone();
            tokio::spawn(async move {
                tokio::join!(connection.read_loop(read, handler), connection.write_loop(write, queue));
                connection.shared.shut();
            })
        };
        (connection, driver)
    }

    /// Whether two handles are the same connection.
    pub fn same_as(&self, other: &Connection) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Send a request and wait for its answer. Any number may be in flight at once.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = encode(&request_object(Some(id), method, params));
        if frame.len() > MAX_FRAME_BYTES + 1 {
            return Err(RpcError::new(
                codes::INVALID_REQUEST,
                format!("request {method} is too large ({} bytes; the limit is {MAX_FRAME_BYTES})", frame.len() - 1),
            ));
        }
        let (reply, answer) = oneshot::channel();
        {
            let mut pending = self.shared.pending();
            if self.shared.closed.load(Ordering::SeqCst) {
                return Err(RpcError::connection_closed());
            }
            pending.insert(id, reply);
        }
        // Forget the entry if this future is dropped before the answer comes.
        let _guard = PendingGuard { shared: &self.shared, id };
        if self.shared.outgoing.send(frame).await.is_err() {
            return Err(RpcError::connection_closed());
        }
        answer.await.unwrap_or_else(|_| Err(RpcError::connection_closed()))
    }

    /// [`Connection::request`] with typed params and result.
    pub async fn call<P: Serialize, R: DeserializeOwned>(&self, method: &str, params: &P) -> Result<R, RpcError> {
        let params = serde_json::to_value(params)
            .map_err(|e| RpcError::internal(format!("cannot encode the params of {method}: {e}")))?;
        let result = self.request(method, params).await?;
        serde_json::from_value(result)
            .map_err(|e| RpcError::internal(format!("the peer answered {method} with an unexpected result: {e}")))
    }

    /// Send a notification (no answer).
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), RpcError> {
        if self.is_closed() {
            return Err(RpcError::connection_closed());
        }
        let frame = encode(&request_object(None, method, params));
        if frame.len() > MAX_FRAME_BYTES + 1 {
            return Err(RpcError::new(codes::INVALID_REQUEST, format!("notification {method} is too large")));
        }
        self.shared.outgoing.send(frame).await.map_err(|_| RpcError::connection_closed())
    }

    /// Resolves once the connection is closed (by either end).
    pub async fn closed(&self) {
        let mut closed = self.shared.closed_tx.subscribe();
        let _ = closed.wait_for(|closed| *closed).await;
    }

    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::SeqCst)
    }

    /// Close gracefully: wait (up to 2 s) for the handlers of requests already received to
    /// answer, flush what is queued, then close. Do not await this from inside a handler: it
    /// would wait for itself until the grace ends.
    pub async fn close(&self) {
        let mut in_flight = self.shared.in_flight.subscribe();
        let _ = tokio::time::timeout(CLOSE_GRACE, in_flight.wait_for(|n| *n == 0)).await;
        self.shared.shut();
    }

    /// Close at once; answers not yet queued are lost.
    pub fn abort(&self) {
        self.shared.shut();
    }

    async fn read_loop<R: AsyncRead + Unpin>(&self, read: R, handler: Arc<dyn RequestHandler>) {
        let mut reader = BufReader::with_capacity(64 << 10, read);
        let mut frame = Vec::new();
        loop {
            if frame.capacity() > KEEP_FRAME_CAPACITY {
                frame = Vec::new();
            }
            let got = tokio::select! {
                got = read_frame(&mut reader, &mut frame, MAX_FRAME_BYTES) => got,
                _ = self.closed() => return,
            };
            match got {
                Ok(true) => {
                    if let Err(violation) = self.dispatch(&frame, &handler) {
                        tracing::warn!("closing the connection: {}", violation.message);
                        let body = json!({"jsonrpc": "2.0", "id": null, "error": violation});
                        let _ = self.shared.outgoing.try_send(encode(&body));
                        self.shared.shut();
                        return;
                    }
                }
                Ok(false) => {
                    tracing::debug!("the peer closed the connection");
                    self.shared.shut();
                    return;
                }
                Err(FrameError::TooLong) => {
                    let message = format!("frame longer than {MAX_FRAME_BYTES} bytes");
                    tracing::warn!("closing the connection: {message}");
                    let error = RpcError::new(codes::INVALID_REQUEST, message);
                    let _ =
                        self.shared.outgoing.try_send(encode(&json!({"jsonrpc": "2.0", "id": null, "error": error})));
                    self.shared.shut();
                    return;
                }
                Err(FrameError::Io(e)) => {
                    tracing::warn!("closing the connection: read failed: {e}");
                    self.shared.shut();
                    return;
                }
            }
        }
    }

    /// Handle one frame; an `Err` is a protocol violation that closes the connection.
    fn dispatch(&self, frame: &[u8], handler: &Arc<dyn RequestHandler>) -> Result<(), RpcError> {
        let text =
            std::str::from_utf8(frame).map_err(|_| RpcError::new(codes::PARSE_ERROR, "frame is not valid UTF-8"))?;
        if text.trim().is_empty() {
            return Ok(());
        }
        let mut object = parse_object(text)?;
        if object.contains_key("method") {
            let request = take_request(&mut object)?;
            self.start_handler(handler.clone(), request.method, request.params, request.id);
            return Ok(());
        }
        let result = object.remove("result");
        let error = object.remove("error");
        let answer = match (result, error) {
            (Some(result), None) => Ok(result),
            (None, Some(error)) => Err(serde_json::from_value::<RpcError>(error).map_err(|e| {
                RpcError::new(codes::INVALID_REQUEST, format!("error must be {{code, message, data?}}: {e}"))
            })?),
            _ => {
                return Err(RpcError::new(
                    codes::INVALID_REQUEST,
                    "frame is neither a request (method) nor a response (exactly one of result, error)",
                ));
            }
        };
        let id = object.get("id").and_then(Value::as_u64);
        let waiting = id.and_then(|id| self.shared.pending().remove(&id));
        match waiting {
            Some(reply) => {
                let _ = reply.send(answer);
            }
            // A late answer to a request whose caller gave up; harmless.
            None => tracing::debug!("ignoring a response to unknown request id {:?}", object.get("id")),
        }
        Ok(())
    }

    fn start_handler(&self, handler: Arc<dyn RequestHandler>, method: String, params: Value, id: Option<Value>) {
        self.shared.in_flight.send_modify(|n| *n += 1);
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let _done = InFlightGuard(&shared);
            let name = method.clone();
            let result = AssertUnwindSafe(async move { handler.handle(method, params).await })
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    tracing::error!(method = %name, "a request handler panicked");
                    Err(RpcError::internal(format!("the handler of {name} failed unexpectedly")))
                });
            let Some(id) = id else { return };
            let _ = shared.outgoing.send(response_frame(id, result)).await;
        });
    }

    async fn write_loop<W: AsyncWrite + Unpin>(&self, write: W, mut queue: mpsc::Receiver<String>) {
        let mut writer = BufWriter::with_capacity(64 << 10, write);
        loop {
            tokio::select! {
                biased;
                frame = queue.recv() => {
                    let Some(frame) = frame else { break };
                    if let Err(e) = write_frames(&mut writer, frame, &mut queue).await {
                        tracing::warn!("closing the connection: write failed: {e}");
                        self.shared.shut();
                        return;
                    }
                }
                _ = self.closed() => {
                    // Flush what was queued before the close (e.g. the answer to `shutdown`).
                    let flush = async {
                        while let Ok(frame) = queue.try_recv() {
                            writer.write_all(frame.as_bytes()).await?;
                        }
                        writer.flush().await
                    };
                    let _ = tokio::time::timeout(CLOSE_GRACE, flush).await;
                    break;
                }
            }
        }
        let _ = writer.shutdown().await;
    }
}

/// Write one frame and whatever else is already queued, then flush once.
async fn write_frames<W: AsyncWrite + Unpin>(
    writer: &mut BufWriter<W>,
    first: String,
    queue: &mut mpsc::Receiver<String>,
) -> std::io::Result<()> {
    writer.write_all(first.as_bytes()).await?;
    while let Ok(frame) = queue.try_recv() {
        writer.write_all(frame.as_bytes()).await?;
    }
    writer.flush().await
}

struct PendingGuard<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.shared.pending().remove(&self.id);
    }
}

struct InFlightGuard<'a>(&'a Shared);

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.0.in_flight.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A request as it came off the wire.
#[derive(Clone, Debug, PartialEq)]
pub struct IncomingRequest {
    pub method: String,
    /// `null` when absent, else an object or an array.
    pub params: Value,
    /// `None` for a notification.
    pub id: Option<Value>,
}

/// Read the first frame of a stream, which must be a request, before a [`Connection`] takes the
/// stream over (pass the same buffered reader on to [`Connection::spawn_halves`]: nothing it
/// read past the frame is lost). At most `limit` bytes are buffered, however long the line is.
/// The end of the stream is [`RpcError::connection_closed`]; a too long, malformed or non-request
/// frame is the error a [`Connection`] would send before closing.
pub async fn read_first_request<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    limit: usize,
) -> Result<IncomingRequest, RpcError> {
    let mut frame = Vec::new();
    loop {
        match read_frame(reader, &mut frame, limit).await {
            Ok(true) if frame.iter().all(u8::is_ascii_whitespace) => continue,
            Ok(true) => break,
            Ok(false) => return Err(RpcError::connection_closed()),
            Err(FrameError::TooLong) => {
                return Err(RpcError::new(codes::INVALID_REQUEST, format!("frame longer than {limit} bytes")));
            }
            Err(FrameError::Io(e)) => return Err(RpcError::new(codes::CONNECTION_CLOSED, format!("read failed: {e}"))),
        }
    }
    let text =
        std::str::from_utf8(&frame).map_err(|_| RpcError::new(codes::PARSE_ERROR, "frame is not valid UTF-8"))?;
    let mut object = parse_object(text)?;
    if !object.contains_key("method") {
        return Err(RpcError::new(codes::INVALID_REQUEST, "the first frame must be a request"));
    }
    take_request(&mut object)
}

/// One encoded response frame (with its newline), for a peer not (yet) behind a [`Connection`].
pub fn response_line(id: Value, result: Result<Value, RpcError>) -> String {
    response_frame(id, result)
}

/// A frame's JSON-RPC 2.0 object.
fn parse_object(text: &str) -> Result<Map<String, Value>, RpcError> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| RpcError::new(codes::PARSE_ERROR, format!("frame is not valid JSON: {e}")))?;
    let Value::Object(object) = value else {
        return Err(RpcError::new(codes::INVALID_REQUEST, "frame is not a JSON-RPC 2.0 object"));
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(RpcError::new(codes::INVALID_REQUEST, "frame is not JSON-RPC 2.0 (jsonrpc must be \"2.0\")"));
    }
    Ok(object)
}

/// The request in an object that has a `method`.
fn take_request(object: &mut Map<String, Value>) -> Result<IncomingRequest, RpcError> {
    let Some(Value::String(method)) = object.remove("method") else {
        return Err(RpcError::new(codes::INVALID_REQUEST, "method must be a string"));
    };
    let params = match object.remove("params") {
        None => Value::Null,
        Some(params @ (Value::Object(_) | Value::Array(_))) => params,
        Some(_) => return Err(RpcError::new(codes::INVALID_REQUEST, "params must be an object or an array")),
    };
    let id = match object.remove("id") {
        None => None,
        Some(id @ (Value::Number(_) | Value::String(_))) => Some(id),
        Some(_) => return Err(RpcError::new(codes::INVALID_REQUEST, "id must be a number or a string")),
    };
    Ok(IncomingRequest { method, params, id })
}

enum FrameError {
    TooLong,
    Io(std::io::Error),
}

/// Read one line into `frame` (without the newline), refusing one longer than `limit` as soon as
/// it is (so a peer that never sends a newline costs at most `limit` bytes). `Ok(false)` at a
/// clean end of stream; a partial last line without its newline is dropped.
async fn read_frame<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    frame: &mut Vec<u8>,
    limit: usize,
) -> Result<bool, FrameError> {
    frame.clear();
    loop {
        let available = reader.fill_buf().await.map_err(FrameError::Io)?;
        if available.is_empty() {
            if !frame.is_empty() {
                tracing::warn!("the peer closed the connection in the middle of a frame");
            }
            return Ok(false);
        }
        let (chunk, found) = match available.iter().position(|b| *b == b'\n') {
            Some(end) => (end, true),
            None => (available.len(), false),
        };
        if frame.len() + chunk > limit {
            return Err(FrameError::TooLong);
        }
        frame.extend_from_slice(&available[..chunk]);
        reader.consume(if found { chunk + 1 } else { chunk });
        if found {
            return Ok(true);
        }
    }
}

fn request_object(id: Option<u64>, method: &str, params: Value) -> Value {
    let mut object = Map::new();
    object.insert("jsonrpc".into(), json!("2.0"));
    if let Some(id) = id {
        object.insert("id".into(), json!(id));
    }
    object.insert("method".into(), json!(method));
    if !params.is_null() {
        object.insert("params".into(), params);
    }
    Value::Object(object)
}

fn response_frame(id: Value, result: Result<Value, RpcError>) -> String {
    let body = match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
    };
    let frame = encode(&body);
    if frame.len() <= MAX_FRAME_BYTES + 1 {
        return frame;
    }
    // The caller is told the size, with the kind a tool call reads (`data.kind`), not left to
    // wait for an answer that cannot come.
    let error =
        crate::toolpack::ToolError::TooLarge(crate::toolpack::output::too_large(frame.len() - 1, MAX_FRAME_BYTES));
    encode(&json!({"jsonrpc": "2.0", "id": id, "error": error.to_rpc()}))
}

/// One frame: compact JSON (never contains a raw newline) plus `\n`.
fn encode(value: &Value) -> String {
    let mut text = value.to_string();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    //! The stream-generic path, over an in-memory `tokio::io::duplex` instead of a socket.

    use super::*;

    /// Answers `echo` with its name and the params, after yielding `params.yields` times so that
    /// concurrent answers overtake each other.
    struct Echo(&'static str);

    impl RequestHandler for Echo {
        fn handle(&self, method: String, params: Value) -> HandlerFuture {
            let name = self.0;
            Box::pin(async move {
                match method.as_str() {
                    "echo" => {
                        for _ in 0..params["yields"].as_u64().unwrap_or(0) {
                            tokio::task::yield_now().await;
                        }
                        Ok(json!({"from": name, "params": params}))
                    }
                    other => Err(RpcError::method_not_found(other)),
                }
            })
        }
    }

    async fn within<T>(future: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(10), future).await.expect("timed out")
    }

    #[tokio::test]
    async fn requests_both_ways_over_a_duplex_stream_are_matched_by_id() {
        let (a, b) = tokio::io::duplex(4096);
        let (ca, _) = Connection::spawn_stream(a, Arc::new(Echo("a")));
        let (cb, _) = Connection::spawn_stream(b, Arc::new(Echo("b")));
        let calls = (0..60u64).map(|n| {
            let (from, to) = if n % 2 == 0 { (&ca, "b") } else { (&cb, "a") };
            async move {
                let params = json!({"n": n, "yields": (60 - n) % 7});
                (from.request("echo", params.clone()).await, json!({"from": to, "params": params}))
            }
        });
        for (answer, expected) in within(futures_util::future::join_all(calls)).await {
            assert_eq!(answer, Ok(expected));
        }
        let unknown = within(ca.request("nope", Value::Null)).await;
        assert_eq!(unknown, Err(RpcError::method_not_found("nope")));
    }

    #[tokio::test]
    async fn the_first_request_is_read_under_its_own_limit_and_leaves_the_rest() {
        use tokio::io::AsyncReadExt;
        let long = vec![b'x'; 100 << 10];
        let err = read_first_request(&mut BufReader::new(&long[..]), 64 << 10).await.unwrap_err();
        assert_eq!((err.code, err.message.as_str()), (codes::INVALID_REQUEST, "frame longer than 65536 bytes"));

        let text = b"\n{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"hello\",\"params\":{}}\nrest";
        let mut reader = BufReader::new(&text[..]);
        let request = read_first_request(&mut reader, 1024).await.unwrap();
        assert_eq!(request, IncomingRequest { method: "hello".into(), params: json!({}), id: Some(json!(7)) });
        let mut rest = String::new();
        reader.read_to_string(&mut rest).await.unwrap();
        assert_eq!(rest, "rest", "what follows the frame stays for the connection");

        let response = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n";
        let err = read_first_request(&mut BufReader::new(&response[..]), 1024).await.unwrap_err();
        assert_eq!(err.message, "the first frame must be a request");
        let err = read_first_request(&mut BufReader::new(&b""[..]), 1024).await.unwrap_err();
        assert!(err.is_connection_closed());
    }

    #[tokio::test]
    async fn an_oversized_frame_is_refused_both_ways_over_a_duplex_stream() {
        let (a, raw) = tokio::io::duplex(64 << 10);
        let (conn, driver) = Connection::spawn_stream(a, Arc::new(Echo("a")));

        // Outgoing: refused before it is sent, and the connection stays open.
        let refused = conn.request("echo", json!("x".repeat(MAX_FRAME_BYTES))).await;
        assert_eq!(refused.map_err(|e| e.code), Err(codes::INVALID_REQUEST));
        assert!(!conn.is_closed());

        // Incoming: one error frame with `id: null`, then the connection closes.
        let (raw_read, mut raw_write) = tokio::io::split(raw);
        tokio::spawn(async move {
            // The connection stops reading partway and drops its end: the write then fails.
            let _ = raw_write.write_all(&vec![b'x'; MAX_FRAME_BYTES + 1]).await;
        });
        let mut lines = BufReader::new(raw_read).lines();
        let line = within(lines.next_line()).await.expect("read").expect("an error frame");
        let frame: Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(frame["id"], Value::Null);
        assert_eq!(frame["error"]["code"], json!(codes::INVALID_REQUEST));
        within(conn.closed()).await;
        within(driver).await.expect("driver");
        assert_eq!(conn.request("echo", json!({})).await, Err(RpcError::connection_closed()));
    }
}
