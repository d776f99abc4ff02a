//! What the benchmarks share: percentiles, copying a fixture project, a client end that
//! answers `load` like a runner with no packs, and the quick mode.
//!
//! Quick mode (`SUZUMIO_BENCH_QUICK=1`, what `scripts/test.sh` sets): every measurement runs a
//! few iterations only, so the test command runs each bench end to end in seconds and a bench
//! that breaks fails the suite. Its figures mean nothing.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

/// The `p` quantile (0..=1) of the samples.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut s = samples.to_vec();
    s.sort();
    s[((s.len() as f64 - 1.0) * p).round() as usize]
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Answers `load` with no tools: enough to hold a session open on an agent's socket.
pub struct AnswerLoad;

impl suzumio::rpc::RequestHandler for AnswerLoad {
    fn handle(&self, method: String, _params: Value) -> suzumio::rpc::HandlerFuture {
        Box::pin(async move {
            match method.as_str() {
                "load" => Ok(json!({"tools": []})),
                other => Err(suzumio::rpc::RpcError::method_not_found(other)),
            }
        })
    }
}

/// True when a test runner asks a benchmark to list its tests (it has none).
pub fn listing() -> bool {
    std::env::args().any(|a| a == "--list")
}

/// True in quick mode (`SUZUMIO_BENCH_QUICK=1`).
pub fn quick() -> bool {
    std::env::var("SUZUMIO_BENCH_QUICK").is_ok_and(|v| v == "1")
}

/// `full` iterations, or `few` in quick mode.
pub fn iterations(full: usize, few: usize) -> usize {
    if quick() { few } else { full }
}

/// Run `total` calls of `f` from `n` tasks at once (each starts its next call when its last
/// returns): every call's latency, and the calls per second over the whole run.
pub async fn in_flight<F, Fut>(n: usize, total: usize, f: F) -> (Vec<Duration>, f64)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let start = std::time::Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (f, next) = (f.clone(), next.clone());
            tokio::spawn(async move {
                let mut samples = Vec::new();
                while next.fetch_add(1, Ordering::Relaxed) < total {
                    let t = std::time::Instant::now();
                    f().await;
                    samples.push(t.elapsed());
                }
                samples
            })
        })
        .collect();
    let mut samples = Vec::with_capacity(total);
    for task in tasks {
        samples.extend(task.await.unwrap());
    }
    (samples, total as f64 / start.elapsed().as_secs_f64())
}

/// The original's `callSupport` path re-created in Node (`benches/peers/node-support-path/`, a
/// copy of the project's shared peer; see its README), run against `pack_dir` with `clients` keep-alive clients for `seconds`:
/// the lines its client prints (p50/p99 of sequential calls, throughput).
pub fn node_peer(pack_dir: &Path, clients: usize, seconds: u64) -> Vec<String> {
    use std::process::{Command, Stdio};
    // A verbatim copy of the shared peer, kept with the benches so that a clean clone runs it.
    let peer = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers/node-support-path");
    assert!(peer.join("server.mjs").is_file(), "the Node peer is missing at {}", peer.display());
    let version = Command::new("node").arg("--version").output();
    assert!(
        version.as_ref().is_ok_and(|o| o.status.success()),
        "`node` is not installed or not on PATH ({version:?}): install Node.js 20 or newer \
         (`apt-get install nodejs`, or https://nodejs.org) to run the Node peer beside callSupport"
    );
    // The peer's `recordSignal` is a stub that returns nothing: give it a copy of the pack whose
    // handler reads the (absent) signal ids leniently; otherwise the same code runs.
    let pack = std::env::temp_dir().join(format!("suzumio-node-peer-{}", std::process::id()));
    copy_dir(pack_dir, &pack);
    let controller = pack.join("controller.mjs");
    let source = std::fs::read_to_string(&controller).unwrap();
    std::fs::write(&controller, source.replace("signals.map(", "(signals ?? []).map(")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = Command::new("node")
        .arg(peer.join("server.mjs"))
        .arg(port.to_string())
        .arg(&pack)
        .stdout(Stdio::null())
        .spawn()
        .expect("starting the Node peer's server");
    // Listening is the event to wait for; the deadline only guards against a server that died.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "the Node peer's server never listened on {port}");
        assert!(server.try_wait().unwrap().is_none(), "the Node peer's server exited before listening");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = Command::new("node")
        .arg(peer.join("client.mjs"))
        .args([port.to_string(), clients.to_string(), seconds.to_string()])
        .output()
        .expect("running the Node peer's client");
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&pack);
    assert!(out.status.success(), "the Node peer's client failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}
