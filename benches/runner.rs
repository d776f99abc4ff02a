//! The runner path on this machine, side by side in one run (medians and p99):
//! - cold start: `docker run --rm <minimal image> true` vs our hardened agent container from
//!   nothing to "runner ready" (created, started, connected, hello, toolpacks loaded);
//! - a warm tool call of a trivial `runner.mjs` tool: over the socket only, and through the full
//!   path (allowlist, schema, recorded start/finish in SQLite), sequential and with 16 in flight;
//! - `callSupport` round trip on the agent's socket (broker checks + the pack's controller
//!   handler), sequential latency and throughput with 16 calls in flight.
//!
//! Needs Docker and the static runner (release build preferred):
//! `RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --target x86_64-unknown-linux-gnu -p suzumio-runner`
//! then `cargo bench --bench runner` (`SUZUMIO_BENCH_QUICK=1`: a few iterations of each, as
//! `scripts/test.sh` runs it).

mod common;

use common::{AnswerLoad, copy_dir, iterations, percentile};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use suzumio::calls::execute_tool;
use suzumio::config::BackendKind;

fn row(name: &str, samples: &[Duration]) {
    println!(
        "{:<58} {:>10.3}ms {:>10.3}ms",
        name,
        percentile(samples, 0.5).as_secs_f64() * 1e3,
        percentile(samples, 0.99).as_secs_f64() * 1e3
    );
}

fn main() {
    if common::listing() {
        return;
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let runner = ["release", "debug"]
        .iter()
        .map(|p| repo.join("target/x86_64-unknown-linux-gnu").join(p).join("suzumio-runner"))
        .find(|p| p.is_file())
        .expect("build the static runner first (see the header of benches/runner.rs)");
    let dir = std::env::temp_dir().join(format!("suzumio-bench-runner-{}", std::process::id()));
    copy_dir(&repo.join("tests/fixtures/projects/bench"), &dir);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let tools = suzumio::controller::open(&dir).unwrap();
        let runner_set = || suzumio::controller::runners_with(&tools, BackendKind::Docker, runner.clone());
        let image = tools.project.config.backend.docker.image.clone();
        println!("runner binary: {}", runner.display());
        println!("{:<58} {:>12} {:>12}", "case", "median", "p99");

        // The bare `docker run` needs the image the agents' containers use; the backend builds
        // the default one only at the first container start.
        let docker = suzumio::backend::DockerBackend::connect().await.unwrap();
        docker.ensure_image(&image).await.unwrap();
        let mut bare = Vec::new();
        for _ in 0..iterations(10, 2) {
            let start = Instant::now();
            let out = std::process::Command::new("docker")
                .args(["run", "--rm", "--network", "none", &image, "true"])
                .output()
                .unwrap();
            assert!(out.status.success());
            bare.push(start.elapsed());
        }
        row("docker run --rm (network none) of the minimal image", &bare);

        // `shutdown` is final (the sockets' listeners are gone for good), so each cold start
        // has its own runner set, made before the clock starts; the last one stays for the
        // warm measurements.
        let mut cold = Vec::new();
        let cold_starts = iterations(10, 2);
        let mut warm = None;
        for i in 0..cold_starts {
            let runners = runner_set().await.unwrap();
            let start = Instant::now();
            let errors = runners.warm_up().await;
            assert!(errors.is_empty(), "{errors:?}");
            cold.push(start.elapsed());
            if i + 1 == cold_starts {
                warm = Some(runners);
            } else {
                runners.shutdown().await;
            }
        }
        let runners = warm.expect("at least one cold start");
        row("our agent container: nothing -> runner ready", &cold);
        println!(
            "  ratio (medians): {:.2}x",
            percentile(&cold, 0.5).as_secs_f64() / percentile(&bare, 0.5).as_secs_f64()
        );

        let activation = tools.store.start_activation("w", "bench", &[]).unwrap();
        let mut socket_only = Vec::new();
        let mut full = Vec::new();
        let (calls, warm_up) = (iterations(2000, 20), iterations(200, 2));
        for i in 0..calls {
            let start = Instant::now();
            let out = runners.invoke("w", &activation.id, "bench.echo", json!({"x": "hi"})).await.unwrap();
            if i >= warm_up {
                socket_only.push(start.elapsed());
            }
            assert_eq!(out.output, "hi");
        }
        row("warm runner.mjs tool call, socket + runner only", &socket_only);
        let (calls, warm_up) = (iterations(1000, 20), iterations(100, 2));
        for i in 0..calls {
            let start = Instant::now();
            execute_tool(&tools, runners.as_ref(), "w", &activation.id, "bench.echo", json!({"x": "hi"}))
                .await
                .unwrap();
            if i >= warm_up {
                full.push(start.elapsed());
            }
        }
        row("warm runner.mjs tool call, full path (records in SQLite)", &full);
        let (in_flight_calls, commits_before) = (iterations(4000, 64), tools.store.commits());
        let (samples, rate) = {
            let (tools, runners, activation) = (tools.clone(), runners.clone(), activation.id.clone());
            common::in_flight(16, in_flight_calls, move || {
                let (tools, runners, activation) = (tools.clone(), runners.clone(), activation.clone());
                async move {
                    execute_tool(&tools, runners.as_ref(), "w", &activation, "bench.echo", json!({"x": "hi"}))
                        .await
                        .unwrap();
                }
            })
            .await
        };
        row("warm tool call, full path, 16 in flight (latency)", &samples);
        println!("{:<58} {:>10.0}/s", "warm tool call, full path, 16 in flight (throughput)", rate);
        println!("  {in_flight_calls} calls, {} store commits (fsyncs)", tools.store.commits() - commits_before);

        // callSupport on the agent's socket, as the runner sends it: this program is the agent's
        // runner, on a runner set of its own (a socket takes one session at a time, with a
        // one-time token).
        runners.shutdown().await;
        let runners = runner_set().await.unwrap();
        let token = runners.admit_runner("w").unwrap();
        let socket = dir.join(".suzumio/run/w/control.sock");
        let stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
        let (conn, _) = suzumio::rpc::Connection::spawn(stream, Arc::new(AnswerLoad));
        conn.request("hello", json!({"version": "bench", "protocol": 1, "token": token})).await.unwrap();
        let params = json!({"activationId": activation.id, "toolpackId": "bench", "tool": "bench.ping", "input": {}});
        let mut support = Vec::new();
        let (calls, warm_up) = (iterations(3000, 30), iterations(300, 3));
        for i in 0..calls {
            let start = Instant::now();
            conn.request("callSupport", params.clone()).await.unwrap();
            if i >= warm_up {
                support.push(start.elapsed());
            }
        }
        row("callSupport round trip (sequential)", &support);
        let calls = iterations(20_000, 200);
        let start = Instant::now();
        let mut in_flight = futures_util::stream::FuturesUnordered::new();
        let mut sent = 0;
        let mut done = 0;
        use futures_util::StreamExt;
        while done < calls {
            while sent < calls && in_flight.len() < 16 {
                let c = conn.clone();
                let p = params.clone();
                in_flight.push(async move { c.request("callSupport", p).await });
                sent += 1;
            }
            if let Some(r) = in_flight.next().await {
                r.unwrap();
                done += 1;
            }
        }
        let rate = calls as f64 / start.elapsed().as_secs_f64();
        println!("{:<58} {:>10.0}/s", "callSupport throughput (16 in flight)", rate);
        runners.shutdown().await;
    });
    let _ = std::fs::remove_dir_all(&dir);
}
