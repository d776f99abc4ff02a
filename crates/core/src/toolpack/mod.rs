//! Toolpacks: manifest parsing and validation, the built-in `core`/`shell`/`web` packs, the
//! registry of a project's packs, JSON Schema compilation and per-agent allowlist resolution.
//!
//! This module decides *which* tools exist and who may see them. It never runs a tool: the
//! runner (container side) and the support broker (controller side) do that.

pub mod builtin;
pub mod effects;
pub mod error;
pub mod manifest;
pub mod mcp;
pub mod mcp_session;
pub mod output;
pub mod packaged;
pub mod redact;
pub mod registry;
pub mod schema;

pub use effects::{DiskEffect, ToolEffects, Touches};
pub use error::ToolError;
pub use manifest::{Presentation, RunsIn, ToolAnnotations, ToolDefinition, WebuiEntry, WebuiKind};
pub use registry::{AgentToolset, PackSource, TOOL_SEARCH, Toolpack, ToolpackRegistry};

/// The key under which a model's tool-call arguments that were not valid JSON are passed on
/// (`{"__invalid_json": "<text>"}`), so the call pipeline can answer the model with the text.
pub const INVALID_JSON_KEY: &str = "__invalid_json";

/// Tool names: 1–128 characters of `A-Za-z0-9_.-`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// The model-facing form of a tool name: every run of characters outside `[A-Za-z0-9_-]` becomes
/// one `_` (`messages.send` → `messages_send`), as the reference's runner does (§4). The model
/// providers name tools so, and the store reads a model's calls back by it.
pub fn sanitize_tool_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_run = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('_');
            in_run = true;
        }
    }
    out
}

/// Toolpack ids and WebUI entry ids: `^[A-Za-z0-9_.-]+$`.
pub fn is_valid_pack_id(id: &str) -> bool {
    // `.` and `..` would name a directory other than the pack's own under /toolpacks and state.
    !id.is_empty()
        && id != "."
        && id != ".."
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_name_charset_and_length() {
        assert!(is_valid_tool_name("review.summarize"));
        assert!(is_valid_tool_name(&"a".repeat(128)));
        assert!(!is_valid_tool_name(&"a".repeat(129)));
        assert!(!is_valid_tool_name(""));
        assert!(!is_valid_tool_name("review summarize"));
        assert!(!is_valid_tool_name("review/summarize"));
    }

    #[test]
    fn sanitizing_collapses_runs() {
        assert_eq!(sanitize_tool_name("messages.send"), "messages_send");
        assert_eq!(sanitize_tool_name("a..b/c"), "a_b_c");
        assert_eq!(sanitize_tool_name("ok_name-1"), "ok_name-1");
        assert_eq!(sanitize_tool_name("ünï.code"), "_n_code");
    }
}
