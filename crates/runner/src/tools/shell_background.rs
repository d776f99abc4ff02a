//! Background commands: `shell.start` runs a command line as `shell.exec` does (`bash -lc`, or
//! `sh -c` without bash; its own process group; the runner's environment without the agent
//! token, plus the call's `env`) but returns at once with a command id; `shell.check` returns the
//! output written since the last check, the status and the exit code, optionally waiting a
//! little for the end; `shell.stop` ends the whole process group (SIGTERM, SIGKILL 2 s later);
//! `shell.list` shows the agent's commands.
//!
//! The output of each command (stdout and stderr interleaved, as a terminal shows them) is kept
//! in a ring buffer of [`RING_BYTES`]: a command that writes more keeps only its tail, and
//! `shell.check` says how much was dropped. At most [`MAX_RUNNING`] commands run at once per
//! agent, and the last [`MAX_KEPT`] ended ones are remembered.
//!
//! When a command ends by itself, its end is *reported*: the runner's service sends
//! `commandFinished` (the controller records one `shell.command_finished` signal for it) until
//! the controller acknowledges it — unless the result was already read: a `shell.check` that
//! saw the end (or was waiting for it when it came), or a `shell.stop`. A check that reads an end
//! already reported says so (`endRead` in its metadata), and the controller withdraws the signal
//! if it is still pending. The registry lives as
//! long as the runner process, across `load`s and across a lost and resumed controller
//! connection, so a command outlives both.

use std::collections::{BTreeMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::sync::{Notify, watch};

use super::shell_exec::{DRAIN_GRACE, KILL_GRACE, shell, signal_name, working_directory};
use super::{ToolContext, positive, string_field};
use crate::reaper::Tree;
use crate::rpc::{CommandFinishedParams, CommandInfo, CommandStatus, ToolOutput};
use crate::toolpack::ToolError;

/// Output kept per command (its tail).
pub const RING_BYTES: usize = 1 << 20;
/// Commands of one agent that may run at once.
pub const MAX_RUNNING: usize = 8;
/// Ended commands remembered (the oldest whose end needs no report are forgotten first).
pub const MAX_KEPT: usize = 64;
/// Characters of output carried by the `shell.command_finished` signal.
pub const SIGNAL_TAIL_CHARS: usize = 8_000;
const DEFAULT_CHECK_OUTPUT: u64 = 40_000;
const MAX_CHECK_OUTPUT: u64 = 200_000;
const MAX_WAIT_MS: u64 = 120_000;
const MAX_NAME_CHARS: usize = 100;

/// Which background tool.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    Start,
    Check,
    Stop,
    List,
}

/// The background commands of one runner (one agent).
#[derive(Default)]
pub struct BackgroundCommands {
    /// By id; ids are UUIDv7, so the map is in start order.
    commands: Mutex<BTreeMap<String, Arc<Background>>>,
    /// Notified when a command's end is to be reported.
    ended: Notify,
}

struct Background {
    id: String,
    name: Option<String>,
    command: String,
    cwd: String,
    started_at: String,
    pid: u32,
    state: Mutex<State>,
    /// Becomes true once the command ended and its state says how.
    ended: watch::Sender<bool>,
}

/// Whether the end of a command still has to reach the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Report {
    /// It runs.
    NotYet,
    /// Ended and unread: to be sent.
    Pending,
    /// Sent, no answer yet.
    Sending,
    /// Acknowledged by the controller, or not needed (read by `shell.check`, or stopped).
    Done,
}

struct State {
    ring: VecDeque<u8>,
    /// Bytes written in all.
    written: u64,
    /// Up to where (in `written` terms) `shell.check` has returned the output.
    cursor: u64,
    status: CommandStatus,
    exit_code: Option<i32>,
    signal: Option<String>,
    error: Option<String>,
    ended_at: Option<String>,
    /// The group's leader is not reaped yet, so its pid (the group id) cannot have been reused
    /// and the group may be signalled.
    group_live: bool,
    stop_requested: bool,
    /// Why the runner stopped it by itself (the disk quota): its end is reported all the same.
    stopped_by: Option<String>,
    /// `shell.check` calls waiting for the end right now: the end goes to them.
    waiting_checks: usize,
    report: Report,
}

impl State {
    /// A command just started: running, no output yet, its group alive.
    fn started() -> State {
        State {
            ring: VecDeque::new(),
            written: 0,
            cursor: 0,
            status: CommandStatus::Running,
            exit_code: None,
            signal: None,
            error: None,
            ended_at: None,
            group_live: true,
            stop_requested: false,
            stopped_by: None,
            waiting_checks: 0,
            report: Report::NotYet,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.written += bytes.len() as u64;
        if bytes.len() >= RING_BYTES {
            self.ring.clear();
            self.ring.extend(&bytes[bytes.len() - RING_BYTES..]);
            return;
        }
        let overflow = (self.ring.len() + bytes.len()).saturating_sub(RING_BYTES);
        self.ring.drain(..overflow);
        self.ring.extend(bytes);
    }

    /// Bytes dropped from the front of the ring.
    fn dropped(&self) -> u64 {
        self.written - self.ring.len() as u64
    }

    /// The output after `from`: how many of those bytes were dropped already, and the rest.
    fn since(&self, from: u64) -> (u64, Vec<u8>) {
        let start = self.dropped();
        let lost = start.saturating_sub(from);
        let skip = from.saturating_sub(start) as usize;
        (lost, self.ring.iter().skip(skip).copied().collect())
    }

    /// The last `chars` characters of the kept output, and whether anything before them is gone.
    fn tail(&self, chars: usize) -> (String, bool) {
        let take = self.ring.len().min(chars.saturating_mul(4));
        let bytes: Vec<u8> = self.ring.iter().skip(self.ring.len() - take).copied().collect();
        let text = text_from_middle(&bytes);
        let count = text.chars().count();
        let cut = count > chars;
        let text = if cut { text.chars().skip(count - chars).collect() } else { text };
        (text, cut || self.dropped() > 0 || take < self.ring.len())
    }

    fn running(&self) -> bool {
        self.status == CommandStatus::Running
    }
}

/// Bytes that may start or end inside a character, as text: a cut character at either end is
/// left out rather than shown as garbage.
fn text_from_middle(bytes: &[u8]) -> String {
    let start = bytes.iter().take(3).take_while(|b| (**b & 0b1100_0000) == 0b1000_0000).count();
    let bytes = &bytes[start..];
    let end = match std::str::from_utf8(bytes) {
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        _ => bytes.len(),
    };
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl Background {
    fn info(&self, tail_chars: usize) -> CommandInfo {
        let state = lock(&self.state);
        CommandInfo {
            id: self.id.clone(),
            name: self.name.clone(),
            command: self.command.clone(),
            cwd: self.cwd.clone(),
            status: state.status,
            exit_code: state.exit_code,
            signal: state.signal.clone(),
            error: state.error.clone(),
            started_at: self.started_at.clone(),
            ended_at: state.ended_at.clone(),
            output_bytes: state.written,
            dropped_bytes: state.dropped(),
            recent_output: (tail_chars > 0).then(|| state.tail(tail_chars).0),
        }
    }

    fn finished_params(&self, state: &State) -> CommandFinishedParams {
        let (output_tail, truncated) = state.tail(SIGNAL_TAIL_CHARS);
        CommandFinishedParams {
            command_id: self.id.clone(),
            name: self.name.clone(),
            command: self.command.clone(),
            status: state.status,
            exit_code: state.exit_code,
            signal: state.signal.clone(),
            output_tail,
            truncated,
            started_at: self.started_at.clone(),
            ended_at: state.ended_at.clone().unwrap_or_default(),
            stopped_by: state.stopped_by.clone(),
        }
    }

    /// Ask the group to stop: SIGTERM now, SIGKILL after [`KILL_GRACE`] if it is still there.
    fn request_stop(self: &Arc<Self>, signal: Signal) {
        let group = Pid::from_raw(self.pid as i32);
        {
            let mut state = lock(&self.state);
            if !state.running() {
                return;
            }
            state.stop_requested = true;
            state.report = Report::Done;
            if state.group_live {
                Tree::new(group, &self.id).signal(signal);
            }
        }
        if signal == Signal::SIGKILL {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(KILL_GRACE).await;
            let state = lock(&me.state);
            if state.group_live {
                Tree::new(group, &me.id).kill_all();
            }
        });
    }
}

impl BackgroundCommands {
    pub fn new() -> Self {
        BackgroundCommands::default()
    }

    fn all(&self) -> MutexGuard<'_, BTreeMap<String, Arc<Background>>> {
        self.commands.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// By id, or by name (the newest command with it).
    fn find(&self, key: &str) -> Result<Arc<Background>, ToolError> {
        let all = self.all();
        if let Some(found) = all.get(key) {
            return Ok(found.clone());
        }
        all.values()
            .rev()
            .find(|c| c.name.as_deref() == Some(key))
            .cloned()
            .ok_or_else(|| ToolError::Rejected(format!("No background command {key}: shell.list shows them")))
    }

    /// Every command, oldest first, with up to `tail_chars` of its recent output.
    pub fn infos(&self, tail_chars: usize) -> Vec<CommandInfo> {
        let all: Vec<Arc<Background>> = self.all().values().cloned().collect();
        all.iter().map(|c| c.info(tail_chars)).collect()
    }

    /// Stop a command for the user (the controller's `stopCommand`); like `shell.stop`, no
    /// report follows.
    pub async fn stop(&self, id: &str) -> Result<CommandInfo, ToolError> {
        let command =
            self.all().get(id).cloned().ok_or_else(|| ToolError::Rejected(format!("No background command {id}")))?;
        command.request_stop(Signal::SIGTERM);
        wait_ended(&command, KILL_GRACE + Duration::from_secs(3)).await;
        Ok(command.info(0))
    }

    /// Whether the runner must keep going without a controller: a command runs, or an end is
    /// not acknowledged yet.
    pub fn need_controller(&self) -> bool {
        self.all().values().any(|c| matches!(lock(&c.state).report, Report::NotYet | Report::Pending | Report::Sending))
    }

    /// Resolves when an end may be waiting to be reported.
    pub async fn ended(&self) {
        self.ended.notified().await
    }

    /// The ends to report now (each marked as being sent).
    pub fn take_reports(&self) -> Vec<CommandFinishedParams> {
        let all: Vec<Arc<Background>> = self.all().values().cloned().collect();
        all.iter()
            .filter_map(|c| {
                let mut state = lock(&c.state);
                (state.report == Report::Pending).then(|| {
                    state.report = Report::Sending;
                    c.finished_params(&state)
                })
            })
            .collect()
    }

    /// The controller acknowledged (`delivered`) the end of `id`, or could not take it now.
    pub fn reported(&self, id: &str, delivered: bool) {
        if let Some(command) = self.all().get(id) {
            let mut state = lock(&command.state);
            if state.report == Report::Sending {
                state.report = if delivered { Report::Done } else { Report::Pending };
            }
        }
    }

    /// Kill every running command because the agent is over its disk quota: each end is
    /// reported, with `reason`. How many were running.
    pub fn stop_for_quota(&self, reason: &str) -> usize {
        let all: Vec<Arc<Background>> = self.all().values().cloned().collect();
        let mut stopped = 0;
        for command in all {
            {
                let mut state = lock(&command.state);
                if !state.running() || state.stopped_by.is_some() {
                    continue;
                }
                state.stopped_by = Some(reason.to_string());
            }
            command.request_stop(Signal::SIGKILL);
            stopped += 1;
        }
        stopped
    }

    /// Kill every running command (the runner stops); their ends are not reported.
    pub fn kill_all(&self) {
        let all: Vec<Arc<Background>> = self.all().values().cloned().collect();
        for command in all {
            command.request_stop(Signal::SIGKILL);
        }
    }

    fn running(&self) -> usize {
        self.all().values().filter(|c| lock(&c.state).running()).count()
    }

    /// Forget the oldest ended commands beyond [`MAX_KEPT`] whose end needs nothing more.
    fn prune(&self) {
        let mut all = self.all();
        let forgettable: Vec<String> = all
            .iter()
            .filter(|(_, c)| {
                let state = lock(&c.state);
                state.report == Report::Done && !state.running()
            })
            .map(|(id, _)| id.clone())
            .collect();
        let ended = all.values().filter(|c| !lock(&c.state).running()).count();
        for id in forgettable.into_iter().take(ended.saturating_sub(MAX_KEPT)) {
            all.remove(&id);
        }
    }
}

pub(super) async fn run(op: Op, ctx: &ToolContext, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let commands = &ctx.commands;
    match op {
        Op::Start => start(ctx, commands, input).await,
        Op::Check => check(commands, input).await,
        Op::Stop => stop(commands, input).await,
        Op::List => Ok(list(commands)),
    }
}

async fn start(
    ctx: &ToolContext,
    commands: &Arc<BackgroundCommands>,
    input: &Map<String, Value>,
) -> Result<ToolOutput, ToolError> {
    let command = string_field(input, "command")?.to_string();
    let name = match input.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(n)) if n.trim().is_empty() => None,
        Some(Value::String(n)) if n.chars().count() > MAX_NAME_CHARS => {
            return Err(ToolError::Rejected(format!("name must be at most {MAX_NAME_CHARS} characters")));
        }
        Some(Value::String(n)) => Some(n.trim().to_string()),
        Some(_) => return Err(ToolError::Rejected("name must be a string".into())),
    };
    let env = match input.get("env") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(vars)) => vars
            .iter()
            .map(|(k, v)| match v {
                Value::String(v) if valid_env_name(k) && !v.contains('\0') => Ok((k.clone(), v.clone())),
                Value::String(_) => Err(ToolError::Rejected(format!("env: {k:?} is not a usable variable name"))),
                _ => Err(ToolError::Rejected(format!("env.{k} must be a string"))),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(ToolError::Rejected("env must be an object of strings".into())),
    };
    let (cwd_shown, cwd) = working_directory(ctx, input.get("cwd"))?;
    if !cwd.is_dir() {
        return Err(ToolError::Failed(format!("Working directory does not exist: {cwd_shown}")));
    }
    if commands.running() >= MAX_RUNNING {
        return Err(ToolError::Failed(format!(
            "{MAX_RUNNING} background commands are running already (the most an agent may have): stop one with shell.stop or wait for one to end"
        )));
    }

    let (program, flag) = shell();
    let id = format!("cmd_{}", uuid::Uuid::now_v7().simple());
    let (mark, marked) = Tree::env(&id);
    let mut command_to_run = Command::new(program);
    crate::quota::limit_command(&mut command_to_run);
    let spawning = crate::reaper::spawning();
    let mut child = command_to_run
        .arg(flag)
        .arg(&command)
        .current_dir(&cwd)
        .env_remove("SUZUMIO_TOKEN")
        .envs(env)
        .env(mark, marked)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| ToolError::Failed(format!("Cannot start {program}: {e}")))?;
    spawning.own(child.id());
    let pid = child.id().ok_or_else(|| ToolError::Failed("the command exited before it could be watched".into()))?;
    let (ended, _) = watch::channel(false);
    let background = Arc::new(Background {
        id,
        name,
        command,
        cwd: cwd_shown,
        started_at: now(),
        pid,
        state: Mutex::new(State::started()),
        ended,
    });
    commands.all().insert(background.id.clone(), background.clone());
    commands.prune();
    let readers: Vec<_> = [
        child.stdout.take().map(|p| Box::new(p) as Box<dyn AsyncRead + Send + Unpin>),
        child.stderr.take().map(|p| Box::new(p) as Box<dyn AsyncRead + Send + Unpin>),
    ]
    .into_iter()
    .flatten()
    .map(|pipe| tokio::spawn(read_into(pipe, background.clone())))
    .collect();
    tokio::spawn(watch_command(background.clone(), child, readers, commands.clone()));

    let id = &background.id;
    let shown = background.name.as_deref().map_or(String::new(), |n| format!(" ({n})"));
    Ok(ToolOutput {
        title: Some(format!("started {id}")),
        output: format!(
            "Started background command {id}{shown}, pid {pid}: {}\nRead its output with shell.check {{\"id\": \"{id}\"}} (waitMs waits for the end). When it ends you get a shell.command_finished signal, unless shell.check has read its end or you stopped it with shell.stop.",
            background.command
        ),
        metadata: json!({ "id": id, "pid": pid, "name": background.name, "cwd": background.cwd }).as_object().cloned(),
        ..ToolOutput::default()
    })
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('=') && !name.contains('\0')
}

/// Read a pipe to its end into the command's ring.
async fn read_into(mut pipe: impl AsyncRead + Unpin, command: Arc<Background>) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => lock(&command.state).push(&buf[..n]),
        }
    }
}

/// Wait for the command's shell to exit, stop what it left running in its group (as
/// `shell.exec` does), reap it, and record how it ended.
async fn watch_command(
    command: Arc<Background>,
    mut child: Child,
    readers: Vec<tokio::task::JoinHandle<()>>,
    commands: Arc<BackgroundCommands>,
) {
    let group = Pid::from_raw(command.pid as i32);
    // Waited for without reaping: while it is a zombie its pid, the group id, is not reused.
    let exited = tokio::task::spawn_blocking(move || {
        nix::sys::wait::waitid(
            nix::sys::wait::Id::Pid(group),
            nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT,
        )
    })
    .await;
    // Ended only when every process of its tree has: what is left after the drain is killed.
    let tree = Tree::new(group, &command.id);
    if tree.has_live_members() {
        tokio::time::sleep(DRAIN_GRACE).await;
        tree.kill_all();
    }
    lock(&command.state).group_live = false;
    let status = match exited {
        Ok(Ok(_)) => {
            let status = child.wait().await.map_err(|e| format!("Cannot wait for the command: {e}"));
            crate::reaper::waited(command.pid);
            status
        }
        Ok(Err(e)) => Err(format!("Cannot wait for the command: {e}")),
        Err(e) => Err(format!("Cannot wait for the command: {e}")),
    };
    for mut reader in readers {
        if tokio::time::timeout(DRAIN_GRACE, &mut reader).await.is_err() {
            reader.abort();
        }
    }
    let report = {
        let mut state = lock(&command.state);
        state.ended_at = Some(now());
        match status {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                state.exit_code = status.code();
                state.signal = status.signal().map(signal_name);
                state.status = if state.stop_requested { CommandStatus::Stopped } else { CommandStatus::Exited };
            }
            Err(error) => {
                state.error = Some(error);
                state.status = if state.stop_requested { CommandStatus::Stopped } else { CommandStatus::Failed };
            }
        }
        // A check waiting for the end gets it: nothing is left to tell.
        state.report = match () {
            // The agent did not ask for this stop: it hears of it by the signal.
            _ if state.stopped_by.is_some() => Report::Pending,
            _ if state.stop_requested || state.waiting_checks > 0 => Report::Done,
            _ => Report::Pending,
        };
        state.report == Report::Pending
    };
    command.ended.send_replace(true);
    if report {
        commands.ended.notify_one();
    }
    tracing::info!(id = %command.id, "background command ended");
}

async fn wait_ended(command: &Background, within: Duration) {
    let mut ended = command.ended.subscribe();
    let _ = tokio::time::timeout(within, ended.wait_for(|e| *e)).await;
}

async fn check(commands: &BackgroundCommands, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let command = commands.find(string_field(input, "id")?)?;
    let max = positive(input, "maxOutputBytes", DEFAULT_CHECK_OUTPUT, MAX_CHECK_OUTPUT)? as usize;
    let wait_ms = match input.get("waitMs") {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64().unwrap_or(0).min(MAX_WAIT_MS),
        Some(_) => return Err(ToolError::Rejected("waitMs must be a whole number of milliseconds".into())),
    };
    let waiting = wait_ms > 0 && {
        let mut state = lock(&command.state);
        let running = state.running();
        if running {
            state.waiting_checks += 1;
        }
        running
    };
    if waiting {
        wait_ended(&command, Duration::from_millis(wait_ms)).await;
    }
    let mut state = lock(&command.state);
    if waiting {
        state.waiting_checks -= 1;
    }
    let (lost, new) = state.since(state.cursor);
    state.cursor = state.written;
    if !state.running() && state.report == Report::Pending {
        state.report = Report::Done;
    }
    Ok(result_of(&command, &state, lost, new, max))
}

async fn stop(commands: &BackgroundCommands, input: &Map<String, Value>) -> Result<ToolOutput, ToolError> {
    let command = commands.find(string_field(input, "id")?)?;
    let was_running = lock(&command.state).running();
    command.request_stop(Signal::SIGTERM);
    wait_ended(&command, KILL_GRACE + Duration::from_secs(3)).await;
    let mut state = lock(&command.state);
    let (lost, new) = state.since(state.cursor);
    state.cursor = state.written;
    if !state.running() {
        state.report = Report::Done;
    }
    let mut out = result_of(&command, &state, lost, new, DEFAULT_CHECK_OUTPUT as usize);
    if !was_running {
        out.output = format!("{} had already ended.\n{}", command.id, out.output);
    } else if state.running() {
        out.output = format!("{} did not stop yet (it was sent SIGKILL).\n{}", command.id, out.output);
    }
    Ok(out)
}

fn list(commands: &BackgroundCommands) -> ToolOutput {
    let infos = commands.infos(0);
    let mut output = String::new();
    if infos.is_empty() {
        output.push_str("No background commands.");
    }
    for info in &infos {
        let name = info.name.as_deref().map_or(String::new(), |n| format!(" ({n})"));
        output.push_str(&format!(
            "{}{name} {} · {} · in {} · started {} · {} bytes of output\n",
            info.id,
            describe(info.status, info.exit_code, info.signal.as_deref()),
            info.command,
            info.cwd,
            info.started_at,
            info.output_bytes
        ));
    }
    ToolOutput {
        title: Some(format!("{} background command(s)", infos.len())),
        output: output.trim_end().to_string(),
        metadata: json!({ "commands": infos }).as_object().cloned(),
        ..ToolOutput::default()
    }
}

fn describe(status: CommandStatus, exit_code: Option<i32>, signal: Option<&str>) -> String {
    match (status, exit_code, signal) {
        (CommandStatus::Running, ..) => "running".to_string(),
        (CommandStatus::Stopped, ..) => "stopped".to_string(),
        (CommandStatus::Failed, ..) => "failed".to_string(),
        (CommandStatus::Lost, ..) => "lost".to_string(),
        (_, _, Some(signal)) => format!("killed by {signal}"),
        (_, Some(code), _) => format!("exited with code {code}"),
        _ => "exited".to_string(),
    }
}

/// What `shell.check` and `shell.stop` return: the status, then the new output (its last `max`
/// bytes), saying what was dropped by the ring or skipped here.
fn result_of(command: &Background, state: &State, lost: u64, mut new: Vec<u8>, max: usize) -> ToolOutput {
    let status = describe(state.status, state.exit_code, state.signal.as_deref());
    let mut output = format!("{} {status}: {}", command.id, command.command);
    if let Some(error) = &state.error {
        output.push_str(&format!("\n{error}"));
    }
    if lost > 0 {
        output.push_str(&format!(
            "\n[{lost} bytes of output were dropped before they were read: only the last {} are kept]",
            RING_BYTES
        ));
    }
    let skipped = new.len().saturating_sub(max);
    if skipped > 0 {
        new.drain(..skipped);
        output.push_str(&format!("\n[{skipped} bytes skipped: only the last {max} bytes of the new output are shown]"));
    }
    if new.is_empty() {
        output.push_str("\n(no new output)");
    } else {
        let text = text_from_middle(&new);
        output.push('\n');
        output.push_str(text.strip_suffix('\n').unwrap_or(&text));
    }
    ToolOutput {
        title: Some(status),
        output,
        metadata: json!({
            "id": command.id,
            "status": state.status,
            "exitCode": state.exit_code,
            "signal": state.signal,
            "newBytes": new.len() + skipped,
            "droppedBytes": lost,
            "skippedBytes": skipped,
            "truncated": lost > 0 || skipped > 0,
            "outputBytes": state.written,
            // The caller has now seen how it ended (the controller withdraws a pending signal).
            "endRead": !state.running(),
        })
        .as_object()
        .cloned(),
        ..ToolOutput::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State { group_live: false, ..State::started() }
    }

    #[test]
    fn the_ring_keeps_the_tail_and_counts_what_it_dropped() {
        let mut s = state();
        s.push(&vec![b'a'; RING_BYTES - 10]);
        s.push(b"0123456789abcdefghij");
        assert_eq!(s.written, RING_BYTES as u64 + 10);
        assert_eq!(s.ring.len(), RING_BYTES);
        assert_eq!(s.dropped(), 10);
        let (lost, new) = s.since(0);
        assert_eq!(lost, 10);
        assert!(new.ends_with(b"abcdefghij"));
        let (lost, new) = s.since(s.written - 3);
        assert_eq!((lost, new.as_slice()), (0, &b"hij"[..]));
        s.push(&vec![b'z'; 3 * RING_BYTES]);
        assert_eq!(s.ring.len(), RING_BYTES);
        assert_eq!(s.tail(4), ("zzzz".to_string(), true));
    }

    #[test]
    fn a_tail_never_starts_inside_a_character() {
        let mut s = state();
        s.push("ééé".as_bytes());
        assert_eq!(s.tail(2), ("éé".to_string(), true));
        assert_eq!(text_from_middle(&"é".as_bytes()[1..]), "");
    }
}
