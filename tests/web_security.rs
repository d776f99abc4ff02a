//! The API's trust boundary over real sockets, tried as an attacker would: DNS rebinding (a
//! foreign `Host`, with or without a matching `Origin`), origins with the wrong scheme or port,
//! `--allowed-host` for a reverse proxy, token mode, and a flood of event streams.
//!
//! Requests whose `Host` matters go over a raw `TcpStream`: reqwest derives `Host` from the URL.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{Controller, TempProject, http};

const P: &str = "/api/projects/review-demo";

/// The controller's socket address, from its base URL.
fn addr(c: &Controller) -> SocketAddr {
    c.base.trim_start_matches("http://").parse().expect("the base URL is http://IP:PORT")
}

fn port(c: &Controller) -> u16 {
    addr(c).port()
}

/// An answer read off a raw socket.
struct Raw {
    status: u16,
    head: String,
    body: String,
}

impl Raw {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Read a response's head, and its body when it has a `Content-Length` (an event stream has
/// none: its socket stays open).
fn read_response(stream: &mut TcpStream) -> Raw {
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let split = loop {
        if let Some(at) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = stream.read(&mut buf).expect("the response head arrives");
        assert!(n > 0, "the connection closed before a response: {:?}", String::from_utf8_lossy(&bytes));
        bytes.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&bytes[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("a status line");
    let mut raw = Raw { status, head, body: String::new() };
    if let Some(length) = raw.header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        let mut body = bytes[split + 4..].to_vec();
        while body.len() < length {
            let n = stream.read(&mut buf).expect("the body arrives");
            assert!(n > 0, "the body ended early");
            body.extend_from_slice(&buf[..n]);
        }
        raw.body = String::from_utf8_lossy(&body).into_owned();
    }
    raw
}

/// One request with exactly these headers (`Host` included, or left out when not given).
fn raw(c: &Controller, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> Raw {
    let mut stream = TcpStream::connect(addr(c)).unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(body) = body {
        request.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body.unwrap_or(""));
    stream.write_all(request.as_bytes()).unwrap();
    read_response(&mut stream)
}

#[test]
fn a_rebinding_host_is_misdirected_on_every_route_and_loopback_names_work() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    let port = port(&c);
    let evil = format!("evil.example:{port}");
    let evil_origin = format!("http://{evil}");
    let message = r#"{"recipient": "pm", "body": "from a rebinding page"}"#;
    let status_before = http("GET", &c.url(P), &[], None).json()["status"].clone();
    let routes = [
        ("GET", format!("{P}/agents"), None),
        ("POST", format!("{P}/messages"), Some(message)),
        ("POST", format!("{P}/stop"), Some("")),
        ("GET", format!("{P}/stream"), None),
        ("GET", "/".to_string(), None),
        ("GET", "/ui/app.js".to_string(), None),
        ("GET", "/health".to_string(), None),
        ("GET", "/no/such/route".to_string(), None),
    ];
    for (method, path, body) in &routes {
        for headers in [vec![("Host", evil.as_str())], vec![("Host", evil.as_str()), ("Origin", evil_origin.as_str())]]
        {
            let r = raw(&c, method, path, &headers, *body);
            assert_eq!(r.status, 421, "{method} {path} {headers:?}: {}", r.body);
            let error = r.json()["error"].as_str().unwrap().to_string();
            assert!(error.contains(&evil) && error.contains("--allowed-host"), "{error}");
        }
    }
    // Nothing the refused requests asked for happened.
    assert_eq!(http("GET", &c.url(P), &[], None).json()["status"], status_before, "not stopped");
    assert_eq!(http("GET", &c.url(&format!("{P}/messages")), &[], None).json()["items"], json!([]));

    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
        let r = raw(&c, "GET", &format!("{P}/agents"), &[("Host", &host)], None);
        assert_eq!(r.status, 200, "{host}: {}", r.body);
        let origin = format!("http://{host}");
        let r = raw(&c, "POST", &format!("{P}/messages"), &[("Host", &host), ("Origin", &origin)], Some(message));
        assert_eq!(r.status, 201, "{host}: {}", r.body);
    }
    for host in [format!("localhost:{}", port.wrapping_add(1)), "localhost".to_string(), format!("127.0.0.2:{port}")] {
        assert_eq!(raw(&c, "GET", &format!("{P}/agents"), &[("Host", &host)], None).status, 421, "{host}");
    }
    // HTTP/1.1 requires Host; a request without one is refused.
    let r = raw(&c, "GET", &format!("{P}/agents"), &[], None);
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.json()["error"], "the request has no Host header");
    assert_eq!(http("GET", &c.url("/health"), &[], None).status, 200);
}

#[test]
fn an_origin_with_the_wrong_scheme_or_port_is_refused() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    let port = port(&c);
    let url = c.url(&format!("{P}/messages"));
    let body = r#"{"recipient": "pm", "body": "hi"}"#;
    let status_before = http("GET", &c.url(P), &[], None).json()["status"].clone();
    for origin in [
        format!("https://127.0.0.1:{port}"),
        format!("http://127.0.0.1:{}", port.wrapping_add(1)),
        "http://127.0.0.1".to_string(),
        format!("http://evil.example:{port}"),
        "null".to_string(),
    ] {
        let r = http("POST", &url, &[("Origin", &origin)], Some(body));
        assert_eq!(r.status, 403, "{origin}: {}", r.body);
        assert!(r.json()["error"].as_str().unwrap().contains(&origin), "{}", r.body);
        let r = http("POST", &c.url(&format!("{P}/stop")), &[("Origin", &origin)], Some(""));
        assert_eq!(r.status, 403, "{origin}: {}", r.body);
    }
    // Reads from another origin are refused too: no page elsewhere may hold a stream open.
    let r = http("GET", &c.url(&format!("{P}/stream")), &[("Origin", "http://evil.example")], None);
    assert_eq!(r.status, 403, "{}", r.body);
    let own = format!("http://127.0.0.1:{port}");
    assert_eq!(http("POST", &url, &[("Origin", &own)], Some(body)).status, 201);
    assert_eq!(http("POST", &url, &[], Some(body)).status, 201, "no Origin (curl, the CLI): allowed");
    assert_eq!(http("GET", &c.url(P), &[], None).json()["status"], status_before, "not stopped");
}

#[test]
fn an_allowed_host_admits_exactly_that_name() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &["--allowed-host", "proxy.example"]);
    let port = port(&c);
    let agents = format!("{P}/agents");
    for host in ["proxy.example", "proxy.example:443", &format!("PROXY.example:{port}")] {
        assert_eq!(raw(&c, "GET", &agents, &[("Host", host)], None).status, 200, "{host}");
    }
    for host in ["sub.proxy.example", "proxy.example.evil", "evil.example"] {
        let r = raw(&c, "GET", &agents, &[("Host", host)], None);
        assert_eq!(r.status, 421, "{host}");
        assert!(r.json()["error"].as_str().unwrap().contains("proxy.example"), "names what is accepted: {}", r.body);
    }
    // Behind a proxy that ends TLS the page's origin is https.
    let message = r#"{"recipient": "pm", "body": "via the proxy"}"#;
    let headers = [("Host", "proxy.example"), ("Origin", "https://proxy.example")];
    assert_eq!(raw(&c, "POST", &format!("{P}/messages"), &headers, Some(message)).status, 201);
    let headers = [("Host", "proxy.example"), ("Origin", "https://evil.example")];
    assert_eq!(raw(&c, "POST", &format!("{P}/messages"), &headers, Some(message)).status, 403);
    drop(c);

    // The environment variable, comma-separated; a port pins the name to it.
    let c = Controller::start_with_env(&project.dir, &[], &[("SUZUMIO_ALLOWED_HOSTS", "a.example,b.example:8080")]);
    for (host, status) in [("a.example:1", 200), ("b.example:8080", 200), ("b.example:8081", 421), ("b.example", 421)] {
        assert_eq!(raw(&c, "GET", &agents, &[("Host", host)], None).status, status, "{host}");
    }
    drop(c);

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["run", project.dir.to_str().unwrap(), "--port", "0", "--allowed-host", "https://proxy.example/"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(support::text(&out.stderr).contains("invalid allowed host"), "{}", support::text(&out.stderr));
}

#[test]
fn token_mode_answers_addresses_and_allowed_names_only() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &["--host", "0.0.0.0", "--token", "tok-1"]);
    let port = port(&c);
    let agents = format!("{P}/agents");
    let auth = ("Authorization", "Bearer tok-1");
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("0.0.0.0:{port}")] {
        assert_eq!(raw(&c, "GET", &agents, &[("Host", &host), auth], None).status, 200, "{host}");
    }
    let evil = format!("evil.example:{port}");
    assert_eq!(raw(&c, "GET", &agents, &[("Host", &evil), auth], None).status, 421, "the token does not admit a name");
    assert_eq!(raw(&c, "GET", &agents, &[("Host", &format!("127.0.0.1:{port}"))], None).status, 401);
}

/// A connection to the controller from `source` (any 127.0.0.0/8 address is this machine, so
/// each stands for another client).
fn connect_from(source: &str, to: SocketAddr) -> TcpStream {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
        let stream = socket.connect(to).await.unwrap_or_else(|e| panic!("connect from {source}: {e}"));
        let stream = stream.into_std().unwrap();
        stream.set_nonblocking(false).unwrap();
        stream
    })
}

/// Open an event stream from `source`: the open socket and the answer's head (its body, when
/// refused).
fn open_stream(c: &Controller, source: &str) -> (TcpStream, Raw) {
    let mut stream = connect_from(source, addr(c));
    let request =
        format!("GET {P}/stream HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAccept: text/event-stream\r\n\r\n", port(c));
    stream.write_all(request.as_bytes()).unwrap();
    let response = read_response(&mut stream);
    (stream, response)
}

/// Open a stream, retrying while the controller has not yet noticed closed ones.
fn open_stream_eventually(c: &Controller, source: &str) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (stream, r) = open_stream(c, source);
        if r.status == 200 {
            return stream;
        }
        assert_eq!(r.status, 503, "{}", r.body);
        assert!(Instant::now() < deadline, "closed streams were not given back: {}", r.body);
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn event_streams_are_capped_per_client_and_overall_and_closed_ones_are_given_back() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    // The defaults: 16 per client address, 64 in all.
    let mut first: Vec<TcpStream> = (0..16)
        .map(|i| {
            let (stream, r) = open_stream(&c, "127.0.0.1");
            assert_eq!(r.status, 200, "stream {i}: {}", r.body);
            stream
        })
        .collect();
    let (_refused, r) = open_stream(&c, "127.0.0.1");
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.header("retry-after"), Some("10"));
    assert_eq!(r.header("connection"), Some("close"), "a refused client keeps no connection open");
    assert!(r.json()["error"].as_str().unwrap().contains("16 event streams are open from this address"), "{}", r.body);

    // Close half; as many open again.
    first.truncate(8);
    for _ in 0..8 {
        first.push(open_stream_eventually(&c, "127.0.0.1"));
    }
    let (_refused, r) = open_stream(&c, "127.0.0.1");
    assert_eq!(r.status, 503, "full again: {}", r.body);

    // Other clients fill the rest, then even a new client is refused.
    let controller = &c;
    let others: Vec<TcpStream> = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        .iter()
        .flat_map(|source| {
            (0..16).map(move |i| {
                let (stream, r) = open_stream(controller, source);
                assert_eq!(r.status, 200, "{source} stream {i}: {}", r.body);
                stream
            })
        })
        .collect();
    let (_refused, r) = open_stream(&c, "127.0.0.5");
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.json()["error"].as_str().unwrap().contains("64 event streams are open"), "{}", r.body);
    assert_eq!(http("GET", &c.url("/health"), &[], None).status, 200, "other routes keep answering");

    drop(first);
    drop(others);
    let mut stream = open_stream_eventually(&c, "127.0.0.5");
    let more: Vec<TcpStream> = (0..15).map(|_| open_stream_eventually(&c, "127.0.0.1")).collect();
    assert_eq!(more.len(), 15);

    // A stream opened after the flood still delivers events.
    let sent = http("POST", &c.url(&format!("{P}/messages")), &[], Some(r#"{"recipient": "pm", "body": "after"}"#));
    assert_eq!(sent.status, 201, "{}", sent.body);
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains("message.created") {
        let n = stream.read(&mut buf).expect("the stream delivers");
        assert!(n > 0, "the stream ended: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert_eq!(http("GET", &c.url("/health"), &[], None).status, 200);
}

/// The worker's model runs a command full of secrets (harmless: it only echoes).
const SECRET_SCRIPT: &str = r#"
activations:
  - agent: worker
    steps:
      - call: [{tool: shell.exec, input: {command: "API_TOKEN=hunter2 echo https://bob:pw-1@example.com/?api_key=k-2 --password=pw-3"}}]
      - say: done
"#;

#[test]
fn tool_call_lists_show_a_redacted_target() {
    let worker = ("reviewer:\n    tools:", "worker:\n    tools: [shell.exec]\n  reviewer:\n    tools:");
    let project = TempProject::scripted("review", SECRET_SCRIPT, &[worker]);
    let dir = project.dir.to_str().unwrap().to_string();
    assert_eq!(support::suzumio(&project.dir, &["start", &dir]).status.code(), Some(0));
    let sent = support::suzumio(&project.dir, &["send", &dir, "worker", "run it"]);
    assert_eq!(sent.status.code(), Some(0), "{}", support::text(&sent.stderr));

    let runner = support::runner_binary();
    let c = Controller::start_with_env(&project.dir, &[], &[("SUZUMIO_RUNNER_BIN", runner.to_str().unwrap())]);
    let started = Instant::now();
    let call = loop {
        let calls = http("GET", &c.url(&format!("{P}/tool-calls")), &[], None).json();
        let done = calls["items"]
            .as_array()
            .and_then(|items| items.iter().find(|t| t["tool"] == "shell.exec" && t["status"] != "running").cloned());
        if let Some(call) = done {
            break call;
        }
        assert!(started.elapsed() < support::PATIENCE, "no shell.exec call finished; stderr:\n{}", c.stderr());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(call["status"], "completed", "{call}");
    assert_eq!(call["target"], "API_TOKEN=*** echo https://***@example.com/?api_key=*** --password=***");
    let detail = http("GET", &c.url(&format!("{P}/activations/{}", call["activationId"].as_str().unwrap())), &[], None);
    assert_eq!(detail.json()["toolCalls"][0]["target"], call["target"], "{}", detail.body);
    for secret in ["hunter2", "pw-1", "k-2", "pw-3"] {
        assert!(!detail.body.contains(secret), "{secret} in {}", detail.body);
    }
}
