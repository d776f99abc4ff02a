//! The one result shape of every tool and WebUI handler (controller side and runner side alike):
//! `{output, title?, metadata?}`, or a rich result `{content: [...], isError?, structuredContent?}`
//! (MCP's shape: text, image and resource-link blocks). Anything else a pack returns is an error
//! that names the pack, so a sloppy pack cannot hand the WebUI or a model something it would
//! misread. A rich result gets `output` too, the text of its blocks, so everything that shows a
//! result as text keeps working.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::rpc::ContentBlock;

/// At most this many content blocks in one result.
pub const MAX_CONTENT_BLOCKS: usize = 8;
/// At most this many bytes per image (decoded), the largest image the model providers take.
pub const MAX_IMAGE_BYTES: usize = 5 << 20;
/// At most this many bytes of a whole rich result as JSON: it must fit the runner's 8 MiB frame.
pub const MAX_RESULT_BYTES: usize = 7 << 20;
/// The image types the model providers take.
pub const IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];

/// What a result over a size limit is told: "result of 50.0 MB exceeds the limit of 7.3 MB"
/// (decimal megabytes, one decimal; the bytes too when that does not tell them apart), with
/// what to do about it.
pub fn too_large(bytes: usize, limit: usize) -> String {
    let mb = |n: usize| format!("{:.1} MB", n as f64 / 1e6);
    let (size, max) = if mb(bytes) == mb(limit) {
        (format!("{} ({bytes} bytes)", mb(bytes)), format!("{} ({limit} bytes)", mb(limit)))
    } else {
        (mb(bytes), mb(limit))
    };
    format!("result of {size} exceeds the limit of {max}; ask for less (a part, a page, a summary)")
}

/// Serialized both ways: a call handed to the serving controller comes back in this shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ToolOutput {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub output: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// A rich result's blocks (empty for `{output}`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ContentBlock>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    /// The handler said the call failed (`isError: true`): a failed call, its content kept.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl ToolOutput {
    pub fn new(title: impl Into<String>, output: impl Into<String>) -> Self {
        ToolOutput { title: Some(title.into()), output: output.into(), ..ToolOutput::default() }
    }

    pub fn with_metadata(mut self, metadata: Value) -> Self {
        if let Value::Object(map) = metadata {
            self.metadata = Some(map);
        }
        self
    }

    /// The images of a rich result: `(mimeType, base64 data)`.
    pub fn images(&self) -> impl Iterator<Item = (&str, &str)> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::Image { data, mime_type } => Some((mime_type.as_str(), data.as_str())),
            _ => None,
        })
    }
}

/// Check what a pack returned. `what` names the pack and the handler for the message.
// String: the shape mistake is the whole error; each caller (a pack, an MCP server, a hook) gives it its kind.
pub fn parse_output(what: &str, value: Value) -> Result<ToolOutput, String> {
    let Value::Object(mut map) = value else {
        return Err(format!(
            "{what} returned {}, expected an object {{output, title?, metadata?}} or {{content, isError?, structuredContent?}}",
            kind(&value)
        ));
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
    if map.contains_key("content") {
        if map.contains_key("output") {
            return Err(format!("{what} returned both `output` and `content`; return one of the two shapes"));
        }
        let mut out = parse_rich(what, map)?;
        out.title = title;
        out.metadata = metadata;
        return Ok(out);
    }
    let output = match map.remove("output") {
        Some(Value::String(s)) => s,
        Some(other) => return Err(format!("{what} returned `output` as {}, expected a string", kind(&other))),
        None => {
            return Err(format!(
                "{what} returned an object without `output` or `content` (expected {{output, title?, metadata?}} or {{content, isError?, structuredContent?}})"
            ));
        }
    };
    if let Some(extra) = map.keys().next() {
        return Err(format!("{what} returned an unexpected field `{extra}` (allowed: output, title, metadata)"));
    }
    Ok(ToolOutput { title, output, metadata, ..ToolOutput::default() })
}

/// `{content, isError?, structuredContent?}` with the limits on blocks, images and size.
// String: part of `parse_output`.
fn parse_rich(what: &str, mut map: Map<String, Value>) -> Result<ToolOutput, String> {
    let Some(Value::Array(blocks)) = map.remove("content") else {
        return Err(format!("{what} returned `content` that is not an array of content blocks"));
    };
    let is_error = match map.remove("isError") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(other) => return Err(format!("{what} returned `isError` as {}, expected a boolean", kind(&other))),
    };
    let structured_content = match map.remove("structuredContent") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v),
        Some(other) => {
            return Err(format!("{what} returned `structuredContent` as {}, expected an object", kind(&other)));
        }
    };
    if let Some(extra) = map.keys().next() {
        return Err(format!(
            "{what} returned an unexpected field `{extra}` (allowed: content, isError, structuredContent, title, metadata)"
        ));
    }
    if blocks.len() > MAX_CONTENT_BLOCKS {
        return Err(format!(
            "{what} returned {} content blocks; the limit is {MAX_CONTENT_BLOCKS} blocks per result",
            blocks.len()
        ));
    }
    let mut content = Vec::with_capacity(blocks.len());
    let mut size = structured_content.as_ref().map_or(0, |v| v.to_string().len());
    for (i, block) in blocks.into_iter().enumerate() {
        size += block.to_string().len();
        let block = parse_block(&format!("{what} content[{i}]"), block)?;
        content.push(block);
    }
    if size > MAX_RESULT_BYTES {
        return Err(format!("{what}: {}", too_large(size, MAX_RESULT_BYTES)));
    }
    Ok(ToolOutput { output: text_of(&content), content, structured_content, is_error, ..ToolOutput::default() })
}

// String: part of `parse_output`.
fn parse_block(what: &str, block: Value) -> Result<ContentBlock, String> {
    let Value::Object(map) = &block else {
        return Err(format!("{what} is {}, expected a content block object", kind(&block)));
    };
    let kind_of = map.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
    let parsed: ContentBlock = serde_json::from_value(block).map_err(|e| match kind_of.as_str() {
        "text" | "image" | "resource_link" => format!("{what} ({kind_of}): {e}"),
        _ => format!(
            "{what} has type {kind_of:?}; the types are text, image (data, mimeType) and resource_link (uri, name)"
        ),
    })?;
    if let ContentBlock::Image { data, mime_type } = &parsed {
        if !IMAGE_TYPES.contains(&mime_type.as_str()) {
            return Err(format!("{what}: image mimeType {mime_type:?} is not one of {}", IMAGE_TYPES.join(", ")));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| format!("{what}: image data is not base64: {e}"))?;
        if bytes.len() > MAX_IMAGE_BYTES {
            return Err(format!(
                "{what}: the image is {} bytes; the limit is {MAX_IMAGE_BYTES} bytes ({} MiB) per image",
                bytes.len(),
                MAX_IMAGE_BYTES >> 20
            ));
        }
    }
    Ok(parsed)
}

/// The text of a rich result, for everything that shows results as text (and the model, which
/// gets the images next to it).
pub fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .map(|b| match b {
            ContentBlock::Text { text } => text.clone(),
            ContentBlock::Image { data, mime_type } => {
                let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
                format!("[image {mime_type}, {} bytes]", (data.len() / 4 * 3).saturating_sub(padding))
            }
            ContentBlock::ResourceLink { uri, name } => format!("[{name}]({uri})"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A result's `structuredContent` against the tool's `outputSchema`, when it declares one. An
/// error result (`isError`) need not match.
// String: like `parse_output`, the caller gives the mismatch its kind.
pub fn check_structured(tool: &super::ToolDefinition, out: &ToolOutput) -> Result<(), String> {
    let Some(validator) = &tool.output_validator else { return Ok(()) };
    if out.is_error {
        return Ok(());
    }
    let Some(structured) = &out.structured_content else {
        return Err(format!("{} declares an outputSchema but its result has no structuredContent", tool.name));
    };
    super::schema::check_input(validator, structured).map_err(|errors| {
        format!(
            "{} returned structuredContent that does not match its outputSchema: {}",
            tool.name,
            super::error::describe_input_errors(&errors)
        )
    })
}

impl From<ToolOutput> for crate::rpc::ToolOutput {
    fn from(o: ToolOutput) -> Self {
        crate::rpc::ToolOutput {
            title: o.title,
            output: o.output,
            metadata: o.metadata,
            content: o.content,
            structured_content: o.structured_content,
            is_error: o.is_error,
        }
    }
}

impl From<crate::rpc::ToolOutput> for ToolOutput {
    fn from(o: crate::rpc::ToolOutput) -> Self {
        ToolOutput {
            title: o.title,
            output: o.output,
            metadata: o.metadata,
            content: o.content,
            structured_content: o.structured_content,
            is_error: o.is_error,
        }
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
            Ok(ToolOutput { title: None, output: "x".into(), metadata: None, ..ToolOutput::default() })
        );
        assert!(parse_output("p", json!({"output": "x", "title": "t", "metadata": {"a": 1}})).is_ok());
        assert_eq!(
            parse_output("toolpack p", json!("x")).unwrap_err(),
            "toolpack p returned a string, expected an object {output, title?, metadata?} or {content, isError?, structuredContent?}"
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

    #[test]
    fn rich_shapes() {
        let out = parse_output(
            "p",
            json!({"content": [{"type": "text", "text": "hi"}, {"type": "resource_link", "uri": "file:///a", "name": "a"}],
                   "isError": true, "structuredContent": {"n": 1}}),
        )
        .unwrap();
        assert_eq!(out.output, "hi\n[a](file:///a)");
        assert!(out.is_error);
        let png = base64::engine::general_purpose::STANDARD.encode([0x89, b'P', b'N', b'G']);
        let out =
            parse_output("p", json!({"content": [{"type": "image", "data": png, "mimeType": "image/png"}]})).unwrap();
        assert_eq!(out.images().count(), 1);
        let nine: Vec<Value> = (0..9).map(|_| json!({"type": "text", "text": "x"})).collect();
        assert_eq!(
            parse_output("p", json!({"content": nine})).unwrap_err(),
            "p returned 9 content blocks; the limit is 8 blocks per result"
        );
        assert!(
            parse_output("p", json!({"content": [{"type": "image", "data": "!!", "mimeType": "image/png"}]}))
                .unwrap_err()
                .starts_with("p content[0]: image data is not base64")
        );
        assert!(
            parse_output("p", json!({"content": [{"type": "image", "data": png, "mimeType": "image/bmp"}]}))
                .unwrap_err()
                .contains("is not one of image/png")
        );
        assert!(parse_output("p", json!({"content": [{"type": "audio"}]})).unwrap_err().contains("has type \"audio\""));
        assert!(parse_output("p", json!({"content": [], "output": "x"})).is_err());
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; MAX_IMAGE_BYTES + 1]);
        assert_eq!(
            parse_output("p", json!({"content": [{"type": "image", "data": big, "mimeType": "image/png"}]}))
                .unwrap_err(),
            "p content[0]: the image is 5242881 bytes; the limit is 5242880 bytes (5 MiB) per image"
        );
        let text = "x".repeat(MAX_RESULT_BYTES / 4);
        let blocks: Vec<Value> = (0..5).map(|_| json!({"type": "text", "text": text})).collect();
        assert!(
            parse_output("p", json!({"content": blocks}))
                .unwrap_err()
                .starts_with("p: result of 9.2 MB exceeds the limit of 7.3 MB")
        );
    }
}
