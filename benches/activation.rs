//! Activation latency and controller footprint:
//! - time from `send` (a message recorded) to the start of the model call for an idle agent,
//!   through the real scheduler loop (woken by the store event) and the real model loop, with a
//!   local OpenAI-compatible endpoint that answers at once (target: under 20 ms);
//! - resident memory of `suzumio run` with 20 idle agents, the packaged scheduler and plan packs
//!   loaded, containers excluded (target: under 50 MiB).
//!
//! Run with `cargo bench --bench activation` (`SUZUMIO_BENCH_QUICK=1`: 5 messages, and the
//! memory read after 1 s instead of 5).

mod common;

use common::{iterations, percentile};

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use suzumio::activation::providers::{ProviderPool, RetryPolicy};
use suzumio::activation::{Activations, NoRunner};
use suzumio::scheduler::Scheduler;
use suzumio::store::{ProjectStatus, SendMessage};

fn main() {
    if common::listing() {
        return;
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let dir = std::env::temp_dir().join(format!("suzumio-bench-act-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let arrivals: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
    let base = rt.block_on(async {
        use axum::routing::post;
        let seen = arrivals.clone();
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            post(move |_body: axum::Json<serde_json::Value>| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(Instant::now());
                    axum::Json(json!({"choices": [{"message": {"content": null, "tool_calls": [{"id": "c", "type": "function",
                        "function": {"name": "coordination_wait_for_signal", "arguments": "{\"reason\":\"bench\"}"}}]}, "finish_reason": "tool_calls"}]}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/v1")
    });
    std::fs::write(
        dir.join("suzumio.yaml"),
        format!(
            "name: bench\ntask: Measure.\nagents:\n  pm: {{tools: [messages.send, coordination.wait_for_signal]}}\nbackend:\n  runner:\n    model: main\n    models:\n      providers: {{fake: {{type: openai-compatible, baseURL: '{base}'}}}}\n      presets: {{main: {{provider: fake, model: m}}}}\n"
        ),
    )
    .unwrap();
    let mut latencies = Vec::new();
    rt.block_on(async {
        let tools = suzumio::controller::open(&dir).unwrap();
        tools.store.set_project_status(ProjectStatus::Running).unwrap();
        let providers = ProviderPool::new(|_| None, RetryPolicy::none());
        let activations = Activations::with_providers(tools.clone(), Arc::new(NoRunner("bench".into())), providers);
        let scheduler = Arc::new(Scheduler::new(tools.clone(), activations.clone()));
        tokio::spawn(scheduler.run(tokio_util::sync::CancellationToken::new()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (messages, warm_up) = (iterations(60, 5), iterations(10, 1));
        for i in 0..messages {
            let before = arrivals.lock().unwrap().len();
            let sent = Instant::now();
            tools
                .store
                .send_message(SendMessage {
                    sender: "user".into(),
                    recipient: Some("pm".into()),
                    priority: Some("P2".into()),
                    body: format!("go {i}"),
                    ..Default::default()
                })
                .unwrap();
            let arrived = loop {
                if let Some(t) = arrivals.lock().unwrap().get(before) {
                    break *t;
                }
                tokio::time::sleep(Duration::from_micros(200)).await;
            };
            if i >= warm_up {
                latencies.push(arrived - sent);
            }
            // Let the activation end before the next message.
            while activations.running() > 0 || tools.store.agent("pm").unwrap().unwrap().active_activation_id.is_some()
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });
    println!("{:<62} {:>10} {:>10}", "case", "median", "p99");
    println!(
        "{:<62} {:>8.2}ms {:>8.2}ms",
        &format!("send -> start of the model call (idle agent, {} messages)", latencies.len()),
        percentile(&latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3
    );

    // Memory of a real controller process with 20 idle agents.
    let project = std::env::temp_dir().join(format!("suzumio-bench-mem-{}", std::process::id()));
    std::fs::create_dir_all(&project).unwrap();
    let toolpacks = repo.join("toolpacks");
    std::fs::write(
        project.join("suzumio.yaml"),
        format!(
            "name: mem\ntask: Idle.\ntools:\n  toolpacks:\n    - core\n    - shell\n    - {{path: {}, id: scheduler}}\n    - {{path: {}, id: plan}}\nagents:\n  pm: {{tools: [messages.send, schedule.*, plan.*]}}\n  worker: {{count: 19, tools: [messages.send, shell.exec, file.*]}}\nbackend:\n  runner:\n    model: main\n    models:\n      providers: {{local: {{type: scripted}}}}\n      presets: {{main: {{provider: local}}}}\n",
            toolpacks.join("scheduler").display(),
            toolpacks.join("plan").display()
        ),
    )
    .unwrap();
    let exe = repo.join("target/release/suzumio");
    let exe = if exe.is_file() { exe } else { repo.join("target/debug/suzumio") };
    let status = std::process::Command::new(&exe).args(["start", project.to_str().unwrap()]).output().unwrap();
    assert!(status.status.success());
    let mut child = std::process::Command::new(&exe)
        .args(["run", project.to_str().unwrap(), "--port", "0", "--backend", "process"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(iterations(5, 1) as u64));
    let rss = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .map(|l| l.split_whitespace().nth(1).unwrap_or("0").parse::<u64>().unwrap_or(0))
        .unwrap_or(0);
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "{:<62} {:>8.1} MiB ({})",
        "controller RSS, 20 idle agents, scheduler+plan packs loaded",
        rss as f64 / 1024.0,
        exe.display()
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&project);
}
