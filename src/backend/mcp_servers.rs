//! MCP servers from npm and PyPI in a Debian runner image (`suzumio image build --base debian
//! --npm … --pip …`): installed at build time on the host, with the host's own `npm` and `pip`
//! and their registry settings, for the image's node and python (their versions read from the
//! image's dpkg status), then appended to the root filesystem under [`MCP_ROOT`] (owned by root,
//! so read-only to the runner user, and under the read-only root anyway). Each server's command
//! is in [`MCP_BIN`]: npm's own links, and for a PyPI package a wrapper per console script that
//! runs it with the image's python3 and the packages on its path.
//!
//! The containers never reach a registry: everything a server needs is in the image. This
//! module installs and packs; it does not decide when an image is built (`debian.rs` does).

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::Stdio;

use crate::backend::error::BackendError;

/// Where the servers live in the image.
pub const MCP_ROOT: &str = "/opt/mcp";
/// Where their commands are (on the image's `PATH` too).
pub const MCP_BIN: &str = "/opt/mcp/bin";
/// npm's global prefix inside [`MCP_ROOT`]: `lib/node_modules/<pkg>`, its links in `bin/`.
const NPM_PREFIX: &str = "/opt/mcp";
/// `pip install --target` of the PyPI packages.
const PYTHON_DIR: &str = "/opt/mcp/python";

/// The MCP servers to install: npm package specs and PyPI requirements, as given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct McpServers {
    pub npm: Vec<String>,
    pub pip: Vec<String>,
}

impl McpServers {
    pub fn is_empty(&self) -> bool {
        self.npm.is_empty() && self.pip.is_empty()
    }

    /// Every spec checked to be a plain registry package (no path, URL, git or option), so
    /// nothing but the registries is reached and nothing is taken for a flag.
    pub fn check(&self) -> Result<(), BackendError> {
        if let Some(bad) = self.npm.iter().find(|s| !is_npm_spec(s)) {
            return Err(BackendError::InvalidMcpPackage { registry: "npm", spec: bad.clone() });
        }
        if let Some(bad) = self.pip.iter().find(|s| !is_pip_requirement(s)) {
            return Err(BackendError::InvalidMcpPackage { registry: "pip", spec: bad.clone() });
        }
        Ok(())
    }

    /// `npm a b; pip c`: what the image's label records.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.npm.is_empty() {
            parts.push(format!("npm {}", self.npm.join(" ")));
        }
        if !self.pip.is_empty() {
            parts.push(format!("pip {}", self.pip.join(" ")));
        }
        parts.join("; ")
    }
}

/// `name`, `@scope/name`, either with `@version-or-range` (no spaces, no `:` or `/` in it).
fn is_npm_spec(spec: &str) -> bool {
    let name_part = |s: &str| {
        !s.is_empty()
            && !s.starts_with(['.', '_', '-'])
            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-._~".contains(c))
    };
    let (scoped, rest) = match spec.strip_prefix('@') {
        Some(rest) => (true, rest),
        None => (false, spec),
    };
    let (name, version) = match rest.split_once('@') {
        Some((name, version)) => (name, Some(version)),
        None => (rest, None),
    };
    let name_ok = match (scoped, name.split_once('/')) {
        (true, Some((scope, name))) => name_part(scope) && name_part(name),
        (false, None) => name_part(name),
        _ => false,
    };
    let version_ok = version
        .is_none_or(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || ".+-~^<>=*|".contains(c)));
    name_ok && version_ok
}

/// A PEP 508 name with optional extras and version specifiers, no URL, no marker, no option.
fn is_pip_requirement(spec: &str) -> bool {
    let end = spec.find(|c: char| !(c.is_ascii_alphanumeric() || "-_.".contains(c))).unwrap_or(spec.len());
    let (name, mut rest) = spec.split_at(end);
    if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return false;
    }
    if let Some(extras) = rest.strip_prefix('[') {
        let Some((inside, after)) = extras.split_once(']') else { return false };
        if !inside.chars().all(|c| c.is_ascii_alphanumeric() || "-_.,".contains(c)) {
            return false;
        }
        rest = after;
    }
    rest.is_empty()
        || (rest.starts_with(['=', '<', '>', '~', '!'])
            && rest.chars().all(|c| c.is_ascii_alphanumeric() || ".*+!,<>=~".contains(c)))
}

/// The runtimes of an image, from its dpkg status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRuntimes {
    /// `18.19.0`
    pub node: Option<String>,
    /// `3.11`
    pub python: Option<String>,
    /// glibc's `(major, minor)`
    pub glibc: Option<(u32, u32)>,
}

impl ImageRuntimes {
    /// Read from the text of `/var/lib/dpkg/status`.
    pub fn from_dpkg_status(status: &str) -> ImageRuntimes {
        let installed = |package: &str| {
            status.split("\n\n").find_map(|stanza| {
                let field = |name: &str| stanza.lines().find_map(|l| l.strip_prefix(name).map(str::trim));
                (field("Package:") == Some(package) && field("Status:").is_some_and(|s| s.ends_with(" installed")))
                    .then(|| field("Version:").map(str::to_string))
                    .flatten()
            })
        };
        // `18.19.0+dfsg-6~deb12u2` → 18.19.0; an epoch (`1:`) goes first.
        let upstream = |v: String| {
            let v = v.split_once(':').map(|(_, v)| v.to_string()).unwrap_or(v);
            v.split(['+', '-', '~']).next().unwrap_or_default().to_string()
        };
        let node = installed("nodejs").map(upstream).filter(|v| !v.is_empty());
        let python = installed("python3").map(upstream).and_then(|v| {
            let mut parts = v.split('.');
            Some(format!("{}.{}", parts.next()?, parts.next()?))
        });
        let glibc = installed("libc6").map(upstream).and_then(|v| {
            let mut parts = v.split('.');
            Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
        });
        ImageRuntimes { node, python, glibc }
    }
}

/// The dpkg status file of the root filesystem tar at `rootfs`.
pub fn runtimes_of(rootfs: &Path) -> Result<ImageRuntimes, BackendError> {
    let fail = |e: std::io::Error| pack_error(format!("cannot read {}: {e}", rootfs.display()));
    let mut archive = tar::Archive::new(std::fs::File::open(rootfs).map_err(fail)?);
    for entry in archive.entries_with_seek().map_err(fail)? {
        let mut entry = entry.map_err(fail)?;
        if entry.path().map_err(fail)?.as_ref() == Path::new("./var/lib/dpkg/status")
            || entry.path().map_err(fail)?.as_ref() == Path::new("var/lib/dpkg/status")
        {
            let mut text = String::new();
            entry.read_to_string(&mut text).map_err(fail)?;
            return Ok(ImageRuntimes::from_dpkg_status(&text));
        }
    }
    Err(pack_error(format!("{} has no var/lib/dpkg/status", rootfs.display())))
}

/// What was installed: the commands in [`MCP_BIN`], and npm's and pip's warnings worth reading
/// (a package that wants a newer node than the image's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Installed {
    pub commands: Vec<String>,
    pub notes: Vec<String>,
}

/// Install `servers` for `runtimes` under `staging` (which then holds `opt/mcp/…`).
pub async fn install(
    servers: &McpServers,
    runtimes: &ImageRuntimes,
    staging: &Path,
) -> Result<Installed, BackendError> {
    let at = |dir: &str| staging.join(dir.trim_start_matches('/'));
    let bin = at(MCP_BIN);
    std::fs::create_dir_all(&bin).map_err(|e| pack_error(format!("cannot create {}: {e}", bin.display())))?;
    let mut notes = Vec::new();
    if !servers.npm.is_empty() {
        let node = runtimes.node.as_deref().ok_or(BackendError::McpRuntimeMissing { runtime: "nodejs" })?;
        let mut npm = tokio::process::Command::new("npm");
        npm.args(["install", "--global", "--no-audit", "--no-fund", "--no-update-notifier", "--loglevel=warn"])
            .arg("--prefix")
            .arg(at(NPM_PREFIX))
            // npm prefers, for every range, the versions whose `engines` accept the image's node.
            .arg(format!("--node-version={node}"))
            .args(&servers.npm);
        let stderr = run_installer(npm, "npm", &servers.npm).await?;
        notes.extend(
            stderr
                .lines()
                .filter(|l| l.contains("EBADENGINE") || l.contains("Unsupported engine") || l.contains("required:"))
                .map(|l| format!("npm: {}", l.trim_start_matches("npm warn ").trim())),
        );
    }
    if !servers.pip.is_empty() {
        let python = runtimes.python.as_deref().ok_or(BackendError::McpRuntimeMissing { runtime: "python3" })?;
        let (major, minor) = runtimes.glibc.unwrap_or((2, 17));
        let arch = std::env::consts::ARCH;
        let mut pip = tokio::process::Command::new("python3");
        // --target with --python-version and --platform: wheels for the image's interpreter and
        // glibc, whatever python the host has (and no Debian externally-managed check).
        pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-warn-conflicts"])
            .args(["--root-user-action=ignore", "--only-binary=:all:", "--python-version", python])
            .args(["--platform", &format!("manylinux2014_{arch}")]);
        for glibc_minor in 17..=minor.max(17) {
            if major == 2 {
                pip.args(["--platform", &format!("manylinux_2_{glibc_minor}_{arch}")]);
            }
        }
        pip.arg("--target").arg(at(PYTHON_DIR)).args(&servers.pip);
        run_installer(pip, "pip", &servers.pip).await?;
        write_python_wrappers(&at(PYTHON_DIR), &servers.pip, &bin)?;
    }
    let mut commands: Vec<String> = std::fs::read_dir(&bin)
        .map_err(|e| pack_error(format!("cannot list {}: {e}", bin.display())))?
        .filter_map(|e| e.ok())
        .map(|e| format!("{MCP_BIN}/{}", e.file_name().to_string_lossy()))
        .collect();
    commands.sort();
    notes.sort();
    notes.dedup();
    Ok(Installed { commands, notes })
}

/// Run an installer; its stderr when it succeeded.
async fn run_installer(
    mut command: tokio::process::Command,
    tool: &'static str,
    packages: &[String],
) -> Result<String, BackendError> {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let failed = |cause: String| BackendError::McpInstall { tool, packages: packages.join(" "), cause };
    let output = match command.output().await {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let install = if tool == "npm" { "apt-get install npm" } else { "apt-get install python3-pip" };
            return Err(failed(format!("{tool} is not installed on this machine ({install})")));
        }
        Err(e) => return Err(failed(e.to_string())),
    };
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    if !output.status.success() {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let text = format!("{stdout}{stderr}");
        let tail: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).rev().take(12).collect();
        return Err(failed(format!("{} — {}", output.status, tail.into_iter().rev().collect::<Vec<_>>().join("\n"))));
    }
    Ok(stderr)
}

/// The name of a requirement (`mcp-server-time==1` → `mcp-server-time`), normalized as
/// dist-info directories are (`mcp_server_time`).
fn normalized_name(requirement: &str) -> String {
    let end =
        requirement.find(|c: char| !(c.is_ascii_alphanumeric() || "-_.".contains(c))).unwrap_or(requirement.len());
    requirement[..end].to_ascii_lowercase().replace(['-', '.'], "_")
}

/// The console scripts of the requested packages, from their `entry_points.txt` in `target`
/// (what their dependencies bring stays out of [`MCP_BIN`]).
fn console_scripts(target: &Path, requested: &[String]) -> Vec<String> {
    let wanted: Vec<String> = requested.iter().map(|r| normalized_name(r)).collect();
    let Ok(entries) = std::fs::read_dir(target) else { return Vec::new() };
    let mut scripts = Vec::new();
    for entry in entries.filter_map(|e| e.ok()) {
        let dir = entry.file_name().to_string_lossy().to_string();
        let Some(stem) = dir.strip_suffix(".dist-info") else { continue };
        let name = stem.rsplit_once('-').map_or(stem, |(name, _)| name);
        if !wanted.contains(&normalized_name(name)) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path().join("entry_points.txt")) else { continue };
        let mut in_scripts = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                in_scripts = line == "[console_scripts]";
            } else if in_scripts && let Some((script, _)) = line.split_once('=') {
                scripts.push(script.trim().to_string());
            }
        }
    }
    scripts
}

/// For each console script of the requested packages, a wrapper in `bin` running pip's script
/// with the image's python3 and [`PYTHON_DIR`] on its path (pip's own scripts start with the
/// host's interpreter, which the image does not have). An npm command of the same name is kept.
fn write_python_wrappers(target: &Path, requested: &[String], bin: &Path) -> Result<(), BackendError> {
    use std::os::unix::fs::PermissionsExt;
    for name in console_scripts(target, requested) {
        let wrapper = bin.join(&name);
        if wrapper.symlink_metadata().is_ok() || !target.join("bin").join(&name).is_file() {
            continue;
        }
        let script = format!(
            "#!/bin/sh\n# {name} from PyPI, installed by `suzumio image build --pip`\n\
             export PYTHONPATH=\"{PYTHON_DIR}${{PYTHONPATH:+:$PYTHONPATH}}\" PYTHONDONTWRITEBYTECODE=1\n\
             exec /usr/bin/python3 {PYTHON_DIR}/bin/{name} \"$@\"\n"
        );
        let fail = |e: std::io::Error| pack_error(format!("cannot write {}: {e}", wrapper.display()));
        std::fs::write(&wrapper, script).map_err(fail)?;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).map_err(fail)?;
    }
    Ok(())
}

/// Append `staging`'s tree to the root filesystem tar at `rootfs` (over its end-of-archive
/// blocks), every entry owned by root: the servers become part of the image's one layer.
pub fn append_to_rootfs(rootfs: &Path, staging: &Path) -> Result<(), BackendError> {
    let fail = |e: std::io::Error| pack_error(format!("cannot add the MCP servers to {}: {e}", rootfs.display()));
    let mut end = 0;
    {
        let mut archive = tar::Archive::new(std::fs::File::open(rootfs).map_err(fail)?);
        for entry in archive.entries_with_seek().map_err(fail)? {
            let entry = entry.map_err(fail)?;
            end = entry.raw_file_position() + entry.size().div_ceil(512) * 512;
        }
    }
    let mut file = std::fs::OpenOptions::new().read(true).write(true).open(rootfs).map_err(fail)?;
    file.seek(SeekFrom::Start(end)).map_err(fail)?;
    file.set_len(end).map_err(fail)?;
    let mut builder = tar::Builder::new(file);
    builder.mode(tar::HeaderMode::Deterministic);
    builder.follow_symlinks(false);
    let root = MCP_ROOT.trim_start_matches('/');
    builder.append_dir_all(format!("./{root}"), staging.join(root)).map_err(fail)?;
    builder.into_inner().map_err(fail)?;
    Ok(())
}

fn pack_error(cause: String) -> BackendError {
    BackendError::McpInstall { tool: "suzumio", packages: String::new(), cause }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_registry_packages_are_accepted() {
        for good in ["@modelcontextprotocol/server-filesystem", "@scope/pkg@2026.8.31", "left-pad@^1.3.0", "a.b_c~d"] {
            assert!(is_npm_spec(good), "{good}");
        }
        for bad in
            ["", "-g", "./local", "/abs", "git+https://x/y.git", "@scope", "@s/", "Pkg", "a b", "x@file:../y", "@a/b/c"]
        {
            assert!(!is_npm_spec(bad), "{bad}");
        }
        for good in ["mcp-server-time", "mcp-server-time==2026.10.19", "mcp[cli]>=1.2,<3", "Foo_Bar.baz~=1.0"] {
            assert!(is_pip_requirement(good), "{good}");
        }
        for bad in
            ["", "-r", "--index-url=x", "./dir", "pkg @ https://x", "pkg;os_name=='nt'", "pkg[a", "https://x/y.whl"]
        {
            assert!(!is_pip_requirement(bad), "{bad}");
        }
        let err = McpServers { npm: vec!["-g".into()], pip: vec![] }.check().unwrap_err().to_string();
        assert!(err.contains("--npm \"-g\" is not a registry package"), "{err}");
    }

    #[test]
    fn runtimes_come_from_the_installed_packages_of_the_dpkg_status() {
        let status = "Package: nodejs\nStatus: install ok installed\nVersion: 18.19.0+dfsg-6~deb12u2\n\n\
                      Package: python3\nStatus: install ok installed\nVersion: 3.11.2-1+b1\n\n\
                      Package: libc6\nStatus: install ok installed\nVersion: 2.36-9+deb12u7\n\n\
                      Package: nodejs-doc\nStatus: deinstall ok config-files\nVersion: 20.1.0\n";
        let runtimes = ImageRuntimes::from_dpkg_status(status);
        assert_eq!(
            runtimes,
            ImageRuntimes { node: Some("18.19.0".into()), python: Some("3.11".into()), glibc: Some((2, 36)) }
        );
        assert_eq!(normalized_name("Mcp-Server.Time[x]==1"), "mcp_server_time");
        let none = ImageRuntimes::from_dpkg_status("Package: nodejs\nStatus: deinstall ok config-files\nVersion: 1\n");
        assert_eq!(none.node, None);
    }
}
