//! The control sockets cannot be exhausted (issue 11, point 3), against a real `suzumio run` on
//! the Docker engine: 150 connections each sending 8 MB without a newline or a hello are closed
//! early and the controller's RSS grows by less than [`RSS_GROWTH_BOUND_KB`]; 20 000 idle
//! connections to one agent's socket leave the controller's descriptors alone, another agent's
//! tool call succeeds meanwhile, and the attacked agent's calls succeed during and after.
//!
//! Tool calls are real activations: a message to the agent, and the scripted model's
//! `shell.exec`, run in the agent's container.
//!
//! Needs a Docker engine (scripts/setup.sh) and the static runner (scripts/test.sh builds it).

mod support;

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Controller, TempProject, static_runner};

/// The stated bound (README "Security"): the controller's RSS grows by less than 16 MB under
/// 150 connections of 8 MB each.
const RSS_GROWTH_BOUND_KB: u64 = 16 * 1024;
const FLOOD_BYTES: usize = 8 << 20;
/// Half of the 20 000 idle connections.
const HALF: usize = 10_000;

/// Connect `argv[2]` times to the socket `argv[1]`, say so, and hold them until stdin closes.
const HOLD_CONNECTIONS: &str = r#"
import socket, sys
held = []
for n in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    held.append(s)
print(f"holding {len(held)}", flush=True)
sys.stdin.read()
"#;

const SCRIPT: &str = r#"
activations:
  - repeat: true
    steps:
      - call: [{tool: shell.exec, input: {command: "echo ran-in-{{agentId}}"}}]
"#;

struct Run {
    project: TempProject,
    name: String,
    controller: Controller,
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &format!("suzumio-{}-a", self.name), &format!("suzumio-{}-b", self.name)])
            .output();
    }
}

fn start() -> Run {
    let project = TempProject::copy_of("containers");
    let unique = project.dir.file_name().unwrap().to_string_lossy().rsplit('-').next().unwrap().to_string();
    let name = format!("flood-{unique}");
    std::fs::write(project.dir.join("script.yaml"), SCRIPT).unwrap();
    let yaml = std::fs::read_to_string(project.dir.join("suzumio.yaml")).unwrap();
    let yaml = yaml.replace("name: containers", &format!("name: {name}")).replace(
        "cloud: {type: openai-compatible, baseURL: 'http://127.0.0.1:9/v1', apiKey: sk-inline-SECRET-1234}\n      presets: {main: {provider: cloud, model: gpt-x}}",
        "local: {type: scripted, script: ./script.yaml}\n      presets: {main: {provider: local}}",
    );
    assert!(yaml.contains("type: scripted"), "the fixture's model section changed: {yaml}");
    std::fs::write(project.dir.join("suzumio.yaml"), yaml).unwrap();
    let dir = project.dir.to_str().unwrap().to_string();
    let started = support::suzumio(&project.dir, &["start", &dir]);
    assert_eq!(started.status.code(), Some(0), "{}", support::text(&started.stderr));
    let runner = static_runner();
    let controller = Controller::start_with_env(
        &project.dir,
        &["--backend", "docker"],
        &[("SUZUMIO_RUNNER_BIN", runner.to_str().unwrap())],
    );
    Run { project, name, controller }
}

impl Run {
    fn api(&self, path: &str) -> String {
        self.controller.url(&format!("/api/projects/{}{path}", self.name))
    }

    fn socket(&self, agent: &str) -> PathBuf {
        self.project.dir.join(".suzumio/run").join(agent).join("control.sock")
    }

    fn completed_calls(&self, agent: &str) -> (usize, Vec<Value>) {
        let calls = support::http("GET", &self.api(&format!("/tool-calls?agent={agent}&tool=shell.exec")), &[], None);
        let items = calls.json()["items"].as_array().cloned().unwrap_or_default();
        (items.iter().filter(|c| c["status"] == "completed").count(), items)
    }

    /// A message to `agent`, and its activation's `shell.exec` completed in the agent's runner.
    fn tool_call_succeeds(&self, agent: &str) {
        let before = self.completed_calls(agent).0;
        let body = format!(r#"{{"recipient": "{agent}", "body": "run the probe"}}"#);
        let sent = support::http("POST", &self.api("/messages"), &[], Some(&body));
        assert!(sent.status < 300, "message to {agent}: {} {}", sent.status, sent.body);
        let started = Instant::now();
        loop {
            let (done, items) = self.completed_calls(agent);
            if done > before {
                return;
            }
            assert!(
                started.elapsed() < support::PATIENCE,
                "no completed shell.exec for {agent}: {items:?}\nstderr:\n{}",
                self.controller.stderr()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn pid(&self) -> u32 {
        self.controller.child.id()
    }
}

fn status_field_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field}: {status}"));
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Write up to 8 MB without a newline; how much went in before the controller closed.
fn flood_one(socket: &Path, chunk: &[u8]) -> usize {
    use std::io::Write;
    let Ok(mut stream) = UnixStream::connect(socket) else { return 0 };
    let _ = stream.set_write_timeout(Some(Duration::from_secs(20)));
    let mut sent = 0;
    while sent < FLOOD_BYTES {
        match stream.write(chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => sent += n,
        }
    }
    sent
}

#[test]
fn eight_megabyte_lines_before_a_hello_are_cut_short_and_the_controller_stays_small() {
    let run = start();
    run.tool_call_succeeds("a");
    run.tool_call_succeeds("b");
    let pid = run.pid();
    let baseline = status_field_kb(pid, "VmRSS:");

    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(baseline));
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while sampling.load(std::sync::atomic::Ordering::SeqCst) {
                peak.fetch_max(status_field_kb(pid, "VmRSS:"), std::sync::atomic::Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let chunk = std::sync::Arc::new(vec![b'x'; 64 << 10]);
    let socket = run.socket("a");
    let floods: Vec<_> = (0..150)
        .map(|_| {
            let (socket, chunk) = (socket.clone(), chunk.clone());
            std::thread::spawn(move || flood_one(&socket, &chunk))
        })
        .collect();
    let sent: Vec<usize> = floods.into_iter().map(|t| t.join().unwrap()).collect();
    sampling.store(false, std::sync::atomic::Ordering::SeqCst);
    sampler.join().unwrap();

    let longest = sent.iter().max().copied().unwrap_or(0);
    assert!(longest < 2 << 20, "every connection is closed long before 8 MB (the most one sent: {longest})");
    let growth = peak.load(std::sync::atomic::Ordering::SeqCst).saturating_sub(baseline);
    eprintln!("RSS {baseline} kB, peak growth {growth} kB; the most one connection sent: {longest} bytes");
    assert!(growth < RSS_GROWTH_BOUND_KB, "RSS grew by {growth} kB (from {baseline} kB), over the bound");
    // The agent under attack and the other one still work.
    run.tool_call_succeeds("a");
    run.tool_call_succeeds("b");
}

#[test]
fn twenty_thousand_idle_connections_exhaust_nothing() {
    let run = start();
    run.tool_call_succeeds("a");
    run.tool_call_succeeds("b");
    let pid = run.pid();
    let fds_before = open_fds(pid);
    let socket = run.socket("a");
    // One process may not hold 20 000 descriptors here (the hard limit is what the controller
    // got too), so a Python client holds half of them and this process the other half.
    let (soft, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    assert!(hard > HALF as u64 + 500, "RLIMIT_NOFILE {soft}/{hard} leaves no room for {HALF} connections");
    let mut helper = std::process::Command::new("python3")
        .args(["-c", HOLD_CONNECTIONS, socket.to_str().unwrap(), &HALF.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut flood = Vec::with_capacity(HALF);
    let mut most_fds = fds_before;
    for n in 0..HALF {
        flood.push(UnixStream::connect(&socket).unwrap_or_else(|e| panic!("connection {n}: {e}")));
        if n % 1000 == 0 {
            most_fds = most_fds.max(open_fds(pid));
        }
    }
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(helper.stdout.take().unwrap()), &mut ready).unwrap();
    assert_eq!(ready.trim(), format!("holding {HALF}"), "the Python client's connections");
    most_fds = most_fds.max(open_fds(pid));
    eprintln!("controller descriptors: {fds_before} before, at most {most_fds} during the flood");
    assert!(most_fds < fds_before + 64, "the controller holds no flood of descriptors: {fds_before} → {most_fds}");
    // With all of them open: the other agent, and the attacked one's live session, work.
    run.tool_call_succeeds("b");
    run.tool_call_succeeds("a");
    drop(flood);
    drop(helper.stdin.take());
    assert!(helper.wait().unwrap().success());
    run.tool_call_succeeds("a");
    let stderr = run.controller.stderr();
    assert!(!stderr.contains("Too many open files"), "{stderr}");
}
