//! Wire types of the methods (see the table in the module above). Field names are camelCase on
//! the wire; optional fields are left out when empty.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Method names.
pub mod method {
    pub const HELLO: &str = "hello";
    pub const CALL_SUPPORT: &str = "callSupport";
    pub const RECORD_SIGNAL: &str = "recordSignal";
    pub const COMMAND_FINISHED: &str = "commandFinished";
    pub const LOAD: &str = "load";
    pub const INVOKE: &str = "invoke";
    pub const CANCEL: &str = "cancel";
    pub const PING: &str = "ping";
    pub const SHUTDOWN: &str = "shutdown";
    pub const LIST_COMMANDS: &str = "listCommands";
    pub const STOP_COMMAND: &str = "stopCommand";
    /// Runner → controller: an MCP server of the agent changed its tool list (params: the new
    /// [`McpListing`](crate::toolpack::mcp::McpListing)).
    pub const MCP_TOOLS_CHANGED: &str = "mcpToolsChanged";
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HelloParams {
    /// The runner's build (`suzumio::VERSION`), for logs.
    pub version: String,
    pub protocol: u32,
    /// The one-time token of a runner just started; empty when `resume` is given.
    pub token: String,
    /// A runner that lost its controller and reconnects: the resume token the last hello it
    /// made was answered with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HelloResult {
    pub project: String,
    pub agent_id: String,
    pub protocol: u32,
    /// What this runner presents (as `resume`) to reconnect after losing the connection; each
    /// hello replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallSupportParams {
    pub activation_id: String,
    pub toolpack_id: String,
    pub tool: String,
    #[serde(default = "empty_object")]
    pub input: Value,
}

/// What a runner pack may ask to record (reference §3.3): no `status`, no `notBefore`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SignalRequest {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub useful_effect: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordSignalParams {
    pub activation_id: String,
    pub signal: SignalRequest,
}

/// One runner pack to load: its JavaScript and the tools this agent may use from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PackSpec {
    pub id: String,
    /// The pack directory; imports may not leave it.
    pub root: String,
    /// The runner module, absolute or relative to `root`.
    pub module: String,
    /// Allowed tool names of this pack; each must have a handler.
    pub tools: Vec<String>,
    pub timeout_ms: u64,
    pub memory_mb: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadParams {
    pub project: String,
    pub agent_id: String,
    #[serde(default)]
    pub packs: Vec<PackSpec>,
    /// Allowed built-in runner tools: any of `file.read`, `file.write`, `file.patch`, `shell.exec`.
    #[serde(default)]
    pub builtin_tools: Vec<String>,
    /// The agent's writable artifacts directory as tools see it (default `/artifacts/<agentId>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts_dir: Option<String>,
    /// The stdio MCP servers to run for the agent (its MCP toolpacks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<crate::toolpack::mcp::McpServerSpec>,
    /// The agent's disk quota (`backend.docker.diskQuota`) in bytes, when one applies: the
    /// runner limits what its processes may write to it (see the runner's `quota` module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_quota_bytes: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadResult {
    pub tools: Vec<String>,
    /// What each MCP server of `mcp` listed (or why it could not).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<crate::toolpack::mcp::McpListing>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvokeParams {
    pub activation_id: String,
    pub tool: String,
    /// The model's arguments; absent or `null` reaches the handler as `{}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// Chosen by the controller; names the call in `cancel`.
    pub call_id: String,
    /// The agent's `deny` and `ask` path rules that apply to this tool, for the runner to match
    /// against the path it actually opens (links resolved). Absent from older controllers: the
    /// runner then checks nothing beyond the controller's lexical decision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_rules: Vec<PathRule>,
}

/// A path rule as the runner applies it to what it resolves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PathRule {
    pub decision: PathRuleDecision,
    /// The rule's globs, as written (relative ones are relative to `/workspace`).
    pub paths: Vec<String>,
    /// Where the rule is written, e.g. `project rule 2 (suzumio.yaml:12)`.
    pub source: String,
    /// An `ask` rule the call's own (lexical) paths met: a person approved the call already.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub asked: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PathRuleDecision {
    Deny,
    Ask,
}

impl PathRule {
    /// Whether one of the rule's globs covers the normalized tool path `path`.
    pub fn covers(&self, path: &str) -> bool {
        self.paths.iter().any(|g| path_glob_matches(g, path))
    }
}

/// A rule's path glob against a normalized tool path: relative globs are relative to
/// `/workspace`; `*` stays within one component, `**` crosses them. The controller's lexical
/// check and the runner's check of the resolved path use this one function.
pub fn path_glob_matches(glob: &str, path: &str) -> bool {
    let absolute = if glob.starts_with('/') { glob.to_string() } else { format!("/workspace/{glob}") };
    let options = glob::MatchOptions { case_sensitive: true, require_literal_separator: true, ..Default::default() };
    glob::Pattern::new(&absolute).is_ok_and(|p| p.matches_with(path, options))
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelParams {
    pub call_id: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelResult {
    /// Whether a running call with that id was found and told to stop.
    pub cancelled: bool,
}

/// The result of every tool: `{output, title?, metadata?}`, and for a rich result its content
/// blocks, structured content and whether it is an error (`output` is then the blocks' text).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolOutput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ContentBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

/// One block of a rich tool result (MCP's content blocks, the kinds Suzumio passes on).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// Base64 `data` of an image of `mimeType`.
    Image {
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    ResourceLink {
        uri: String,
        name: String,
    },
}

/// How a background command stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandStatus {
    Running,
    /// It ended by itself (any exit code, or a signal it did not get from `shell.stop`).
    Exited,
    /// It could not be started or watched.
    Failed,
    /// `shell.stop` (or the user) ended it.
    Stopped,
    /// The runner that ran it went away (its container was killed, OOM-killed, removed or
    /// exited): only the controller says this, from the store, never a runner.
    Lost,
}

impl CommandStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CommandStatus::Running => "running",
            CommandStatus::Exited => "exited",
            CommandStatus::Failed => "failed",
            CommandStatus::Stopped => "stopped",
            CommandStatus::Lost => "lost",
        }
    }
}

/// `commandFinished`: a background command of the runner's agent ended and its result was
/// not read; the controller records one `shell.command_finished` signal per `commandId`, so a
/// runner resending it (after a lost answer, or after reconnecting) changes nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandFinishedParams {
    pub command_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub command: String,
    pub status: CommandStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The last characters of its output (stdout and stderr interleaved).
    pub output_tail: String,
    /// Whether output before the tail was dropped.
    pub truncated: bool,
    pub started_at: String,
    pub ended_at: String,
    /// Why the runner stopped it by itself (`stopped` status), e.g. the disk quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandFinishedResult {
    /// The signal recorded for this command (the same one when it was already recorded).
    pub signal_id: String,
    /// False when an earlier `commandFinished` for it had already recorded the signal.
    pub recorded: bool,
}

/// One background command as `shell.list` and `listCommands` show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandInfo {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub command: String,
    pub cwd: String,
    pub status: CommandStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Bytes of output it wrote in all.
    pub output_bytes: u64,
    /// Bytes dropped from the front of the ring buffer.
    pub dropped_bytes: u64,
    /// The end of its output (for `listCommands` with `tailChars`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent_output: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListCommandsParams {
    /// Characters of recent output to include with each command (0: none).
    #[serde(default)]
    pub tail_chars: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListCommandsResult {
    pub commands: Vec<CommandInfo>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StopCommandParams {
    pub command_id: String,
}

/// `{}`: the result of `ping` and `shutdown`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Empty {}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn invoke_params_without_path_rules_still_parse_and_empty_rules_are_not_sent() {
        let old: InvokeParams =
            serde_json::from_value(json!({"activationId": "a", "tool": "file.read", "callId": "c"})).unwrap();
        assert!(old.path_rules.is_empty());
        assert_eq!(serde_json::to_value(&old).unwrap().get("pathRules"), None);
        let rule = PathRule {
            decision: PathRuleDecision::Ask,
            paths: vec!["notes/**".into()],
            source: "project rule 2 (suzumio.yaml:11)".into(),
            asked: true,
        };
        let sent = serde_json::to_value(&rule).unwrap();
        assert_eq!(
            sent,
            json!({"decision": "ask", "paths": ["notes/**"], "source": "project rule 2 (suzumio.yaml:11)", "asked": true})
        );
        assert_eq!(serde_json::from_value::<PathRule>(sent).unwrap(), rule);
        assert!(rule.covers("/workspace/notes/a/b") && !rule.covers("/workspace/notes"));
    }
}
