//! `suzumio send` (a message from the user) and `suzumio signals` (the signal listing).

use std::path::Path;

use crate::clock::iso;
use crate::config::Priority;
use crate::store::SignalStatus;

use super::{CliError, Output, render_table, to_json, unknown_agent};

/// `suzumio send <dir> <recipient> [--priority P] <body…> [--json]`: a message from the user.
pub fn send(dir: &Path, recipient: &str, priority: Priority, body: &str, as_json: bool) -> Result<Output, CliError> {
    let tools = crate::controller::open(dir)?;
    if !recipient.starts_with('#') && recipient != "user" && tools.project.config.agent(recipient).is_none() {
        return Err(unknown_agent(&tools.project.config, recipient));
    }
    let (recipient, channel) = if recipient.starts_with('#') {
        (None, Some(recipient.to_string()))
    } else {
        (Some(recipient.to_string()), None)
    };
    let sent = tools.store.send_message(crate::store::SendMessage {
        sender: "user".into(),
        recipient,
        channel,
        priority: Some(priority.to_string()),
        body: body.to_string(),
        source_agent: None,
        source_activation: None,
    })?;
    if as_json {
        return Ok(to_json(&sent).into());
    }
    Ok(format!("sent {} ({} signal(s))\n", sent.message_id, sent.signal_ids.len()).into())
}

/// `suzumio signals <dir> [--agent ID] [--status S] [--limit N] [--json]`.
pub fn signals(
    dir: &Path,
    agent: Option<&str>,
    status: Option<SignalStatus>,
    limit: usize,
    as_json: bool,
) -> Result<Output, CliError> {
    let tools = crate::controller::open_read_only(dir)?;
    if let Some(a) = agent
        && tools.project.config.agent(a).is_none()
    {
        return Err(unknown_agent(&tools.project.config, a));
    }
    let query = crate::store::SignalQuery {
        target_agent: agent.map(str::to_string),
        status,
        limit: Some(limit),
        kind: None,
        before_id: None,
    };
    let signals = tools.store.list_signals(&query)?;
    if as_json {
        return Ok(to_json(&signals).into());
    }
    let rows: Vec<[String; 7]> = signals
        .iter()
        .map(|s| {
            let target = s.target_agent.clone().or_else(|| s.target_channel.clone()).unwrap_or_else(|| "-".into());
            [
                s.id.clone(),
                s.kind.clone(),
                s.priority.to_string(),
                s.status.as_str().to_string(),
                target,
                iso(s.created_at),
                s.not_before.map(iso).unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    Ok(render_table(["SIGNAL", "KIND", "PRI", "STATUS", "TARGET", "CREATED", "NOT BEFORE"], &rows).into())
}
