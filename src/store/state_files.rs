//! Toolpack state files: JSON documents under `<root>/toolpack-state/<pack-id>/<name>` (the
//! scheduler pack's `jobs.json`, the plan pack's `state.json`), read and written for the packs'
//! `state.read(name)` / `state.write(name, value)`.
//!
//! Guarantees: a write is atomic (temp file in the same directory, fsync, rename, fsync of the
//! directory), so a crash leaves the old or the new document, never half of one; writers of one
//! pack are serialized by an in-process lock, which read-modify-write callers hold across the
//! whole cycle ([`StateFiles::lock`]); a file that is not valid JSON is moved aside to
//! `<name>.corrupt-<UTC time>` and reported, never silently replaced or deleted. Names are
//! confined to the pack's directory. It knows nothing about what the documents mean.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError};

use serde_json::Value;

/// The directory (under the project root) holding one subdirectory per toolpack.
pub const STATE_ROOT: &str = "toolpack-state";

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(
        "invalid toolpack state file name `{name}`: use letters, digits, `_`, `.` and `-`, start with a letter, \
         digit or `_`, and do not use `..`"
    )]
    BadName { name: String },

    #[error("invalid toolpack id `{id}` for state files: use letters, digits, `_`, `.` and `-`, and not `..`")]
    BadPackId { id: String },

    #[error(
        "toolpack state file {} is not valid JSON ({reason}); it was moved aside to {} so nothing is lost — \
         repair it and move it back, or delete it to start from empty state",
        path.display(),
        kept_as.display()
    )]
    Corrupt { path: PathBuf, kept_as: PathBuf, reason: String },

    #[error("toolpack state file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io { path: path.to_path_buf(), source }
}

/// State files of one project. Cheap to create; the locks are process-wide (keyed by the pack's
/// directory), so every `StateFiles` for the same project shares them.
#[derive(Clone, Debug)]
pub struct StateFiles {
    root: PathBuf,
}

impl StateFiles {
    pub fn new(project_root: &Path) -> StateFiles {
        StateFiles { root: project_root.join(STATE_ROOT) }
    }

    /// `<root>/toolpack-state/<pack_id>`.
    pub fn pack_dir(&self, pack_id: &str) -> Result<PathBuf, StateError> {
        if !is_valid_pack_id(pack_id) {
            return Err(StateError::BadPackId { id: pack_id.to_string() });
        }
        Ok(self.root.join(pack_id))
    }

    /// Take the pack's lock for a read-modify-write cycle; other writers of the pack wait until
    /// the guard is dropped. Use the guard's `read`/`write` while holding it.
    pub fn lock(&self, pack_id: &str) -> Result<StateLock, StateError> {
        let dir = self.pack_dir(pack_id)?;
        let (held, released) = pack_locks();
        let mut set = held.lock().unwrap_or_else(PoisonError::into_inner);
        while set.contains(&dir) {
            set = released.wait(set).unwrap_or_else(PoisonError::into_inner);
        }
        set.insert(dir.clone());
        Ok(StateLock { dir })
    }

    /// Read one document (`None` when it does not exist), under the pack's lock.
    pub fn read(&self, pack_id: &str, name: &str) -> Result<Option<Value>, StateError> {
        self.lock(pack_id)?.read(name)
    }

    /// Atomically replace one document, under the pack's lock.
    pub fn write(&self, pack_id: &str, name: &str, value: &Value) -> Result<(), StateError> {
        self.lock(pack_id)?.write(name, value)
    }
}

/// Holds one pack's lock; released on drop.
#[derive(Debug)]
pub struct StateLock {
    dir: PathBuf,
}

impl StateLock {
    pub fn read(&self, name: &str) -> Result<Option<Value>, StateError> {
        let path = self.file(name)?;
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&path)(e)),
        };
        let parsed = std::str::from_utf8(&bytes)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<Value>(text).map_err(|e| e.to_string()));
        match parsed {
            Ok(value) => Ok(Some(value)),
            Err(reason) => {
                let kept_as = self.set_aside(&path, name)?;
                tracing::warn!(path = %path.display(), kept_as = %kept_as.display(), %reason, "corrupt toolpack state file moved aside");
                Err(StateError::Corrupt { path, kept_as, reason })
            }
        }
    }

    pub fn write(&self, name: &str, value: &Value) -> Result<(), StateError> {
        let path = self.file(name)?;
        fs::create_dir_all(&self.dir).map_err(io_error(&self.dir))?;
        let mut text = serde_json::to_string_pretty(value).map_err(|e| io_error(&path)(e.into()))?;
        text.push('\n');

        // The temp file lives in the same directory so the rename cannot cross filesystems, and
        // starts with `.` so it never matches a valid state name.
        let temp = self.dir.join(format!(".{name}.tmp-{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()));
        let written = (|| {
            let mut file = File::create(&temp)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            drop(file);
            fs::rename(&temp, &path)?;
            // Persist the rename itself.
            File::open(&self.dir)?.sync_all()
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&temp);
            return Err(io_error(&path)(e));
        }
        Ok(())
    }

    fn file(&self, name: &str) -> Result<PathBuf, StateError> {
        if !is_valid_name(name) {
            return Err(StateError::BadName { name: name.to_string() });
        }
        Ok(self.dir.join(name))
    }

    /// Move a corrupt file to `<name>.corrupt-<yyyymmddThhmmssZ>` (with `-N` if taken).
    fn set_aside(&self, path: &Path, name: &str) -> Result<PathBuf, StateError> {
        let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
        let mut kept_as = self.dir.join(format!("{name}.corrupt-{stamp}"));
        let mut n = 1;
        while kept_as.exists() {
            kept_as = self.dir.join(format!("{name}.corrupt-{stamp}-{n}"));
            n += 1;
        }
        fs::rename(path, &kept_as).map_err(io_error(path))?;
        Ok(kept_as)
    }
}

impl Drop for StateLock {
    fn drop(&mut self) {
        let (held, released) = pack_locks();
        held.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.dir);
        released.notify_all();
    }
}

/// Pack directories currently locked, and the condition waiters sleep on.
fn pack_locks() -> &'static (Mutex<HashSet<PathBuf>>, Condvar) {
    static LOCKS: OnceLock<(Mutex<HashSet<PathBuf>>, Condvar)> = OnceLock::new();
    LOCKS.get_or_init(|| (Mutex::new(HashSet::new()), Condvar::new()))
}

/// `^[A-Za-z0-9_][A-Za-z0-9_.-]*$` without `..`: a plain file name inside the pack directory.
pub fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (first.is_ascii_alphanumeric() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        && !name.contains("..")
}

/// Toolpack ids are `[A-Za-z0-9_.-]+`; `.`/`..` would leave the state root.
fn is_valid_pack_id(id: &str) -> bool {
    !id.is_empty()
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        && id != "."
        && !id.contains("..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        let cases = [
            ("state.json", true),
            ("jobs.json", true),
            ("_private", true),
            ("a-b_c.d", true),
            ("9lives", true),
            ("", false),
            (".hidden", false),
            ("-dash", false),
            ("a..b", false),
            ("..", false),
            ("dir/file", false),
            ("../escape", false),
            ("spa ce", false),
            ("ünï", false),
        ];
        for (name, ok) in cases {
            assert_eq!(is_valid_name(name), ok, "{name:?}");
        }
    }

    #[test]
    fn pack_ids_are_checked() {
        for (id, ok) in [("plan", true), ("my.pack-1", true), ("", false), (".", false), ("..", false), ("a/b", false)]
        {
            assert_eq!(is_valid_pack_id(id), ok, "{id:?}");
        }
    }
}
