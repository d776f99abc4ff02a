//! Shared helpers for the integration tests: run the real `suzumio` binary and compare what it
//! prints with golden files. Set `UPDATE_EXPECT=1` to rewrite the golden files from the output
//! (then review the diff before committing).

#![allow(dead_code)]

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

/// Compare `actual` with the golden file `path` (or rewrite it when UPDATE_EXPECT is set).
pub fn assert_golden(path: &Path, actual: &str) {
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(path, actual).expect("golden file written");
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!("golden file {} is missing ({e}); run with UPDATE_EXPECT=1 to create it", path.display())
    });
    assert_eq!(actual, expected, "output differs from {}", path.display());
}

/// The static runner binary the Docker tests mount into containers (built by scripts/test.sh).
pub fn static_runner() -> PathBuf {
    let path = repo_root().join("target/x86_64-unknown-linux-gnu/debug/suzumio-runner");
    assert!(
        path.is_file(),
        "the static runner is missing at {}: build it with RUSTFLAGS='-C target-feature=+crt-static' cargo build \
         --target x86_64-unknown-linux-gnu --bin suzumio-runner (scripts/test.sh does)",
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
}

impl TempProject {
    pub fn copy_of(fixture_project: &str) -> TempProject {
        TempProject::copy_of_path(&repo_root().join("tests/fixtures/projects").join(fixture_project))
    }

    pub fn copy_of_path(source: &Path) -> TempProject {
        let fixture_project = source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let unique =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("suzumio-test-{fixture_project}-{}-{unique}", std::process::id()));
        copy_dir(source, &dir);
        TempProject { dir }
    }
}

impl Drop for TempProject {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

/// A running `suzumio run` process on a free loopback port. Stopped (SIGINT, then kill) on drop.
pub struct Controller {
    pub child: std::process::Child,
    pub base: String,
    pub stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Controller {
    pub fn start(dir: &Path, extra: &[&str]) -> Controller {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_suzumio"))
            .arg("run")
            .arg(dir)
            .args(["--port", "0"])
            .args(if extra.contains(&"--backend") { &[][..] } else { &["--backend", "process"][..] })
            .args(extra)
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
        std::thread::spawn(move || for _ in lines {});
        let base = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no URL in {first:?}"))
            .to_string();
        Controller { child, base, stderr }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Stop with SIGINT (as Ctrl-C) and wait; returns the exit code.
    pub fn stop(mut self) -> Option<i32> {
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        wait_with_timeout(&mut self.child, std::time::Duration::from_secs(10))
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

/// A minimal HTTP/1.1 client over a real TCP socket (no client library needed for tests).
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

pub fn http(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&str>) -> Response {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let mut stream = std::net::TcpStream::connect(host).expect("connect");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).ok();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or("");
    if !body.is_empty() && !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
        request.push_str("Content-Type: application/json\r\n");
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).expect("send");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read");
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string())))
        .collect();
    let chunked = headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(body) } else { body.to_string() };
    Response { status, headers, body }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}
