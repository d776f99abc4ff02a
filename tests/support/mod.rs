//! Shared helpers for the integration tests: run the real `suzumio` binary (once, or as a running
//! controller), copy fixture projects into temporary directories, talk HTTP to the controller,
//! and name golden files (`expect-test`: set `UPDATE_EXPECT=1` to rewrite them from the output,
//! then review the diff before committing).

#![allow(dead_code)]

pub mod containers;
pub mod mcp_client;
pub mod mcp_image;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(kind: &str, name: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(kind).join(name)
}

/// Run `suzumio <args>` in `cwd` with a clean, fixed environment.
pub fn suzumio(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SUZUMIO_TEST_VALUE", "from-env")
        .output()
        .expect("the suzumio binary runs")
}

/// The golden file `tests/golden/<name>`: `.assert_eq(actual)` compares, and rewrites it when
/// `UPDATE_EXPECT=1` is set.
/// `suzumio <args…>` that must succeed; its stdout.
pub fn cli(dir: &Path, args: &[&str]) -> String {
    let out = suzumio(dir, args);
    assert!(out.status.success(), "suzumio {args:?}: {}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

/// `suzumio <args…>` that must be refused as bad input (exit 2); its stderr.
pub fn refused(dir: &Path, args: &[&str]) -> String {
    let out = suzumio(dir, args);
    assert_eq!(out.status.code(), Some(2), "suzumio {args:?}: {}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stderr)
}

pub fn golden(name: &str) -> expect_test::ExpectFile {
    expect_test::expect_file![repo_root().join("tests/golden").join(name)]
}

/// The runner binary of this build (`target/debug/suzumio-runner`), which the process backend
/// starts. A workspace test run (`cargo test`, `cargo nextest run`) builds it with the runner
/// crate's own tests.
pub fn runner_binary() -> PathBuf {
    let path = repo_root().join("target/debug/suzumio-runner");
    assert!(
        path.is_file(),
        "the runner binary is missing at {}: build it with `cargo build -p suzumio-runner` (a workspace test run does)",
        path.display()
    );
    path
}

/// The static runner binary the Docker tests mount into containers (built by scripts/test.sh).
pub fn static_runner() -> PathBuf {
    let path = repo_root().join("target/x86_64-unknown-linux-gnu/debug/suzumio-runner");
    assert!(
        path.is_file(),
        "the static runner is missing at {}: build it with RUSTFLAGS='-C target-feature=+crt-static' cargo build \
         --target x86_64-unknown-linux-gnu -p suzumio-runner (scripts/test.sh does)",
        path.display()
    );
    path
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A copy of a fixture project in a fresh temporary directory (the controller writes state
/// into the project directory; the repository must stay clean). Removed on drop.
pub struct TempProject {
    pub dir: PathBuf,
    _root: tempfile::TempDir,
}

impl TempProject {
    pub fn copy_of(fixture_project: &str) -> TempProject {
        TempProject::copy_of_path(&repo_root().join("tests/fixtures/projects").join(fixture_project))
    }

    /// `fixture_project` whose scripted model plays `script` (written as `script.yaml`), with each
    /// `(from, to)` of `edits` made to its `suzumio.yaml` first.
    pub fn scripted(fixture_project: &str, script: &str, edits: &[(&str, &str)]) -> TempProject {
        let project = TempProject::copy_of(fixture_project);
        std::fs::write(project.dir.join("script.yaml"), script).expect("write the script");
        let path = project.dir.join("suzumio.yaml");
        let mut yaml = std::fs::read_to_string(&path).expect("read suzumio.yaml");
        let scripted = ("local: { type: scripted }", "local: { type: scripted, script: ./script.yaml }");
        for (from, to) in edits.iter().chain([&scripted]) {
            assert!(yaml.contains(from), "{fixture_project}/suzumio.yaml has no {from:?} to change");
            yaml = yaml.replace(from, to);
        }
        std::fs::write(&path, yaml).expect("write suzumio.yaml");
        project
    }

    pub fn copy_of_path(source: &Path) -> TempProject {
        let name = source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let root = tempfile::Builder::new().prefix(&format!("suzumio-test-{name}-")).tempdir().expect("temp dir");
        copy_dir(source, root.path());
        TempProject { dir: root.path().to_path_buf(), _root: root }
    }
}

/// `cp -r` that keeps links as links. A project's links may be relative (seed-001's toolpacks
/// point into the repository's `toolpacks/`) and would dangle from a temporary directory, so
/// each is recreated pointing at its absolute target.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        let kind = entry.file_type().expect("file type");
        if kind.is_symlink() {
            let points_to = std::fs::canonicalize(entry.path())
                .unwrap_or_else(|e| panic!("{} is a dangling link: {e}", entry.path().display()));
            std::os::unix::fs::symlink(points_to, &target).expect("symlink");
        } else if kind.is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

/// The `review` fixture's edit that adds a `worker` allowed the background-command tools.
pub const BACKGROUND_WORKER: (&str, &str) = (
    "reviewer:\n    tools:",
    "worker:\n    tools: [shell.start, shell.check, shell.stop, shell.list, coordination.wait_for_signal]\n  reviewer:\n    tools:",
);

/// A running `suzumio run` process on a free loopback port. Stopped (SIGINT, then kill) on drop.
pub struct Controller {
    pub child: std::process::Child,
    pub base: String,
    pub stderr: std::sync::Arc<std::sync::Mutex<String>>,
    /// What it printed on stdout after its first line (the plain lines of its live view).
    pub stdout: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Controller {
    pub fn start(dir: &Path, extra: &[&str]) -> Controller {
        Controller::start_with_env(dir, extra, &[])
    }

    /// `suzumio run` with extra arguments (the process backend unless `--backend` is given)
    /// and extra environment variables.
    pub fn start_with_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Controller {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_suzumio"))
            .arg("run")
            .arg(dir)
            .args(["--port", "0"])
            .args(if extra.contains(&"--backend") { &[][..] } else { &["--backend", "process"][..] })
            .args(extra)
            .envs(env.iter().copied())
            .env("SUZUMIO_LOG", "info")
            .env_remove("SUZUMIO_API_TOKEN")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("suzumio run starts");
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        {
            let sink = stderr.clone();
            let pipe = child.stderr.take().expect("stderr");
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                    let mut s = sink.lock().unwrap_or_else(|e| e.into_inner());
                    s.push_str(&line);
                    s.push('\n');
                }
            });
        }
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = std::io::BufReader::new(stdout).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_else(|| {
            let _ = child.wait();
            panic!("suzumio run printed nothing; stderr:\n{}", stderr.lock().unwrap())
        });
        let printed = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        {
            let sink = printed.clone();
            std::thread::spawn(move || {
                for line in lines.map_while(Result::ok) {
                    let mut s = sink.lock().unwrap_or_else(|e| e.into_inner());
                    s.push_str(&line);
                    s.push('\n');
                }
            });
        }
        let base = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {first:?}"))
            .to_string();
        Controller { child, base, stderr, stdout: printed }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Stop with SIGINT (as Ctrl-C) and wait; returns the exit code.
    pub fn stop(mut self) -> Option<i32> {
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        wait_with_timeout(&mut self.child, std::time::Duration::from_secs(10))
    }

    /// Stop with SIGTERM (as a service manager does) and wait; the exit code, or `None` when it
    /// did not exit within 10 s.
    pub fn terminate(&mut self) -> Option<i32> {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        wait_with_timeout(&mut self.child, std::time::Duration::from_secs(10))
    }

    /// What it printed on stdout so far, after its first line.
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_with_timeout(child: &mut std::process::Child, limit: std::time::Duration) -> Option<i32> {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if let Ok(Some(status)) = child.try_wait() {
            return status.code();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    None
}

/// How long a test waits for something that must happen: a guard against hanging, never a
/// measure of speed (a loaded machine may take long, and that is not a failure).
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// Poll `probe` until it returns `Some`, at most [`PATIENCE`]; a time-out fails naming `what`,
/// with `ctl`'s log when there is a controller.
pub fn wait_for<T>(what: &str, ctl: Option<&Controller>, mut probe: impl FnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "timed out waiting for {what}; controller stderr:\n{}",
            ctl.map(Controller::stderr).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// [`wait_for`] inside an async test: the probe is polled without blocking the runtime.
pub async fn wait_for_async<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(start.elapsed() < PATIENCE, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The tests' HTTP client: no proxy, no redirects followed (a test sees the 303 itself), no
/// cookie store (a test sends the cookie it means to).
pub fn client() -> &'static reqwest::blocking::Client {
    static CLIENT: std::sync::OnceLock<reqwest::blocking::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        suzumio::support::web_fetch::tls_provider();
        reqwest::blocking::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .expect("the HTTP client builds")
    })
}

/// An answer read to its end.
pub struct Response {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Response {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// One request; a body is sent as JSON unless `headers` name another Content-Type.
pub fn http(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&str>) -> Response {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("an HTTP method");
    let mut request = client().request(method, url);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    if let Some(body) = body {
        if !body.is_empty() && !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
            request = request.header("Content-Type", "application/json");
        }
        request = request.body(body.to_string());
    }
    let response = request.send().unwrap_or_else(|e| panic!("{url}: {e}"));
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    let body = response.text().unwrap_or_else(|e| panic!("{url}: reading the body: {e}"));
    Response { status, headers, body }
}

/// An exclusive lock on `target/test-locks/<name>.lock`, held until the file is dropped: nextest
/// runs test binaries in parallel, and two of them must not build the same image at once.
pub fn cross_process_lock(name: &str) -> File {
    let dir = repo_root().join("target/test-locks");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let path = dir.join(format!("{name}.lock"));
    let file = File::create(&path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
    file.lock().unwrap_or_else(|e| panic!("locking {}: {e}", path.display()));
    file
}

/// The id of `image` in the engine, `None` when it has none (a test that needs Docker fails when
/// the engine is unreachable).
pub fn image_id(image: &str) -> Option<String> {
    let out = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", image])
        .output()
        .expect("the docker CLI runs (install and start Docker with scripts/setup.sh)");
    out.status.success().then(|| text(&out.stdout).trim().to_string())
}

/// `suzumio-runner:debian`, built through the CLI (`suzumio image build --base debian`) when the
/// engine does not have it yet; kept in the engine between runs.
pub fn debian_image() -> &'static str {
    use suzumio::backend::DEBIAN_IMAGE;
    if image_id(DEBIAN_IMAGE).is_some() {
        return DEBIAN_IMAGE;
    }
    let _lock = cross_process_lock("debian-image");
    if image_id(DEBIAN_IMAGE).is_some() {
        return DEBIAN_IMAGE;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["image", "build", "--base", "debian"])
        .output()
        .expect("suzumio image build");
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "suzumio image build --base debian failed (start Docker and install mmdebstrap with scripts/setup.sh): \
         {stdout}{}",
        text(&out.stderr)
    );
    assert!(stdout.starts_with(&format!("Built {DEBIAN_IMAGE} (")), "{stdout}");
    assert!(stdout.contains("git, python3, nodejs, ripgrep"), "{stdout}");
    DEBIAN_IMAGE
}

/// Every call of `tool` in the project at `dir`, oldest first, with its recorded output or error
/// (read from the store, as a second process would).
pub fn tool_calls(
    dir: &Path,
    tool: &str,
) -> Vec<(suzumio::store::ToolCallStatus, Option<serde_json::Value>, Option<String>)> {
    let host = suzumio::controller::open_read_only(dir).unwrap_or_else(|e| panic!("{e}"));
    let mut out: Vec<_> = host
        .store
        .list_tool_calls(Some(tool), None, None, 100)
        .unwrap()
        .into_iter()
        .map(|s| {
            let record = host.store.tool_call(&s.id).unwrap().unwrap();
            (record.status, record.output, record.error)
        })
        .collect();
    out.reverse();
    out
}
