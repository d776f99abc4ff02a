//! The disk quota (`backend.docker.diskQuota`) against a real container: the attack was
//! `shell.exec "fallocate -l 3G /workspace/fill.bin"`, which put 3 GB on the host's disk. Here,
//! with a quota of 8m: a `file.write`, `file.patch` or `file.edit` beyond it fails before it
//! runs; a shell command that writes 20 MB is not stopped, but within seconds the agent's next
//! calls that may add data fail with "disk quota exceeded (…)" and `agent.quota_exceeded` is
//! recorded; reads and every call that frees space (`file.delete`, `file.move`, a deleting
//! `file.patch`, a shrinking `file.edit`, `shell.exec rm …`, `shell.stop`) still run, so the
//! agent can clean up, and then the calls work again (`agent.quota_ok`). `/tmp` is a tmpfs
//! with a size.
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
    /// Calls `shell.exec "cat note.txt"` (a call that may add data) until `done` holds for its
    /// result; the deadline only guards against hanging.
    async fn read_until(
        &self,
        within: Duration,
        done: impl Fn(&Result<String, String>) -> bool,
    ) -> Result<String, String> {
        let deadline = Instant::now() + within;
        loop {
            let result = self.call("a", "shell.exec", json!({"command": "cat note.txt"})).await;
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
    let blocked = s.read_until(Duration::from_secs(60), exceeded).await;
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
    let back = s.read_until(Duration::from_secs(60), |r| r.is_ok()).await;
    assert!(back.as_deref().is_ok_and(|out| out.contains("small")), "{back:?}");
    assert_eq!(s.events("agent.quota_ok").len(), 1);
}

/// Over the quota, every call that reads or frees space runs; every call that may add data is
/// refused before it runs — `file.edit` included, which counts like `file.write`.
#[tokio::test]
async fn over_the_quota_the_agent_can_still_look_around_and_clean_up() {
    let s = setup("8m").await;
    s.call("a", "file.write", json!({"path": "note.txt", "content": "small"})).await.unwrap();
    // Under the quota, an edit that would take the agent over fails before it runs.
    let grow = json!({"path": "note.txt", "oldText": "small", "newText": "y".repeat(9 << 20)});
    let refused = s.call("a", "file.edit", grow.clone()).await;
    assert!(exceeded(&refused), "{refused:?}");
    assert!(refused.unwrap_err().contains("more would go over"));
    assert_eq!(std::fs::read_to_string(s.tools.project.config.root.join("workspaces/a/note.txt")).unwrap(), "small");

    let fill = "dd if=/dev/zero of=/workspace/big bs=1M count=20 && cp /workspace/big /workspace/big2 && mkdir -p /workspace/d";
    s.call("a", "shell.exec", json!({ "command": fill })).await.unwrap();
    s.call("a", "shell.start", json!({"command": "sleep 300", "name": "idle"})).await.unwrap();
    let blocked = s.read_until(Duration::from_secs(60), exceeded).await;
    assert!(exceeded(&blocked), "{blocked:?}");

    // What may add data is refused…
    for (tool, input) in [
        ("file.write", json!({"path": "more.txt", "content": "x"})),
        ("file.edit", json!({"path": "note.txt", "oldText": "small", "newText": "bigger"})),
        ("file.patch", json!({"operations": [{"op": "add", "path": "n.txt", "content": "x"}]})),
        ("shell.exec", json!({"command": "rm -f /workspace/big; dd if=/dev/zero of=/workspace/again bs=1M count=1"})),
        ("shell.start", json!({"command": "sleep 1"})),
    ] {
        let result = s.call("a", tool, input).await;
        assert!(exceeded(&result), "{tool} may add data and must be refused: {result:?}");
    }
    // …what reads or frees space runs.
    let read = s.call("a", "file.read", json!({"path": "note.txt"})).await;
    assert_eq!(read.as_deref(), Ok("1: small"));
    let listed = s.call("a", "file.list", json!({"path": "/workspace"})).await.unwrap();
    assert!(listed.contains("big2"), "{listed}");
    let commands = s.call("a", "shell.list", json!({})).await.unwrap();
    let id = commands.split_whitespace().find(|w| w.starts_with("cmd_")).map(str::to_string);
    let id = id.unwrap_or_else(|| panic!("a command id in {commands}"));
    s.call("a", "shell.stop", json!({ "id": id })).await.unwrap();
    s.call("a", "file.edit", json!({"path": "note.txt", "oldText": "small", "newText": "s"})).await.unwrap();
    s.call("a", "file.move", json!({"from": "note.txt", "to": "/workspace/d/note.txt"})).await.unwrap();
    s.call("a", "shell.exec", json!({"command": "rm -f /workspace/big"})).await.unwrap();
    s.call("a", "file.delete", json!({"path": "big2"})).await.unwrap();
    let root = s.tools.project.config.root.join("workspaces/a");
    assert!(!root.join("big").exists() && !root.join("big2").exists());
    assert_eq!(std::fs::read_to_string(root.join("d/note.txt")).unwrap(), "s");
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
