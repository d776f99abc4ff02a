//! Per-call costs on the controller side, side by side in one run (medians and p99):
//! - a controller-side `support` call into a pack's warm JavaScript runtime, in process (it
//!   records a signal: one durable write), sequential and with 16 in flight, beside the
//!   original's path re-created in Node (`shared/peers/node-support-path/`) in the same run;
//! - a built-in WebUI entry (`core/project.stats`, Rust + SQLite), in process;
//! - `POST /api/projects/:p/tool-ui/...` over loopback HTTP (keep-alive), for a JS pack entry
//!   and for the built-in entry.
//!
//! Run with `cargo bench --bench controller` (optionally `-- <iterations>`; `SUZUMIO_BENCH_QUICK=1`:
//! 20).

mod common;

use common::copy_dir;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use suzumio::clock::SystemClock;
use suzumio::config::load::ProcessEnv;
use suzumio::project::Project;
use suzumio::store::{StateFiles, Store};
use suzumio::support::ToolHost;

struct Stats {
    name: &'static str,
    samples: Vec<Duration>,
}

impl Stats {
    fn percentile(&self, p: f64) -> Duration {
        common::percentile(&self.samples, p)
    }
}

fn measure(name: &'static str, iterations: usize, mut f: impl FnMut()) -> Stats {
    for _ in 0..iterations / 10 + 1 {
        f(); // warm up
    }
    let samples = (0..iterations)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    Stats { name, samples }
}

/// A keep-alive HTTP/1.1 connection (requests with Content-Length, responses read by length).
struct Conn {
    reader: BufReader<TcpStream>,
    host: String,
}

impl Conn {
    fn post(&mut self, path: &str, body: &str) -> u16 {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        self.reader.get_mut().write_all(request.as_bytes()).unwrap();
        let mut status_line = String::new();
        self.reader.read_line(&mut status_line).unwrap();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        status_line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
    }
}

fn main() {
    // Test runners list the tests of every target; a benchmark has none.
    if common::listing() {
        return;
    }
    let iterations: usize =
        std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(common::iterations(2000, 20));
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("suzumio-bench-{}", std::process::id()));
    copy_dir(&repo.join("tests/fixtures/projects/review"), &dir);

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let project = Arc::new(Project::load(&dir, &ProcessEnv).expect("fixture project loads"));
    let store = Store::open(&project.config, Arc::new(SystemClock)).unwrap();
    let host = ToolHost::new(project.clone(), store, StateFiles::new(&dir));
    let activation = host.store.start_activation("reviewer", "bench", &[]).unwrap();

    let mut results = Vec::new();
    results.push(measure("support call, JS pack (in process)", iterations, || {
        let out = rt.block_on(host.support(
            "reviewer",
            &activation.id,
            "review-tools",
            "review.summarize",
            json!({"summary": "ok"}),
        ));
        assert!(out.is_ok(), "{out:?}");
    }));
    let commits_before = host.store.commits();
    let support_in_flight = {
        let (host, activation) = (host.clone(), activation.id.clone());
        rt.block_on(common::in_flight(16, iterations * 4, move || {
            let (host, activation) = (host.clone(), activation.clone());
            async move {
                let out = host
                    .support("reviewer", &activation, "review-tools", "review.summarize", json!({"summary": "ok"}))
                    .await;
                assert!(out.is_ok(), "{out:?}");
            }
        }))
    };
    let in_flight_commits = host.store.commits() - commits_before;
    results.push(measure("WebUI entry, JS pack, trivial handler (in process)", iterations, || {
        let out = rt.block_on(host.invoke_webui("slow", "slow.ok", json!({})));
        assert!(out.is_ok(), "{out:?}");
    }));
    results.push(measure("WebUI panel, JS pack review.stats (in process)", iterations, || {
        let out = rt.block_on(host.invoke_webui("review-tools", "review.stats", json!({})));
        assert!(out.is_ok(), "{out:?}");
    }));
    results.push(measure("WebUI panel, built-in project.stats (in process)", iterations, || {
        let out = rt.block_on(host.invoke_webui("core", "project.stats", json!({})));
        assert!(out.is_ok(), "{out:?}");
    }));

    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let router = suzumio::web::router(host.clone(), None);
    rt.spawn(async move { axum::serve(listener, router).await });
    let mut conn = Conn { reader: BufReader::new(TcpStream::connect(addr).unwrap()), host: addr.to_string() };
    conn.reader.get_mut().set_nodelay(true).unwrap();
    let base = format!("/api/projects/{}/tool-ui", project.config.name);
    results.push(measure("POST tool-ui, JS pack review.stats (loopback HTTP)", iterations, || {
        assert_eq!(conn.post(&format!("{base}/review-tools/review.stats"), "{}"), 200);
    }));
    results.push(measure("POST tool-ui, built-in project.stats (loopback HTTP)", iterations, || {
        assert_eq!(conn.post(&format!("{base}/core/project.stats"), "{}"), 200);
    }));

    println!("{iterations} iterations each");
    println!("{:<55} {:>12} {:>12}", "case", "median", "p99");
    for r in &results {
        println!("{:<55} {:>10.1}µs {:>10.1}µs", r.name, micros(r.percentile(0.5)), micros(r.percentile(0.99)));
    }
    let (samples, rate) = support_in_flight;
    let in_flight = Stats { name: "support call, JS pack, 16 in flight (in process)", samples };
    println!(
        "{:<55} {:>10.1}µs {:>10.1}µs {:>8.0} calls/s",
        in_flight.name,
        micros(in_flight.percentile(0.5)),
        micros(in_flight.percentile(0.99)),
        rate
    );
    println!("  {} calls, {in_flight_commits} store commits (fsyncs)", iterations * 4);

    // The same pack, served by the original's path re-created in Node, in this run.
    let seconds = if common::quick() { 1 } else { 5 };
    println!("Node peer (node-support-path, 16 clients, {seconds} s), review.summarize:");
    for line in common::node_peer(&dir.join("toolpacks/review"), 16, seconds) {
        println!("  {line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
