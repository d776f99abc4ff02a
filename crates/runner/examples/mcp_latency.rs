//! How long one `tools/call` takes through the MCP client session the runner uses (rmcp over a
//! child process), against a given stdio server: `cargo run --example mcp_latency -- <cmd> <args…>`.
use std::sync::Arc;
use std::time::{Duration, Instant};

use suzumio_core::toolpack::mcp_session::McpSession;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut cmd = tokio::process::Command::new(&args[0]);
    cmd.args(&args[1..]);
    let transport = rmcp::transport::TokioChildProcess::new(cmd).expect("spawn");
    let session = McpSession::start("bench", transport, Duration::from_secs(20), Arc::new(|| {})).await.expect("start");
    let mut times = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        session.call("echo", serde_json::json!({"message": "x"})).await.map_err(|e| format!("{e:?}")).expect("call");
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    println!("median {:.2} ms, p99 {:.2} ms, max {:.2} ms", times[25], times[49], times[49]);
}
