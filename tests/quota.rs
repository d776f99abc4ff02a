//! The disk quota (`backend.docker.diskQuota`) against a real container. The attacks were
//! `fallocate -l 3G`, a 2 GB `dd` that finished under `diskQuota: 200m`, and a background
//! writer that grew to 1.8 GB after the quota was reported. Now:
//! - a `file.write`, `file.patch` or `file.edit` beyond the quota fails before it runs;
//! - every process the runner starts has `RLIMIT_FSIZE` at what is left of the quota, and the
//!   runner lowers it to each writer's share as the usage grows: a `dd` stops at the quota, and
//!   the result says the disk quota stopped it;
//! - what still takes the agent over (here: directories, which no file size limit counts) is
//!   found within a measurement: its background commands are stopped, each with one
//!   `shell.command_finished` signal saying the quota stopped it, and its next calls that may
//!   add data fail with "disk quota exceeded (…)" (`agent.quota_exceeded` is recorded); reads
//!   and every call that frees space (`file.delete`, `file.move`, a deleting `file.patch`, a
//!   shrinking `file.edit`, `shell.exec rm …`, `shell.stop`) still run, so the agent can clean
//!   up, and then the calls work again (`agent.quota_ok`);
//! - the testers' three cases against `diskQuota: 200m` (one 2 GB `dd`, a background writer, 8
//!   parallel `dd`s) print how far over the quota each got.
//!
//! `/tmp` is a tmpfs with a size. Needs a Docker engine and the static runner, like
//! tests/containers.rs.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use suzumio::backend::spec::{artifacts_dir, workspace_dir};
use suzumio::config::BackendKind;
use suzumio::store::{COMMAND_FINISHED_KIND, SignalQuery, SignalRecord};

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

    /// What agent `a` holds now, measured as the quota measures it.
    fn used(&self) -> u64 {
        let root = &self.tools.project.config.root;
        [workspace_dir(root, "a"), artifacts_dir(root, "a")]
            .iter()
            .map(|d| suzumio::disk::allocated(d, 1_000_000).bytes)
            .sum()
    }

    fn finish_signals(&self) -> Vec<SignalRecord> {
        let query = SignalQuery {
            target_agent: Some("a".into()),
            kind: Some(COMMAND_FINISHED_KIND.into()),
            ..Default::default()
        };
        self.tools.store.list_signals(&query).unwrap()
    }

    /// The finish signal of the background command named `name`, once it is recorded.
    async fn finish_signal_of(&self, name: &str) -> SignalRecord {
        support::wait_for_async(&format!("the finish signal of {name}"), async || {
            self.finish_signals().into_iter().find(|s| s.payload["name"] == name)
        })
        .await
    }

    /// Fills the workspace with `count` directories (4 KiB each): data no file size limit
    /// counts, so only the measurement finds it.
    async fn fill_with_directories(&self, count: u32) {
        let fill = format!("mkdir -p /workspace/dirs && cd /workspace/dirs && seq {count} | xargs mkdir");
        self.sh("a", &fill).await;
    }

    /// Runs `free` (a command line that only deletes, which runs even over the quota), then
    /// waits until a new command starts with at least `at_least` bytes of file size limit:
    /// the controller and the runner have both measured the freed space.
    async fn free(&self, free: &str, at_least: u64) {
        self.sh("a", free).await;
        // `ulimit -f` counts 512-byte blocks.
        let enough = |out: &str| {
            out.lines().last().and_then(|l| l.trim().parse::<u64>().ok()).is_some_and(|b| b * 512 >= at_least)
        };
        let limit = self.read_until_output("ulimit -f", Duration::from_secs(60), enough).await;
        assert!(
            limit.as_deref().is_ok_and(enough),
            "the file size limit of new commands comes back after {free}: {limit:?}"
        );
    }

    /// Calls `shell.exec command` until it succeeds with an output `done` accepts.
    async fn read_until_output(
        &self,
        command: &str,
        within: Duration,
        done: impl Fn(&str) -> bool,
    ) -> Result<String, String> {
        let deadline = Instant::now() + within;
        loop {
            let result = self.call("a", "shell.exec", json!({ "command": command })).await;
            if result.as_deref().is_ok_and(&done) || Instant::now() > deadline {
                return result;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn exceeded(result: &Result<String, String>) -> bool {
    result.as_ref().is_err_and(|e| e.starts_with("disk quota exceeded (") && e.contains(" of 8.0 MiB used)"))
}

#[tokio::test]
async fn a_shell_write_stops_at_the_quota_and_growth_past_it_stops_the_agents_calls_until_space_is_freed() {
    let s = setup("8m").await;
    s.call("a", "file.write", json!({"path": "note.txt", "content": "small"})).await.unwrap();

    let too_big = s.call("a", "file.write", json!({"path": "big.txt", "content": "x".repeat(10 << 20)})).await;
    assert!(exceeded(&too_big), "{too_big:?}");
    assert!(too_big.unwrap_err().ends_with("writing 10.0 MiB more would go over"));
    let patch = json!({"operations": [{"op": "add", "path": "big.txt", "content": "x".repeat(9 << 20)}]});
    assert!(exceeded(&s.call("a", "file.patch", patch).await));

    // A shell write stops at the quota: the file cannot grow past what was left.
    let dd = s.call("a", "shell.exec", json!({"command": "dd if=/dev/zero of=/workspace/big bs=1M count=20"})).await;
    let dd = dd.unwrap();
    assert!(dd.contains("the agent's disk quota (8.0 MiB) is used up"), "{dd}");
    let big = s.tools.project.config.root.join("workspaces/a/big");
    let written = std::fs::metadata(&big).map(|m| m.len()).unwrap();
    assert!(written <= 8 << 20 && written > 6 << 20, "dd stopped at what was left: {written}");
    assert!(s.used() <= (8 << 20) + (64 << 10), "{}", s.used());
    s.sh("a", "rm -f /workspace/big").await;

    // What no file size limit counts is found by the measurement.
    s.fill_with_directories(3000).await;
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
    assert!(events[0]["usedBytes"].as_u64().unwrap() > 8 << 20, "{events:?}");

    // Deleting frees space, and is allowed while over.
    s.sh("a", "rm -rf /workspace/dirs").await;
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

    let fill =
        "dd if=/dev/zero of=/workspace/big bs=1M count=3 && cp /workspace/big /workspace/big2 && mkdir -p /workspace/d";
    s.call("a", "shell.exec", json!({ "command": fill })).await.unwrap();
    s.call("a", "shell.start", json!({"command": "sleep 300", "name": "idle"})).await.unwrap();
    s.fill_with_directories(1500).await;
    let blocked = s.read_until(Duration::from_secs(60), exceeded).await;
    assert!(exceeded(&blocked), "{blocked:?}");
    // Over the quota, the runner stopped the background command, and said so once.
    let idle = s.finish_signal_of("idle").await;
    assert_eq!(idle.payload["status"], "stopped", "{:?}", idle.payload);
    let reason = idle.payload["stoppedBy"].as_str().unwrap_or_default();
    assert!(reason.contains("disk quota (8.0 MiB) is used up"), "{:?}", idle.payload);
    assert_eq!(s.finish_signals().len(), 1);

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
        .call("a", "shell.exec", json!({"command": "df -k /tmp | tail -1; for i in 1 2 3 4 5 6 7 8 9 10; do dd if=/dev/zero of=/tmp/fill$i bs=1M count=7 2>&1; done; rm -f /tmp/fill*"}))
        .await
        .unwrap();
    assert!(out.contains("tmpfs"), "{out}");
    // Files of 7 MB each, under the file size limit that the 8m quota leaves.
    assert!(out.contains("No space left on device"), "a write beyond /tmp's 64m fails: {out}");
    // /tmp is not the workspace: it does not count against the disk quota.
    assert!(s.call("a", "file.read", json!({"path": "/workspace"})).await.is_ok());
}

/// The quota that all the figures are against.
const QUOTA: u64 = 200 << 20;
/// What one writer of one file may pass the quota by: nothing, as its `RLIMIT_FSIZE` is what
/// was left; a MiB for the directory and the measurement's rounding.
const SLACK: u64 = 1 << 20;

fn over(used: u64) -> String {
    let percent = (used as f64 / QUOTA as f64 - 1.0) * 100.0;
    format!("{:.1} MiB of {} MiB ({percent:+.1} %)", used as f64 / (1 << 20) as f64, QUOTA >> 20)
}

/// The testers' cases against `diskQuota: 200m`, each from an empty workspace: one 2 GB `dd`,
/// a background writer appending 1 MB at a time, and 8 parallel 2 GB `dd`s. Prints what the
/// agent held after each (run with `--no-capture` to see it).
#[tokio::test]
async fn the_testers_writers_stay_within_the_quota() {
    let s = setup("200m").await;
    let mut figures = Vec::new();

    let one = s.sh("a", "cd /workspace && dd if=/dev/zero of=big bs=1M count=2000").await;
    assert!(one.contains("the agent's disk quota (200.0 MiB) is used up"), "{one}");
    let used = s.used();
    figures.push(format!("one 2 GB dd: {}", over(used)));
    assert!(used <= QUOTA + SLACK, "a single writer stops at the quota: {}", over(used));
    s.free("rm -f /workspace/big", QUOTA - (1 << 20)).await;

    // It ends when a write is refused (or when the runner stops it over the quota).
    let writer = "cd /workspace && while head -c 1048576 /dev/zero >> log; do :; done";
    s.call("a", "shell.start", json!({"command": writer, "name": "writer"})).await.unwrap();
    let ended = s.finish_signal_of("writer").await;
    let used = s.used();
    figures.push(format!(
        "a background writer: {} ({}, exit {})",
        over(used),
        ended.payload["status"],
        ended.payload["exitCode"]
    ));
    assert!(used <= QUOTA + SLACK, "one writer of one file stops at the quota: {}", over(used));
    s.free("rm -f /workspace/log", QUOTA - (1 << 20)).await;

    let parallel = "cd /workspace && for i in 1 2 3 4 5 6 7 8; do dd if=/dev/zero of=p$i bs=1M count=2000 & done; wait";
    s.call("a", "shell.exec", json!({ "command": parallel })).await.unwrap();
    let used = s.used();
    figures.push(format!("8 parallel 2 GB dd: {}", over(used)));
    println!("diskQuota 200m, what the agent held after each case:\n  {}", figures.join("\n  "));
    // Each started with what was left as its limit: no file is larger. How far they got
    // together depends on how soon the first measurement shared the rest out (see
    // `writers_share_what_is_left` for the shares themselves); the goal is the 10 % printed.
    let root = workspace_dir(&s.tools.project.config.root, "a");
    for i in 1..=8 {
        let len = std::fs::metadata(root.join(format!("p{i}"))).map_or(0, |m| m.len());
        assert!(len <= QUOTA, "p{i} is {len} bytes: {}", figures.join("\n  "));
    }
}

/// The shares themselves: four processes that each hold a file open for writing get file size
/// limits that together leave no more than what is left of the quota, each a quarter of it.
#[tokio::test]
async fn writers_share_what_is_left() {
    let s = setup("200m").await;
    s.sh("a", "dd if=/dev/zero of=/workspace/base bs=1M count=40").await;
    let hold = "cd /workspace && for i in 1 2 3 4; do (exec 3>>held$i; exec sleep 300) & done; wait";
    s.call("a", "shell.start", json!({"command": hold, "name": "holders"})).await.unwrap();
    let limits = "for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = sleep ] && grep 'Max file size' $p/limits; done; true";
    let left = QUOTA - s.used();
    let parse = |out: &str| -> Vec<u64> {
        out.lines().filter_map(|l| l.strip_prefix("Max file size")?.split_whitespace().next()?.parse().ok()).collect()
    };
    // Waits for the runner's measurements to share out what is left (each started with all of
    // it) among all four: one measurement sets the writers' limits one after the other, and one
    // that saw three of them gave thirds, so a read between two is not the shares yet. A share
    // that never settles fails at the deadline, with the limits last read.
    let shared = s.read_until_output(limits, Duration::from_secs(60), |out| {
        let limits = parse(out);
        limits.len() == 4 && limits.iter().sum::<u64>() <= left && limits.iter().all(|&l| l >= left / 4 - (1 << 20))
    });
    let out = shared.await.unwrap();
    let limits = parse(&out);
    let total: u64 = limits.iter().sum();
    println!("4 writers with {left} bytes left: limits {limits:?}");
    assert!(total <= left, "the shares add up to no more than is left ({left}): {limits:?}");
    assert!(limits.iter().all(|&l| l >= left / 4 - (1 << 20)), "each gets a quarter of {left}: {limits:?}");
}
