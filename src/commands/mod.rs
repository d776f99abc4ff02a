//! What each CLI command does. Commands load the project, compute, and return their output as
//! text (or JSON text) plus warnings, or a [`CliError`] that knows its exit code; `main.rs`
//! parses the arguments, calls one function per command, prints and exits. `--json` shapes are
//! the structs of [`views`]. One file per command group: [`check`] (`check`, `tools`),
//! [`project`] (`status`, `start`/`stop`, `approve`, `resume`, `tick`), [`signals`] (`send`,
//! `signals`), [`tool`] (`tool call`, `ui`), [`permissions`] (`permissions explain|list|add|rm|mode`, `audit`),
//! [`activity`] (activations, `show`, `logs [-f]`, `history`, `cancel`, `wake`), [`approvals`],
//! [`switches`] (`tools on|off`), [`questions`] (`questions`, `answer`),
//! [`mcp`], [`run`], [`image`] and [`scaffold`] (`init`, `toolpack new`).

mod activity;
pub mod views;

pub use activity::{
    CANCELLED_BY_USER, LogFilter, WAKE_BODY, activations, cancel, follow_logs, history, logs, show, wake,
};

pub mod approvals;
mod check;
pub mod image;
pub mod mcp;
mod permissions;
mod project;
pub mod questions;
pub mod run;
pub mod scaffold;
mod signals;
mod switches;
mod tool;

pub use check::{check, tools};
pub use permissions::{
    audit, permissions_add, permissions_explain, permissions_list, permissions_mode, permissions_rm,
};
pub use project::{approve, resume, set_status, status, tick};
pub use signals::{send, signals};
pub use switches::switch as switch_tools;
pub use tool::{tool_call, ui};

use std::fmt::Write as _;

use serde_json::json;

use crate::backend::BackendError;
use crate::config::{Diagnostic, InvalidInput, Priority};
use crate::controller::RunError;
use crate::project::Project;
use crate::store::StoreError;
use crate::support::InvokeError;

pub struct Output {
    pub stdout: String,
    pub warnings: Vec<Diagnostic>,
}

impl From<String> for Output {
    fn from(stdout: String) -> Self {
        Output { stdout, warnings: Vec::new() }
    }
}

/// Why a command failed. [`CliError::exit_code`]: 2 when the user's input (arguments, config,
/// the project's state they asked to change) is wrong, 1 for failures at run time.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The config or a manifest is invalid; rendered as its own `error:` lines.
    #[error("{0}")]
    Invalid(#[from] InvalidInput),
    /// An argument or request the user must change.
    #[error("{0}")]
    Input(String),
    /// Loading the project, opening its state, serving or starting runners failed.
    #[error("{0}")]
    Run(#[from] RunError),
    /// A WebUI entry or a store request was refused (exit 2) or failed (exit 1).
    #[error("{0}")]
    Invoke(#[from] InvokeError),
    #[error("{0}")]
    Backend(#[from] BackendError),
    /// A tool call that did not produce an output: refused (exit 2) or failed (exit 1).
    #[error("{0}")]
    Tool(#[from] crate::toolpack::ToolError),
    /// A failure at run time.
    #[error("{0}")]
    Failed(String),
}

impl From<crate::support::start::StartError> for CliError {
    fn from(e: crate::support::start::StartError) -> Self {
        CliError::Run(e.into())
    }
}

/// The store's own split: what the caller can fix is refused, the rest failed.
impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        CliError::Invoke(e.into())
    }
}

impl CliError {
    /// What kind of failure, as `--json` error objects name it.
    pub fn kind(&self) -> &'static str {
        match self {
            CliError::Invalid(_) | CliError::Run(RunError::Invalid(_)) => "invalid_config",
            CliError::Tool(e) => e.kind(),
            _ if self.exit_code() == 2 => "invalid_input",
            _ => "failed",
        }
    }

    /// A line that helps fix the input, printed under the error: the allowed values of an enum
    /// that arrived in JSON (where clap could not check it).
    pub fn hint(&self) -> Option<String> {
        // Config diagnostics carry their own hints.
        if self.is_rendered() {
            return None;
        }
        // A schema's failure on a `priority` field (the only priority a user types in JSON).
        let priority = match self {
            CliError::Invoke(InvokeError::InvalidInput(errors)) => errors.iter().any(|e| e.pointer == "/priority"),
            _ => false,
        };
        priority.then(|| {
            let all: Vec<&str> = Priority::ALL.iter().map(|p| p.as_str()).collect();
            format!("hint: a priority is one of {}", all.join(", "))
        })
    }

    /// The `--json` error object.
    pub fn to_json(&self) -> String {
        let message = match self {
            CliError::Invalid(i) | CliError::Run(RunError::Invalid(i)) => {
                crate::config::diag::sorted(&i.0.errors).iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n")
            }
            other => other.to_string(),
        };
        to_json(&views::JsonError {
            error: views::ErrorBody { message, kind: self.kind(), exit_code: self.exit_code() },
        })
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Invalid(_) | CliError::Input(_) => 2,
            CliError::Run(e) => e.exit_code(),
            CliError::Invoke(InvokeError::Handler(_) | InvokeError::Internal(_) | InvokeError::DiskFull(_)) => 1,
            CliError::Invoke(_) => 2,
            CliError::Tool(crate::toolpack::ToolError::Rejected(_)) => 2,
            CliError::Backend(_) | CliError::Tool(_) | CliError::Failed(_) => 1,
        }
    }

    /// Config diagnostics are already `error: ...` lines; everything else is one message.
    pub fn is_rendered(&self) -> bool {
        matches!(self, CliError::Invalid(_) | CliError::Run(RunError::Invalid(_)))
    }
}

/// Pretty JSON and a newline: how every `--json` prints.
fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
}

/// `Unknown agent: wirter (did you mean `writer`? agents: pm, writer)`: exit 2.
pub(crate) fn unknown_agent(config: &crate::config::ProjectConfig, id: &str) -> CliError {
    let known: Vec<&str> = config.agents.iter().map(|a| a.id.as_str()).collect();
    let hint =
        crate::config::diag::did_you_mean(id, known.iter().copied()).map(|h| format!("{h} ")).unwrap_or_default();
    CliError::Input(format!("Unknown agent: {id} ({hint}agents: {})", known.join(", ")))
}

/// `Unknown tool: file.raed (did you mean `file.read`?)`: exit 2.
fn unknown_tool(project: &Project, name: &str) -> CliError {
    let hint = crate::config::diag::did_you_mean(name, project.registry.tools().map(|(_, t)| t.name.as_str()))
        .map(|h| format!(" ({h})"))
        .unwrap_or_default();
    CliError::Input(format!("Unknown tool: {name}{hint} (suzumio tools lists them)"))
}

/// The input argument of `ui` and `tool call`: a JSON object, `{}` when left out.
fn json_input(input: Option<&str>) -> Result<serde_json::Value, CliError> {
    match input {
        None => Ok(json!({})),
        Some(text) => {
            serde_json::from_str(text).map_err(|e| CliError::Input(format!("the input is not valid JSON: {e}")))
        }
    }
}

fn render_table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == N {
                text.push_str(cell);
            } else {
                let _ = write!(text, "{cell:<width$}  ", width = widths[i]);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// The first sentence or line of a text, cut at `max` characters.
fn first_line(text: &str, max: usize) -> String {
    let line = text.trim().lines().next().unwrap_or("");
    let sentence = line.find(". ").map_or(line, |i| &line[..=i]);
    if sentence.chars().count() <= max {
        sentence.to_string()
    } else {
        let cut: String = sentence.chars().take(max - 1).collect();
        format!("{}…", cut.trim_end())
    }
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() { "none".to_string() } else { items.join(", ") }
}
