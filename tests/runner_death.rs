//! A runner that dies during a call, on the real engine: the call fails because its runner died
//! (nothing else could end it: its command sleeps for an hour) with how the container ended — killed, OOM-killed with its memory limit, removed —
//! and its last log lines; a call whose runner died is never sent again (its side effect happens
//! once); and the next call gets a fresh container. Needs a Docker engine (scripts/setup.sh) and
//! the static runner (scripts/test.sh builds it).

mod support;

use std::path::PathBuf;

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

    /// Start an hour's `sleep` as a call, do `to_the_container` once the command runs, and
    /// return the call's error. Only the runner's death can end the call within the tests'
    /// patience (how soon after the death it ends is the bench's question).
    async fn die_during_sleep(&self, to_the_container: &[&str]) -> String {
        let started = self.workspace().join("started");
        let _ = std::fs::remove_file(&started);
        let call = self.shell("touch /workspace/started; sleep 3600");
        let kill = async {
            support::wait_for_async("the command to start", async || started.exists().then_some(())).await;
            docker(to_the_container);
        };
        let (result, ()) = until_patience("the call to fail", async { tokio::join!(call, kill) }).await;
        result.expect_err("the call fails when its runner dies")
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

/// `future`, or a failure naming `what` if it hangs.
async fn until_patience<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(support::PATIENCE, future).await.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

#[tokio::test]
async fn a_killed_container_fails_the_call_at_once_and_the_next_call_works() {
    let s = setup().await;
    assert!(s.shell("echo warm").await.unwrap().ends_with("\nwarm"));
    let name = s.container();
    let error = s.die_during_sleep(&["kill", &name]).await;
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
    let error = s.die_during_sleep(&["rm", "-f", &name]).await;
    assert!(error.starts_with("runner lost during shell.exec: its container was removed"), "{error}");
    assert!(s.shell("echo again").await.unwrap().ends_with("\nagain"));
}

/// `docker stop`: the runner cancels its calls on SIGTERM, then exits; the call says it lost its
/// runner rather than that it was cancelled.
#[tokio::test]
async fn a_stopped_container_fails_the_call_as_runner_lost() {
    let s = setup().await;
    let name = s.container();
    let error = s.die_during_sleep(&["stop", "-t", "5", &name]).await;
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
    let call = s.shell("head -c 60m /dev/zero > /tmp/fill; sleep 3600");
    let error = until_patience("the OOM-killed call to fail", call).await.expect_err("the runner is OOM-killed");
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
                   sleep 3600";
    let error = until_patience("the call to fail", s.shell(command)).await.expect_err("the runner is gone");
    assert!(error.starts_with("runner lost during shell.exec: killed (SIGKILL, exit code 137)"), "{error}");
    let log = std::fs::read_to_string(s.workspace().join("log")).unwrap();
    assert_eq!(log, "x\n", "the command ran exactly once");
    assert!(s.shell("cat /workspace/log").await.unwrap().ends_with("\nx"), "the next call works");
}
