//! Every process a command starts stays the command's, and a stop stops all of them.
//!
//! The runner is a child subreaper (`PR_SET_CHILD_SUBREAPER`): a process whose parent exits —
//! after `setsid`, a double fork, `nohup … &` — is re-parented to the runner, not to the
//! container's init, so it is still under the runner when a stop comes, and the runner reaps it
//! when it dies. A command's processes are its [`Tree`]: the members of its process group, every
//! process whose environment carries the command's mark (`SUZUMIO_COMMAND=<id>`, inherited
//! through `setsid`, forks and `nohup`, which move a process out of the group but keep its
//! environment), and, transitively, the children of any of those (a child started with a
//! cleared environment while its parent lives). `shell.stop`, a cancel, a time-out and the end
//! of `shell.exec` signal the whole tree; a background command has ended only when its tree is
//! empty.
//!
//! Reaping: tokio waits for the children the runner spawned itself (each by pid); every other
//! zombie whose parent is the runner is an adopted orphan, reaped here on each `SIGCHLD`. Spawns
//! happen under the same lock as that scan, so a child that exits at once is never taken for an
//! orphan before its pid is known.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

/// The environment variable that marks a command's processes.
pub const MARK: &str = "SUZUMIO_COMMAND";

/// The pids of the children the runner spawned itself (tokio waits for those).
static SPAWNED: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn spawned() -> MutexGuard<'static, BTreeSet<i32>> {
    SPAWNED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Become the subreaper of everything the runner starts, and reap adopted orphans from now on.
/// Call once, inside the runtime.
pub fn start() {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!(
            "cannot become the child subreaper ({e}): processes that leave their command's group may outlive a stop"
        );
    }
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
        Ok(mut children) => {
            tokio::spawn(async move {
                while children.recv().await.is_some() {
                    reap_orphans();
                }
            });
        }
        Err(e) => tracing::warn!("cannot watch SIGCHLD ({e}): adopted processes are not reaped"),
    }
}

/// Held while spawning a child: [`Spawning::own`] records its pid before the next orphan scan.
pub struct Spawning(MutexGuard<'static, BTreeSet<i32>>);

pub fn spawning() -> Spawning {
    Spawning(spawned())
}

impl Spawning {
    pub fn own(mut self, pid: Option<u32>) {
        if let Some(pid) = pid {
            self.0.insert(pid as i32);
        }
    }
}

/// The child with `pid` was waited for: its pid may now be reused by anything.
pub fn waited(pid: u32) {
    spawned().remove(&(pid as i32));
}

/// Reap every zombie child that the runner did not spawn itself.
fn reap_orphans() {
    let me = std::process::id() as i32;
    let ours = spawned();
    for p in processes() {
        if p.zombie && p.ppid == me && !ours.contains(&p.pid) {
            let _ = waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// One line of `/proc/<pid>/stat`, the fields this module reads.
struct Process {
    pid: i32,
    ppid: i32,
    pgid: i32,
    zombie: bool,
}

fn processes() -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // After the command name, which is in parentheses and may contain anything.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some(Process {
                pid,
                zombie: *fields.first()? == "Z",
                ppid: fields.get(1)?.parse().ok()?,
                pgid: fields.get(2)?.parse().ok()?,
            })
        })
        .collect()
}

/// Whether the environment `pid` started with carries `mark`.
fn marked(pid: i32, mark: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| env.split(|b| *b == 0).any(|var| var == mark))
}

/// A command's processes: its group (led by `group`), everything marked with `mark`, and their
/// children.
#[derive(Clone, Debug)]
pub struct Tree {
    group: Pid,
    mark: String,
}

impl Tree {
    /// `mark` is the command's id; [`Tree::env`] is what its process must be started with.
    pub fn new(group: Pid, mark: &str) -> Tree {
        Tree { group, mark: mark.to_string() }
    }

    pub fn env(mark: &str) -> (&'static str, String) {
        (MARK, mark.to_string())
    }

    /// The live processes of the tree (the leader included while it runs).
    pub fn members(&self) -> Vec<Pid> {
        let mark = format!("{MARK}={}", self.mark).into_bytes();
        let all: Vec<Process> = processes().into_iter().filter(|p| !p.zombie).collect();
        let mut found: BTreeSet<i32> =
            all.iter().filter(|p| p.pgid == self.group.as_raw() || marked(p.pid, &mark)).map(|p| p.pid).collect();
        loop {
            let before = found.len();
            for p in &all {
                if found.contains(&p.ppid) && p.ppid != std::process::id() as i32 {
                    found.insert(p.pid);
                }
            }
            if found.len() == before {
                break;
            }
        }
        found.into_iter().map(Pid::from_raw).collect()
    }

    /// Whether something other than the leader is alive.
    pub fn has_live_members(&self) -> bool {
        self.members().into_iter().any(|p| p != self.group)
    }

    pub fn is_empty(&self) -> bool {
        self.members().is_empty()
    }

    /// `signal` to the group and to every member; whether any process got it.
    pub fn signal(&self, signal: Signal) -> bool {
        let mut reached = killpg(self.group, signal).is_ok();
        for pid in self.members() {
            reached |= kill(pid, signal).is_ok();
        }
        reached
    }

    /// SIGKILL to the tree until it is empty (a member may start another while it is killed);
    /// whether anything was killed.
    pub fn kill_all(&self) -> bool {
        let mut killed = false;
        for _ in 0..50 {
            let members = self.members();
            if members.is_empty() {
                break;
            }
            killed = true;
            let _ = killpg(self.group, Signal::SIGKILL);
            for pid in members {
                let _ = kill(pid, Signal::SIGKILL);
            }
            std::thread::yield_now();
        }
        reap_orphans();
        killed
    }
}
