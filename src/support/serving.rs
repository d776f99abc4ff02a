//! Who owns a project's runners: one process at a time holds an exclusive `flock` on
//! `.suzumio/controller.lock` while it runs runners — `suzumio run` for as long as it serves, or
//! a `tool call`/`mcp` that found no serving controller, for as long as its own runners live.
//! The file holds the holder's pid, command, start time and (for `run`) its API address and
//! control socket, so that a second `run` names the first, `status` shows who serves, and a
//! command that needs a runner hands its call to the serving controller ([`super::control`])
//! instead of starting a runner of its own next to it.
//!
//! The lock belongs to the open file, so it dies with the process — kill -9 included — and a
//! crashed run never blocks the next: a file whose lock is free is stale, whatever it says.
//! Only the holder writes the file (in place, never renamed: a rename would leave the lock on
//! the old inode), and only the holder binds or removes the sockets under `.suzumio/`.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;
use serde::{Deserialize, Serialize};

use crate::store::STATE_DIR;

/// The lock file, under `.suzumio/`.
pub const LOCK_FILE: &str = "controller.lock";
/// The serving controller's control directory (mode 0700) and socket (mode 0600) in it.
pub const CONTROL_DIR: &str = "controller";
pub const CONTROL_SOCKET: &str = "control.sock";

/// What the holder of the lock wrote about itself.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    pub pid: u32,
    /// `run`, `tool call` or `mcp`.
    pub command: String,
    pub started_at: String,
    /// The API's address, once `run` has bound it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The control socket, once `run` listens on it: present means calls can be handed over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<PathBuf>,
}

impl Holder {
    /// "suzumio run (pid 123, http://127.0.0.1:8080, since …)".
    pub fn describe(&self) -> String {
        let url = self.url.as_deref().map(|u| format!(", {u}")).unwrap_or_default();
        let since = if self.started_at.is_empty() { String::new() } else { format!(", since {}", self.started_at) };
        let command = if self.command.is_empty() { "another suzumio" } else { &self.command };
        format!("suzumio {command} (pid {}{url}{since})", self.pid)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("the project is already served by {}; stop it first, or use its WebUI/API", .0.describe())]
    Served(Holder),
    #[error("the project's runners are in use by {}, which started its own; let it end (or stop it), then try again", .0.describe())]
    InUse(Holder),
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
}

impl LockError {
    fn io(path: &Path, error: impl Into<std::io::Error>) -> LockError {
        LockError::Io { path: path.to_path_buf(), error: error.into() }
    }
}

/// The lock, held until dropped (or the process ends).
#[derive(Debug)]
pub struct ServeLock {
    file: File,
    path: PathBuf,
    holder: Holder,
}

pub fn lock_path(root: &Path) -> PathBuf {
    root.join(STATE_DIR).join(LOCK_FILE)
}

/// The control socket `run` serves for `root` (whether or not it is served now).
pub fn control_socket(root: &Path) -> PathBuf {
    root.join(STATE_DIR).join(CONTROL_DIR).join(CONTROL_SOCKET)
}

fn open(root: &Path) -> Result<(File, PathBuf), LockError> {
    let path = lock_path(root);
    let dir = root.join(STATE_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| LockError::io(&dir, e))?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc_nofollow())
        .open(&path)
        .map_err(|e| LockError::io(&path, e))?;
    Ok((file, path))
}

/// `O_NOFOLLOW`: a link planted at the lock's path is refused rather than followed.
fn libc_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

fn read_holder(file: &mut File) -> Option<Holder> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// Who holds the project's lock now, if anyone. A holder that has not written itself yet (it
/// took the lock a moment ago) is reported with what is known: nothing but that it exists.
pub fn holder(root: &Path) -> Result<Option<Holder>, LockError> {
    if !lock_path(root).exists() {
        return Ok(None);
    }
    let (mut file, path) = open(root)?;
    match rustix::fs::flock(&file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            // Free: whatever the file says is from a process that is gone.
            let _ = rustix::fs::flock(&file, FlockOperation::Unlock);
            Ok(None)
        }
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(Some(read_holder(&mut file).unwrap_or_default())),
        Err(e) => Err(LockError::io(&path, e)),
    }
}

/// The serving controller's control socket, when a `run` serves the project and listens on it.
pub fn serving(root: &Path) -> Result<Option<(Holder, PathBuf)>, LockError> {
    Ok(holder(root)?.filter(|h| h.command == RUN).and_then(|h| h.control.clone().map(|c| (h, c))))
}

/// How often, and how far apart, [`ServeLock::acquire`] tries a lock that someone may only be
/// looking at.
const PROBE_TRIES: u32 = 5;
const PROBE_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// The command names the lock is held under.
pub const RUN: &str = "run";
pub const MCP: &str = "mcp";

impl ServeLock {
    /// Take the lock now, or say who has it.
    pub fn acquire(root: &Path, command: &str, now: &str) -> Result<ServeLock, LockError> {
        let (mut file, path) = open(root)?;
        let mut tries = 0;
        loop {
            match rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                // [`holder`] looks with a shared lock of a few microseconds: only a lock still
                // held after a few tries is a holder.
                Err(rustix::io::Errno::WOULDBLOCK) if tries < PROBE_TRIES => {
                    tries += 1;
                    std::thread::sleep(PROBE_PAUSE);
                }
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    let holder = read_holder(&mut file).unwrap_or_default();
                    return Err(if holder.command == RUN {
                        LockError::Served(holder)
                    } else {
                        LockError::InUse(holder)
                    });
                }
                Err(e) => return Err(LockError::io(&path, e)),
            }
        }
        let holder = Holder {
            pid: std::process::id(),
            command: command.to_string(),
            started_at: now.to_string(),
            url: None,
            control: None,
        };
        let lock = ServeLock { file, path, holder };
        lock.write()?;
        Ok(lock)
    }

    /// Take the lock, waiting for a holder that is not a serving controller (a `tool call` or an
    /// `mcp` session with its own runners) to let it go. `Ok(Err(..))`: a `run` serves the
    /// project, whose control socket takes the call instead.
    pub async fn acquire_or_serving(
        root: &Path,
        command: &str,
        now: &str,
    ) -> Result<Result<ServeLock, (Holder, PathBuf)>, LockError> {
        // A `run` that has not opened its control socket yet is waited for, like a holder that
        // is not serving.
        let waited = |e: &LockError| match e {
            LockError::Served(holder) => holder.control.is_none(),
            LockError::InUse(_) => true,
            LockError::Io { .. } => false,
        };
        match ServeLock::acquire_waiting(root, command, now, waited).await {
            Ok(lock) => Ok(Ok(lock)),
            Err(LockError::Served(holder)) => {
                let control = holder.control.clone().unwrap_or_default();
                Ok(Err((holder, control)))
            }
            Err(e) => Err(e),
        }
    }

    /// `run`'s lock: waits for a `tool call` or a `check` that runs runners of its own (they
    /// end by themselves), and refuses to wait for an `mcp` session (which ends when its client
    /// does) or another `run`.
    pub async fn acquire_for_run(root: &Path, now: &str) -> Result<ServeLock, LockError> {
        let waited = |e: &LockError| matches!(e, LockError::InUse(holder) if holder.command != MCP);
        ServeLock::acquire_waiting(root, RUN, now, waited).await
    }

    /// [`ServeLock::acquire`], again while `wait` says the holder is worth waiting for (said
    /// once on stderr). The holder ends (its lock goes with it) or writes its control socket:
    /// either is seen at the next look; flock has no wake-up on "file changed", so it looks
    /// again shortly.
    async fn acquire_waiting(
        root: &Path,
        command: &str,
        now: &str,
        wait: impl Fn(&LockError) -> bool,
    ) -> Result<ServeLock, LockError> {
        let mut told = false;
        loop {
            match ServeLock::acquire(root, command, now) {
                Err(e) if wait(&e) => {
                    if !told && let LockError::InUse(holder) | LockError::Served(holder) = &e {
                        tracing::warn!("waiting for {} to release the project's runners", holder.describe());
                        told = true;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                other => return other,
            }
        }
    }

    /// Add `run`'s API address and control socket.
    pub fn announce(&mut self, url: &str, control: &Path) -> Result<(), LockError> {
        self.holder.url = Some(url.to_string());
        self.holder.control = Some(control.to_path_buf());
        self.write()
    }

    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    /// Rewrite the file in place: one `write` of a small JSON object at offset 0 after the
    /// truncation. A reader in between sees an empty file, which [`holder`] reports as a holder
    /// with no details.
    fn write(&self) -> Result<(), LockError> {
        let text = serde_json::to_string(&self.holder).unwrap_or_default();
        let mut file = &self.file;
        file.set_len(0).map_err(|e| LockError::io(&self.path, e))?;
        file.rewind().map_err(|e| LockError::io(&self.path, e))?;
        file.write_all(text.as_bytes()).map_err(|e| LockError::io(&self.path, e))?;
        Ok(())
    }
}
