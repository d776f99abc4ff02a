//! Operations: `GET /metrics` read back by a Prometheus text-format parser and checked against
//! what the store says after a scripted run; the API's Host and token rules on it; and
//! `suzumio run --log-format json`, whose every log line is a JSON object.

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use prometheus_parse::{Sample, Scrape, Value as Metric};
use serde_json::Value;
use support::{Controller, TempProject, http, repo_root, suzumio, text};

const SCRIPT: &str = r#"
activations:
  - agent: reviewer
    steps:
      - say: "Writing notes."
        call:
          - tool: file.write
            input: {path: "/workspace/notes.md", content: "LGTM"}
          - tool: file.read
            input: {path: "/workspace/missing.md"}
      - call: [{tool: messages.send, input: {recipient: pm, body: "done"}}]
      - say: "Done."
"#;

fn project() -> TempProject {
    TempProject::scripted("review", SCRIPT, &[])
}

fn json(dir: &str, args: &[&str]) -> Value {
    let mut full = args.to_vec();
    full.insert(1, dir);
    let out = suzumio(&repo_root(), &full);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn scrape(body: &str) -> Vec<Sample> {
    Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).expect("the Prometheus text format").samples
}

fn number(sample: &Sample) -> f64 {
    match &sample.value {
        Metric::Counter(v) | Metric::Gauge(v) | Metric::Untyped(v) => *v,
        other => panic!("{}: not a number: {other:?}", sample.metric),
    }
}

/// The value of `metric` with exactly these labels.
fn value(samples: &[Sample], metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.metric == metric
                && s.labels.len() == labels.len()
                && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
        })
        .map(number)
}

fn wait_idle(dir: &str) {
    let start = Instant::now();
    loop {
        let status = json(dir, &["status", "--json"]);
        let running = status["activations"]["running"].as_u64().unwrap_or(1);
        if status["activations"]["total"].as_u64().unwrap_or(0) >= 2 && running == 0 && status["pendingSignals"] == 0 {
            return;
        }
        assert!(start.elapsed() < support::PATIENCE, "the run did not settle: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn metrics_match_the_store_after_a_scripted_run() {
    let project = project();
    let dir = project.dir.to_str().unwrap();
    let c = Controller::start_with_env(
        &project.dir,
        &[],
        &[("SUZUMIO_RUNNER_BIN", support::runner_binary().to_str().unwrap())],
    );
    let sent = suzumio(&repo_root(), &["send", dir, "reviewer", "Review PR 7"]);
    assert_eq!(sent.status.code(), Some(0));
    wait_idle(dir);
    // Left pending for the scrape: a stopped project delivers nothing.
    for args in [&["stop", dir][..], &["send", dir, "reviewer", "--priority", "P1", "later"]] {
        let out = suzumio(&repo_root(), args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
    }

    let r = http("GET", &c.url("/metrics"), &[], None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("content-type").is_some_and(|t| t.starts_with("application/openmetrics-text")));
    let samples = scrape(&r.body);

    // Activations by agent and status, as `activations --json` lists them.
    let activations = json(dir, &["activations", "--json", "--limit", "500"]);
    let mut by: HashMap<(String, String), f64> = HashMap::new();
    let mut tokens: HashMap<String, (f64, f64)> = HashMap::new();
    for a in activations.as_array().unwrap() {
        let agent = a["agentId"].as_str().unwrap().to_string();
        *by.entry((agent.clone(), a["status"].as_str().unwrap().to_string())).or_default() += 1.0;
        let t = tokens.entry(agent).or_default();
        t.0 += a["usage"]["inputTokens"].as_f64().unwrap();
        t.1 += a["usage"]["outputTokens"].as_f64().unwrap();
    }
    assert!(by.len() >= 2, "{by:?}");
    for ((agent, status), n) in &by {
        assert_eq!(value(&samples, "suzumio_activations", &[("agent", agent), ("status", status)]), Some(*n));
    }
    for (agent, (input, output)) in &tokens {
        assert_eq!(value(&samples, "suzumio_model_input_tokens_total", &[("agent", agent)]), Some(*input), "{agent}");
        assert_eq!(value(&samples, "suzumio_model_output_tokens_total", &[("agent", agent)]), Some(*output), "{agent}");
    }

    // Tool calls by tool and status, as the reviewer's timeline shows them, with histograms.
    let id = activations.as_array().unwrap().iter().find(|a| a["agentId"] == "reviewer").unwrap()["id"].clone();
    let timeline = json(dir, &["show", id.as_str().unwrap(), "--json"]);
    for (tool, status) in [("file.write", "completed"), ("file.read", "failed"), ("messages.send", "completed")] {
        let calls =
            timeline["items"].as_array().unwrap().iter().filter(|i| i["tool"] == tool && i["status"] == status).count()
                as f64;
        assert_eq!(calls, 1.0, "{tool} {status}: {timeline}");
        assert_eq!(value(&samples, "suzumio_tool_calls_total", &[("tool", tool), ("status", status)]), Some(calls));
        let histogram = samples
            .iter()
            .find(|s| {
                s.metric == "suzumio_tool_call_duration_seconds"
                    && s.labels.get("tool") == Some(tool)
                    && s.labels.get("status") == Some(status)
            })
            .unwrap_or_else(|| panic!("no histogram for {tool} {status}"));
        let Metric::Histogram(buckets) = &histogram.value else { panic!("{histogram:?}") };
        assert_eq!(buckets.last().map(|b| (b.less_than, b.count)), Some((f64::INFINITY, calls)), "{buckets:?}");
        assert!(buckets.windows(2).all(|w| w[0].count <= w[1].count), "cumulative: {buckets:?}");
    }
    // The runner started once, for the reviewer's runner-side calls.
    assert_eq!(value(&samples, "suzumio_runner_starts_total", &[("agent", "reviewer")]), Some(1.0));
    assert_eq!(value(&samples, "suzumio_runner_restarts_total", &[("agent", "reviewer")]), Some(0.0));

    // Pending signals by priority, as `signals --json` counts them.
    let signals = json(dir, &["signals", "--json", "--limit", "500", "--status", "pending"]);
    assert_eq!(value(&samples, "suzumio_signals_pending", &[("priority", "P1")]), Some(1.0));
    for p in ["P0", "P1", "P2", "P3"] {
        let pending = signals.as_array().unwrap().iter().filter(|s| s["priority"] == p).count() as f64;
        assert_eq!(value(&samples, "suzumio_signals_pending", &[("priority", p)]), Some(pending), "{p}");
    }
    assert_eq!(value(&samples, "suzumio_approvals_pending", &[]), Some(0.0));
    assert_eq!(value(&samples, "suzumio_agent_paused", &[("agent", "pm"), ("limit", "")]), Some(0.0));
    let today = json(dir, &["status", "--json"]);
    let project_tokens =
        today["usageToday"]["inputTokens"].as_f64().unwrap() + today["usageToday"]["outputTokens"].as_f64().unwrap();
    assert_eq!(
        value(&samples, "suzumio_budget_tokens_today", &[("scope", "project"), ("agent", "")]),
        Some(project_tokens)
    );
    assert_eq!(c.stop(), Some(0));
}

const SLOW_SCRIPT: &str = r#"
activations:
  - agent: reviewer
    steps:
      - say: "Starting the long job."
        call: [{tool: shell.exec, input: {command: "sleep 30; echo late"}}]
      - say: "never reached"
"#;

/// Until `done` holds, within a deadline that only guards against hanging.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < support::PATIENCE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A call stopped by `suzumio cancel` is no failure of the tool: the store records it with
/// kind `cancelled`, and `/metrics` counts it under `status="cancelled"`, not `failed`.
#[test]
fn a_cancelled_call_is_counted_as_cancelled() {
    let project = TempProject::scripted("review", SLOW_SCRIPT, &[]);
    let dir = project.dir.to_str().unwrap();
    let c = Controller::start_with_env(
        &project.dir,
        &[],
        &[("SUZUMIO_RUNNER_BIN", support::runner_binary().to_str().unwrap())],
    );
    let sent = suzumio(&repo_root(), &["send", dir, "reviewer", "Run the slow job"]);
    assert_eq!(sent.status.code(), Some(0), "{}", text(&sent.stderr));
    wait_for("the slow shell call", || {
        let out = suzumio(&repo_root(), &["logs", dir, "--agent", "reviewer", "--type", "tool_call.started"]);
        text(&out.stdout).contains("shell.exec")
    });
    let cancelled = json(dir, &["cancel", "reviewer", "--json"]);
    assert_eq!(cancelled["cancelled"], true, "{cancelled}");
    let id = cancelled["activationId"].as_str().unwrap().to_string();

    let timeline = json(dir, &["show", &id, "--json"]);
    let call = timeline["items"].as_array().unwrap().iter().find(|i| i["tool"] == "shell.exec").unwrap().clone();
    assert_eq!((call["status"].as_str(), call["errorKind"].as_str()), (Some("failed"), Some("cancelled")), "{call}");

    let r = http("GET", &c.url("/metrics"), &[], None);
    assert_eq!(r.status, 200, "{}", r.body);
    let samples = scrape(&r.body);
    let calls = |status| value(&samples, "suzumio_tool_calls_total", &[("tool", "shell.exec"), ("status", status)]);
    assert_eq!((calls("cancelled"), calls("failed")), (Some(1.0), None), "{}", r.body);
    assert!(
        samples.iter().any(|s| s.metric == "suzumio_tool_call_duration_seconds"
            && s.labels.get("tool") == Some("shell.exec")
            && s.labels.get("status") == Some("cancelled")),
        "the histogram has the same label: {}",
        r.body
    );
    assert_eq!(c.stop(), Some(0));
}

/// One request with the headers given (no Host of its own), over a plain socket.
fn raw_get(base: &str, path: &str, headers: &[(&str, &str)]) -> u16 {
    let addr = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[test]
fn metrics_follow_the_api_host_and_token_rules() {
    let project = project();
    let c = Controller::start(&project.dir, &[]);
    let port = c.base.rsplit(':').next().unwrap().to_string();
    let local = format!("127.0.0.1:{port}");
    let evil = format!("evil.example:{port}");
    assert_eq!(raw_get(&c.base, "/metrics", &[("Host", &local)]), 200);
    assert_eq!(raw_get(&c.base, "/metrics", &[("Host", &evil)]), 421, "a rebinding host is misdirected");
    drop(c);

    let c = Controller::start(&project.dir, &["--token", "tok-1"]);
    let port = c.base.rsplit(':').next().unwrap().to_string();
    let local = format!("127.0.0.1:{port}");
    assert_eq!(raw_get(&c.base, "/metrics", &[("Host", &local)]), 401, "the token is required");
    assert_eq!(raw_get(&c.base, "/metrics", &[("Host", &local), ("Authorization", "Bearer nope")]), 401);
    assert_eq!(raw_get(&c.base, "/metrics", &[("Host", &local), ("Authorization", "Bearer tok-1")]), 200);
}

/// Logs that do not go to a terminal carry no colour codes: the controller's, and the lines
/// a process-backend runner writes into the same stderr (they came with ANSI colours).
#[test]
fn logs_written_to_a_pipe_have_no_colour_codes() {
    let project = project();
    let dir = project.dir.to_str().unwrap();
    let sent = suzumio(&repo_root(), &["send", dir, "reviewer", "Review PR 7"]);
    assert_eq!(sent.status.code(), Some(0), "{}", text(&sent.stderr));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["run", dir, "--port", "0", "--backend", "process", "--until-idle"])
        .env("SUZUMIO_LOG", "info")
        .env("SUZUMIO_RUNNER_BIN", support::runner_binary())
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("connected to the controller"), "the runner's own lines are there: {stderr}");
    assert!(stderr.contains("the project is idle"), "and the controller's: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "no escape sequences: {stderr:?}");
}

#[test]
fn run_with_log_format_json_writes_one_json_object_per_line() {
    let project = project();
    let dir = project.dir.to_str().unwrap();
    // The pm uses controller-side tools only: no runner process starts, so every line on
    // stderr is the controller's (a process-backend runner writes its own text lines there).
    let sent = suzumio(&repo_root(), &["send", dir, "pm", "hello"]);
    assert_eq!(sent.status.code(), Some(0));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["run", dir, "--port", "0", "--backend", "process", "--until-idle", "--log-format", "json"])
        .env("SUZUMIO_LOG", "info")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let lines: Vec<Value> =
        stderr.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect();
    assert!(lines.len() >= 2, "{stderr}");
    for line in &lines {
        assert!(line["timestamp"].is_string() && line["level"].is_string(), "{line}");
        assert!(line["fields"]["message"].is_string(), "{line}");
    }
    assert!(lines.iter().any(|l| l["fields"]["message"] == "the project is idle"), "{stderr}");
}
