//! `suzumio ui` and `suzumio tool call`: a WebUI entry or one tool run by hand, through the same
//! path the WebUI and the model loop take.

use std::fmt::Write as _;
use std::path::Path;

use crate::config::BackendKind;
use crate::support::InvokeError;

use super::{CliError, Output, json_input, to_json, unknown_agent, unknown_tool};

/// `suzumio ui <dir> <pack>/<entry> [json]`: run a WebUI entry and render its result.
pub async fn ui(dir: &Path, target: &str, input: Option<&str>, as_json: bool) -> Result<Output, CliError> {
    let Some((pack, entry)) = target.split_once('/') else {
        return Err(CliError::Input(format!("`{target}` is not <toolpack>/<entry> (e.g. core/project.stats)")));
    };
    let input = json_input(input)?;
    let tools = crate::controller::open(dir)?;
    let project = tools.project.snapshot();
    let registry = &project.registry;
    let suggest = |name: &str, known: Vec<&str>| {
        crate::config::diag::did_you_mean(name, known).map(|h| format!(" ({h})")).unwrap_or_default()
    };
    match registry.pack(pack) {
        None => {
            let known = registry.packs().iter().map(|p| p.id.as_str()).collect();
            return Err(CliError::Invoke(InvokeError::Rejected(format!(
                "Unknown toolpack: {pack}{}",
                suggest(pack, known)
            ))));
        }
        Some(p) if !p.webui.iter().any(|e| e.id == entry) => {
            let known = p.webui.iter().map(|e| e.id.as_str()).collect();
            return Err(CliError::Invoke(InvokeError::Rejected(format!(
                "Unknown WebUI tool entry {entry} in {pack}{}",
                suggest(entry, known)
            ))));
        }
        Some(_) => {}
    }
    // A served project's packs hold their state in the serving controller: it runs the entry.
    let output = match crate::support::serving::serving(&tools.project.config.root)
        .map_err(|e| CliError::Failed(format!("finding who serves the project: {e}")))?
    {
        Some((holder, socket)) => {
            crate::support::control::Delegated::new(holder, socket).invoke_webui(pack, entry, input).await?
        }
        None => tools.invoke_webui(pack, entry, input).await?,
    };
    if as_json {
        return Ok(to_json(&output).into());
    }
    let mut out = String::new();
    if let Some(title) = &output.title {
        let _ = writeln!(out, "{title}");
    }
    if let Some(metrics) = output.metadata.as_ref().and_then(|m| m.get("metrics")).and_then(|m| m.as_array()) {
        for m in metrics {
            let value = match &m["value"] {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let _ = writeln!(out, "  {}: {value}", m["label"].as_str().unwrap_or(""));
        }
    }
    let _ = writeln!(out, "{}", output.output);
    Ok(out.into())
}

/// `suzumio tool call <dir> --agent ID <tool> [json]`: one tool through the real path, inside a
/// short activation of its own (so the call is recorded like any other). Exit 1 on a tool error.
pub async fn tool_call(
    dir: &Path,
    agent: &str,
    tool: &str,
    input: Option<&str>,
    backend: Option<BackendKind>,
    as_json: bool,
) -> Result<Output, CliError> {
    let input = json_input(input)?;
    let tools = crate::controller::open(dir)?;
    if tools.project.config.agent(agent).is_none() {
        return Err(unknown_agent(&tools.project.config, agent));
    }
    let project = tools.project.snapshot();
    if project.registry.tool(tool).is_none() {
        return Err(unknown_tool(&project, tool));
    }
    // Refused input is refused before a runner (or a Docker engine) is asked for; the path
    // below says the same for calls that get that far.
    if tools.project.config.agent(agent).is_some_and(|a| !a.tools.allows(tool)) {
        return Err(crate::toolpack::ToolError::Rejected(format!("Tool not allowed for {agent}: {tool}")).into());
    }
    let kind = backend.unwrap_or(tools.project.config.backend.kind);
    // While `run` serves the project, it runs the call (in the agent's one container).
    let calls = crate::calls::cli::CliCalls::new(&tools, kind, "tool call")
        .map_err(|e| CliError::Failed(format!("finding who serves the project: {e}")))?;
    // A busy agent is a failure at run time (try again later), not something to fix in the input.
    let activation = tools
        .store
        .start_activation(agent, &format!("suzumio tool call {tool}"), &[])
        .map_err(|e| CliError::Failed(e.to_string()))?;
    let result = calls.execute(agent, &activation.id, tool, input).await;
    // The activation only frames the call; a failing tool is recorded on the tool call, and must
    // not leave the agent `failed`.
    let framed = tools.store.finish_activation(&activation.id, crate::store::ActivationOutcome::Completed, None, None);
    calls.shutdown().await;
    if !tools.audit.flush_async(crate::controller::AUDIT_FLUSH).await {
        tracing::warn!("the permission audit was not written within {} s", crate::controller::AUDIT_FLUSH.as_secs());
    }
    framed.map_err(|e| CliError::Failed(format!("recording the end of the call's activation: {e}")))?;
    let output = result?;
    if as_json {
        return Ok(to_json(&output).into());
    }
    let mut out = String::new();
    if let Some(title) = &output.title {
        let _ = writeln!(out, "{title}");
    }
    let _ = writeln!(out, "{}", output.output);
    Ok(out.into())
}
