//! What decides a call that no rule matched: the agent's `permissionMode`, the tool's
//! `requiresApproval` and annotations. And how risky a call looks.
//!
//! - `default`: `requiresApproval` asks; everything else runs. Annotations do not ask here, so a
//!   project written before permissions existed keeps running unattended; to be asked before
//!   writes, add `ask` rules or choose `auto`.
//! - `auto`: read-only tools (`readOnlyHint`) run; `requiresApproval`, destructive tools and
//!   tools that say nothing about themselves ask.
//! - `full-access`: no ordinary asks (`requiresApproval` included); `deny` rules, hooks'
//!   denials and the schema still apply.
//!
//! In every mode the coordination tools (those whose manifest entry declares
//! `effects.coordination`: messaging, waiting, submitting) run: they only reach other agents and the user, through the
//! communication policy, and an agent that could not use them could not finish its work.

use super::rules::Subject;
use super::{Behavior, Call, Decision, ReasonCode, Risk};
use crate::config::PermissionMode;
use crate::toolpack::ToolDefinition;

/// The tools that only reach agents and the user (declared `effects.coordination`).
pub fn is_coordination_tool(def: &ToolDefinition) -> bool {
    def.effects.coordination
}

pub fn default_decision(mode: PermissionMode, call: &Call<'_>, _subject: &Subject, risk: Risk) -> Decision {
    let def = call.def;
    let a = &def.annotations;
    // The code follows from the source: the tool's markings, or the mode itself.
    let decision = |behavior, source: &str, reason: String| {
        let code = match source {
            "coordination tool" => ReasonCode::Coordination,
            "requiresApproval" | "destructiveHint" | "readOnlyHint" => ReasonCode::Annotation,
            _ => ReasonCode::ModeDefault,
        };
        Decision::new(behavior, source, reason, risk, code)
    };
    if is_coordination_tool(def) {
        return decision(
            Behavior::Allow,
            "coordination tool",
            format!("{} only reaches agents and the user", call.tool),
        );
    }
    match mode {
        PermissionMode::FullAccess => decision(
            Behavior::Allow,
            "mode full-access",
            format!("{} runs without review in full-access mode", call.tool),
        ),
        PermissionMode::Default if def.requires_approval => {
            decision(Behavior::Ask, "requiresApproval", format!("{} is marked requiresApproval", call.tool))
        }
        PermissionMode::Default => {
            decision(Behavior::Allow, "mode default", format!("no rule asks for {} and it is not marked", call.tool))
        }
        PermissionMode::Auto if def.requires_approval => {
            decision(Behavior::Ask, "requiresApproval", format!("{} is marked requiresApproval", call.tool))
        }
        PermissionMode::Auto if a.destructive_hint == Some(true) => decision(
            Behavior::Ask,
            "destructiveHint",
            format!("{} is marked destructive, and auto mode asks before destructive calls", call.tool),
        ),
        PermissionMode::Auto if a.read_only_hint == Some(true) => decision(
            Behavior::Allow,
            "readOnlyHint",
            format!("{} is read-only, and auto mode runs read-only calls", call.tool),
        ),
        PermissionMode::Auto if def.server_annotations.as_ref().is_some_and(|c| c.read_only_hint == Some(true)) => {
            decision(
                Behavior::Ask,
                "mode auto",
                format!(
                    "{} claims to be read-only, but the claim comes from an MCP server that is not trusted, so auto \
                     mode does not take it and asks; to trust the server's annotations, add `trusted: true` to its \
                     `- mcp:` entry in tools.toolpacks (or allow the tool with a rule)",
                    call.tool
                ),
            )
        }
        PermissionMode::Auto => decision(
            Behavior::Ask,
            "mode auto",
            format!("{} is not marked read-only, and auto mode asks for calls it cannot classify", call.tool),
        ),
    }
}

/// `high` for shell lines, destructive tools and tools that say nothing about themselves;
/// `low` for read-only and coordination tools; `medium` for the rest (they change something,
/// and say it is not destructive).
pub fn risk(def: &ToolDefinition, subject: &Subject) -> Risk {
    let a = &def.annotations;
    if a.read_only_hint == Some(true) && !matches!(subject, Subject::Shell(_)) || is_coordination_tool(def) {
        Risk::Low
    } else if matches!(subject, Subject::Shell(_))
        || a.destructive_hint == Some(true)
        || (a.read_only_hint.is_none() && a.destructive_hint.is_none())
    {
        Risk::High
    } else {
        Risk::Medium
    }
}
