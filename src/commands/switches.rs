//! `suzumio tools on|off <dir> <agent> <tool|group:NAME>…`: switch tools of one agent's
//! allowlist off, or back on, while the project runs (or before it does). It writes to the
//! project's store like the API does, so a serving `suzumio run` sees it at the agent's next
//! request and call; what may be switched, and the audit line, are `catalog::switch`'s.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::{CliError, Output, unknown_agent};
use crate::catalog::{SwitchError, SwitchReport};
use crate::permissions::approvals::cli_user;

/// `tools on|off`.
pub fn switch(dir: &Path, agent: &str, names: &[String], enabled: bool, json: bool) -> Result<Output, CliError> {
    let host = crate::controller::open(dir)?;
    let report = crate::catalog::switch(&host, agent, names, enabled, &cli_user());
    // The audit line is written by a thread; this process ends right after.
    if !host.audit.flush(Duration::from_secs(5)) {
        tracing::warn!("the permission audit could not be written within 5 s");
    }
    let report = report.map_err(|e| match e {
        SwitchError::UnknownAgent { .. } => unknown_agent(&host.project.config, agent),
        SwitchError::NotAllowed(message) => CliError::Input(message),
        SwitchError::Store(e) => e.into(),
    })?;
    if json {
        return Ok(format!("{}\n", serde_json::to_string_pretty(&report).unwrap_or_default()).into());
    }
    Ok(render(&report).into())
}

fn render(report: &SwitchReport) -> String {
    let word = if report.enabled { "on" } else { "off" };
    let mut out = String::new();
    for named in &report.switched {
        let what = if named.name.starts_with(crate::catalog::GROUP_PREFIX) {
            format!("{} ({})", named.name, named.tools.join(", "))
        } else {
            named.name.clone()
        };
        if named.changed.is_empty() {
            let _ = writeln!(out, "{what}: already {word} for {}", report.agent);
        } else {
            let _ = writeln!(out, "switched {word} for {} by {}: {what}", report.agent, report.by);
        }
    }
    out
}
