//! MCP tool calls on this machine, side by side in one run (medians and p99), against the same
//! stdio server (`tests/fixtures/mcp/tally.py`, official Python SDK, its `echo` tool):
//! - the official Python SDK's client calling it directly: what a peer that runs MCP servers on
//!   the host pays;
//! - the runner's client session (`rmcp` over a child process), directly;
//! - through the agent's runner (socket + runner + MCP);
//! - the full path of an agent's call (`execute_tool`: allowlist, schema, permissions, audit,
//!   start/finish recorded in SQLite), next to the same path for a trivial `runner.mjs` tool.
//!
//! The runner is a local process (`--backend process`), so the figures are the protocol's and
//! ours, not Docker's. Needs the venv of `scripts/setup.sh` and the static runner:
//! `RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --target x86_64-unknown-linux-gnu -p suzumio-runner`
//! then `cargo bench --bench mcp` (`SUZUMIO_BENCH_QUICK=1`: 10 calls of each).

mod common;

use common::{copy_dir, percentile};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use suzumio::calls::execute_tool;
use suzumio::config::BackendKind;
use suzumio::toolpack::mcp_session::McpSession;

const PYTHON: &str = "/opt/suzumio-mcp-venv/bin/python";

fn row(name: &str, samples: &[Duration]) {
    println!(
        "{:<62} {:>10.3}ms {:>10.3}ms",
        name,
        percentile(samples, 0.5).as_secs_f64() * 1e3,
        percentile(samples, 0.99).as_secs_f64() * 1e3
    );
}

/// The Python SDK's own client, timing each call in the client process.
const PY_CLIENT: &str = r#"
import asyncio, sys, time
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
async def main():
    params = StdioServerParameters(command=sys.argv[1], args=[sys.argv[2]])
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            for i in range(int(sys.argv[3])):
                t = time.perf_counter()
                await s.call_tool("echo", {"message": "hi"})
                print(time.perf_counter() - t)
asyncio.run(main())
"#;

fn main() {
    if common::listing() {
        return;
    }
    let (calls, warm) = (common::iterations(1000, 10), common::iterations(100, 2));
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let server = repo.join("tests/fixtures/mcp/tally.py");
    assert!(std::path::Path::new(PYTHON).exists(), "{PYTHON} is missing: run scripts/setup.sh");
    let runner = ["release", "debug"]
        .iter()
        .map(|p| repo.join("target/x86_64-unknown-linux-gnu").join(p).join("suzumio-runner"))
        .find(|p| p.is_file())
        .expect("build the static runner first (see the header of benches/mcp.rs)");
    println!("runner binary: {}", runner.display());
    println!("{:<62} {:>12} {:>12}", "case", "median", "p99");

    let out = std::process::Command::new(PYTHON)
        .args(["-c", PY_CLIENT, PYTHON, &server.display().to_string(), &(calls + warm).to_string()])
        .output()
        .expect("python runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let python: Vec<Duration> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(warm)
        .map(|l| Duration::from_secs_f64(l.trim().parse().unwrap()))
        .collect();
    row("Python SDK client -> server (direct)", &python);

    let dir = std::env::temp_dir().join(format!("suzumio-bench-mcp-{}", std::process::id()));
    copy_dir(&repo.join("tests/fixtures/projects/bench"), &dir);
    let yaml = std::fs::read_to_string(dir.join("suzumio.yaml")).unwrap().replace(
        "    - {path: ./toolpacks/bench, id: bench}\n",
        &format!(
            "    - {{path: ./toolpacks/bench, id: bench}}\n    - mcp: {{id: tally, command: {PYTHON}, args: [\"{}\"], trusted: true}}\n",
            server.display()
        ),
    );
    let yaml = yaml.replace("w: {tools: [bench.*, shell.exec]}", "w: {tools: [bench.*, shell.exec, tally.*]}");
    std::fs::write(dir.join("suzumio.yaml"), yaml).unwrap();

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut command = tokio::process::Command::new(PYTHON);
        command.arg(&server);
        let transport = rmcp::transport::TokioChildProcess::new(command).unwrap();
        let session = McpSession::start("tally", transport, Duration::from_secs(20), Arc::new(|| {})).await.unwrap();
        let mut direct = Vec::new();
        for i in 0..calls + warm {
            let start = Instant::now();
            session.call("echo", json!({"message": "hi"})).await.map_err(|e| format!("{e:?}")).unwrap();
            if i >= warm {
                direct.push(start.elapsed());
            }
        }
        session.close().await;
        row("runner's rmcp client session -> server (direct)", &direct);
        println!(
            "  ratio (medians, rmcp / Python SDK): {:.2}x",
            percentile(&direct, 0.5).as_secs_f64() / percentile(&python, 0.5).as_secs_f64()
        );

        let tools = suzumio::controller::open(&dir).unwrap();
        let runners = suzumio::controller::runners_with(&tools, BackendKind::Process, runner.clone()).await.unwrap();
        let errors = runners.warm_up().await;
        assert!(errors.is_empty(), "{errors:?}");
        let activation = tools.store.start_activation("w", "bench", &[]).unwrap();
        let mut via_runner = Vec::new();
        for i in 0..calls + warm {
            let start = Instant::now();
            let out = runners.invoke("w", &activation.id, "tally.echo", json!({"message": "hi"})).await.unwrap();
            if i >= warm {
                via_runner.push(start.elapsed());
            }
            assert_eq!(out.output, "Echo: hi");
        }
        row("MCP tool through the agent's runner (socket + runner + MCP)", &via_runner);
        let mut full_mcp = Vec::new();
        let mut full_js = Vec::new();
        for i in 0..calls + warm {
            let start = Instant::now();
            execute_tool(&tools, runners.as_ref(), "w", &activation.id, "tally.echo", json!({"message": "hi"}))
                .await
                .unwrap();
            let mcp = start.elapsed();
            let start = Instant::now();
            execute_tool(&tools, runners.as_ref(), "w", &activation.id, "bench.echo", json!({"x": "hi"}))
                .await
                .unwrap();
            if i >= warm {
                full_mcp.push(mcp);
                full_js.push(start.elapsed());
            }
        }
        row("MCP tool, full path (permissions, audit, SQLite records)", &full_mcp);
        row("runner.mjs tool, full path (the same, for comparison)", &full_js);
        runners.shutdown().await;
        let _ = tools.audit.flush_async(Duration::from_secs(5)).await;
    });
    let _ = std::fs::remove_dir_all(&dir);
}
