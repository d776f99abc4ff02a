//! A small W3C WebDriver client for the browser tests: it starts Debian's `chromedriver` on a
//! free loopback port, opens one headless Chromium session and offers the few commands the tests
//! use (navigate, find with a wait, click, type, read, run JavaScript, screenshot).
//!
//! It talks plain HTTP/JSON with async `reqwest`; no WebDriver crate. It never skips: a missing
//! `chromedriver` or `chromium` is an error that says how to install them. Dropping a [`Browser`]
//! closes the session (which ends Chromium), stops chromedriver and removes the profile.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Debian's Chromium, as `scripts/setup.sh` installs it.
pub const CHROMIUM: &str = "/usr/bin/chromium";
const MISSING: &str = "run scripts/setup.sh (installs chromium and chromium-driver)";
/// The W3C key under which an element reference travels.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";
const POLL: Duration = Duration::from_millis(100);
/// How long chromedriver gets to answer `/status` after it was spawned.
const DRIVER_READY: Duration = Duration::from_secs(20);

/// What went wrong, with the W3C error code (`no such element`, ...) when the driver gave one.
/// `Debug` prints the message, so a test returning `Result<(), Error>` fails readably.
pub struct Error {
    pub code: String,
    pub message: String,
}

impl Error {
    fn local(message: impl Into<String>) -> Error {
        Error { code: String::new(), message: message.into() }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// A reference to an element of the current page (the driver's element id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element(pub String);

impl Element {
    /// The element as an argument of [`Browser::execute_with`] (it arrives in JS as the node).
    pub fn arg(&self) -> Value {
        json!({ ELEMENT_KEY: self.0 })
    }

    fn from_value(value: &Value) -> Result<Element> {
        value[ELEMENT_KEY]
            .as_str()
            .map(|id| Element(id.to_string()))
            .ok_or_else(|| Error::local(format!("chromedriver returned no element reference: {value}")))
    }
}

/// One headless Chromium session behind its own chromedriver process.
pub struct Browser {
    http: reqwest::Client,
    driver_url: String,
    driver_addr: SocketAddr,
    driver: Child,
    session: String,
    chromium_pid: Option<i32>,
    scratch: PathBuf,
    /// How long `find`, `wait_until` and friends poll before they give up.
    pub wait: Duration,
}

impl Browser {
    /// Start `chromedriver` from PATH and open a session.
    pub async fn start() -> Result<Browser> {
        Browser::start_with_driver("chromedriver").await
    }

    /// Start the given chromedriver program and open a headless Chromium session in a fresh
    /// profile.
    pub async fn start_with_driver(program: &str) -> Result<Browser> {
        let scratch = scratch_dir();
        std::fs::create_dir_all(scratch.join("profile"))
            .map_err(|e| Error::local(format!("cannot create {}: {e}", scratch.display())))?;
        let log = scratch.join("chromedriver.log");
        let port = free_port()?;
        let driver = Command::new(program)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let driver = match driver {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&scratch);
                return Err(if e.kind() == std::io::ErrorKind::NotFound {
                    Error::local(format!("chromedriver not found: {MISSING}"))
                } else {
                    Error::local(format!("cannot start chromedriver ({program}): {e}"))
                });
            }
        };
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| Error::local(format!("cannot build the HTTP client: {e}")))?;
        let mut browser = Browser {
            http,
            driver_url: format!("http://127.0.0.1:{port}"),
            driver_addr: SocketAddr::from(([127, 0, 0, 1], port)),
            driver,
            session: String::new(),
            chromium_pid: None,
            scratch,
            wait: Duration::from_secs(10),
        };
        if !std::path::Path::new(CHROMIUM).is_file() {
            return Err(Error::local(format!("chromium not found at {CHROMIUM}: {MISSING}")));
        }
        browser.wait_for_driver().await?;
        browser.open_session().await?;
        Ok(browser)
    }

    async fn wait_for_driver(&mut self) -> Result<()> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.driver.try_wait() {
                return Err(Error::local(format!(
                    "chromedriver exited ({status}) before it was ready; its log:\n{}",
                    self.driver_log()
                )));
            }
            let answer = self.http.get(format!("{}/status", self.driver_url)).send().await;
            if let Ok(response) = answer
                && let Ok(body) = response.json::<Value>().await
                && body["value"]["ready"] == true
            {
                return Ok(());
            }
            if started.elapsed() > DRIVER_READY {
                return Err(Error::local(format!(
                    "chromedriver did not become ready on {} within {} s; its log:\n{}",
                    self.driver_url,
                    DRIVER_READY.as_secs(),
                    self.driver_log()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn open_session(&mut self) -> Result<()> {
        let profile = self.scratch.join("profile");
        let capabilities = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": CHROMIUM,
                        // As root on a machine whose network is closed: no sandbox, and nothing
                        // that phones home (its refused connections would slow every start).
                        "args": [
                            "--headless",
                            "--no-sandbox",
                            "--disable-gpu",
                            "--disable-quic",
                            "--no-first-run",
                            "--disable-background-networking",
                            "--disable-component-update",
                            "--disable-sync",
                            "--window-size=1280,900",
                            format!("--user-data-dir={}", profile.display()),
                        ],
                    },
                },
            },
        });
        let response = self
            .http
            .post(format!("{}/session", self.driver_url))
            .json(&capabilities)
            .send()
            .await
            .map_err(|e| Error::local(format!("chromedriver did not answer the new-session request: {e}")))?;
        let value = unwrap_answer("new session", response).await.map_err(|e| {
            Error::local(format!("Chromium did not start: {e}\nchromedriver log:\n{}", self.driver_log()))
        })?;
        self.session = value["sessionId"]
            .as_str()
            .ok_or_else(|| Error::local(format!("chromedriver returned no session id: {value}")))?
            .to_string();
        self.chromium_pid = value["capabilities"]["goog:processID"].as_i64().and_then(|p| i32::try_from(p).ok());
        Ok(())
    }

    /// The last lines of chromedriver's log, for error messages.
    fn driver_log(&self) -> String {
        let log = std::fs::read_to_string(self.scratch.join("chromedriver.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Send one session command; the answer's `value` on success, the driver's error otherwise.
    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value> {
        let what = format!("{method} {path}");
        let url = format!("{}/session/{}{path}", self.driver_url, self.session);
        let mut request = self.http.request(method.clone(), url);
        if method == reqwest::Method::POST {
            // W3C wants a JSON object on every POST, even an empty one.
            request = request.json(&body.unwrap_or_else(|| json!({})));
        }
        let response =
            request.send().await.map_err(|e| Error::local(format!("{what}: chromedriver did not answer: {e}")))?;
        unwrap_answer(&what, response).await
    }

    async fn get(&self, path: &str) -> Result<Value> {
        self.command(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value> {
        self.command(reqwest::Method::POST, path, Some(body)).await
    }

    /// Navigate and wait for the page load.
    pub async fn goto(&self, url: &str) -> Result<()> {
        self.post("/url", json!({ "url": url })).await.map(drop)
    }

    pub async fn current_url(&self) -> Result<String> {
        Ok(self.get("/url").await?.as_str().unwrap_or_default().to_string())
    }

    /// The current DOM serialized as HTML.
    pub async fn page_source(&self) -> Result<String> {
        Ok(self.get("/source").await?.as_str().unwrap_or_default().to_string())
    }

    /// The first element matching `css`, polling until one appears (at most `self.wait`).
    pub async fn find(&self, css: &str) -> Result<Element> {
        self.poll_find(css, "/element").await
    }

    /// The first element matching `css` inside `parent`, polling like [`Browser::find`].
    pub async fn find_in(&self, parent: &Element, css: &str) -> Result<Element> {
        self.poll_find(css, &format!("/element/{}/element", parent.0)).await
    }

    async fn poll_find(&self, css: &str, path: &str) -> Result<Element> {
        let started = Instant::now();
        loop {
            match self.post(path, json!({ "using": "css selector", "value": css })).await {
                Ok(value) => return Element::from_value(&value),
                Err(e) if e.code == "no such element" && started.elapsed() < self.wait => {
                    tokio::time::sleep(POLL).await
                }
                Err(e) if e.code == "no such element" => {
                    let url = self.current_url().await.unwrap_or_default();
                    return Err(Error {
                        code: e.code,
                        message: format!(
                            "no element matches `{css}` after {:.1} s (page {url})",
                            self.wait.as_secs_f64()
                        ),
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Every element matching `css` now (no waiting; possibly none).
    pub async fn find_all(&self, css: &str) -> Result<Vec<Element>> {
        let value = self.post("/elements", json!({ "using": "css selector", "value": css })).await?;
        value.as_array().map(|all| all.iter().map(Element::from_value).collect()).unwrap_or_else(|| Ok(Vec::new()))
    }

    /// Click, retrying while another element covers it or it is not interactable yet.
    pub async fn click(&self, element: &Element) -> Result<()> {
        let started = Instant::now();
        loop {
            match self.post(&format!("/element/{}/click", element.0), json!({})).await {
                Ok(_) => return Ok(()),
                Err(e)
                    if (e.code == "element click intercepted" || e.code == "element not interactable")
                        && started.elapsed() < self.wait =>
                {
                    tokio::time::sleep(POLL).await
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Type `text` into the element (appends to what it holds; see [`Browser::clear`]).
    pub async fn send_keys(&self, element: &Element, text: &str) -> Result<()> {
        self.post(&format!("/element/{}/value", element.0), json!({ "text": text })).await.map(drop)
    }

    pub async fn clear(&self, element: &Element) -> Result<()> {
        self.post(&format!("/element/{}/clear", element.0), json!({})).await.map(drop)
    }

    /// The rendered text of the element, as a user sees it.
    pub async fn text(&self, element: &Element) -> Result<String> {
        Ok(self.get(&format!("/element/{}/text", element.0)).await?.as_str().unwrap_or_default().to_string())
    }

    /// An HTML attribute; `None` when the element does not have it.
    pub async fn attribute(&self, element: &Element, name: &str) -> Result<Option<String>> {
        let value = self.get(&format!("/element/{}/attribute/{name}", element.0)).await?;
        Ok(value.as_str().map(str::to_string))
    }

    /// A DOM property (`value`, `checked`, ...), as JSON.
    pub async fn property(&self, element: &Element, name: &str) -> Result<Value> {
        self.get(&format!("/element/{}/property/{name}", element.0)).await
    }

    /// Run `script` (a function body: use `return` for a result) in the page.
    pub async fn execute(&self, script: &str) -> Result<Value> {
        self.execute_with(script, Vec::new()).await
    }

    /// Run `script` with `arguments[i]` bound to `args` ([`Element::arg`] passes a node).
    pub async fn execute_with(&self, script: &str, args: Vec<Value>) -> Result<Value> {
        self.post("/execute/sync", json!({ "script": script, "args": args })).await
    }

    /// Poll the JavaScript expression `condition` until it is truthy (at most `self.wait`). A
    /// script error counts as "not yet" and is reported if the wait runs out.
    pub async fn wait_until(&self, condition: &str) -> Result<()> {
        let script = format!("return Boolean({condition});");
        let started = Instant::now();
        let mut last_error = String::new();
        loop {
            match self.execute(&script).await {
                Ok(Value::Bool(true)) => return Ok(()),
                Ok(_) => {}
                Err(e) if e.code == "javascript error" => last_error = format!(" (last script error: {e})"),
                Err(e) => return Err(e),
            }
            if started.elapsed() >= self.wait {
                return Err(Error::local(format!(
                    "`{condition}` was still false after {:.1} s{last_error}",
                    self.wait.as_secs_f64()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The first element matching `css` whose text contains `needle`, polling (at most
    /// `self.wait`). On timeout the error shows the texts it saw last.
    pub async fn wait_for_text(&self, css: &str, needle: &str) -> Result<Element> {
        let started = Instant::now();
        loop {
            let mut seen = Vec::new();
            for element in self.find_all(css).await? {
                match self.text(&element).await {
                    Ok(text) if text.contains(needle) => return Ok(element),
                    Ok(text) => seen.push(text),
                    // The page re-rendered between the two calls: look again.
                    Err(e) if e.code == "stale element reference" => {}
                    Err(e) => return Err(e),
                }
            }
            if started.elapsed() >= self.wait {
                let seen = if seen.is_empty() { "no element matched".to_string() } else { seen.join("\n---\n") };
                return Err(Error::local(format!(
                    "no `{css}` contained {needle:?} after {:.1} s; it showed:\n{seen}",
                    self.wait.as_secs_f64()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Result<Vec<u8>> {
        let encoded = self.get("/screenshot").await?;
        base64_decode(encoded.as_str().unwrap_or_default())
    }

    /// End the session over a plain blocking socket: `Drop` cannot await, and this must work
    /// while a test unwinds.
    fn delete_session_blocking(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect_timeout(&self.driver_addr, Duration::from_secs(2)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let request = format!(
            "DELETE /session/{} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            self.session, self.driver_addr
        );
        let mut answer = Vec::new();
        stream.write_all(request.as_bytes()).is_ok()
            && stream.read_to_end(&mut answer).is_ok()
            && answer.starts_with(b"HTTP/1.1 200")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let closed = self.session.is_empty() || self.delete_session_blocking();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        if !closed && let Some(pid) = self.chromium_pid {
            // The session did not close: end the Chromium it started ourselves (by its id).
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// The `value` of a WebDriver answer, or its `error`/`message` as an [`Error`].
async fn unwrap_answer(what: &str, response: reqwest::Response) -> Result<Value> {
    let status = response.status();
    let text = response.text().await.map_err(|e| Error::local(format!("{what}: reading the answer failed: {e}")))?;
    let mut body: Value = serde_json::from_str(&text)
        .map_err(|e| Error::local(format!("{what}: chromedriver answered {status} with non-JSON ({e}): {text}")))?;
    let value = body["value"].take();
    if status.is_success() {
        return Ok(value);
    }
    let code = value["error"].as_str().unwrap_or("unknown error").to_string();
    let message = value["message"].as_str().unwrap_or_default();
    // Chromium appends a long stack of its own symbols: the first line says it all.
    let message = message.lines().next().unwrap_or_default();
    Err(Error { message: format!("{what}: {code}: {message}"), code })
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::local(format!("cannot find a free loopback port: {e}")))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| Error::local(format!("cannot find a free port: {e}")))
}

fn scratch_dir() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("suzumio-browser-{}-{n}", std::process::id()))
}

/// Standard base64 (RFC 4648 with padding; line breaks ignored), as WebDriver sends screenshots.
pub fn base64_decode(text: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for (i, byte) in text.bytes().enumerate() {
        let sextet = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            b'\r' | b'\n' => continue,
            _ => return Err(Error::local(format!("not base64: byte {byte:#04x} at offset {i}"))),
        };
        acc = (acc << 6) | u32::from(sextet);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod base64_tests {
    use super::base64_decode;

    fn check(input: &str, expected: &[u8]) {
        assert_eq!(base64_decode(input).unwrap(), expected, "{input:?}");
    }

    #[test]
    fn empty() {
        check("", b"");
    }

    #[test]
    fn padding_of_two_one_and_none() {
        check("Zg==", b"f");
        check("Zm8=", b"fo");
        check("Zm9v", b"foo");
        check("Zm9vYmFy", b"foobar");
    }

    #[test]
    fn every_sextet_and_line_breaks() {
        check("AAEC/f7/", &[0x00, 0x01, 0x02, 0xfd, 0xfe, 0xff]);
        check("iVBO\r\nRw0KGgo=", &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a]);
        check("+/+/", &[0xfb, 0xff, 0xbf]);
    }

    #[test]
    fn foreign_bytes_are_an_error() {
        assert_eq!(base64_decode("Zm9v!").unwrap_err().message, "not base64: byte 0x21 at offset 4");
    }
}
