//! The controller-side built-in tools, each registered once in [`HANDLERS`] next to its
//! implementation: `messages.send` (with the communication policy of [`policy`] enforced),
//! `coordination.wait_for_signal` and `completion.submit` of the `core` pack (reference
//! §4.2–§4.4), `ask_user` of the `core` pack (stored and waited for by `permissions::questions`),
//! and `web.fetch` of the `web` pack. Where a built-in runs and whether it ends the
//! activation is declared in its manifest (`runsIn`, `endsActivation`); a unit test checks that
//! every controller built-in of the manifests has a handler here and every handler a manifest
//! entry. They act for a calling agent's activation, whose identity the caller (the activation
//! loop, or the support broker after its verification chain) guarantees. Inputs arrive already
//! checked against the tools' schemas.

use std::future::Future;
use std::io::Write as _;
use std::pin::Pin;

use serde_json::{Value, json};

use super::{InvokeError, ToolHost, ToolOutput, policy, web_fetch};
use crate::config::Priority;
use crate::store::{SendMessage, SignalRequest};
use crate::toolpack::ToolError;

/// Who is calling: an agent, during one of its activations.
#[derive(Clone, Debug)]
pub struct Caller {
    pub agent_id: String,
    pub activation_id: String,
}

pub type HandlerFuture<'a> = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'a>>;

/// A controller-side built-in: runs in place, for the calling agent.
pub type Handler = for<'a> fn(&'a ToolHost, &'a Caller, &'a Value) -> HandlerFuture<'a>;

/// Every controller-side built-in tool, by name.
pub const HANDLERS: &[(&str, Handler)] = &[
    ("messages.send", |host, caller, input| ready(send(host, caller, input))),
    ("coordination.wait_for_signal", |host, caller, input| ready(wait_for_signal(host, caller, input))),
    ("completion.submit", |host, caller, input| ready(submit(host, caller, input))),
    ("tool_search", |host, caller, input| {
        Box::pin(std::future::ready(super::tool_search::search(host, caller, input)))
    }),
    ("ask_user", |host, caller, input| {
        Box::pin(async move {
            let project = host.project.snapshot();
            let approvals =
                crate::permissions::approvals::Approvals { store: &host.store, audit: &host.audit, project: &project };
            crate::permissions::questions::ask(approvals, &caller.agent_id, &caller.activation_id, input).await
        })
    }),
    ("web.fetch", |host, _caller, input| {
        Box::pin(async move { web_fetch::fetch(&host.project.config.web_fetch, input).await })
    }),
];

/// The handler of a controller-side built-in tool.
pub fn handler(tool: &str) -> Option<Handler> {
    HANDLERS.iter().find(|(name, _)| *name == tool).map(|(_, h)| *h)
}

fn ready<'a>(result: Result<ToolOutput, InvokeError>) -> HandlerFuture<'a> {
    Box::pin(std::future::ready(result.map_err(ToolError::from)))
}

/// Run a controller-side built-in tool (`Rejected` when `tool` is not one).
pub async fn call(host: &ToolHost, caller: &Caller, tool: &str, input: &Value) -> Result<ToolOutput, ToolError> {
    let http_mcp = host.project.snapshot().registry.tool(tool).and_then(|(pack, _)| pack.mcp()).cloned();
    if let Some(pack) = http_mcp {
        return super::mcp_http::call(host, &pack, tool, input.clone()).await;
    }
    match handler(tool) {
        Some(run) => run(host, caller, input).await,
        None => Err(ToolError::Rejected(format!("{tool} has no controller-side handler"))),
    }
}

fn text(input: &Value, key: &str) -> Option<String> {
    input.get(key).and_then(Value::as_str).filter(|s| !s.trim().is_empty()).map(str::to_string)
}

fn send(host: &ToolHost, caller: &Caller, input: &Value) -> Result<ToolOutput, InvokeError> {
    let recipient = text(input, "recipient");
    let channel = text(input, "channel");
    let priority_text = text(input, "priority").unwrap_or_else(|| "P3".into());
    let priority = policy::priority(Some(&priority_text), Priority::P3)?;
    let route = policy::Route { recipient: recipient.as_deref(), channel: channel.as_deref(), priority };
    policy::check_message(&host.project.config.communication, &caller.agent_id, None, route)?;
    let sent = host.store.send_message(SendMessage {
        sender: caller.agent_id.clone(),
        recipient,
        channel,
        priority: Some(priority_text),
        body: text(input, "body").unwrap_or_default(),
        source_agent: Some(caller.agent_id.clone()),
        source_activation: Some(caller.activation_id.clone()),
    })?;
    Ok(ToolOutput {
        title: None,
        output: format!("Message sent and delivered: {}", sent.message_id),
        metadata: json!({ "messageId": sent.message_id }).as_object().cloned(),
        ..ToolOutput::default()
    })
}

fn wait_for_signal(host: &ToolHost, caller: &Caller, input: &Value) -> Result<ToolOutput, InvokeError> {
    let communication = &host.project.config.communication;
    let reason = text(input, "reason").unwrap_or_default();
    let coordinator = communication.coordinator_agent.as_deref();
    // No coordinator and none named: there is nobody to tell.
    let pm = text(input, "pm").or_else(|| coordinator.map(str::to_string)).unwrap_or_default();
    let is_coordinator = coordinator == Some(caller.agent_id.as_str());
    let notify = input.get("notifyPm").and_then(Value::as_bool).unwrap_or(!is_coordinator);
    let mut message_id = None;
    if notify && pm != caller.agent_id && host.project.config.agent(&pm).is_some() {
        // A wait must always be reportable to the coordinator, so that notice bypasses the
        // policy as in the reference; `pm` naming anyone else is an ordinary message to them.
        // A coordinator that is itself only waiting gets the note without being woken by it:
        // two waiting agents notifying each other would otherwise wake each other for ever.
        if coordinator != Some(pm.as_str()) {
            let route = policy::Route { recipient: Some(&pm), channel: None, priority: Priority::P2 };
            policy::check_message(communication, &caller.agent_id, None, route)?;
        }
        let message = SendMessage {
            sender: caller.agent_id.clone(),
            recipient: Some(pm.clone()),
            priority: Some("P2".into()),
            body: format!("Waiting for future signals.\n\nReason: {reason}"),
            source_agent: Some(caller.agent_id.clone()),
            source_activation: Some(caller.activation_id.clone()),
            ..Default::default()
        };
        let sent = if host.store.is_waiting(&pm)? {
            host.store.send_note(message)?
        } else {
            host.store.send_message(message)?
        };
        message_id = Some(sent.message_id);
    }
    host.store.record_signal(SignalRequest {
        kind: "coordination.wait_for_signal".into(),
        source_agent: Some(caller.agent_id.clone()),
        source_activation: Some(caller.activation_id.clone()),
        payload: json!({ "reason": reason, "notifiedAgent": message_id.as_ref().map(|_| pm.clone()), "messageId": message_id }),
        useful_effect: Some(true),
        ..Default::default()
    })?;
    let output = match &message_id {
        Some(id) => format!("Wait state recorded; notified {pm} with {id}."),
        None => "Wait state recorded. Future signals will wake the agent.".to_string(),
    };
    Ok(ToolOutput {
        title: None,
        output,
        metadata: json!({ "messageId": message_id }).as_object().cloned(),
        ..ToolOutput::default()
    })
}

fn submit(host: &ToolHost, caller: &Caller, input: &Value) -> Result<ToolOutput, InvokeError> {
    let report = text(input, "report").ok_or_else(|| InvokeError::Rejected("report is required".into()))?;
    let root = &host.project.config.root;
    let path = root.join("final-report.md");
    write_atomically(&path, format!("{}\n", report.trim()).as_bytes())
        .map_err(|e| InvokeError::Internal(format!("cannot write {}: {e}", path.display())))?;
    let shown = path.display().to_string();
    host.store.submit_project(&shown, Some(&caller.agent_id), Some(&caller.activation_id))?;
    Ok(ToolOutput {
        title: None,
        output: format!("Project submitted for user approval. Report: {shown}"),
        metadata: json!({ "reportPath": shown }).as_object().cloned(),
        ..ToolOutput::default()
    })
}

/// Temp file in the same directory, fsync, rename: a reader never sees half a report.
pub fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let temp = dir.join(format!(".{name}.tmp-{}", uuid::Uuid::new_v4().simple()));
    let result = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}
