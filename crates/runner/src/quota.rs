//! The agent's disk quota (`backend.docker.diskQuota`, sent in `load`) as the runner enforces
//! it on the processes it starts. The controller's watcher (`support::quota`) decides which
//! calls still run; this module limits what a process can write meanwhile.
//!
//! - Every process the runner starts (`shell.exec`, `shell.start`, the git and other commands
//!   of the built-in tools, stdio MCP servers) starts with `RLIMIT_FSIZE`, soft and hard, set
//!   to what is left of the quota at that moment ([`limit_command`]): no file it or its
//!   children write can grow past that; the write that would is refused with `SIGXFSZ`, which
//!   kills the writer (a shell builtin's redirection kills the shell).
//! - The runner measures the agent's `/workspace` and `/artifacts/<agent>` itself
//!   ([`suzumio_core::disk::allocated`]), every 20 ms to 1 s (ten times what a walk costs),
//!   (every 5 ms for 2 s after it starts a process), and after each measurement lowers the
//!   limit of every process it started (its descendants, never another process) to its share
//!   of what is left: a process that
//!   has regular files open for writing may grow its largest one by `left / files` (the
//!   number of distinct files open for writing in the container); over the
//!   quota, every other process gets 0 (what it starts cannot grow any file).
//!   Limits only go down (an unprivileged process cannot raise a hard limit, and the runner
//!   does not either), so `ulimit -f unlimited` in a command does not undo them.
//! - When a measurement finds the agent over its quota, every running background command is
//!   killed, its end recorded as stopped by the disk quota and reported (one
//!   `shell.command_finished` signal each).
//!
//! What this bounds: one process writing one file stops at the quota (the single-file case is
//! exact, up to one write). Several processes writing at once can each reach the limit they
//! started with before the next measurement shares what is left out, so the overshoot of
//! parallel writers is what they write within one measurement interval. `RLIMIT_FSIZE` is on a
//! file's size, not on what a write adds: while little is left, a process cannot grow an
//! existing file that is larger than what is left, even by a byte.
//!
//! Why `unsafe`: the limit must be in place before the program runs its first instruction,
//! which only a `pre_exec` hook does (setting it on the pid after the spawn leaves a window in
//! which a fast `dd` has already written). The hook makes one `setrlimit` and one `nice` call,
//! which are async-signal-safe and allocate nothing, as `pre_exec` requires. (The other
//! sanctioned way, re-executing the runner binary as a wrapper that sets the limit and then
//! execs the command, costs an exec per command and changes what `/proc/<pid>/exe` shows.)
//! The processes it starts also run 5 nice levels below the runner, so that a burst of
//! writers does not starve the measurements that share what is left among them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Resource, Rlimit};
use suzumio_core::disk::{allocated, size};

use crate::tools::BackgroundCommands;

/// Entries one measurement visits at most (as the controller's watcher).
const MAX_ENTRIES: u64 = 200_000;
/// The shortest and longest pause between two measurements.
const FASTEST: Duration = Duration::from_millis(20);
const SLOWEST: Duration = Duration::from_secs(1);
/// For this long after the runner starts a process, measure every [`BURST_PAUSE`]: what many
/// writers it starts can write before the first measurement shares the rest out is the
/// overshoot.
const BURST: Duration = Duration::from_secs(2);
const BURST_PAUSE: Duration = Duration::from_millis(5);
/// How much lower than the runner's the priority of the processes it starts is.
const NICER: i32 = 5;

struct Quota {
    limit: u64,
    /// `/workspace` and `/artifacts/<agent>` on disk.
    dirs: [PathBuf; 2],
    /// The last measurement.
    used: u64,
    commands: Arc<BackgroundCommands>,
}

static QUOTA: Mutex<Option<Quota>> = Mutex::new(None);
static WATCHING: OnceLock<()> = OnceLock::new();
/// When the runner last started a process (it wakes the watcher).
static STARTED: Mutex<Option<Instant>> = Mutex::new(None);
static STARTING: tokio::sync::Notify = tokio::sync::Notify::const_new();

fn quota() -> MutexGuard<'static, Option<Quota>> {
    QUOTA.lock().unwrap_or_else(|p| p.into_inner())
}

/// At `load`: limit what the agent's processes write to `limit` bytes in `dirs` (none: no
/// limit for processes started from now on), measuring from now on.
pub(crate) async fn enforce(limit: Option<u64>, dirs: [PathBuf; 2], commands: Arc<BackgroundCommands>) {
    let Some(limit) = limit else {
        *quota() = None;
        return;
    };
    // Before any process starts under it: the first limits are from a real measurement.
    let walked = dirs.clone();
    let used = tokio::task::spawn_blocking(move || allocated_in(&walked)).await.unwrap_or(0);
    *quota() = Some(Quota { limit, dirs, used, commands });
    if WATCHING.set(()).is_ok() {
        tokio::spawn(watch());
    }
}

/// What is left of the quota by the last measurement (`None`: no quota).
pub fn left() -> Option<u64> {
    quota().as_ref().map(|q| q.limit.saturating_sub(q.used))
}

/// Start `command`'s process with `RLIMIT_FSIZE` at what is left of the quota.
pub(crate) fn limit_command(command: &mut tokio::process::Command) {
    let Some(left) = left() else { return };
    // Never above the runner's own hard limit: raising it is not allowed (and would fail the spawn).
    let own = rustix::process::getrlimit(Resource::Fsize).maximum;
    let left = own.map_or(left, |own| own.min(left));
    *STARTED.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    STARTING.notify_one();
    let limit = Rlimit { current: Some(left), maximum: Some(left) };
    // SAFETY: the hook runs in the child between fork and exec and makes two system calls
    // (setrlimit, setpriority) on values computed before the fork; it allocates nothing and
    // takes no lock.
    unsafe {
        command.pre_exec(move || {
            rustix::process::setrlimit(Resource::Fsize, limit)?;
            // Below the runner, so that its measurements keep up with a burst of writers.
            let _ = rustix::process::nice(NICER);
            Ok(())
        });
    }
}

/// The line a result carries when the disk quota stopped (part of) it: a process killed by
/// `SIGXFSZ` (a shell reports it as exit code 153, or as "File size limit exceeded"), or a
/// write refused with `EFBIG` ("File too large"). `None` without a quota or other evidence.
pub fn stopped_note(signal: Option<i32>, exit_code: Option<i32>, output: &str) -> Option<String> {
    let limit = quota().as_ref().map(|q| q.limit)?;
    let xfsz = rustix::process::Signal::XFSZ.as_raw();
    let hit = signal == Some(xfsz)
        || exit_code == Some(128 + xfsz)
        || output.contains("File size limit exceeded")
        || output.contains("File too large");
    hit.then(|| {
        format!(
            "[the agent's disk quota ({}) is used up: a write past it was stopped; free space in /workspace first (rm, file.delete)]",
            size(limit)
        )
    })
}

/// Why a background command was stopped by the quota, as its end reports it.
fn stop_reason(limit: u64) -> String {
    format!("stopped by the disk quota: the agent's disk quota ({}) is used up", size(limit))
}

fn allocated_in(dirs: &[PathBuf; 2]) -> u64 {
    dirs.iter().map(|d| allocated(d, MAX_ENTRIES).bytes).sum()
}

/// Forever: measure, lower the processes' limits, stop background commands when over.
async fn watch() {
    loop {
        let Some(dirs) = quota().as_ref().map(|q| q.dirs.clone()) else {
            tokio::time::sleep(SLOWEST).await;
            continue;
        };
        let started = Instant::now();
        // The writers' files first, then the walk: the walk counts at least what the files held
        // when they were seen, so the shares never add up to more than is left.
        let measured = tokio::task::spawn_blocking(move || {
            let writing = writers();
            (writing, allocated_in(&dirs))
        });
        let Ok((writing, used)) = measured.await else { return };
        let (limit, commands) = {
            let mut current = quota();
            let Some(q) = current.as_mut() else { continue };
            q.used = used;
            (q.limit, q.commands.clone())
        };
        let _ = tokio::task::spawn_blocking(move || lower_limits(writing, used, limit)).await;
        if used > limit {
            let stopped = commands.stop_for_quota(&stop_reason(limit));
            if stopped > 0 {
                tracing::warn!(used, limit, stopped, "over the disk quota: stopped the background commands");
            }
        }
        let bursting = STARTED.lock().unwrap_or_else(|p| p.into_inner()).is_some_and(|at| at.elapsed() < BURST);
        let pause = started.elapsed().saturating_mul(10).clamp(FASTEST, SLOWEST);
        if bursting {
            tokio::time::sleep(BURST_PAUSE.max(started.elapsed())).await;
        } else {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = STARTING.notified() => {}
            }
        }
    }
}

/// Lower every other process's `RLIMIT_FSIZE` to its share of what is left (see the module
/// header): a writer to its largest open file plus its share; over the quota, every other
/// process to 0 (nothing it starts may grow a file).
fn lower_limits(writing: BTreeMap<u32, Vec<Written>>, used: u64, limit: u64) {
    let left = limit.saturating_sub(used);
    // Shares are per file: a shell and the program it redirects into the same file are one.
    let files: BTreeSet<(u64, u64)> = writing.values().flatten().map(|w| w.file).collect();
    let files = files.len().max(1) as u64;
    for (pid, written) in writing {
        let target = match written.iter().map(|w| w.size).max() {
            Some(largest) => largest.saturating_add(left / files),
            None if used > limit => 0,
            // Under the quota, a process that writes nothing now keeps the limit it started
            // with: lowering it to `left` would refuse appending to a file larger than that.
            None => continue,
        };
        let Some(pid) = Pid::from_raw(pid as i32) else { continue };
        let Some(now) = file_size_limit(pid) else { continue };
        let lower = |l: Option<u64>| Some(l.map_or(target, |l| l.min(target)));
        let new = Rlimit { current: lower(now.current), maximum: lower(now.maximum) };
        if new != now {
            let _ = rustix::process::prlimit(Some(pid), Resource::Fsize, new);
        }
    }
}

/// The runner's descendants (as the subreaper, everything its commands start stays one), with
/// the files each writes. Never any other process: a runner started on a host by hand must
/// not touch the host's processes.
fn writers() -> BTreeMap<u32, Vec<Written>> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else { return BTreeMap::new() };
    let parents: BTreeMap<u32, u32> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command name, which is in parentheses and may contain anything.
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect();
    let descends = |mut pid: u32| {
        for _ in 0..parents.len() {
            match parents.get(&pid) {
                Some(&parent) if parent == me => return true,
                Some(&parent) if parent > 0 => pid = parent,
                _ => return false,
            }
        }
        false
    };
    parents.keys().copied().filter(|&pid| pid != me && descends(pid)).map(|pid| (pid, written_by(pid))).collect()
}

/// `pid`'s `RLIMIT_FSIZE`, from `/proc/<pid>/limits` (`None` for unlimited).
fn file_size_limit(pid: Pid) -> Option<Rlimit> {
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", pid.as_raw_nonzero())).ok()?;
    let line = limits.lines().find_map(|l| l.strip_prefix("Max file size"))?;
    let mut values = line.split_whitespace().map(|v| v.parse::<u64>().ok());
    Some(Rlimit { current: values.next()?, maximum: values.next()? })
}

/// A regular file open for writing.
struct Written {
    /// Device and inode.
    file: (u64, u64),
    size: u64,
}

/// The regular files `pid` has open for writing.
fn written_by(pid: u32) -> Vec<Written> {
    use std::os::unix::fs::MetadataExt;
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return Vec::new() };
    fds.filter_map(Result::ok)
        .filter(|fd| {
            let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy()));
            info.ok()
                .and_then(|i| i.lines().find_map(|l| l.strip_prefix("flags:").map(|f| f.trim().to_string())))
                .and_then(|f| u32::from_str_radix(&f, 8).ok())
                .is_some_and(|flags| flags & 0o3 != 0)
        })
        .filter_map(|fd| std::fs::metadata(fd.path()).ok())
        .filter(|m| m.is_file())
        .map(|m| Written { file: (m.dev(), m.ino()), size: m.len() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_limit_is_read_as_the_kernel_has_it() {
        let me = Pid::from_raw(std::process::id() as i32).unwrap();
        assert_eq!(file_size_limit(me), Some(rustix::process::getrlimit(Resource::Fsize)));
    }

    #[test]
    fn only_files_open_for_writing_count_and_each_file_once() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let (written, read) = (tmp.path().join("w"), tmp.path().join("r"));
        std::fs::write(&read, b"read only").unwrap();
        let _reading = std::fs::File::open(&read).unwrap();
        let mut writing = std::fs::File::create(&written).unwrap();
        std::io::Write::write_all(&mut writing, &[0; 1000]).unwrap();
        let _again = std::fs::OpenOptions::new().append(true).open(&written).unwrap();
        let ours: Vec<Written> = written_by(std::process::id());
        let inode = std::fs::metadata(&written).unwrap().ino();
        let seen: Vec<&Written> = ours.iter().filter(|w| w.file.1 == inode).collect();
        assert_eq!(seen.len(), 2, "both descriptors of the written file");
        assert!(seen.iter().all(|w| w.size == 1000));
        let read_inode = std::fs::metadata(&read).unwrap().ino();
        assert!(ours.iter().all(|w| w.file.1 != read_inode), "a file open for reading is no writer's");
    }
}
