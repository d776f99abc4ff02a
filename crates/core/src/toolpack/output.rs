//! The one result shape of every tool and WebUI handler (controller side and runner side alike): `{output, title?, metadata?}`.
//! Anything else a pack returns is an error that names the pack, so a sloppy pack cannot hand
//! the WebUI or a model something it would misread.

use serde::Serialize;
use serde_json::{Map, Value};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub output: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl ToolOutput {
    pub fn new(title: impl Into<String>, output: impl Into<String>) -> Self {
        ToolOutput { title: Some(title.into()), output: output.into(), metadata: None }
    }

    pub fn with_metadata(mut self, metadata: Value) -> Self {
        if let Value::Object(map) = metadata {
            self.metadata = Some(map);
        }
        self
    }
}

/// Check what a pack returned. `what` names the pack and the handler for the message.
pub fn parse_output(what: &str, value: Value) -> Result<ToolOutput, String> {
    let Value::Object(mut map) = value else {
        return Err(format!("{what} returned {}, expected an object {{output, title?, metadata?}}", kind(&value)));
    };
    let output = match map.remove("output") {
        Some(Value::String(s)) => s,
        Some(other) => return Err(format!("{what} returned `output` as {}, expected a string", kind(&other))),
        None => {
            return Err(format!("{what} returned an object without `output` (expected {{output, title?, metadata?}})"));
        }
    };
    let title = match map.remove("title") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => return Err(format!("{what} returned `title` as {}, expected a string", kind(&other))),
    };
    let metadata = match map.remove("metadata") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m),
        Some(other) => return Err(format!("{what} returned `metadata` as {}, expected an object", kind(&other))),
    };
    if let Some(extra) = map.keys().next() {
        return Err(format!("{what} returned an unexpected field `{extra}` (allowed: output, title, metadata)"));
    }
    Ok(ToolOutput { title, output, metadata })
}

impl From<ToolOutput> for crate::rpc::ToolOutput {
    fn from(o: ToolOutput) -> Self {
        crate::rpc::ToolOutput { title: o.title, output: o.output, metadata: o.metadata }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shapes() {
        assert_eq!(
            parse_output("p", json!({"output": "x"})),
            Ok(ToolOutput { title: None, output: "x".into(), metadata: None })
        );
        assert!(parse_output("p", json!({"output": "x", "title": "t", "metadata": {"a": 1}})).is_ok());
        assert_eq!(
            parse_output("toolpack p", json!("x")).unwrap_err(),
            "toolpack p returned a string, expected an object {output, title?, metadata?}"
        );
        assert_eq!(
            parse_output("p", json!({"output": 3})).unwrap_err(),
            "p returned `output` as a number, expected a string"
        );
        assert_eq!(
            parse_output("p", json!({"output": "x", "extra": 1})).unwrap_err(),
            "p returned an unexpected field `extra` (allowed: output, title, metadata)"
        );
        assert!(parse_output("p", json!({"title": "t"})).is_err());
    }
}
