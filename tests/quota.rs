//! The disk quota (`backend.docker.diskQuota`) against a real container: the attack was
//! `shell.exec "fallocate -l 3G /workspace/fill.bin"`, which put 3 GB on the host's disk. Here,
//! with a quota of 8m: a `file.write` beyond it fails before it runs; a shell command that
//! writes 20 MB is not stopped, but within seconds the agent's next calls fail with "disk quota
//! exceeded (…)" and `agent.quota_exceeded` is recorded; a `file.patch` that deletes the file
//! still runs, and then the calls work again (`agent.quota_ok`). `/tmp` is a tmpfs with a size.
//! Needs a Docker engine and the static runner, like tests/containers.rs.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use suzumio::config::BackendKind;

type Setup = support::containers::ContainerProject;

async fn setup(quota: &str) -> Setup {
    support::containers::start("quota", Some(&format!("diskQuota: {quota}")), BackendKind::Docker).await
}

impl Setup {
    /// Calls `file.read` until `done` holds for its result, for at most `within`.
    async fn read_until(
        &self,
        within: Duration,
        done: impl Fn(&Result<String, String>) -> bool,
    ) -> Result<String, String> {
        let deadline = Instant::now() + within;
        loop {
            let result = self.call("a", "file.read", json!({"path": "note.txt"})).await;
            if done(&result) || Instant::now() > deadline {
                return result;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn events(&self, kind: &str) -> Vec<Value> {
        self.tools.store.events_of_kind(kind, 10).unwrap().into_iter().map(|r| r.data()).collect()
    }
}

fn exceeded(result: &Result<String, String>) -> bool {
    result.as_ref().is_err_and(|e| e.starts_with("disk quota exceeded (") && e.contains(" of 8.0 MiB used)"))
}

#[tokio::test]
async fn shell_growth_past_the_quota_stops_the_agents_calls_until_space_is_freed() {
    let s = setup("8m").await;
    s.call("a", "file.write", json!({"path": "note.txt", "content": "small"})).await.unwrap();

    let too_big = s.call("a", "file.write", json!({"path": "big.txt", "content": "x".repeat(10 << 20)})).await;
    assert!(exceeded(&too_big), "{too_big:?}");
    assert!(too_big.unwrap_err().ends_with("writing 10.0 MiB more would go over"));
    let patch = json!({"operations": [{"op": "add", "path": "big.txt", "content": "x".repeat(9 << 20)}]});
    assert!(exceeded(&s.call("a", "file.patch", patch).await));

    // The shell is not stopped mid-write: detection follows within seconds.
    let dd = s.call("a", "shell.exec", json!({"command": "dd if=/dev/zero of=/workspace/big bs=1M count=20"})).await;
    assert!(dd.is_ok(), "{dd:?}");
    let big = s.tools.project.config.root.join("workspaces/a/big");
    assert_eq!(std::fs::metadata(&big).map(|m| m.len()).ok(), Some(20 << 20), "{dd:?}");
    let blocked = s.read_until(Duration::from_secs(10), exceeded).await;
    assert!(exceeded(&blocked), "the next calls fail within seconds: {blocked:?}");
    assert!(
        s.call("a", "shell.exec", json!({"command": "true"}))
            .await
            .is_err_and(|e| e.starts_with("disk quota exceeded"))
    );
    let events = s.events("agent.quota_exceeded");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["agentId"], "a");
    assert_eq!(events[0]["limitBytes"], 8 << 20);
    assert!(events[0]["usedBytes"].as_u64().unwrap() >= 20 << 20, "{events:?}");

    // Deleting frees space, and is allowed while over.
    s.call("a", "file.patch", json!({"operations": [{"op": "delete", "path": "/workspace/big"}]})).await.unwrap();
    let back = s.read_until(Duration::from_secs(10), |r| r.is_ok()).await;
    assert_eq!(back.as_deref(), Ok("1: small"));
    assert_eq!(s.events("agent.quota_ok").len(), 1);
}

#[tokio::test]
async fn tmp_is_a_tmpfs_with_a_size() {
    let s = setup("8m").await;
    let out = s
        .call("a", "shell.exec", json!({"command": "df -k /tmp | tail -1; dd if=/dev/zero of=/tmp/fill bs=1M count=100 2>&1; rm -f /tmp/fill"}))
        .await
        .unwrap();
    assert!(out.contains("tmpfs"), "{out}");
    assert!(out.contains("No space left on device"), "a write beyond /tmp's 64m fails: {out}");
    // /tmp is not the workspace: it does not count against the disk quota.
    assert!(s.call("a", "file.read", json!({"path": "/workspace"})).await.is_ok());
}
