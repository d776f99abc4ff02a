//! `shell.exec`: run a command with `bash -lc` (or `sh -c` where there is no bash) in its own
//! process group, capture stdout and stderr up to a shared byte cap, and stop the whole group on
//! timeout or cancel: SIGTERM, then SIGKILL 2 s later. A non-zero exit is reported, not an error.
//! When the command returns, whatever it left running in its group (`sleep 20 &`) is killed:
//! nothing outlives the call (long-running commands are `shell.start`'s business, see
//! [`super::shell_background`]).
//!
//! The agent token (`SUZUMIO_TOKEN`) is removed from the command's environment.
//!
//! [`execute`] is the process runner itself; runner packs' `context.exec` uses it too.

use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::reaper::Tree;
use nix::unistd::Pid;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::sync::Notify;

use super::{ToolContext, positive};
use crate::paths::{Roots, WORKSPACE};
use crate::rpc::ToolOutput;
use crate::toolpack::ToolError;

const DEFAULT_TIMEOUT_MS: u64 = 60_000;
const MAX_TIMEOUT_MS: u64 = 300_000;
const DEFAULT_MAX_OUTPUT: u64 = 40_000;
const MAX_MAX_OUTPUT: u64 = 200_000;
/// Between SIGTERM and SIGKILL.
pub(super) const KILL_GRACE: Duration = Duration::from_secs(2);
/// After the command exits, how long to keep reading output that processes it left running in
/// the background may still be writing to the same pipes.
pub(super) const DRAIN_GRACE: Duration = Duration::from_millis(250);

pub(super) async fn run(
    ctx: &ToolContext,
    input: &Map<String, Value>,
    cancel: Option<Arc<Notify>>,
) -> Result<ToolOutput, ToolError> {
    let command = match input.get("command") {
        Some(Value::String(command)) => command.as_str(),
        _ => return Err(ToolError::Rejected("command must be a string".into())),
    };
    let timeout_ms = positive(input, "timeoutMs", DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS)?;
    let max_output = positive(input, "maxOutputBytes", DEFAULT_MAX_OUTPUT, MAX_MAX_OUTPUT)? as usize;
    let (cwd_shown, cwd) = working_directory(ctx, input.get("cwd"))?;
    if !cwd.is_dir() {
        return Err(ToolError::Failed(format!("Working directory does not exist: {cwd_shown}")));
    }

    let (program, flag) = shell();
    let request = ProcessRequest {
        program: program.into(),
        args: vec![flag.into(), command.into()],
        cwd,
        env: None,
        input: None,
        timeout: Duration::from_millis(timeout_ms),
        max_output,
    };
    let cancelled = async {
        match &cancel {
            Some(cancel) => cancel.notified().await,
            None => std::future::pending().await,
        }
    };
    let done =
        execute(request, cancelled).await.map_err(|e| ToolError::Failed(format!("Cannot start {program}: {e}")))?;
    if done.cancelled {
        return Err(ToolError::Cancelled(format!("shell.exec was cancelled: {command}")));
    }

    let exit_code = done.status.code();
    let signal = done.status.signal().map(signal_name);
    let mut output = format!("$ {command}");
    for (label, bytes) in [("[stdout]", done.stdout), ("[stderr]", done.stderr)] {
        if bytes.is_empty() {
            continue;
        }
        let text = text_of(bytes);
        output.push('\n');
        output.push_str(label);
        output.push('\n');
        output.push_str(text.strip_suffix('\n').unwrap_or(&text));
    }
    if done.truncated {
        output.push_str("\n[truncated]");
    }
    if let Some(note) = crate::quota::stopped_note(done.status.signal(), exit_code, &output) {
        output.push('\n');
        output.push_str(&note);
    }
    if done.stopped_background {
        output.push_str("\n[processes it left running in the background were stopped: shell.exec returns only when nothing it started runs]");
    }
    let title = match (&signal, exit_code) {
        _ if done.timed_out => format!("timed out after {timeout_ms} ms"),
        (Some(signal), _) => format!("killed by {signal}"),
        (None, Some(code)) => format!("exit code {code}"),
        (None, None) => "finished".to_string(),
    };
    Ok(ToolOutput {
        title: Some(title),
        output,
        metadata: json!({
            "exitCode": exit_code,
            "signal": signal,
            "cwd": cwd_shown,
            "timedOut": done.timed_out,
            "truncated": done.truncated,
            "stoppedBackground": done.stopped_background,
        })
        .as_object()
        .cloned(),
        ..ToolOutput::default()
    })
}

/// A process to run: `shell.exec`'s shell, or the program of a pack's `context.exec`.
pub(crate) struct ProcessRequest {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    /// The whole environment; `None` keeps the runner's, without the agent token.
    pub env: Option<Vec<(String, String)>>,
    /// Written to its stdin, which is then closed (`None`: stdin is `/dev/null`).
    pub input: Option<Vec<u8>>,
    pub timeout: Duration,
    /// Shared by stdout and stderr.
    pub max_output: usize,
}

/// How a process ended and what it wrote.
pub(crate) struct Executed {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub truncated: bool,
    pub timed_out: bool,
    pub cancelled: bool,
    pub stopped_background: bool,
}

/// Run a process in its own process group, capturing its output up to the cap, and stop the
/// whole group on timeout or when `cancelled` resolves (SIGTERM, SIGKILL after the grace), and
/// when the process exits leaving members behind. If this future is dropped before the end, the
/// group is killed. The error is the spawn's (the program does not exist, ...).
pub(crate) async fn execute(request: ProcessRequest, cancelled: impl Future<Output = ()>) -> std::io::Result<Executed> {
    let mut command = Command::new(&request.program);
    command.args(&request.args).current_dir(&request.cwd);
    match &request.env {
        None => {
            command.env_remove("SUZUMIO_TOKEN");
        }
        Some(env) => {
            command.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
        }
    }
    let mark = format!("exec_{}", uuid::Uuid::now_v7().simple());
    let (key, value) = Tree::env(&mark);
    command.env(key, value);
    crate::quota::limit_command(&mut command);
    let spawning = crate::reaper::spawning();
    let mut child = command
        .stdin(if request.input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    spawning.own(child.id());
    // The child leads its own group, so the group id is its pid (known until it is waited for;
    // never 0, which would signal our own group).
    let pid = child.id().ok_or_else(|| std::io::Error::other("the command exited before it could be watched"))?;
    let group = Pid::from_raw(pid as i32);
    let tree = Tree::new(group, &mark);
    let mut guard = KillOnDrop(Some(tree.clone()));
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), request.input) {
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let _ = stdin.write_all(&input).await;
        });
    }
    let capture = Arc::new(Mutex::new(Capture::new(request.max_output)));
    let mut readers = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        readers.push(tokio::spawn(read_stream(stdout, capture.clone(), false)));
    }
    if let Some(stderr) = child.stderr.take() {
        readers.push(tokio::spawn(read_stream(stderr, capture.clone(), true)));
    }

    let mut timed_out = false;
    let mut was_cancelled = false;
    // Wait for the leader to exit *without reaping it*: while it is a zombie its pid, which is
    // the group id, cannot be reused, so signalling the group reaches only what it started.
    let leader = group;
    let exited = tokio::task::spawn_blocking(move || {
        nix::sys::wait::waitid(
            nix::sys::wait::Id::Pid(leader),
            nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT,
        )
    });
    let finished = tokio::select! {
        _ = exited => true,
        _ = tokio::time::sleep(request.timeout) => { timed_out = true; false }
        _ = cancelled => { was_cancelled = true; false }
    };
    let mut stopped_background = false;
    let status = if finished {
        // Members of its tree still alive were started in the background: give them the drain
        // grace to finish writing, then kill the group, then reap the leader.
        if tree.has_live_members() {
            tokio::time::sleep(DRAIN_GRACE).await;
            stopped_background = tree.kill_all();
        }
        child.wait().await
    } else {
        stop_tree(&tree, &mut child).await
    };
    crate::reaper::waited(pid);
    let status = status?;
    guard.0 = None;

    for mut reader in readers {
        if tokio::time::timeout(DRAIN_GRACE, &mut reader).await.is_err() {
            reader.abort();
        }
    }
    let capture = std::mem::replace(&mut *capture.lock().unwrap_or_else(|p| p.into_inner()), Capture::new(0));
    Ok(Executed {
        status,
        stdout: capture.stdout,
        stderr: capture.stderr,
        truncated: capture.truncated,
        timed_out,
        cancelled: was_cancelled,
        stopped_background,
    })
}

/// Kills a command's tree that is still running when the call that started it goes away.
struct KillOnDrop(Option<Tree>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(tree) = &self.0 {
            tree.kill_all();
        }
    }
}

/// The working directory as shown and on disk. Relative paths resolve under `/workspace`; any
/// absolute path is allowed (the roots map to their directories on disk).
pub(super) fn working_directory(ctx: &ToolContext, cwd: Option<&Value>) -> Result<(String, PathBuf), ToolError> {
    let shown = match cwd {
        None | Some(Value::Null) => WORKSPACE.to_string(),
        Some(Value::String(cwd)) if cwd.is_empty() => WORKSPACE.to_string(),
        Some(Value::String(cwd)) => Roots::normalize(cwd),
        Some(_) => return Err(ToolError::Rejected("cwd must be a string".into())),
    };
    let on_disk = ctx.roots.to_disk(&shown).unwrap_or_else(|| PathBuf::from(&shown));
    Ok((shown, on_disk))
}

/// `bash -lc` when bash is installed, else `sh -c`.
pub(super) fn shell() -> (&'static str, &'static str) {
    static HAS_BASH: OnceLock<bool> = OnceLock::new();
    let has_bash = *HAS_BASH.get_or_init(|| {
        let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        std::env::split_paths(&path).any(|dir| dir.join("bash").is_file())
    });
    if has_bash { ("bash", "-lc") } else { ("sh", "-c") }
}

/// SIGTERM to the tree; SIGKILL to whatever is left of it 2 s later. Returns the command's
/// status.
async fn stop_tree(tree: &Tree, child: &mut Child) -> std::io::Result<ExitStatus> {
    tree.signal(Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + KILL_GRACE;
    let status = tokio::time::timeout_at(deadline, child.wait()).await.ok();
    // The command is gone; give the rest of its tree the same grace.
    if status.is_some() {
        while !tree.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    tree.kill_all();
    match status {
        Some(status) => status,
        None => child.wait().await,
    }
}

struct Capture {
    budget: usize,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    truncated: bool,
}

impl Capture {
    fn new(budget: usize) -> Self {
        Capture { budget, stdout: Vec::new(), stderr: Vec::new(), truncated: false }
    }

    fn push(&mut self, stderr: bool, bytes: &[u8]) {
        let room = self.budget.saturating_sub(self.stdout.len() + self.stderr.len());
        if bytes.len() > room {
            self.truncated = true;
        }
        let kept = &bytes[..bytes.len().min(room)];
        if stderr { self.stderr.extend_from_slice(kept) } else { self.stdout.extend_from_slice(kept) }
    }
}

/// Read a pipe to its end; what is over the cap is read and dropped so the command never
/// blocks on a full pipe.
async fn read_stream(mut pipe: impl AsyncRead + Unpin, capture: Arc<Mutex<Capture>>, stderr: bool) {
    let mut buf = vec![0u8; 16 << 10];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => capture.lock().unwrap_or_else(|p| p.into_inner()).push(stderr, &buf[..n]),
        }
    }
}

/// Bytes as text; a character cut by the cap is dropped rather than shown as garbage.
pub(super) fn text_of(mut bytes: Vec<u8>) -> String {
    if let Err(e) = std::str::from_utf8(&bytes)
        && e.error_len().is_none()
    {
        bytes.truncate(e.valid_up_to());
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

pub(super) fn signal_name(number: i32) -> String {
    Signal::try_from(number).map(|s| s.as_str().to_string()).unwrap_or_else(|_| format!("signal {number}"))
}
