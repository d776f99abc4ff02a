//! The files a pack's controller-side JavaScript may touch through `node:fs` and
//! `node:fs/promises` (the host operations `fs.*`): its own pack directory, read-only, and its
//! state directory `toolpack-state/<id>/` (the one [`StateFiles`] keeps), read-write. Anything
//! else is refused with `EACCES` and a message naming both directories. Relative paths resolve
//! against the state directory.
//!
//! A path is checked lexically, then opened from a directory fd of its area with `openat2`
//! (`RESOLVE_BENEATH`): a link inside the area works, one that leads out of it is refused by the
//! kernel; writes, renames and deletions act by name inside a parent opened that way.
//! `node:child_process` is refused: controller code does not start processes.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use serde_json::{Map, Value, json};

use crate::fsat::{dir_entries, remove_tree, stat_json};
use crate::store::StateFiles;
use crate::toolpack::{PackSource, ToolError};

const MAX_READ_BYTES: u64 = 32 << 20;

/// Why `node:child_process` fails in controller code.
pub const NO_PROCESSES: &str = "node:child_process is available only in a pack's runner.mjs (it runs in the agent's \
     container); controller.mjs cannot start processes";
const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// The two areas of one pack.
pub struct PackFiles {
    pack_dir: Option<PathBuf>,
    state_dir: PathBuf,
}

struct Failure {
    code: String,
    message: String,
    path: String,
}

type Outcome = Result<Value, Failure>;

fn failure(code: &str, message: impl Into<String>, path: &Path) -> Failure {
    Failure { code: code.into(), message: message.into(), path: path.display().to_string() }
}

fn errno(e: Errno, path: &Path) -> Failure {
    let error = std::io::Error::from(e);
    failure(&crate::fsat::error_code(&error), format!("{error}: {}", path.display()), path)
}

fn io(e: std::io::Error, path: &Path) -> Failure {
    match e.raw_os_error() {
        Some(n) => errno(Errno::from_raw_os_error(n), path),
        None => failure("EIO", format!("{e}: {}", path.display()), path),
    }
}

/// Whether a path is read or changed.
#[derive(PartialEq, Clone, Copy)]
enum Access {
    Read,
    Write,
}

/// A path inside one area: the area's directory and the components below it.
struct Place {
    shown: PathBuf,
    area: PathBuf,
    rest: Vec<String>,
}

impl PackFiles {
    pub fn new(pack_id: &str, pack: Option<&crate::toolpack::Toolpack>, state: &StateFiles) -> Result<Self, ToolError> {
        let state_dir = state.pack_dir(pack_id).map_err(|e| ToolError::Internal(e.to_string()))?;
        let state_dir = std::path::absolute(&state_dir).unwrap_or(state_dir);
        let pack_dir = pack.and_then(|p| match &p.source {
            PackSource::Local { root, .. } => Some(std::path::absolute(root).unwrap_or_else(|_| root.clone())),
            _ => None,
        });
        Ok(PackFiles { pack_dir, state_dir })
    }

    /// An `fs.*` operation (`runtime.cwd` too); `None` if `op` is not one. Processes are refused.
    pub fn call(&self, op: &str, args: &Value) -> Option<Result<Value, ToolError>> {
        let args = args.as_object().cloned().unwrap_or_default();
        let outcome = match op {
            "runtime.cwd" => return Some(Ok(json!(self.state_dir.display().to_string()))),
            "exec" | "exec.sync" => return Some(Err(ToolError::Failed(NO_PROCESSES.into()))),
            "fs.readFile" => self.read_file(&args),
            "fs.writeFile" => self.write_file(&args),
            "fs.readdir" => self.readdir(&args),
            "fs.stat" => self.stat(&args),
            "fs.mkdir" => self.mkdir(&args),
            "fs.rm" => self.rm(&args),
            "fs.rename" => self.rename(&args),
            _ => return None,
        };
        Some(Ok(match outcome {
            Ok(value) => json!({ "value": value }),
            Err(f) => json!({ "err": { "code": f.code, "message": f.message, "path": f.path } }),
        }))
    }

    /// Where `input` is, if the area allows `access`.
    fn place(&self, input: &str, access: Access) -> Result<Place, Failure> {
        let shown = normalize(&self.state_dir.join(input));
        let refused = || {
            let pack = self.pack_dir.as_ref().map_or(String::new(), |p| format!(" and read in {}", p.display()));
            failure(
                "EACCES",
                format!(
                    "controller.mjs may write only in its state directory {}{pack}: {}",
                    self.state_dir.display(),
                    shown.display()
                ),
                &shown,
            )
        };
        let areas = [Some((&self.state_dir, true)), self.pack_dir.as_ref().map(|p| (p, false))];
        for (area, writable) in areas.into_iter().flatten() {
            let Ok(rest) = shown.strip_prefix(area) else { continue };
            if access == Access::Write && !writable {
                return Err(refused());
            }
            let rest = rest.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            return Ok(Place { shown: shown.clone(), area: area.clone(), rest });
        }
        Err(refused())
    }

    /// An fd of `rest[..upto]` beneath the area (the state directory is created on first use).
    fn open_dir(&self, place: &Place, upto: usize) -> Result<OwnedFd, Failure> {
        if place.area == self.state_dir {
            std::fs::create_dir_all(&self.state_dir).map_err(|e| io(e, &self.state_dir))?;
        }
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let area = rustix::fs::openat(CWD, &place.area, flags, Mode::empty()).map_err(|e| errno(e, &place.area))?;
        let rest = place.rest[..upto].join("/");
        if rest.is_empty() {
            return Ok(area);
        }
        rustix::fs::openat2(&area, rest.as_str(), flags, Mode::empty(), BENEATH).map_err(|e| beneath(e, &place.shown))
    }

    /// The parent directory and final name of a path to change.
    fn parent(&self, input: &str) -> Result<(Place, OwnedFd, CString), Failure> {
        let place = self.place(input, Access::Write)?;
        let Some(name) = place.rest.last() else {
            return Err(failure(
                "EPERM",
                format!("Cannot change the state directory itself: {}", place.shown.display()),
                &place.shown,
            ));
        };
        let name = CString::new(name.as_str()).map_err(|e| failure("EINVAL", e.to_string(), &place.shown))?;
        let dir = self.open_dir(&place, place.rest.len() - 1)?;
        Ok((place, dir, name))
    }

    fn open(&self, input: &str) -> Result<(Place, std::fs::File), Failure> {
        let place = self.place(input, Access::Read)?;
        let dir = self.open_dir(&place, 0)?;
        let rest = place.rest.join("/");
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = if rest.is_empty() {
            rustix::fs::openat(&dir, ".", flags | OFlags::DIRECTORY, Mode::empty())
                .map_err(|e| errno(e, &place.shown))?
        } else {
            rustix::fs::openat2(&dir, rest.as_str(), flags, Mode::empty(), BENEATH)
                .map_err(|e| beneath(e, &place.shown))?
        };
        Ok((place, std::fs::File::from(fd)))
    }

    fn read_file(&self, args: &Map<String, Value>) -> Outcome {
        let (place, file) = self.open(string(args, "path")?)?;
        let meta = file.metadata().map_err(|e| io(e, &place.shown))?;
        if meta.is_dir() {
            return Err(failure("EISDIR", format!("Is a directory: {}", place.shown.display()), &place.shown));
        }
        if meta.len() > MAX_READ_BYTES {
            return Err(failure(
                "EFBIG",
                format!("{} is larger than {MAX_READ_BYTES} bytes", place.shown.display()),
                &place.shown,
            ));
        }
        let mut bytes = Vec::new();
        (&file).take(MAX_READ_BYTES).read_to_end(&mut bytes).map_err(|e| io(e, &place.shown))?;
        Ok(match args.get("encoding").and_then(Value::as_str) {
            Some("utf8") => json!(String::from_utf8_lossy(&bytes)),
            _ => json!(hex::encode(bytes)),
        })
    }

    fn write_file(&self, args: &Map<String, Value>) -> Outcome {
        let path = string(args, "path")?;
        let bytes = hex::decode(string(args, "hex")?).map_err(|e| failure("EINVAL", e.to_string(), Path::new(path)))?;
        let (place, dir, name) = self.parent(path)?;
        let shown = &place.shown;
        let existing = rustix::fs::statat(&dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW).ok();
        if existing.is_some_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory) {
            return Err(failure("EISDIR", format!("Is a directory: {}", shown.display()), shown));
        }
        if flag(args, "exclusive") && existing.is_some() {
            return Err(failure("EEXIST", format!("File exists: {}", shown.display()), shown));
        }
        if flag(args, "append") {
            let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = rustix::fs::openat(&dir, name.as_c_str(), flags, Mode::from_raw_mode(0o644))
                .map_err(|e| errno(e, shown))?;
            return std::fs::File::from(fd).write_all(&bytes).map(|_| Value::Null).map_err(|e| io(e, shown));
        }
        // Whole files are replaced atomically: a temporary file in the same directory, renamed.
        let temp = CString::new(format!(".{}.suzumio-{}.tmp", name.to_string_lossy(), uuid::Uuid::new_v4().simple()))
            .map_err(|e| failure("EINVAL", e.to_string(), shown))?;
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&dir, temp.as_c_str(), flags, Mode::from_raw_mode(0o644))
            .map_err(|e| errno(e, shown))?;
        let mut file = std::fs::File::from(fd);
        let written = file.write_all(&bytes).and_then(|_| file.sync_all());
        let renamed = written.and_then(|_| Ok(rustix::fs::renameat(&dir, temp.as_c_str(), &dir, name.as_c_str())?));
        if let Err(e) = renamed {
            let _ = rustix::fs::unlinkat(&dir, temp.as_c_str(), AtFlags::empty());
            return Err(io(e, shown));
        }
        Ok(Value::Null)
    }

    fn readdir(&self, args: &Map<String, Value>) -> Outcome {
        let (place, file) = self.open(string(args, "path")?)?;
        dir_entries(&file).map_err(|e| errno(e, &place.shown))
    }

    fn stat(&self, args: &Map<String, Value>) -> Outcome {
        let (place, file) = self.open(string(args, "path")?)?;
        let meta = file.metadata().map_err(|e| io(e, &place.shown))?;
        Ok(stat_json(&meta))
    }

    fn mkdir(&self, args: &Map<String, Value>) -> Outcome {
        let path = string(args, "path")?;
        let place = self.place(path, Access::Write)?;
        let recursive = flag(args, "recursive");
        if place.rest.is_empty() {
            self.open_dir(&place, 0)?;
            return if recursive { Ok(Value::Null) } else { Err(failure("EEXIST", "File exists", &place.shown)) };
        }
        let mut dir = self.open_dir(&place, 0)?;
        for (i, part) in place.rest.iter().enumerate() {
            let last = i + 1 == place.rest.len();
            if recursive || last {
                match rustix::fs::mkdirat(&dir, part.as_str(), Mode::from_raw_mode(0o755)) {
                    Ok(()) => {}
                    Err(Errno::EXIST) if recursive => {}
                    Err(e) => return Err(errno(e, &place.shown)),
                }
            }
            if !last {
                let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
                dir = rustix::fs::openat(&dir, part.as_str(), flags, Mode::empty())
                    .map_err(|e| errno(e, &place.shown))?;
            }
        }
        Ok(Value::Null)
    }

    fn rm(&self, args: &Map<String, Value>) -> Outcome {
        let (place, dir, name) = self.parent(string(args, "path")?)?;
        let shown = &place.shown;
        let only = args.get("only").and_then(Value::as_str);
        let kind = match rustix::fs::statat(&dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(s) => FileType::from_raw_mode(s.st_mode),
            Err(Errno::NOENT) if flag(args, "force") => return Ok(Value::Null),
            Err(e) => return Err(errno(e, shown)),
        };
        match kind {
            FileType::Directory if only == Some("file") => Err(failure("EISDIR", "Is a directory", shown)),
            FileType::Directory if flag(args, "recursive") => {
                remove_tree(dir.as_fd(), &name).map(|_| Value::Null).map_err(|e| io(e, shown))
            }
            FileType::Directory if only == Some("directory") => {
                rustix::fs::unlinkat(&dir, name.as_c_str(), AtFlags::REMOVEDIR)
                    .map(|_| Value::Null)
                    .map_err(|e| errno(e, shown))
            }
            FileType::Directory => Err(failure(
                "ERR_FS_EISDIR",
                format!("Path is a directory: {} (pass recursive: true)", shown.display()),
                shown,
            )),
            _ if only == Some("directory") => Err(failure("ENOTDIR", "Not a directory", shown)),
            _ => rustix::fs::unlinkat(&dir, name.as_c_str(), AtFlags::empty())
                .map(|_| Value::Null)
                .map_err(|e| errno(e, shown)),
        }
    }

    fn rename(&self, args: &Map<String, Value>) -> Outcome {
        let (from, from_dir, from_name) = self.parent(string(args, "from")?)?;
        let (_, to_dir, to_name) = self.parent(string(args, "to")?)?;
        rustix::fs::renameat(&from_dir, from_name.as_c_str(), &to_dir, to_name.as_c_str())
            .map(|_| Value::Null)
            .map_err(|e| errno(e, &from.shown))
    }
}

/// `openat2`'s refusal of a path that leaves its area, said as such.
fn beneath(e: Errno, path: &Path) -> Failure {
    match e {
        Errno::XDEV => {
            failure("EACCES", format!("{} leads outside the pack's directories through a link", path.display()), path)
        }
        e => errno(e, path),
    }
}

/// Lexically normalized (`..` stops at `/`).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
            _ => {}
        }
    }
    out
}

fn string<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, Failure> {
    args.get(key).and_then(Value::as_str).ok_or_else(|| Failure {
        code: "ERR_INVALID_ARG_TYPE".into(),
        message: format!("{key} must be a string"),
        path: String::new(),
    })
}

fn flag(args: &Map<String, Value>, key: &str) -> bool {
    args.get(key).and_then(Value::as_bool).unwrap_or(false)
}
