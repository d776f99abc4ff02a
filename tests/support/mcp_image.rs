//! The test image with real MCP servers in it, for the tests of MCP servers as toolpacks inside
//! the agent's container: `suzumio-runner:debian` plus the npm reference server
//! `@modelcontextprotocol/server-everything` and a server written with the official Python SDK
//! (`tests/fixtures/mcp/tally.py`). Both are installed on the host at test set-up (the
//! containers have no network) from pinned trees in `tests/fixtures/mcp/` and copied in with a
//! legacy `docker build`. The image is built once per engine and rebuilt only when those inputs
//! or the base image change (a label holds their hash); a lock file keeps parallel test binaries
//! from building it twice. Both servers run under the real hardening: no network, a read-only
//! root, uid 65534, `/tmp` a small tmpfs.

use std::hash::{Hash, Hasher};
use std::process::Command;
use std::sync::OnceLock;

use super::{cross_process_lock, debian_image, image_id, repo_root, text};

/// The image's tag.
pub const MCP_IMAGE: &str = "suzumio-runner:debian-mcp";

/// The pinned `@modelcontextprotocol/server-everything` (its `package-lock.json` pins the rest of
/// the tree to one that runs on the image's node 18; see `tests/fixtures/mcp/everything/`).
pub const EVERYTHING_VERSION: &str = "2026.8.31";
/// server-everything over stdio: `node <EVERYTHING_ARGS>`, no environment needed. It exits when
/// its stdin closes.
pub const EVERYTHING_COMMAND: &str = "node";
pub const EVERYTHING_ARGS: &[&str] =
    &["/opt/mcp/everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js", "stdio"];
pub const EVERYTHING_ENV: &[(&str, &str)] = &[];

/// The Python SDK server (`tests/fixtures/mcp/tally.py`): tools `add`, `echo`, `pid`, `grow`
/// (adds `grown`, sends `notifications/tools/list_changed`) and `crash` (exits with status 3
/// mid-call). The SDK lives outside the interpreter's path, and bytecode must not be written to
/// the read-only root.
pub const TALLY_COMMAND: &str = "python3";
pub const TALLY_ARGS: &[&str] = &["/opt/mcp/tally.py"];
pub const TALLY_ENV: &[(&str, &str)] = &[("PYTHONPATH", "/opt/mcp/python"), ("PYTHONDONTWRITEBYTECODE", "1")];
/// The `serverInfo` the Python server announces.
pub const TALLY_NAME: &str = "tally";
pub const TALLY_VERSION: &str = "1.4.2";

/// The label on the image holding the hash of what it was built from.
const INPUTS_LABEL: &str = "io.suzumio.test-mcp-inputs";

/// The files the image is made of, relative to `tests/fixtures/mcp/`.
const INPUT_FILES: &[&str] =
    &["everything/package.json", "everything/package-lock.json", "python-requirements.txt", "tally.py"];

const DOCKERFILE: &str = "\
FROM suzumio-runner:debian
COPY everything /opt/mcp/everything
COPY python /opt/mcp/python
COPY tally.py /opt/mcp/tally.py
";

/// The image's tag, after building it if the engine does not have it from the current inputs.
pub fn mcp_image() -> &'static str {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let base = debian_image();
        let inputs = inputs_hash(&image_id(base).unwrap_or_else(|| panic!("{base} vanished from the engine")));
        if built_from(&inputs) {
            return;
        }
        let _lock = cross_process_lock("debian-mcp-image");
        if !built_from(&inputs) {
            build(&inputs);
        }
    });
    MCP_IMAGE
}

fn fixtures() -> std::path::PathBuf {
    repo_root().join("tests/fixtures/mcp")
}

/// A cache key, not a checksum: a collision or a new std hasher only costs a rebuild.
fn inputs_hash(base_id: &str) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    base_id.hash(&mut hasher);
    DOCKERFILE.hash(&mut hasher);
    for name in INPUT_FILES {
        let path = fixtures().join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display())).hash(&mut hasher);
    }
    format!("{:016x}", hasher.finish())
}

fn built_from(inputs: &str) -> bool {
    let out = Command::new("docker")
        .args(["image", "inspect", "--format", &format!("{{{{index .Config.Labels \"{INPUTS_LABEL}\"}}}}"), MCP_IMAGE])
        .output()
        .expect("the docker CLI runs (install and start Docker with scripts/setup.sh)");
    out.status.success() && text(&out.stdout).trim() == inputs
}

fn build(inputs: &str) {
    let context = tempfile::Builder::new().prefix("suzumio-mcp-image-").tempdir().expect("temp dir");
    let dir = context.path();
    let fixtures = fixtures();

    let everything = dir.join("everything");
    std::fs::create_dir(&everything).expect("create dir");
    for name in ["package.json", "package-lock.json"] {
        std::fs::copy(fixtures.join("everything").join(name), everything.join(name)).expect("copy file");
    }
    run(
        Command::new("npm").args(["ci", "--omit=dev", "--no-audit", "--no-fund", "--prefix"]).arg(&everything),
        &format!("installing @modelcontextprotocol/server-everything@{EVERYTHING_VERSION} with npm"),
    );

    // Wheels for the image's interpreter (Debian 12: CPython 3.11, glibc 2.36), whatever python
    // the host has. --target skips Debian's externally-managed check.
    run(
        Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-warn-conflicts"])
            .args(["--root-user-action=ignore", "--only-binary=:all:", "--python-version", "3.11"])
            .args(["--platform", "manylinux_2_17_x86_64", "--platform", "manylinux_2_28_x86_64"])
            .args(["--platform", "manylinux_2_34_x86_64", "--target"])
            .arg(dir.join("python"))
            .arg("-r")
            .arg(fixtures.join("python-requirements.txt")),
        "installing the Python MCP SDK (mcp from PyPI) with pip",
    );

    std::fs::copy(fixtures.join("tally.py"), dir.join("tally.py")).expect("copy file");
    std::fs::write(dir.join("Dockerfile"), format!("{DOCKERFILE}LABEL {INPUTS_LABEL}={inputs}\n")).expect("write file");
    // The legacy builder: BuildKit is not installed, and nothing is pulled (the base is local).
    run(
        Command::new("docker").env("DOCKER_BUILDKIT", "0").args(["build", "--quiet", "--tag", MCP_IMAGE]).arg(dir),
        &format!("building {MCP_IMAGE} with docker build"),
    );
}

fn run(command: &mut Command, what: &str) {
    let out =
        command.output().unwrap_or_else(|e| panic!("{what}: {e} (scripts/setup.sh installs npm and python3-pip)"));
    assert!(
        out.status.success(),
        "{what} failed ({}); it needs the npm registry and PyPI from the host (scripts/setup.sh installs npm and \
         python3-pip):\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}
