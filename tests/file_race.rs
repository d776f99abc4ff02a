//! The symlink race against the runner's file tools, as an attacker ran it: code in another
//! agent's container swaps a directory and a link to `/proc/...` with
//! `renameat2(RENAME_EXCHANGE)` in a tight loop while the tools open paths through it. Before
//! the tools resolved paths from directory fds, 24 of 150 `file.read`s returned the reader's
//! own `/proc/1/environ`. Here the tools run in-process (the runner is pid 1 in its container,
//! so `/proc/self` here is what `/proc/1` is there); every call must either read the real file
//! or be refused, never reach the link's target. The last test runs the attack across two real
//! containers (Docker and the static runner, as in tests/containers.rs).

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use nix::fcntl::{RenameFlags, renameat2};
use serde_json::{Value, json};
use suzumio::config::BackendKind;
use suzumio_runner::{BuiltinTools, Roots};

mod support;

const READS: usize = 10_000;
const WRITES: usize = 2_000;
const DECOY: &str = "harmless";

struct Sandbox {
    base: PathBuf,
    roots: Roots,
    _tmp: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let tmp = tempfile::Builder::new().prefix("suzumio-race-").tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let roots = Roots { workspace: base.join("ws"), artifacts: base.join("artifacts"), mnt: base.join("mnt") };
        for dir in [&roots.workspace, &roots.artifacts.join("pm"), &roots.artifacts.join("bob"), &roots.mnt] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::create_dir_all(base.join("outside")).unwrap();
        Sandbox { base, roots, _tmp: tmp }
    }
}

/// Exchanges `dir/d` (a directory) and `dir/l` (a link to `target`) until stopped; counts swaps.
struct Swapper {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Swapper {
    fn start(dir: &Path, target: &Path) -> Swapper {
        std::os::unix::fs::symlink(target, dir.join("l")).unwrap();
        let (stop, swaps) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let handle = std::fs::File::open(dir).unwrap();
        let thread = std::thread::spawn({
            let (stop, swaps) = (stop.clone(), swaps.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    renameat2(handle.as_fd(), "d", handle.as_fd(), "l", RenameFlags::RENAME_EXCHANGE).unwrap();
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Swapper { stop, swaps, thread: Some(thread) }
    }

    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
        self.swaps.load(Ordering::Relaxed)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_through_a_swapped_link_to_proc_never_leaks() {
    let s = Sandbox::new();
    let bob = s.roots.artifacts.join("bob");
    std::fs::create_dir(bob.join("d")).unwrap();
    std::fs::write(bob.join("d/environ"), DECOY).unwrap();
    let tools = BuiltinTools::new(s.roots.clone(), "pm");
    let swapper = Swapper::start(&bob, Path::new("/proc/self"));
    let (mut read, mut refused, mut leaks) = (0, 0, Vec::new());
    for _ in 0..READS {
        match tools.invoke("file.read", json!({"path": "/artifacts/bob/d/environ"})).await {
            Ok(out) if out.output == format!("1: {DECOY}") => read += 1,
            Ok(out) => leaks.push(out.output),
            Err(e)
                if e.message()
                    == "Read path must be under /workspace, /artifacts, or /mnt: /artifacts/bob/d/environ" =>
            {
                refused += 1
            }
            Err(e) if e.message().starts_with("No such file or directory") => refused += 1,
            Err(e) => leaks.push(format!("unexpected error: {e}")),
        }
    }
    let swaps = swapper.finish();
    assert!(leaks.is_empty(), "{} of {READS} reads leaked, e.g. {:.200}", leaks.len(), leaks[0]);
    // The race really ran: the swapper kept swapping, and both sides of it were seen.
    assert!(swaps > READS as u64, "only {swaps} swaps");
    assert!(read > 0 && refused > 0, "read {read}, refused {refused}: the race did not interleave");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_through_a_swapped_link_to_proc_never_leaks() {
    let s = Sandbox::new();
    let bob = s.roots.artifacts.join("bob");
    std::fs::create_dir(bob.join("d")).unwrap();
    std::fs::write(bob.join("d/environ"), DECOY).unwrap();
    let tools = BuiltinTools::new(s.roots.clone(), "pm");
    let swapper = Swapper::start(&bob, Path::new("/proc/self"));
    let mut leaks = Vec::new();
    for _ in 0..READS / 5 {
        for (tool, path) in [("file.list", "/artifacts/bob/d"), ("file.read", "/artifacts/bob/d")] {
            if let Ok(out) = tools.invoke(tool, json!({"path": path})).await
                && out.output != "environ"
            {
                leaks.push(format!("{tool}: {}", out.output));
            }
        }
    }
    assert!(swapper.finish() > 0, "the swapper never swapped: the race did not run");
    assert!(leaks.is_empty(), "{} listings leaked, e.g. {:.200}", leaks.len(), leaks[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_through_a_swapped_link_never_lands_outside() {
    let s = Sandbox::new();
    let outside = s.base.join("outside");
    std::fs::create_dir(s.roots.workspace.join("d")).unwrap();
    let tools = BuiltinTools::new(s.roots.clone(), "pm");
    let swapper = Swapper::start(&s.roots.workspace, &outside);
    for i in 0..WRITES {
        let input = json!({"path": format!("/workspace/d/sub/f{i}"), "content": "x", "createDirs": true});
        let _ = tools.invoke("file.write", input).await;
        let patch = json!({"operations": [{"op": "add", "path": format!("/workspace/d/p{i}"), "content": "x"}]});
        let _ = tools.invoke("file.patch", patch).await;
    }
    assert!(swapper.finish() > 0, "the swapper never swapped: the race did not run");
    let planted: Vec<_> = std::fs::read_dir(&outside).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(planted.is_empty(), "written outside the roots: {planted:?}");
}

/// Agent `b` swaps `/artifacts/b/d` and a link to `/proc/1` in a shell loop in its container
/// (busybox has no `RENAME_EXCHANGE`, so four renames) while agent `a` reads through it: in
/// `a`'s container `/proc/1` is `a`'s own runner.
#[tokio::test]
async fn across_containers_a_swapped_link_to_proc_1_never_leaks() {
    let s = Arc::new(support::containers::start("race", None, BackendKind::Docker).await);
    let call = |agent: &'static str, tool: &'static str, input: Value| {
        let s = s.clone();
        async move { s.call(agent, tool, input).await }
    };
    let setup = "cd /artifacts/b && mkdir d && echo harmless > d/environ && ln -s /proc/1 l";
    call("b", "shell.exec", json!({"command": setup})).await.unwrap();
    // The swap loop runs in b's container as one long call (a call's background processes are
    // stopped when it returns), until the test drops a stop file into b's workspace. It counts
    // its rounds in a file beside the swapped pair (a plain command line: one the permission
    // rules cannot match, such as shell arithmetic, would wait for an approval instead).
    let swap =
        "cd /artifacts/b && while [ ! -e /workspace/stop ]; do mv d t; mv l d; mv d l; mv t d; echo >> rounds; done";
    let swapping = tokio::spawn(call("b", "shell.exec", json!({"command": swap, "timeoutMs": 300000})));
    let rounds = s.project.dir.join("artifacts/b/rounds");
    support::wait_for_async("the swap loop's first round", async || {
        assert!(!swapping.is_finished(), "the swap loop ended before its first round");
        let asked = s.tools.store.approvals(true, 1).unwrap();
        assert!(asked.is_empty(), "the swap loop waits for an approval: {asked:?}");
        rounds.exists().then_some(())
    })
    .await;
    let (mut read, mut leaks) = (0, Vec::new());
    for _ in 0..2_000 {
        match call("a", "file.read", json!({"path": "/artifacts/b/d/environ"})).await {
            Ok(out) if out == format!("1: {DECOY}") => read += 1,
            Ok(out) => leaks.push(out),
            Err(_) => {}
        }
    }
    assert!(!swapping.is_finished(), "the swap loop ended before the reads did: {:?}", swapping.await);
    std::fs::write(s.project.dir.join("workspaces/b/stop"), "").unwrap();
    let swapped = swapping.await.expect("the swap task").expect("the swap loop's call");
    s.runners.shutdown().await;
    let swaps = std::fs::read_to_string(&rounds).unwrap().lines().count();
    assert!(swaps > 0, "the swap loop swapped no round: {swapped}");
    assert!(leaks.is_empty(), "{} reads leaked, e.g. {:.200}", leaks.len(), leaks[0]);
    assert!(read > 0, "the real file was never read: the swap loop did not run as planned");
}
