//! The wire protocol over real Unix sockets: concurrent requests in both directions matched by
//! id, handlers that do not block each other, protocol violations that close only the offending
//! connection (failing its pending requests), graceful close, and the hello handshake.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};
use suzumio::rpc::{
    Connection, HandlerFuture, HelloParams, HelloResult, MAX_FRAME_BYTES, PROTOCOL_VERSION, RequestHandler, RpcError,
    codes, method, parse_params,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// Answers a few test methods; `relay` calls back into the peer over the same connection;
/// `hold` answers once the test releases it.
#[derive(Default)]
struct TestHandler {
    name: &'static str,
    peer: OnceLock<Connection>,
    notes: Mutex<Vec<Value>>,
    /// Told each time a `sleep` or `hold` handler has begun (so a test knows the request arrived).
    begun: Arc<tokio::sync::Notify>,
    /// Lets one `hold` handler answer.
    release: Arc<tokio::sync::Notify>,
}

impl TestHandler {
    fn new(name: &'static str) -> Arc<TestHandler> {
        Arc::new(TestHandler { name, ..Default::default() })
    }
}

impl RequestHandler for TestHandler {
    fn handle(&self, method: String, params: Value) -> HandlerFuture {
        let name = self.name;
        let peer = self.peer.get().cloned();
        let (begun, release) = (self.begun.clone(), self.release.clone());
        if method == "note" {
            self.notes.lock().unwrap().push(params.clone());
        }
        Box::pin(async move {
            match method.as_str() {
                "echo" => Ok(json!({"from": name, "params": params})),
                "sleep" => {
                    let ms = params["ms"].as_u64().unwrap_or(0);
                    begun.notify_one();
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(json!({"from": name, "slept": ms, "tag": params["tag"]}))
                }
                "hold" => {
                    begun.notify_one();
                    release.notified().await;
                    Ok(json!({"from": name, "held": true}))
                }
                "fail" => Err(RpcError::application("Tool not allowed for pm: file.write")),
                "typed" => {
                    let hello: HelloParams = parse_params(&method, params)?;
                    Ok(json!(hello.version))
                }
                "big" => Ok(json!("x".repeat(params["bytes"].as_u64().unwrap_or(0) as usize))),
                "relay" => {
                    let peer = peer.ok_or_else(|| RpcError::internal("no peer"))?;
                    let answer = peer.request("echo", json!({"relayed": params})).await?;
                    Ok(json!({"via": name, "answer": answer}))
                }
                "note" => Ok(Value::Null),
                other => Err(RpcError::method_not_found(other)),
            }
        })
    }
}

/// Two connected ends, each with its own handler.
fn pair() -> (Connection, Connection, Arc<TestHandler>, Arc<TestHandler>) {
    let (a, b) = UnixStream::pair().unwrap();
    let (ha, hb) = (TestHandler::new("a"), TestHandler::new("b"));
    let (ca, _) = Connection::spawn(a, ha.clone());
    let (cb, _) = Connection::spawn(b, hb.clone());
    ha.peer.set(ca.clone()).ok();
    hb.peer.set(cb.clone()).ok();
    (ca, cb, ha, hb)
}

/// A connection on one end and a raw socket on the other, for writing bad frames.
fn raw_pair() -> (Connection, BufReader<UnixStream>) {
    let (a, b) = UnixStream::pair().unwrap();
    let (ca, _) = Connection::spawn(a, TestHandler::new("a"));
    (ca, BufReader::new(b))
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future).await.unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// A socket path in a fresh directory, which lives as long as the returned guard.
fn temp_socket(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix("suzumio-rpc-").tempdir().unwrap();
    let path = dir.path().join(name);
    (dir, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_in_both_directions_are_matched_by_id() {
    let (ca, cb, _, _) = pair();
    let mut tasks = Vec::new();
    for i in 0..200u64 {
        // Later requests sleep less, so answers come back out of order.
        let (from, to_name) = if i % 2 == 0 { (ca.clone(), "b") } else { (cb.clone(), "a") };
        tasks.push(tokio::spawn(async move {
            let answer = from.request("sleep", json!({"ms": (200 - i) % 17, "tag": i})).await.unwrap();
            assert_eq!(answer, json!({"from": to_name, "slept": (200 - i) % 17, "tag": i}));
        }));
    }
    for task in tasks {
        within("answers", task).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_handler_does_not_block_another_request() {
    let (ca, _cb, _, hb) = pair();
    let slow = tokio::spawn({
        let ca = ca.clone();
        async move { ca.request("hold", json!({})).await }
    });
    within("the held handler to begin", hb.begun.notified()).await;
    // The held request cannot have been answered: only the release below lets it.
    let answer = within("echo while a handler is held", ca.request("echo", json!({"n": 1}))).await.unwrap();
    assert_eq!(answer["params"]["n"], 1);
    assert!(!slow.is_finished(), "the held request was answered before its release");
    hb.release.notify_one();
    assert_eq!(within("the held answer", slow).await.unwrap().unwrap()["held"], true);
}

#[tokio::test]
async fn a_handler_can_call_back_into_the_peer_while_answering() {
    let (ca, _cb, _, _) = pair();
    let answer = within("relay", ca.request("relay", json!({"x": 1}))).await.unwrap();
    assert_eq!(answer, json!({"via": "b", "answer": {"from": "a", "params": {"relayed": {"x": 1}}}}));
}

#[tokio::test]
async fn errors_keep_their_code_and_message() {
    let (ca, _cb, _, _) = pair();
    let error = ca.request("fail", json!({})).await.unwrap_err();
    assert_eq!(error, RpcError::new(codes::APPLICATION, "Tool not allowed for pm: file.write"));
    assert_eq!(error.to_string(), "Tool not allowed for pm: file.write");

    let error = ca.request("nope", json!({})).await.unwrap_err();
    assert_eq!((error.code, error.message.as_str()), (codes::METHOD_NOT_FOUND, "Method not found: nope"));

    let error = ca.request("typed", json!({"version": 3})).await.unwrap_err();
    assert_eq!(error.code, codes::INVALID_PARAMS);
    assert!(error.message.starts_with("Invalid params for typed: "), "{}", error.message);

    // The connection is still fine after all of them.
    assert_eq!(ca.request("echo", Value::Null).await.unwrap()["from"], "b");
}

#[tokio::test]
async fn notifications_get_no_answer() {
    let (ca, _cb, _, hb) = pair();
    ca.notify("note", json!({"n": 1})).await.unwrap();
    ca.notify("note", json!({"n": 2})).await.unwrap();
    // A request after them is answered after they were handled (same reader, in order).
    ca.request("echo", json!({})).await.unwrap();
    within("notes", async {
        while hb.notes.lock().unwrap().len() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(*hb.notes.lock().unwrap(), vec![json!({"n": 1}), json!({"n": 2})]);
}

#[tokio::test]
async fn frames_up_to_the_limit_pass_and_larger_ones_are_refused_without_closing() {
    let (ca, _cb, _, _) = pair();
    let near = MAX_FRAME_BYTES - 1024;
    let answer = within("big echo", ca.request("echo", json!({"s": "y".repeat(near)}))).await.unwrap();
    assert_eq!(answer["params"]["s"].as_str().unwrap().len(), near);

    let error = ca.request("echo", json!({"s": "y".repeat(MAX_FRAME_BYTES)})).await.unwrap_err();
    assert_eq!(error.code, codes::INVALID_REQUEST);
    assert!(error.message.contains("too large"), "{}", error.message);

    // A result over the limit is answered with its size, as a tool call's `too_large`.
    let error = ca.request("big", json!({"bytes": MAX_FRAME_BYTES})).await.unwrap_err();
    assert_eq!((error.code, error.data.clone()), (codes::APPLICATION, Some(json!({"kind": "too_large"}))));
    assert!(error.message.contains(" bytes) exceeds the limit of 8.4 MB (8388608 bytes)"), "{}", error.message);
    assert!(!ca.is_closed());
    assert_eq!(ca.request("echo", json!({})).await.unwrap()["from"], "b");
}

/// Send `bad` from the raw end while the connection waits for an answer; the connection must
/// answer with one error frame of `code`, close, and fail the pending request.
async fn check_violation(bad: Vec<u8>, code: i64) {
    let (conn, mut raw) = raw_pair();
    let pending = tokio::spawn({
        let conn = conn.clone();
        async move { conn.request("never-answered", json!({})).await }
    });
    let mut line = String::new();
    raw.read_line(&mut line).await.unwrap();
    assert!(line.contains("never-answered"));
    // Write in the background: an oversized frame is refused before it is all read.
    let mut raw_stream = raw.into_inner();
    let (read_half, mut write_half) = raw_stream.split();
    let write = async move {
        let _ = write_half.write_all(&bad).await;
    };
    let read = async move {
        let mut reader = BufReader::new(read_half);
        let mut frames = Vec::new();
        let mut line = String::new();
        while reader.read_line(&mut line).await.unwrap_or(0) > 0 {
            frames.push(serde_json::from_str::<Value>(&line).unwrap());
            line.clear();
        }
        frames
    };
    let (_, frames) = within("violation", async { tokio::join!(write, read) }).await;
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["id"], Value::Null);
    assert_eq!(frames[0]["error"]["code"], code, "{frames:?}");
    let error = within("pending", pending).await.unwrap().unwrap_err();
    assert!(error.is_connection_closed(), "{error:?}");
    assert_eq!(error.message, "connection closed");
    within("closed", conn.closed()).await;
    assert!(conn.request("echo", json!({})).await.unwrap_err().is_connection_closed());
}

#[tokio::test]
async fn an_oversized_frame_closes_the_connection() {
    check_violation(vec![b'a'; MAX_FRAME_BYTES + 10], codes::INVALID_REQUEST).await;
}

#[tokio::test]
async fn a_garbage_line_closes_the_connection() {
    check_violation(b"this is not json\n".to_vec(), codes::PARSE_ERROR).await;
}

#[tokio::test]
async fn invalid_utf8_closes_the_connection() {
    check_violation(b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}\n".to_vec(), codes::PARSE_ERROR).await;
}

#[tokio::test]
async fn a_wrong_jsonrpc_version_closes_the_connection() {
    check_violation(b"{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"echo\"}\n".to_vec(), codes::INVALID_REQUEST).await;
}

#[tokio::test]
async fn a_json_value_that_is_not_a_jsonrpc_object_closes_the_connection() {
    check_violation(b"[1,2,3]\n".to_vec(), codes::INVALID_REQUEST).await;
    check_violation(b"{\"jsonrpc\":\"2.0\",\"id\":1}\n".to_vec(), codes::INVALID_REQUEST).await;
    check_violation(
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":3}\n".to_vec(),
        codes::INVALID_REQUEST,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_violation_closes_only_that_connection() {
    let (_dir, path) = temp_socket("server.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let handler = TestHandler::new("server");
    let server = tokio::spawn({
        let handler = handler.clone();
        async move {
            let mut connections = Vec::new();
            for _ in 0..2 {
                let (stream, _) = listener.accept().await.unwrap();
                connections.push(Connection::spawn(stream, handler.clone()).0);
            }
            connections
        }
    });
    let mut bad = UnixStream::connect(&path).await.unwrap();
    let good = Connection::spawn(UnixStream::connect(&path).await.unwrap(), TestHandler::new("client")).0;
    let connections = within("accept", server).await.unwrap();

    bad.write_all(b"garbage\n").await.unwrap();
    let mut rest = Vec::new();
    let _ = within("bad closed", tokio::io::AsyncReadExt::read_to_end(&mut bad, &mut rest)).await;
    assert!(String::from_utf8_lossy(&rest).contains("-32700"));

    assert_eq!(within("good echo", good.request("echo", json!({}))).await.unwrap()["from"], "server");
    assert_eq!(connections.iter().filter(|c| c.is_closed()).count(), 1);
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[tokio::test]
async fn closing_gracefully_still_answers_requests_already_received() {
    let (ca, cb, _, hb) = pair();
    let slow = tokio::spawn({
        let ca = ca.clone();
        async move { ca.request("sleep", json!({"ms": 200, "tag": "last"})).await }
    });
    within("the request to be received", hb.begun.notified()).await;
    within("close", cb.close()).await;
    assert_eq!(within("slow", slow).await.unwrap().unwrap()["tag"], "last");
    within("peer sees the close", ca.closed()).await;
}

#[tokio::test]
async fn the_peer_going_away_fails_pending_requests() {
    let (ca, cb, _, hb) = pair();
    let pending = tokio::spawn({
        let ca = ca.clone();
        async move { ca.request("hold", json!({})).await }
    });
    within("the request to be received", hb.begun.notified()).await;
    cb.abort();
    let error = within("pending", pending).await.unwrap().unwrap_err();
    assert!(error.is_connection_closed());
}

/// The handshake as the controller does it: check the token, answer or refuse and close.
struct HelloController {
    token: &'static str,
    me: OnceLock<Connection>,
}

impl RequestHandler for HelloController {
    fn handle(&self, name: String, params: Value) -> HandlerFuture {
        let token = self.token;
        let me = self.me.get().cloned();
        Box::pin(async move {
            if name != method::HELLO {
                return Err(RpcError::method_not_found(&name));
            }
            let hello: HelloParams = parse_params(&name, params)?;
            if hello.token != token || hello.protocol != PROTOCOL_VERSION {
                if let Some(me) = me {
                    // Closes once this answer is queued.
                    tokio::spawn(async move { me.close().await });
                }
                return Err(RpcError::application("Invalid agent token"));
            }
            serde_json::to_value(HelloResult {
                project: "demo".into(),
                agent_id: "pm".into(),
                protocol: PROTOCOL_VERSION,
                resume: None,
            })
            .map_err(|e| RpcError::internal(e.to_string()))
        })
    }
}

async fn hello_with(token: &str) -> (Result<HelloResult, RpcError>, Connection) {
    let (_dir, path) = temp_socket("control.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let (accepted, connected) =
        within("connect", async { tokio::join!(listener.accept(), UnixStream::connect(&path)) }).await;
    let handler = Arc::new(HelloController { token: "secret", me: OnceLock::new() });
    let (controller, driver) = Connection::spawn(accepted.unwrap().0, handler.clone());
    handler.me.set(controller).ok();
    let runner = Connection::spawn(connected.unwrap(), TestHandler::new("runner")).0;
    let hello = HelloParams { version: "0.1.0".into(), protocol: PROTOCOL_VERSION, token: token.into(), resume: None };
    let answer = within("hello", runner.call::<_, HelloResult>(method::HELLO, &hello)).await;
    if answer.is_err() {
        within("controller driver ends", driver).await.unwrap();
    }
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
    (answer, runner)
}

#[tokio::test]
async fn hello_with_the_right_token_names_the_project_and_agent() {
    let (answer, runner) = hello_with("secret").await;
    assert_eq!(
        answer.unwrap(),
        HelloResult { project: "demo".into(), agent_id: "pm".into(), protocol: 1, resume: None }
    );
    assert!(!runner.is_closed());
}

#[tokio::test]
async fn hello_with_a_wrong_token_is_refused_and_the_controller_closes() {
    let (answer, runner) = hello_with("guess").await;
    assert_eq!(answer.unwrap_err(), RpcError::application("Invalid agent token"));
    within("runner sees the close", runner.closed()).await;
}

#[test]
fn wire_types_are_camel_case() {
    let hello = HelloResult { project: "p".into(), agent_id: "pm".into(), protocol: 1, resume: None };
    assert_eq!(serde_json::to_value(&hello).unwrap(), json!({"project": "p", "agentId": "pm", "protocol": 1}));
    let invoke: suzumio::rpc::InvokeParams =
        serde_json::from_value(json!({"activationId": "act_1", "tool": "file.read", "callId": "c1"})).unwrap();
    assert_eq!(invoke.input, None);
    let signal = serde_json::from_value::<suzumio::rpc::SignalRequest>(json!({"kind": "x", "status": "closed"}));
    assert!(signal.unwrap_err().to_string().contains("unknown field `status`"));
}
