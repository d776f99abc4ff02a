//! The browser tests' WebDriver side: it starts Debian's `chromedriver` on a free loopback port,
//! opens one headless Chromium session through `fantoccini` (which the [`Browser`] derefs to) and
//! adds the waits the tests need: find with a wait, a click that waits out a covering element, a
//! JavaScript condition, an element whose text contains a needle.
//!
//! It never skips: a missing `chromedriver` or `chromium` is an error that says how to install
//! them. Dropping a [`Browser`] closes the session (which ends Chromium), stops chromedriver and
//! removes the profile.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::error::{CmdError, ErrorStatus};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// Debian's Chromium, as `scripts/setup.sh` installs it.
pub const CHROMIUM: &str = "/usr/bin/chromium";
const MISSING: &str = "run scripts/setup.sh (installs chromium and chromium-driver)";
const POLL: Duration = Duration::from_millis(100);
/// How long chromedriver gets to answer `/status` after it was spawned.
const DRIVER_READY: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A WebDriver command failed (the W3C error is in it: `e.is_javascript_error()`, ...).
    #[error(transparent)]
    Driver(#[from] CmdError),
    /// The browser did not start, or a wait ran out; the message says what was seen.
    #[error("{0}")]
    Local(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// An element as an argument of `execute` (it arrives in JavaScript as the node).
pub fn arg(element: &Element) -> Value {
    serde_json::to_value(element).unwrap_or(Value::Null)
}

/// One headless Chromium session behind its own chromedriver process.
pub struct Browser {
    client: Client,
    driver: DriverProcess,
    driver_url: String,
    session: Option<String>,
    chromium_pid: Option<i32>,
    scratch: tempfile::TempDir,
    /// How long `find`, `click`, `wait_until` and `wait_for_text` poll before they give up.
    pub patience: Duration,
}

impl std::ops::Deref for Browser {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl Browser {
    /// Start `chromedriver` from PATH and open a session.
    pub async fn start() -> Result<Browser> {
        Browser::start_with_driver("chromedriver").await
    }

    /// Start the given chromedriver program and open a headless Chromium session in a fresh
    /// profile.
    pub async fn start_with_driver(program: &str) -> Result<Browser> {
        let scratch = tempfile::Builder::new()
            .prefix("suzumio-browser-")
            .tempdir()
            .map_err(|e| Error::Local(format!("cannot create a scratch directory: {e}")))?;
        let log = scratch.path().join("chromedriver.log");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| Error::Local(format!("cannot find a free loopback port: {e}")))?
            .port();
        let driver = Command::new(program)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Error::Local(format!("chromedriver not found: {MISSING}")),
                _ => Error::Local(format!("cannot start chromedriver ({program}): {e}")),
            })?;
        let driver_url = format!("http://127.0.0.1:{port}");
        let mut driver = DriverProcess(driver);
        if !std::path::Path::new(CHROMIUM).is_file() {
            return Err(Error::Local(format!("chromium not found at {CHROMIUM}: {MISSING}")));
        }
        wait_for_driver(&driver_url, &mut driver, &log).await?;

        // As root on a machine whose network is closed: no sandbox, and nothing that phones home
        // (its refused connections would slow every start).
        let profile = format!("--user-data-dir={}", scratch.path().join("profile").display());
        let capabilities = serde_json::Map::from_iter([
            ("browserName".to_string(), json!("chrome")),
            (
                "goog:chromeOptions".to_string(),
                json!({
                    "binary": CHROMIUM,
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
                        profile,
                    ],
                }),
            ),
        ]);
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&driver_url)
            .await
            .map_err(|e| Error::Local(format!("Chromium did not start: {e}\nchromedriver log:\n{}", log_tail(&log))))?;
        let chromium_pid = client
            .capabilities()
            .and_then(|c| c.get("goog:processID"))
            .and_then(Value::as_i64)
            .and_then(|p| i32::try_from(p).ok());
        let session = client.session_id().await?;
        Ok(Browser { client, driver, driver_url, session, chromium_pid, scratch, patience: Duration::from_secs(10) })
    }

    /// The first element matching `css`, polling until one appears (at most `self.patience`).
    pub async fn find(&self, css: &str) -> Result<Element> {
        self.poll_find(None, css).await
    }

    /// The first element matching `css` inside `parent`, polling like [`Browser::find`].
    pub async fn find_in(&self, parent: &Element, css: &str) -> Result<Element> {
        self.poll_find(Some(parent), css).await
    }

    async fn poll_find(&self, parent: Option<&Element>, css: &str) -> Result<Element> {
        let started = Instant::now();
        loop {
            let found = match parent {
                Some(parent) => parent.find(Locator::Css(css)).await,
                None => self.client.find(Locator::Css(css)).await,
            };
            match found {
                Err(e) if e.is_no_such_element() && started.elapsed() < self.patience => tokio::time::sleep(POLL).await,
                Err(e) if e.is_no_such_element() => {
                    let url = self.client.current_url().await.map(String::from).unwrap_or_default();
                    return Err(Error::Local(format!(
                        "no element matches `{css}` after {:.1} s (page {url})",
                        self.patience.as_secs_f64()
                    )));
                }
                found => return Ok(found?),
            }
        }
    }

    /// Click, retrying while another element covers it or it is not interactable yet.
    pub async fn click(&self, element: &Element) -> Result<()> {
        let started = Instant::now();
        loop {
            match element.click().await {
                Err(CmdError::Standard(e))
                    if matches!(
                        e.error,
                        ErrorStatus::ElementClickIntercepted | ErrorStatus::ElementNotInteractable
                    ) && started.elapsed() < self.patience =>
                {
                    tokio::time::sleep(POLL).await
                }
                done => return Ok(done?),
            }
        }
    }

    /// Find `css` and click it. The page re-renders as events arrive, so an element found a
    /// moment ago may be gone: then it is found again (at most `self.patience`).
    pub async fn click_css(&self, css: &str) -> Result<()> {
        let started = Instant::now();
        loop {
            let element = self.find(css).await?;
            match self.click(&element).await {
                Err(Error::Driver(CmdError::Standard(e)))
                    if e.error == ErrorStatus::StaleElementReference && started.elapsed() < self.patience =>
                {
                    tokio::time::sleep(POLL).await
                }
                done => return done,
            }
        }
    }

    /// Poll the JavaScript expression `condition` until it is truthy (at most `self.patience`).
    /// A script error counts as "not yet" and is reported if the wait runs out.
    pub async fn wait_until(&self, condition: &str) -> Result<()> {
        let script = format!("return Boolean({condition});");
        let started = Instant::now();
        let mut last_error = String::new();
        loop {
            match self.client.execute(&script, Vec::new()).await {
                Ok(Value::Bool(true)) => return Ok(()),
                Ok(_) => {}
                Err(e) if e.is_javascript_error() => last_error = format!(" (last script error: {e})"),
                Err(e) => return Err(e.into()),
            }
            if started.elapsed() >= self.patience {
                return Err(Error::Local(format!(
                    "`{condition}` was still false after {:.1} s{last_error}",
                    self.patience.as_secs_f64()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The first element matching `css` whose text contains `needle`, polling (at most
    /// `self.patience`). On timeout the error shows the texts it saw last.
    pub async fn wait_for_text(&self, css: &str, needle: &str) -> Result<Element> {
        self.wait_for_text_of(css, needle).await.map(|(element, _)| element)
    }

    /// [`wait_for_text`](Self::wait_for_text), with the text it matched: read in the same look,
    /// so a page that re-renders right after cannot make it stale.
    pub async fn wait_for_text_of(&self, css: &str, needle: &str) -> Result<(Element, String)> {
        let started = Instant::now();
        loop {
            let mut seen = Vec::new();
            for element in self.client.find_all(Locator::Css(css)).await? {
                match element.text().await {
                    Ok(text) if text.contains(needle) => return Ok((element, text)),
                    Ok(text) => seen.push(text),
                    // The page re-rendered between the two calls: look again.
                    Err(e) if e.is_stale_element_reference() => {}
                    Err(e) => return Err(e.into()),
                }
            }
            if started.elapsed() >= self.patience {
                let seen = if seen.is_empty() { "no element matched".to_string() } else { seen.join("\n---\n") };
                return Err(Error::Local(format!(
                    "no `{css}` contained {needle:?} after {:.1} s; it showed:\n{seen}",
                    self.patience.as_secs_f64()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // `Drop` cannot await, and fantoccini's own close needs the test's runtime, which may be
        // unwinding: end the session with a blocking request from a thread of its own.
        let closed = self.session.as_ref().is_none_or(|id| {
            let url = format!("{}/session/{id}", self.driver_url);
            std::thread::spawn(move || {
                suzumio::support::web_fetch::tls_provider();
                reqwest::blocking::Client::builder()
                    .no_proxy()
                    .timeout(Duration::from_secs(10))
                    .build()
                    .and_then(|http| http.delete(url).send())
                    .is_ok_and(|r| r.status().is_success())
            })
            .join()
            .unwrap_or(false)
        });
        if !closed && let Some(pid) = self.chromium_pid {
            // The session did not close: end the Chromium it started ourselves (by its id).
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// The chromedriver process, killed on drop (also when starting the session fails).
struct DriverProcess(Child);

impl Drop for DriverProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_for_driver(url: &str, driver: &mut DriverProcess, log: &std::path::Path) -> Result<()> {
    suzumio::support::web_fetch::tls_provider();
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| Error::Local(format!("cannot build the HTTP client: {e}")))?;
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = driver.0.try_wait() {
            return Err(Error::Local(format!(
                "chromedriver exited ({status}) before it was ready; its log:\n{}",
                log_tail(log)
            )));
        }
        if let Ok(response) = http.get(format!("{url}/status")).send().await
            && let Ok(body) = response.json::<Value>().await
            && body["value"]["ready"] == true
        {
            return Ok(());
        }
        if started.elapsed() > DRIVER_READY {
            return Err(Error::Local(format!(
                "chromedriver did not become ready on {url} within {} s; its log:\n{}",
                DRIVER_READY.as_secs(),
                log_tail(log)
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The last lines of chromedriver's log, for error messages.
fn log_tail(log: &std::path::Path) -> String {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
