//! A runner that dies during a call, on the real engine: the call fails at once (not at a
//! timeout) with how the container ended — killed, OOM-killed with its memory limit, removed —
//! and its last log lines; a call whose runner died is never sent again (its side effect happens
//! once); and the next call gets a fresh container. Needs a Docker engine (scripts/setup.sh) and
//! the static runner (scripts/test.sh builds it).

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;
use suzumio::config::BackendKind;

/// The agents' memory limit: small enough that filling the container's `/tmp` (a 64 MiB tmpfs,
/// whose pages count against it) gets the runner, its largest process, OOM-killed.
const MEMORY: &str = "32m";

type Setup = support::containers::ContainerProject;

async fn setup() -> Setup {
    support::containers::start("rd", Some(&format!("memory: {MEMORY}")), BackendKind::Docker).await
}

impl Setup {
    fn container(&self) -> String {
        format!("suzumio-{}-a", self.tools.project.config.name)
    }

    fn workspace(&self) -> PathBuf {
        self.tools.project.config.root.join("workspaces").join("a")
    }

    /// `shell.exec` of `command` for agent `a` in its own activation; the error as the model sees it.
    async fn shell(&self, command: &str) -> Result<String, String> {
        self.call("a", "shell.exec", json!({ "command": command })).await
    }

    /// Start `sleep 30` as a call, do `to_the_container` once the command runs, and return how
    /// long after it the call failed, with its error.
    async fn die_during_sleep(&self, to_the_container: &[&str]) -> (Duration, String) {
        let started = self.workspace().join("started");
        let _ = std::fs::remove_file(&started);
        let call = self.shell("touch /workspace/started; sleep 30");
        let kill = async {
            while !started.exists() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            docker(to_the_container);
            Instant::now()
        };
        let (result, killed_at) = tokio::join!(call, kill);
        let elapsed = killed_at.elapsed();
        let error = result.expect_err("the call fails when its runner dies");
        (elapsed, error)
    }

    /// The last tool-call record's error, as stored.
    fn last_call_error(&self) -> String {
        let calls = self.tools.store.list_tool_calls(Some("shell.exec"), Some("a"), None, 1).unwrap();
        calls.first().expect("a tool-call record").error.clone().unwrap_or_default()
    }
}

fn docker(args: &[&str]) -> String {
    let out = std::process::Command::new("docker").args(args).output().expect("docker runs");
    assert!(out.status.success(), "docker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_fast(what: &str, elapsed: Duration) {
    println!("{what}: the call failed {} ms after the container died", elapsed.as_millis());
    assert!(elapsed < Duration::from_secs(10), "{what}: the call failed only after {elapsed:?}");
}

#[tokio::test]
async fn a_killed_container_fails_the_call_at_once_and_the_next_call_works() {
    let s = setup().await;
    assert!(s.shell("echo warm").await.unwrap().ends_with("\nwarm"));
    let name = s.container();
    let (elapsed, error) = s.die_during_sleep(&["kill", &name]).await;
    println!("{error}");
    assert_fast("docker kill", elapsed);
    assert!(error.starts_with("runner lost during shell.exec: killed (SIGKILL, exit code 137)"), "{error}");
    assert!(error.contains("its last log lines:") && error.contains("connected to the controller"), "{error}");
    let recorded = s.last_call_error();
    assert!(recorded.contains("killed (SIGKILL") && recorded.contains("connected to the controller"), "{recorded}");
    assert!(s.shell("echo again").await.unwrap().ends_with("\nagain"), "the next call starts a fresh container");
}

#[tokio::test]
async fn a_removed_container_fails_the_call_at_once_saying_so() {
    let s = setup().await;
    let name = s.container();
    let (elapsed, error) = s.die_during_sleep(&["rm", "-f", &name]).await;
    assert_fast("docker rm -f", elapsed);
    assert!(error.starts_with("runner lost during shell.exec: its container was removed"), "{error}");
    assert!(s.shell("echo again").await.unwrap().ends_with("\nagain"));
}

/// `docker stop`: the runner cancels its calls on SIGTERM, then exits; the call says it lost its
/// runner rather than that it was cancelled.
#[tokio::test]
async fn a_stopped_container_fails_the_call_as_runner_lost() {
    let s = setup().await;
    let name = s.container();
    let (elapsed, error) = s.die_during_sleep(&["stop", "-t", "5", &name]).await;
    println!("{error}");
    assert_fast("docker stop", elapsed);
    assert!(error.starts_with("runner lost during shell.exec: exited with code 0"), "{error}");
    assert!(error.contains("stopping on a signal"), "{error}");
    assert!(s.shell("echo again").await.unwrap().ends_with("\nagain"));
}

#[tokio::test]
async fn an_oom_killed_runner_is_named_with_the_memory_limit() {
    let s = setup().await;
    assert!(s.shell("echo warm").await.unwrap().ends_with("\nwarm"));
    let name = s.container();
    // The call fills the container's tmpfs beyond the memory limit: its pages belong to no
    // process, so the OOM killer takes the largest one, the runner.
    let start = Instant::now();
    let error = s.shell("head -c 60m /dev/zero > /tmp/fill; sleep 30").await.expect_err("the runner is OOM-killed");
    let elapsed = start.elapsed();
    println!("OOM: the call failed {} ms after it started", elapsed.as_millis());
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert!(
        error.starts_with("runner lost during shell.exec: OOM-killed: the memory limit of 32 MiB was reached"),
        "{error}"
    );
    assert_eq!(docker(&["inspect", "-f", "{{.State.OOMKilled}}", &name]).trim(), "true");
    assert!(s.shell("echo again").await.unwrap().ends_with("\nagain"));
}

/// At most once: a command that appends a line and then kills its runner is not run again.
#[tokio::test]
async fn a_call_whose_runner_died_is_not_sent_again() {
    let s = setup().await;
    let command = "echo x >> /workspace/log; \
                   for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = suzumio-runner ] && kill -9 ${p#/proc/}; done; \
                   sleep 30";
    let error = s.shell(command).await.expect_err("the runner is gone");
    assert!(error.starts_with("runner lost during shell.exec: killed (SIGKILL, exit code 137)"), "{error}");
    let log = std::fs::read_to_string(s.workspace().join("log")).unwrap();
    assert_eq!(log, "x\n", "the command ran exactly once");
    assert!(s.shell("cat /workspace/log").await.unwrap().ends_with("\nx"), "the next call works");
}
