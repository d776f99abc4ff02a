//! `suzumio run`: serve the project until a stop signal (or until idle), announcing where it is
//! served and showing live lines per agent. The terminal belongs to `main.rs` (only it prints):
//! this module writes through the [`Console`] it is given.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;

use indicatif::MultiProgress;

use crate::controller::{self, RunOptions};
use crate::store::ProjectStatus;
use crate::support::ToolHost;

use super::CliError;

/// What `suzumio run` writes to the terminal, and the live lines it writes around.
pub trait Console: Clone + Send + Sync + 'static {
    /// One line on stdout.
    fn line(&self, text: &str);
    /// One line on stderr, with the live lines put aside while it is written.
    fn note(&self, text: &str);
    /// The live lines (hidden when stderr is not a terminal).
    fn terminal(&self) -> &MultiProgress;
}

/// How `suzumio run` writes its own lines on stderr.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// For people: plain notes and live lines.
    Text,
    /// For log collectors: one JSON object per line, no live lines.
    Json,
}

/// How a run ended, for the exit code.
pub struct Served {
    /// Some activation failed during the run (already reported on the console).
    pub failed: bool,
}

/// `suzumio run <dir>`: the controller until `stop` resolves with the signal's name.
pub async fn run<C: Console>(
    dir: &Path,
    mut options: RunOptions,
    log_format: LogFormat,
    console: C,
    stop: impl Future<Output = &'static str> + Send + 'static,
) -> Result<Served, CliError> {
    options.login_code = options.token.as_ref().map(|_| crate::store::new_token());
    let link_code = options.login_code.clone();
    let live = console.clone();
    let announce = move |tools: &ToolHost, addr: SocketAddr| {
        let note = match tools.store.project().map(|p| p.status) {
            Ok(ProjectStatus::Running) => String::new(),
            Ok(ProjectStatus::Stopped) => {
                " (stopped: no agent runs until `suzumio start` or Start in the WebUI)".to_string()
            }
            Ok(other) => format!(" ({}: no agent runs until it is started)", other.as_str()),
            Err(e) => format!(" (status unknown: {e})"),
        };
        let url = browsable(addr);
        let every = if addr.ip().is_unspecified() { "on every address of this machine; " } else { "" };
        live.line(&format!("suzumio: project {}{note} is served at {url} ({every}Ctrl-C to stop)", tools.name()));
        if let Some(code) = &link_code {
            live.line(&format!("suzumio: WebUI login link (works once): {url}/login/{code}"));
        }
        // Structured logs are for a collector, not a terminal: no live lines then.
        if log_format == LogFormat::Text {
            show_progress(tools, &live);
        }
    };
    let stopping = console.clone();
    let shutdown = async move {
        let signal = stop.await;
        match log_format {
            LogFormat::Text => stopping.note(&format!("suzumio: {signal}: shutting down")),
            LogFormat::Json => tracing::info!("{signal}: shutting down"),
        }
    };
    let outcome = controller::run(dir, options, announce, shutdown).await?;
    if let Some(rejected) = rejected_note(&outcome.rejected_calls) {
        match log_format {
            LogFormat::Text => console.note(&format!("suzumio: {rejected}")),
            LogFormat::Json => tracing::warn!("{rejected}"),
        }
    }
    if let Some(idle) = &outcome.nothing_to_do {
        let kickoff = if idle.kickoff_would_send { ", or run with --kickoff to send the project's task" } else { "" };
        let hint = format!(
            "nothing to do: send a message first (suzumio send {} {} \"…\"){kickoff}",
            dir.display(),
            idle.recipient
        );
        match log_format {
            LogFormat::Text => console.note(&format!("suzumio: {hint}")),
            LogFormat::Json => tracing::warn!("{hint}"),
        }
    }
    if outcome.failed_activations.is_empty() {
        return Ok(Served { failed: false });
    }
    let failed =
        format!("{} activation(s) failed: {}", outcome.failed_activations.len(), outcome.failed_activations.join(", "));
    match log_format {
        LogFormat::Text => console.note(&format!("suzumio: {failed}")),
        LogFormat::Json => tracing::error!("{failed}"),
    }
    Ok(Served { failed: true })
}

/// `3 tool call(s) were rejected in 2 activation(s) (suzumio show act_…)`, or nothing.
fn rejected_note(rejected: &[(String, u64)]) -> Option<String> {
    let total: u64 = rejected.iter().map(|(_, n)| n).sum();
    let (first, _) = rejected.first()?;
    let more = if rejected.len() > 1 { " and the others" } else { "" };
    Some(format!(
        "{total} tool call(s) were rejected in {} activation(s): the model called a tool it may not use, one \
         that does not exist or one not loaded yet (suzumio show {first}{more} says which and why)",
        rejected.len()
    ))
}

/// The URL a browser on this machine opens for a server bound to `addr`: a server bound to
/// every address (`0.0.0.0`, `::`) is reached on loopback, which its host check accepts.
fn browsable(addr: SocketAddr) -> String {
    match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => format!("http://127.0.0.1:{}", addr.port()),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => format!("http://[::1]:{}", addr.port()),
        _ => format!("http://{addr}"),
    }
}

/// Live lines per agent on a terminal's stderr; plain lines (one per event) on stdout when the
/// live lines are hidden or stdout goes elsewhere.
fn show_progress(tools: &ToolHost, console: &impl Console) {
    use std::io::IsTerminal;
    let mut events = tools.store.subscribe();
    let agents: Vec<String> = tools.project.config.agents.iter().map(|a| a.id.clone()).collect();
    let plain = console.terminal().is_hidden() || !std::io::stdout().is_terminal();
    let mut view = crate::progress::LiveView::new(console.terminal(), &agents, plain);
    let console = console.clone();
    tokio::spawn(async move {
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                // A burst outran us: the counts miss those events, but the view goes on.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            };
            if let Some(line) = view.show(&event) {
                console.line(&line);
            }
        }
    });
}
