//! What a runner pack's code can do in its container, behind `context.fs`, `context.exec`,
//! `context.signal` and the `node:fs`/`node:child_process` modules: the host operations `fs.*`,
//! `exec`, `exec.sync` and `call.cancelled`.
//!
//! Files are confined exactly as the `file.*` tools are: read under `/workspace`, `/artifacts` and
//! `/mnt`, write under `/workspace` and the agent's own artifacts directory, every path opened
//! from a directory fd of its root by [`Roots`] (no path string walked from `/`). Processes run
//! as `shell.exec`'s do ([`crate::tools::execute`]: own process group, capped output, the group
//! killed on timeout, on cancel and when the call ends), with the agent's environment (the
//! runner's, without the token and the runner's own settings) plus what the call passes.
//!
//! Failures a pack should be able to handle (`ENOENT`, a refused path, a non-zero exit is not
//! one) are answered as `{err: {code, message, path}}`, which the JavaScript side throws as a
//! Node-style error with `code`.

use std::collections::HashMap;
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::paths::{ARTIFACTS, MNT, PathRefusal, Roots, WORKSPACE};
use crate::tools::{ProcessRequest, execute, rename_into_place, write_temp};
use suzumio_core::fsat::{dir_entries, remove_tree, stat_json};

/// `readFile` refuses files larger than this (the pack's heap is 64 MiB by default).
const MAX_READ_BYTES: u64 = 32 << 20;
const DEFAULT_TIMEOUT_MS: u64 = 60_000;
const MAX_TIMEOUT_MS: u64 = 600_000;
const DEFAULT_MAX_OUTPUT: u64 = 1 << 20;
const MAX_MAX_OUTPUT: u64 = 16 << 20;
/// The runner's own settings, not the agent's environment.
const RUNNER_ONLY_ENV: &[&str] =
    &["SUZUMIO_TOKEN", "SUZUMIO_SOCKET", "SUZUMIO_WORKSPACE", "SUZUMIO_ARTIFACTS", "SUZUMIO_MNT"];

/// A failure the pack sees as an error with `code`.
struct Failure {
    code: String,
    message: String,
    path: Option<String>,
}

type Outcome = Result<Value, Failure>;

fn failure(code: &str, message: impl Into<String>, path: &str) -> Failure {
    Failure { code: code.into(), message: message.into(), path: Some(path.into()) }
}

fn io_failure(error: &std::io::Error, shown: &str) -> Failure {
    let code = suzumio_core::fsat::error_code(error);
    let message = match error.kind() {
        std::io::ErrorKind::NotFound => format!("No such file or directory: {shown}"),
        std::io::ErrorKind::PermissionDenied => format!("Permission denied: {shown}"),
        _ => format!("{error}: {shown}"),
    };
    failure(&code, message, shown)
}

fn errno_failure(errno: rustix::io::Errno, shown: &str) -> Failure {
    io_failure(&errno.into(), shown)
}

/// The answer to the JavaScript side: `{value}` or `{err}`.
fn answer(outcome: Outcome) -> Value {
    match outcome {
        Ok(value) => json!({ "value": value }),
        Err(f) => json!({ "err": { "code": f.code, "message": f.message, "path": f.path } }),
    }
}

/// One agent's container as its packs reach it.
pub(crate) struct ContainerAccess {
    roots: Roots,
    /// The writable artifacts directory as tools see it, `/artifacts/<agent>`.
    own_artifacts: String,
    env: Vec<(String, String)>,
    /// Running tool calls by activation: how many, and their cancel flag.
    calls: Mutex<HashMap<String, (usize, watch::Sender<bool>)>>,
}

/// A running tool call; dropping it ends the call (its processes are stopped).
pub(crate) struct CallGuard {
    access: Arc<ContainerAccess>,
    activation_id: String,
}

impl CallGuard {
    /// Cancel the call: `context.signal` fires and its processes are stopped.
    pub fn cancel(&self) {
        if let Some((_, flag)) = self.access.calls().get(&self.activation_id) {
            flag.send_replace(true);
        }
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let mut calls = self.access.calls();
        if let Some((count, _)) = calls.get_mut(&self.activation_id) {
            *count -= 1;
            if *count == 0 {
                calls.remove(&self.activation_id);
            }
        }
    }
}

impl ContainerAccess {
    pub fn new(roots: Roots, artifacts_dir: &str) -> ContainerAccess {
        let env = std::env::vars().filter(|(k, _)| !RUNNER_ONLY_ENV.contains(&k.as_str())).collect();
        ContainerAccess {
            roots,
            own_artifacts: Roots::normalize(artifacts_dir),
            env,
            calls: Mutex::new(HashMap::new()),
        }
    }

    /// `context.env`: the agent's environment as its processes get it.
    pub fn env_json(&self) -> Value {
        Value::Object(self.env.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
    }

    /// Mark a tool call of `activation_id` as running until the guard is dropped.
    pub fn begin_call(self: &Arc<Self>, activation_id: &str) -> CallGuard {
        let mut calls = self.calls();
        let entry = calls.entry(activation_id.to_string()).or_insert_with(|| (0, watch::channel(false).0));
        entry.0 += 1;
        CallGuard { access: self.clone(), activation_id: activation_id.to_string() }
    }

    fn calls(&self) -> std::sync::MutexGuard<'_, HashMap<String, (usize, watch::Sender<bool>)>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Resolves when the call is cancelled or has ended; never for code outside a call.
    fn call_over(&self, activation_id: Option<&str>) -> impl Future<Output = ()> + Send + 'static {
        let flag = activation_id.and_then(|a| self.calls().get(a).map(|(_, flag)| flag.subscribe()));
        async move {
            match flag {
                Some(mut flag) => {
                    let _ = flag.wait_for(|cancelled| *cancelled).await;
                }
                None => std::future::pending().await,
            }
        }
    }

    /// `call.cancelled`: true once the call is cancelled, false when it ended without.
    pub fn cancelled(&self, activation_id: Option<&str>) -> impl Future<Output = bool> + Send + 'static {
        let flag = activation_id.and_then(|a| self.calls().get(a).map(|(_, flag)| flag.subscribe()));
        async move {
            match flag {
                Some(mut flag) => flag.wait_for(|cancelled| *cancelled).await.is_ok(),
                None => false,
            }
        }
    }

    /// A synchronous operation (`fs.*`, `runtime.cwd`, `exec.sync`), or `None` if `op` is not one.
    pub fn call(&self, op: &str, args: &Value, activation_id: Option<&str>) -> Option<Value> {
        if op == "exec.sync" {
            return Some(self.exec_blocking(args, activation_id));
        }
        let args = args.as_object().cloned().unwrap_or_default();
        let outcome = match op {
            "runtime.cwd" => return Some(json!(WORKSPACE)),
            "fs.readFile" => self.read_file(&args),
            "fs.writeFile" => self.write_file(&args),
            "fs.readdir" => self.readdir(&args),
            "fs.stat" => self.stat(&args),
            "fs.mkdir" => self.mkdir(&args),
            "fs.rm" => self.rm(&args),
            "fs.rename" => self.rename(&args),
            _ => return None,
        };
        Some(answer(outcome))
    }

    /// `exec`: run a program for the calling tool call (see the module header).
    pub fn exec(&self, args: &Value, activation_id: Option<&str>) -> impl Future<Output = Value> + Send + 'static {
        let request = self.process_request(args.as_object().cloned().unwrap_or_default());
        let over = self.call_over(activation_id);
        async move {
            match request {
                Ok((shown, request)) => answer(run_process(shown, request, over).await),
                Err(f) => answer(Err(f)),
            }
        }
    }

    /// `exec.sync` (`spawnSync`, `execFileSync`): the same on a thread of its own, blocking the
    /// pack until the process ends, times out or the call is cancelled.
    fn exec_blocking(&self, args: &Value, activation_id: Option<&str>) -> Value {
        let future = self.exec(args, activation_id);
        let ran = std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                    Ok::<_, std::io::Error>(runtime.block_on(future))
                })
                .join()
        });
        match ran {
            Ok(Ok(value)) => value,
            Ok(Err(e)) => answer(Err(failure("EIO", format!("cannot run the process: {e}"), ""))),
            Err(_) => answer(Err(failure("EIO", "the process thread failed", ""))),
        }
    }

    fn read_roots(&self) -> [&str; 3] {
        [WORKSPACE, ARTIFACTS, MNT]
    }

    fn write_roots(&self) -> [&str; 2] {
        [WORKSPACE, &self.own_artifacts]
    }

    fn refusal(&self, input: &str, write: bool, refusal: PathRefusal) -> Failure {
        let shown = Roots::normalize(input);
        match refusal {
            PathRefusal::OutsideRoots(outside) if write => failure(
                "EACCES",
                format!("Write path must be under /workspace or {}: {outside}", self.own_artifacts),
                &shown,
            ),
            PathRefusal::OutsideRoots(outside) => {
                failure("EACCES", format!("Read path must be under /workspace, /artifacts, or /mnt: {outside}"), &shown)
            }
            PathRefusal::Unresolvable(why) => failure("ELOOP", why, &shown),
            PathRefusal::Io(e) => io_failure(&e, &shown),
        }
    }

    fn open(&self, path: &str) -> Result<crate::paths::Opened, Failure> {
        self.roots.open(path, &self.read_roots()).map_err(|r| self.refusal(path, false, r))
    }

    fn locate(&self, path: &str) -> Result<crate::paths::Location, Failure> {
        self.roots.locate(path, &self.write_roots()).map_err(|r| self.refusal(path, true, r))
    }

    fn read_file(&self, args: &Map<String, Value>) -> Outcome {
        let path = string(args, "path")?;
        let opened = self.open(path)?;
        let shown = &opened.shown;
        if opened.meta.is_dir() {
            return Err(failure("EISDIR", format!("Is a directory: {shown}"), shown));
        }
        if !opened.meta.is_file() {
            return Err(failure("EINVAL", format!("Not a regular file: {shown}"), shown));
        }
        if opened.meta.len() > MAX_READ_BYTES {
            return Err(failure(
                "EFBIG",
                format!("{shown} has {} bytes; readFile reads at most {MAX_READ_BYTES}", opened.meta.len()),
                shown,
            ));
        }
        let mut bytes = Vec::with_capacity(opened.meta.len() as usize);
        (&opened.file).take(MAX_READ_BYTES).read_to_end(&mut bytes).map_err(|e| io_failure(&e, shown))?;
        Ok(match args.get("encoding").and_then(Value::as_str) {
            Some("utf8") => json!(String::from_utf8_lossy(&bytes)),
            _ => json!(hex::encode(bytes)),
        })
    }

    fn write_file(&self, args: &Map<String, Value>) -> Outcome {
        let path = string(args, "path")?;
        let bytes = hex::decode(string(args, "hex")?).map_err(|e| failure("EINVAL", e.to_string(), path))?;
        let location = self.locate(path)?;
        let shown = location.shown.clone();
        if location.file_type() == Some(FileType::Directory) {
            return Err(failure("EISDIR", format!("Is a directory: {shown}"), &shown));
        }
        let Some(name) = location.rest.last().cloned() else {
            return Err(failure("EISDIR", format!("Is a directory: {shown}"), &shown));
        };
        let parent = if location.name().is_some() {
            location.dir.try_clone().map_err(|e| io_failure(&e, &shown))?
        } else if flag(args, "createDirs") {
            location.create_parents(&mut Vec::new()).map_err(|e| io_failure(&e, &shown))?
        } else {
            let parent = Roots::normalize(&format!("{shown}/.."));
            return Err(failure(
                "ENOENT",
                format!("Parent directory does not exist: {parent} (pass createDirs: true to create it)"),
                &shown,
            ));
        };
        let exists = rustix::fs::statat(&parent, name.as_str(), AtFlags::SYMLINK_NOFOLLOW).is_ok();
        if flag(args, "exclusive") && exists {
            return Err(failure("EEXIST", format!("File exists: {shown}"), &shown));
        }
        if flag(args, "append") {
            let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = rustix::fs::openat(&parent, name.as_str(), flags, Mode::from_raw_mode(0o666))
                .map_err(|e| errno_failure(e, &shown))?;
            std::fs::File::from(fd).write_all(&bytes).map_err(|e| io_failure(&e, &shown))?;
        } else {
            let temp = write_temp(&parent, &name, &bytes).map_err(|e| io_failure(&e, &shown))?;
            rename_into_place(&parent, &temp, &name).map_err(|e| io_failure(&e, &shown))?;
        }
        Ok(Value::Null)
    }

    fn readdir(&self, args: &Map<String, Value>) -> Outcome {
        let path = string(args, "path")?;
        let opened = self.open(path)?;
        let shown = &opened.shown;
        if !opened.meta.is_dir() {
            return Err(failure("ENOTDIR", format!("Not a directory: {shown}"), shown));
        }
        dir_entries(&opened.file).map_err(|e| errno_failure(e, shown))
    }

    fn stat(&self, args: &Map<String, Value>) -> Outcome {
        let opened = self.open(string(args, "path")?)?;
        Ok(stat_json(&opened.meta))
    }

    fn mkdir(&self, args: &Map<String, Value>) -> Outcome {
        let location = self.locate(string(args, "path")?)?;
        let shown = location.shown.clone();
        let recursive = flag(args, "recursive");
        let exists = || failure("EEXIST", format!("File exists: {shown}"), &shown);
        match location.file_type() {
            Some(FileType::Directory) if recursive => return Ok(Value::Null),
            Some(_) => return Err(exists()),
            None => {}
        }
        let Some(name) = location.rest.last() else { return Err(exists()) };
        let parent = if location.name().is_some() {
            location.dir.try_clone().map_err(|e| io_failure(&e, &shown))?
        } else if recursive {
            location.create_parents(&mut Vec::new()).map_err(|e| io_failure(&e, &shown))?
        } else {
            return Err(io_failure(&location.missing_error(), &shown));
        };
        rustix::fs::mkdirat(&parent, name.as_str(), Mode::from_raw_mode(0o777))
            .map_err(|e| errno_failure(e, &shown))?;
        Ok(json!(shown))
    }

    fn rm(&self, args: &Map<String, Value>) -> Outcome {
        let location = self.locate(string(args, "path")?)?;
        let shown = location.shown.clone();
        let force = flag(args, "force");
        let only = args.get("only").and_then(Value::as_str);
        let Some(name) = location.name() else {
            if location.rest.is_empty() {
                return Err(failure("EPERM", format!("Cannot remove a root: {shown}"), &shown));
            }
            return if force { Ok(Value::Null) } else { Err(io_failure(&location.missing_error(), &shown)) };
        };
        match location.file_type() {
            None if force => Ok(Value::Null),
            None => Err(failure("ENOENT", format!("No such file or directory: {shown}"), &shown)),
            Some(FileType::Directory) if only == Some("file") => {
                Err(failure("EISDIR", format!("Is a directory: {shown}"), &shown))
            }
            Some(FileType::Directory) if flag(args, "recursive") => {
                let name = CString::new(name).map_err(|e| failure("EINVAL", e.to_string(), &shown))?;
                remove_tree(location.dir.as_fd(), &name).map_err(|e| io_failure(&e, &shown))?;
                Ok(Value::Null)
            }
            Some(FileType::Directory) if only == Some("directory") => {
                rustix::fs::unlinkat(&location.dir, name, AtFlags::REMOVEDIR).map_err(|e| errno_failure(e, &shown))?;
                Ok(Value::Null)
            }
            Some(FileType::Directory) => Err(failure(
                "ERR_FS_EISDIR",
                format!("Path is a directory: {shown} (pass recursive: true to remove it and its contents)"),
                &shown,
            )),
            Some(_) if only == Some("directory") => {
                Err(failure("ENOTDIR", format!("Not a directory: {shown}"), &shown))
            }
            Some(_) => {
                rustix::fs::unlinkat(&location.dir, name, AtFlags::empty()).map_err(|e| errno_failure(e, &shown))?;
                Ok(Value::Null)
            }
        }
    }

    fn rename(&self, args: &Map<String, Value>) -> Outcome {
        let from = self.locate(string(args, "from")?)?;
        let to = self.locate(string(args, "to")?)?;
        let (Some(from_name), Some(to_name)) = (from.name(), to.name()) else {
            let missing = if from.name().is_none() { &from } else { &to };
            if missing.rest.is_empty() {
                return Err(failure("EPERM", format!("Cannot rename a root: {}", missing.shown), &missing.shown));
            }
            return Err(io_failure(&missing.missing_error(), &missing.shown));
        };
        if from.file_type().is_none() {
            return Err(failure("ENOENT", format!("No such file or directory: {}", from.shown), &from.shown));
        }
        rustix::fs::renameat(&from.dir, from_name, &to.dir, to_name).map_err(|e| errno_failure(e, &from.shown))?;
        Ok(Value::Null)
    }

    /// The process of an `exec`, with its working directory as shown.
    fn process_request(&self, args: Map<String, Value>) -> Result<(String, ProcessRequest), Failure> {
        let command = string(&args, "command")?.to_string();
        let strings = |key: &str| -> Result<Vec<String>, Failure> {
            match args.get(key) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| v.as_str().map(str::to_string).ok_or_else(|| invalid(&format!("{key} must be strings"))))
                    .collect(),
                Some(_) => Err(invalid(&format!("{key} must be an array of strings"))),
            }
        };
        let cwd_shown = match args.get("cwd").and_then(Value::as_str) {
            None | Some("") => WORKSPACE.to_string(),
            Some(cwd) => Roots::normalize(cwd),
        };
        let cwd = self.roots.to_disk(&cwd_shown).unwrap_or_else(|| PathBuf::from(&cwd_shown));
        if !cwd.is_dir() {
            return Err(failure("ENOENT", format!("Working directory does not exist: {cwd_shown}"), &cwd_shown));
        }
        let mut env = self.env.clone();
        if let Some(Value::Object(extra)) = args.get("env") {
            for (key, value) in extra {
                let value = value.as_str().ok_or_else(|| invalid("env values must be strings"))?;
                env.retain(|(k, _)| k != key);
                env.push((key.clone(), value.to_string()));
            }
        }
        let input = match args.get("input").and_then(Value::as_str) {
            None => None,
            Some(hex) => Some(hex::decode(hex).map_err(|e| invalid(&format!("input: {e}")))?),
        };
        let number = |key: &str, default: u64, cap: u64| match args.get(key).and_then(Value::as_f64) {
            Some(n) if n.is_finite() && n >= 1.0 => (n as u64).min(cap),
            _ => default,
        };
        let request = ProcessRequest {
            program: command.clone(),
            args: strings("args")?,
            cwd,
            env: Some(env),
            input,
            timeout: Duration::from_millis(number("timeoutMs", DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS)),
            max_output: number("maxOutputBytes", DEFAULT_MAX_OUTPUT, MAX_MAX_OUTPUT) as usize,
        };
        Ok((command, request))
    }
}

async fn run_process(command: String, request: ProcessRequest, over: impl Future<Output = ()>) -> Outcome {
    let done = execute(request, over).await.map_err(|e| {
        let mut f = io_failure(&e, &command);
        f.message = format!("Cannot start {command}: {e}");
        f
    })?;
    if done.cancelled {
        return Err(failure(
            "ABORT_ERR",
            format!("exec was cancelled (the tool call ended or was cancelled): {command}"),
            &command,
        ));
    }
    let signal = done.status.signal().map(|n| {
        nix::sys::signal::Signal::try_from(n).map_or_else(|_| format!("signal {n}"), |s| s.as_str().to_string())
    });
    Ok(json!({
        "exitCode": done.status.code(),
        "signal": signal,
        "stdout": hex::encode(done.stdout),
        "stderr": hex::encode(done.stderr),
        "timedOut": done.timed_out,
        "truncated": done.truncated,
    }))
}

fn invalid(message: &str) -> Failure {
    Failure { code: "ERR_INVALID_ARG_TYPE".into(), message: message.into(), path: None }
}

fn string<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, Failure> {
    args.get(key).and_then(Value::as_str).ok_or_else(|| invalid(&format!("{key} must be a string")))
}

fn flag(args: &Map<String, Value>, key: &str) -> bool {
    args.get(key).and_then(Value::as_bool).unwrap_or(false)
}
