//! The default runner image, built offline: Debian's static busybox, its applet links, the
//! `runner` user and the empty mount points, packed as a tar in memory and imported through the
//! engine's `images/create?fromSrc=-` endpoint (`docker import` semantics; bollard's
//! `import_image` is `docker load`, which wants a saved image, not a rootfs).
//!
//! Nothing is pulled and nothing is written to disk. The runner itself is not in the image: the
//! controller bind-mounts its static `suzumio-runner` at container start (see `spec.rs`).

use std::fmt;
use std::io;
use std::path::Path;

use bollard::query_parameters::{CreateImageOptions, RemoveImageOptionsBuilder};
use futures_util::StreamExt;

use crate::backend::docker::DockerBackend;
use crate::backend::error::{BackendError, message_of, status_of};
use crate::backend::{IMAGE_KIND_LABEL, RUNNER_GID, RUNNER_UID};
use crate::config::DEFAULT_IMAGE;

/// Where Debian's `busybox-static` installs the binary.
pub const BUSYBOX_PATH: &str = "/bin/busybox";

/// The value of [`IMAGE_KIND_LABEL`] on images this module builds.
pub const MINIMAL_IMAGE_KIND: &str = "minimal";

/// Applets linked in `/bin`: what `shell.exec` scripts commonly need.
const APPLETS: &[&str] = &[
    "sh", "ash", "ls", "cat", "echo", "true", "false", "id", "env", "mkdir", "rm", "cp", "mv", "ln", "pwd", "head",
    "tail", "grep", "sed", "awk", "sort", "wc", "find", "touch", "chmod", "sleep", "test", "[", "printf", "kill", "ps",
    "date", "uname", "tr", "cut", "xargs", "tee", "basename", "dirname",
];

/// Empty directories of the rootfs; the mount points must exist because the rootfs is read-only.
const DIRS: &[(&str, u32)] = &[
    ("bin", 0o755),
    ("etc", 0o755),
    ("usr", 0o755),
    ("usr/bin", 0o755),
    ("workspace", 0o755),
    ("artifacts", 0o755),
    ("toolpacks", 0o755),
    ("run", 0o755),
    ("run/suzumio", 0o755),
    ("mnt", 0o755),
    ("tmp", 0o1777),
    ("opt", 0o755),
    ("opt/suzumio", 0o755),
];

const PASSWD: &str = include_str!("../../runner-image/minimal/etc/passwd");
const GROUP: &str = include_str!("../../runner-image/minimal/etc/group");

/// An image the backend made sure of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageInfo {
    pub tag: String,
    /// `sha256:…`
    pub id: String,
    pub size_bytes: Option<u64>,
    /// True when this call imported it; false when it was already there.
    pub built: bool,
}

impl fmt::Display for ImageInfo {
    /// The line `suzumio image build` prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = short_id(&self.id);
        let size = self.size_bytes.map(|b| format!(", {:.1} MB", b as f64 / 1_000_000.0)).unwrap_or_default();
        if self.built {
            write!(f, "Built {} ({id}{size}) from {BUSYBOX_PATH}", self.tag)
        } else {
            write!(f, "{} is already present ({id}{size}); use --force to rebuild it", self.tag)
        }
    }
}

pub(crate) fn short_id(id: &str) -> &str {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    &hex[..hex.len().min(12)]
}

/// `suzumio image build [--force]`: connect to the engine and make sure the default minimal image
/// exists (rebuilding it with `force`). The returned value's `Display` is what to print.
pub async fn build_minimal_image(force: bool) -> Result<ImageInfo, BackendError> {
    let docker = DockerBackend::connect().await?;
    if force {
        rebuild_minimal_image(&docker, DEFAULT_IMAGE).await
    } else {
        ensure_minimal_image(&docker, DEFAULT_IMAGE).await
    }
}

/// Return the image `tag` if the engine has it; otherwise build the minimal image under that tag.
pub async fn ensure_minimal_image(docker: &DockerBackend, tag: &str) -> Result<ImageInfo, BackendError> {
    match inspect(docker, tag).await? {
        Some(info) => Ok(info),
        None => import_minimal(docker, tag).await,
    }
}

/// Build the minimal image under `tag` even if one exists; the image it replaces is removed when
/// no container uses it any more.
pub async fn rebuild_minimal_image(docker: &DockerBackend, tag: &str) -> Result<ImageInfo, BackendError> {
    let previous = inspect(docker, tag).await?;
    let info = import_minimal(docker, tag).await?;
    if let Some(old) = previous.filter(|old| old.id != info.id) {
        let options = RemoveImageOptionsBuilder::new().build();
        if let Err(e) = docker.client().remove_image(&old.id, Some(options), None).await {
            // Still used by a container, or already gone: both are fine, the tag has moved.
            tracing::debug!(image = %old.id, error = %message_of(&e), "previous minimal image kept");
        }
    }
    Ok(info)
}

/// The rootfs of the minimal image as a tar, built in memory from the busybox at `busybox`.
pub fn minimal_rootfs(busybox: &Path) -> Result<Vec<u8>, BackendError> {
    let binary = std::fs::read(busybox)
        .map_err(|e| BackendError::BusyboxMissing { path: busybox.to_path_buf(), cause: e.to_string() })?;
    check_static_elf(&binary)
        .map_err(|reason| BackendError::BusyboxNotStatic { path: busybox.to_path_buf(), reason })?;
    rootfs_tar(&binary).map_err(|e| BackendError::ImageImport {
        tag: DEFAULT_IMAGE.to_string(),
        cause: format!("cannot pack the rootfs: {e}"),
    })
}

/// A fixed modification time (2024-01-01) so a rebuilt rootfs is byte-identical.
const MTIME: u64 = 1_704_067_200;

/// The rootfs tar around `busybox`: every entry owned by root with the fixed [`MTIME`].
fn rootfs_tar(busybox: &[u8]) -> io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    let mut add = |kind: tar::EntryType, name: &str, mode: u32, link: Option<&str>, data: &[u8]| {
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(kind);
        header.set_path(name)?;
        header.set_mode(mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_username("root")?;
        header.set_groupname("root")?;
        header.set_mtime(MTIME);
        header.set_size(data.len() as u64);
        if let Some(link) = link {
            header.set_link_name(link)?;
        }
        header.set_cksum();
        tar.append(&header, data)
    };
    for (dir, mode) in DIRS {
        add(tar::EntryType::Directory, &format!("{dir}/"), *mode, None, &[])?;
    }
    add(tar::EntryType::Regular, "bin/busybox", 0o755, None, busybox)?;
    for applet in APPLETS {
        add(tar::EntryType::Symlink, &format!("bin/{applet}"), 0o777, Some("busybox"), &[])?;
    }
    add(tar::EntryType::Symlink, "usr/bin/env", 0o777, Some("/bin/busybox"), &[])?;
    add(tar::EntryType::Regular, "etc/passwd", 0o644, None, PASSWD.as_bytes())?;
    add(tar::EntryType::Regular, "etc/group", 0o644, None, GROUP.as_bytes())?;
    tar.into_inner()
}

async fn import_minimal(docker: &DockerBackend, tag: &str) -> Result<ImageInfo, BackendError> {
    let rootfs = minimal_rootfs(Path::new(BUSYBOX_PATH))?;
    let (repo, version) = split_tag(tag);
    let options = CreateImageOptions {
        from_src: Some("-".to_string()),
        repo: Some(repo.to_string()),
        tag: Some(version.to_string()),
        message: Some("suzumio minimal runner image (busybox-static)".to_string()),
        changes: vec![
            format!("LABEL {IMAGE_KIND_LABEL}={MINIMAL_IMAGE_KIND}"),
            "ENV PATH=/bin:/usr/bin".to_string(),
            "WORKDIR /workspace".to_string(),
            format!("USER {RUNNER_UID}:{RUNNER_GID}"),
            r#"CMD ["/bin/sh"]"#.to_string(),
        ],
        ..Default::default()
    };
    let mut progress = docker.client().create_image(Some(options), Some(bollard::body_full(rootfs.into())), None);
    while let Some(item) = progress.next().await {
        item.map_err(|e| docker.engine_error(e, |cause| BackendError::ImageImport { tag: tag.to_string(), cause }))?;
    }
    let info = inspect(docker, tag).await?.ok_or_else(|| BackendError::ImageImport {
        tag: tag.to_string(),
        cause: "the engine accepted the import but the tag does not resolve".to_string(),
    })?;
    tracing::info!(image = tag, id = %info.id, "built the minimal runner image");
    Ok(ImageInfo { built: true, ..info })
}

/// The image `tag`, or `None` when the engine does not have it.
pub(crate) async fn inspect(docker: &DockerBackend, tag: &str) -> Result<Option<ImageInfo>, BackendError> {
    match docker.client().inspect_image(tag).await {
        Ok(image) => Ok(Some(ImageInfo {
            tag: tag.to_string(),
            id: image.id.unwrap_or_default(),
            size_bytes: image.size.and_then(|s| u64::try_from(s).ok()),
            built: false,
        })),
        Err(e) if status_of(&e) == Some(404) => Ok(None),
        Err(e) => Err(docker.engine_error(e, |message| BackendError::Engine { action: "inspect image", message })),
    }
}

/// `repo:tag` → (`repo`, `tag`); a colon before the last `/` belongs to a registry port.
pub(crate) fn split_tag(image: &str) -> (&str, &str) {
    match image.rfind(':') {
        Some(i) if !image[i..].contains('/') => (&image[..i], &image[i + 1..]),
        _ => (image, "latest"),
    }
}

/// A static executable has no `PT_INTERP` program header. Reads just enough of the ELF header.
// String: the reason of `BackendError::BusyboxNotStatic`, and nothing else.
pub fn check_static_elf(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return Err("not an ELF executable".to_string());
    }
    let little = match bytes[5] {
        1 => true,
        2 => false,
        _ => return Err("unknown ELF byte order".to_string()),
    };
    let read = |at: usize, len: usize| -> Option<u64> {
        let b = bytes.get(at..at + len)?;
        let mut v = 0u64;
        for i in 0..len {
            let byte = if little { b[len - 1 - i] } else { b[i] };
            v = (v << 8) | u64::from(byte);
        }
        Some(v)
    };
    // (offset of e_phoff, its size, offset of e_phentsize, offset of e_phnum) for ELF32 / ELF64.
    let (phoff_at, phoff_len, entsize_at, num_at) = match bytes[4] {
        1 => (0x1c, 4, 0x2a, 0x2c),
        2 => (0x20, 8, 0x36, 0x38),
        _ => return Err("unknown ELF class".to_string()),
    };
    let truncated = || "truncated ELF header".to_string();
    let phoff = read(phoff_at, phoff_len).ok_or_else(truncated)? as usize;
    let entsize = read(entsize_at, 2).ok_or_else(truncated)? as usize;
    let count = read(num_at, 2).ok_or_else(truncated)? as usize;
    const PT_INTERP: u64 = 3;
    for i in 0..count {
        let kind = read(phoff + i * entsize, 4).ok_or_else(truncated)?;
        if kind == PT_INTERP {
            return Err("it is dynamically linked".to_string());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_split_at_the_last_colon_after_the_registry() {
        assert_eq!(split_tag("suzumio-runner:minimal"), ("suzumio-runner", "minimal"));
        assert_eq!(split_tag("localhost:5000/runner"), ("localhost:5000/runner", "latest"));
        assert_eq!(split_tag("localhost:5000/runner:v1"), ("localhost:5000/runner", "v1"));
        assert_eq!(split_tag("plain"), ("plain", "latest"));
    }

    #[test]
    fn a_missing_busybox_says_what_to_install() {
        let err = minimal_rootfs(Path::new("/nonexistent/busybox")).unwrap_err().to_string();
        assert!(err.contains("install busybox-static (apt-get install busybox-static)"), "{err}");
    }

    #[test]
    fn the_rootfs_holds_root_owned_dirs_files_and_links() {
        const BUSYBOX: &[u8] = b"\x7fELF busybox";
        let bytes = rootfs_tar(BUSYBOX).unwrap();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let entries: Vec<(String, u8, u32, u64, String)> = archive
            .entries()
            .unwrap()
            .map(|entry| {
                let mut entry = entry.unwrap();
                let h = entry.header().clone();
                assert_eq!((h.uid().unwrap(), h.gid().unwrap(), h.mtime().unwrap()), (0, 0, MTIME));
                assert_eq!((h.username().unwrap(), h.groupname().unwrap()), (Some("root"), Some("root")));
                let mut data = Vec::new();
                std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
                assert_eq!(data.len() as u64, h.size().unwrap());
                let name = String::from_utf8(h.path_bytes().into_owned()).unwrap();
                let link = h.link_name().unwrap().map(|l| l.display().to_string()).unwrap_or_default();
                (name, h.entry_type().as_byte(), h.mode().unwrap(), h.size().unwrap(), link)
            })
            .collect();
        assert_eq!(entries.len(), DIRS.len() + 1 + APPLETS.len() + 1 + 2);
        let find = |name: &str| entries.iter().find(|e| e.0 == name).cloned().unwrap();
        assert_eq!(find("tmp/"), ("tmp/".into(), b'5', 0o1777, 0, String::new()));
        assert_eq!(find("bin/busybox"), ("bin/busybox".into(), b'0', 0o755, BUSYBOX.len() as u64, String::new()));
        assert_eq!(find("bin/["), ("bin/[".into(), b'2', 0o777, 0, "busybox".into()));
        assert_eq!(find("usr/bin/env"), ("usr/bin/env".into(), b'2', 0o777, 0, "/bin/busybox".into()));
        assert_eq!(find("etc/passwd"), ("etc/passwd".into(), b'0', 0o644, PASSWD.len() as u64, String::new()));
        // Identical inputs, identical bytes: a rebuilt image gets the same layer.
        assert_eq!(rootfs_tar(BUSYBOX).unwrap(), bytes);
    }

    #[test]
    fn a_dynamic_executable_is_refused() {
        // /bin/sh on Debian is dash, dynamically linked.
        let sh = std::fs::read("/bin/sh").unwrap();
        assert_eq!(check_static_elf(&sh), Err("it is dynamically linked".to_string()));
        assert_eq!(check_static_elf(b"#!/bin/sh\n"), Err("not an ELF executable".to_string()));
    }
}
