//! Wire types of the methods (see the table in the module above). Field names are camelCase on
//! the wire; optional fields are left out when empty.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Method names.
pub mod method {
    pub const HELLO: &str = "hello";
    pub const CALL_SUPPORT: &str = "callSupport";
    pub const RECORD_SIGNAL: &str = "recordSignal";
    pub const LOAD: &str = "load";
    pub const INVOKE: &str = "invoke";
    pub const CANCEL: &str = "cancel";
    pub const PING: &str = "ping";
    pub const SHUTDOWN: &str = "shutdown";
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HelloParams {
    /// The runner's build (`suzumio::VERSION`), for logs.
    pub version: String,
    pub protocol: u32,
    pub token: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HelloResult {
    pub project: String,
    pub agent_id: String,
    pub protocol: u32,
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
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadResult {
    pub tools: Vec<String>,
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

/// `{}`: the result of `ping` and `shutdown`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Empty {}

fn empty_object() -> Value {
    Value::Object(Map::new())
}
