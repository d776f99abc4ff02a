//! The Debian runner image, `suzumio image build --base debian`: a minbase root filesystem made
//! offline by `mmdebstrap` from the machine's configured Debian sources (no registry, nothing
//! pulled), with the tools real work needs (bash, coreutils, git, python3, nodejs, ripgrep,
//! ca-certificates) and the `runner` user and mount points of the minimal image, imported into
//! the engine like the minimal image (`docker import` semantics, streamed from a temporary file).
//!
//! With `--npm`/`--pip` MCP servers from those registries are installed into `/opt/mcp` of the
//! image at build time (`mcp_servers.rs`); the image's labels record what it was built with, and
//! a request for other servers rebuilds it.
//!
//! Built once and kept: `backend.image: suzumio-runner:debian` names it, and a start whose image
//! is missing says how to build it (the controller never builds it on its own: a minute and the
//! package mirror are not something to spend behind a user's back).

use std::path::Path;
use std::process::Stdio;

use bollard::query_parameters::{CreateImageOptions, RemoveImageOptionsBuilder};
use futures_util::StreamExt;
use tokio_util::io::ReaderStream;

use crate::backend::docker::DockerBackend;
use crate::backend::error::{BackendError, message_of};
use crate::backend::image::{ImageInfo, inspect, split_tag};
use crate::backend::mcp_servers::{self, MCP_BIN, McpServers};
use crate::backend::{IMAGE_KIND_LABEL, RUNNER_GID, RUNNER_UID};

/// The tag `suzumio image build --base debian` builds by default.
pub const DEBIAN_IMAGE: &str = "suzumio-runner:debian";

/// The value of [`IMAGE_KIND_LABEL`] on Debian images.
pub const DEBIAN_IMAGE_KIND: &str = "debian";

/// What every Debian image holds; `--packages` adds to it.
pub const DEBIAN_PACKAGES: &[&str] = &["bash", "coreutils", "git", "python3", "nodejs", "ripgrep", "ca-certificates"];

/// Image labels: the MCP servers it was built with (`npm a; pip b`), and their commands.
pub const MCP_SERVERS_LABEL: &str = "io.suzumio.mcp-servers";
pub const MCP_COMMANDS_LABEL: &str = "io.suzumio.mcp-commands";

/// The mount points a read-only rootfs must already have (as in the minimal image).
const MOUNT_POINTS: &[&str] = &["workspace", "artifacts", "toolpacks", "run/suzumio", "opt/suzumio", "mnt"];

/// What to build.
#[derive(Clone, Debug)]
pub struct DebianBuild {
    pub tag: String,
    /// The Debian suite (`bookworm`, …); `None` takes the machine's own.
    pub suite: Option<String>,
    /// Packages beyond [`DEBIAN_PACKAGES`].
    pub packages: Vec<String>,
    /// MCP servers from npm and PyPI, installed into `/opt/mcp`.
    pub mcp: McpServers,
    pub force: bool,
}

impl Default for DebianBuild {
    fn default() -> Self {
        DebianBuild {
            tag: DEBIAN_IMAGE.to_string(),
            suite: None,
            packages: Vec::new(),
            mcp: McpServers::default(),
            force: false,
        }
    }
}

/// A Debian image the engine has, and what it was made of.
#[derive(Clone, Debug)]
pub struct DebianImage {
    pub info: ImageInfo,
    pub suite: String,
    pub packages: Vec<String>,
    /// The MCP servers' commands in the image (`/opt/mcp/bin/…`).
    pub mcp_commands: Vec<String>,
    /// What npm or pip said that is worth reading (a package wanting a newer node).
    pub notes: Vec<String>,
}

impl std::fmt::Display for DebianImage {
    /// The line `suzumio image build --base debian` prints.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.info.built {
            let size = self.info.size_bytes.map(|b| format!(", {:.0} MB", b as f64 / 1_000_000.0)).unwrap_or_default();
            write!(
                f,
                "Built {} ({}{size}) from Debian {} with {}",
                self.info.tag,
                crate::backend::image::short_id(&self.info.id),
                self.suite,
                self.packages.join(", ")
            )?;
        } else {
            write!(f, "{}", self.info)?;
        }
        if !self.mcp_commands.is_empty() {
            write!(
                f,
                "\nMCP server commands (for `command:` of an `mcp:` toolpack): {}",
                self.mcp_commands.join(", ")
            )?;
        }
        for note in &self.notes {
            write!(f, "\nnote: {note}")?;
        }
        Ok(())
    }
}

/// `suzumio image build --base debian`: the image `build.tag`, built unless the engine has it
/// (or `force`).
pub async fn build_debian_image(build: &DebianBuild) -> Result<DebianImage, BackendError> {
    let packages = package_list(&build.packages)?;
    build.mcp.check()?;
    let docker = DockerBackend::connect().await?;
    let suite = match &build.suite {
        Some(suite) => suite.clone(),
        None => host_suite(),
    };
    let previous = inspect(&docker, &build.tag).await?;
    if let Some(info) = &previous
        && !build.force
    {
        let labels = image_labels(&docker, &info.id).await;
        let built_with = labels.get(MCP_SERVERS_LABEL).cloned().unwrap_or_default();
        if built_with == build.mcp.describe() {
            let mcp_commands = labels
                .get(MCP_COMMANDS_LABEL)
                .map(|c| c.split(',').filter(|c| !c.is_empty()).map(str::to_string).collect())
                .unwrap_or_default();
            return Ok(DebianImage { info: info.clone(), suite, packages, mcp_commands, notes: Vec::new() });
        }
        tracing::info!(image = %build.tag, had = %built_with, wanted = %build.mcp.describe(), "rebuilding: other MCP servers");
    }
    let dir =
        tempfile::tempdir().map_err(|e| import_error(&build.tag, format!("cannot make a temporary directory: {e}")))?;
    let rootfs = dir.path().join("rootfs.tar");
    run_mmdebstrap(&suite, &packages, &rootfs).await?;
    let mut installed = mcp_servers::Installed::default();
    if !build.mcp.is_empty() {
        let runtimes = mcp_servers::runtimes_of(&rootfs)?;
        let staging = dir.path().join("staging");
        installed = mcp_servers::install(&build.mcp, &runtimes, &staging).await?;
        mcp_servers::append_to_rootfs(&rootfs, &staging)?;
    }
    let info = import(&docker, &build.tag, &rootfs, &build.mcp, &installed.commands).await?;
    if let Some(old) = previous.filter(|old| old.id != info.id) {
        let options = RemoveImageOptionsBuilder::new().build();
        if let Err(e) = docker.client().remove_image(&old.id, Some(options), None).await {
            tracing::debug!(image = %old.id, error = %message_of(&e), "previous debian image kept");
        }
    }
    Ok(DebianImage { info, suite, packages, mcp_commands: installed.commands, notes: installed.notes })
}

/// The labels of image `id` (none when the engine does not say).
async fn image_labels(docker: &DockerBackend, id: &str) -> std::collections::HashMap<String, String> {
    match docker.client().inspect_image(id).await {
        Ok(image) => image.config.and_then(|c| c.labels).unwrap_or_default(),
        Err(e) => {
            tracing::debug!(image = %id, error = %message_of(&e), "cannot read the image's labels");
            Default::default()
        }
    }
}

/// The base packages and the extra ones, each checked to be a Debian package name.
fn package_list(extra: &[String]) -> Result<Vec<String>, BackendError> {
    let mut all: Vec<String> = DEBIAN_PACKAGES.iter().map(|p| p.to_string()).collect();
    for name in extra {
        let valid = !name.is_empty()
            && name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c));
        if !valid {
            return Err(BackendError::InvalidPackage { name: name.clone() });
        }
        if !all.contains(name) {
            all.push(name.clone());
        }
    }
    Ok(all)
}

/// `VERSION_CODENAME` of /etc/os-release, or `stable`.
fn host_suite() -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| l.strip_prefix("VERSION_CODENAME=").map(|v| v.trim_matches('"').to_string()))
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "stable".to_string())
}

/// What the customize hook does inside the new root (`$1`): the runner user ahead of `nobody`
/// (same uid, so `id` names it), the mount points, no apt caches.
fn customize_hook() -> String {
    let user = format!("runner:x:{RUNNER_UID}:{RUNNER_GID}:suzumio runner:/workspace:/bin/sh");
    let group = format!("runner:x:{RUNNER_GID}:");
    let dirs = MOUNT_POINTS.iter().map(|d| format!("\"$1/{d}\"")).collect::<Vec<_>>().join(" ");
    format!(
        "sed -i '1a {user}' \"$1/etc/passwd\" && sed -i '1a {group}' \"$1/etc/group\" && \
         mkdir -p {dirs} && rm -rf \"$1\"/var/cache/apt/archives/*.deb \"$1\"/var/lib/apt/lists/*"
    )
}

async fn run_mmdebstrap(suite: &str, packages: &[String], rootfs: &Path) -> Result<(), BackendError> {
    let mut command = tokio::process::Command::new("mmdebstrap");
    command
        .args(["--quiet", "--variant=minbase", "--format=tar"])
        .arg(format!("--include={}", packages.join(",")))
        .arg(format!("--customize-hook={}", customize_hook()))
        .arg(suite)
        .arg(rootfs)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = match command.output().await {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(BackendError::MmdebstrapMissing),
        Err(e) => return Err(BackendError::Mmdebstrap { suite: suite.to_string(), cause: e.to_string() }),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(12).collect();
        let cause = format!("{} — {}", output.status, tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        return Err(BackendError::Mmdebstrap { suite: suite.to_string(), cause });
    }
    Ok(())
}

async fn import(
    docker: &DockerBackend,
    tag: &str,
    rootfs: &Path,
    mcp: &McpServers,
    mcp_commands: &[String],
) -> Result<ImageInfo, BackendError> {
    let file =
        tokio::fs::File::open(rootfs).await.map_err(|e| import_error(tag, format!("cannot open the rootfs: {e}")))?;
    let (repo, version) = split_tag(tag);
    let options = CreateImageOptions {
        from_src: Some("-".to_string()),
        repo: Some(repo.to_string()),
        tag: Some(version.to_string()),
        message: Some("suzumio debian runner image (mmdebstrap minbase)".to_string()),
        changes: vec![
            format!("LABEL {IMAGE_KIND_LABEL}={DEBIAN_IMAGE_KIND}"),
            // JSON strings: a value with spaces stays one label.
            format!("LABEL {MCP_SERVERS_LABEL}={}", serde_json::Value::from(mcp.describe())),
            format!("LABEL {MCP_COMMANDS_LABEL}={}", serde_json::Value::from(mcp_commands.join(","))),
            format!("ENV PATH={MCP_BIN}:/usr/local/bin:/usr/bin:/bin"),
            "ENV LANG=C.UTF-8".to_string(),
            "WORKDIR /workspace".to_string(),
            format!("USER {RUNNER_UID}:{RUNNER_GID}"),
            r#"CMD ["/bin/bash"]"#.to_string(),
        ],
        ..Default::default()
    };
    let body = bollard::body_try_stream(ReaderStream::new(file));
    let mut progress = docker.client().create_image(Some(options), Some(body), None);
    while let Some(item) = progress.next().await {
        item.map_err(|e| docker.engine_error(e, |cause| BackendError::ImageImport { tag: tag.to_string(), cause }))?;
    }
    let info = inspect(docker, tag)
        .await?
        .ok_or_else(|| import_error(tag, "the engine accepted the import but the tag does not resolve".to_string()))?;
    tracing::info!(image = tag, id = %info.id, "built the debian runner image");
    Ok(ImageInfo { built: true, ..info })
}

fn import_error(tag: &str, cause: String) -> BackendError {
    BackendError::ImageImport { tag: tag.to_string(), cause }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_packages_are_added_once_and_checked() {
        let list = package_list(&["jq".to_string(), "git".to_string(), "g++".to_string()]).unwrap();
        assert_eq!(&list[..DEBIAN_PACKAGES.len()], DEBIAN_PACKAGES);
        assert_eq!(&list[DEBIAN_PACKAGES.len()..], ["jq", "g++"]);
        for bad in ["", "Jq", "jq;rm -rf /", "-x", "a b"] {
            let err = package_list(&[bad.to_string()]).unwrap_err().to_string();
            assert!(err.contains("not a Debian package name"), "{bad}: {err}");
        }
    }

    #[test]
    fn the_hook_adds_the_runner_user_and_every_mount_point() {
        let hook = customize_hook();
        assert!(hook.contains(&format!("runner:x:{RUNNER_UID}:{RUNNER_GID}:")), "{hook}");
        for dir in MOUNT_POINTS {
            assert!(hook.contains(&format!("\"$1/{dir}\"")), "{dir}: {hook}");
        }
    }
}
