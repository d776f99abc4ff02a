//! JSON request bodies: the [`JsonBody`] extractor and the typed bodies of our own routes.
//!
//! An empty body means `{}`; a body that is not `application/json` is a 415; one that is not
//! JSON, or does not fit the route's type, is a 400 that names the offending field as a JSON
//! pointer (`/sender`), so a client can tell which part to fix.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::ApiError;

/// A body of one of our routes, parsed into `T`: a JSON object whose fields fit `T`.
pub struct JsonBody<T>(pub T);

/// Any JSON body, for inputs a pack's schema checks (`tool-ui` invocations).
pub struct JsonInput(pub Value);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let JsonInput(value) = JsonInput::from_request(request, state).await?;
        typed(value).map(JsonBody)
    }
}

impl<S: Send + Sync> FromRequest<S> for JsonInput {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let is_json = is_json(request.headers());
        let body = Bytes::from_request(request, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(e.body_text())
            } else {
                ApiError::bad_request(e.body_text())
            }
        })?;
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonInput(Value::Object(Default::default())));
        }
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        serde_json::from_slice(&body)
            .map(JsonInput)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json")))
}

/// Read a parsed body as `T`; a mismatch names the field where it happened.
pub(crate) fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    // serde would also read an array into a struct, field by position; no route means that.
    if !value.is_object() {
        return Err(ApiError::invalid_field("", "the body must be a JSON object"));
    }
    serde_path_to_error::deserialize(value)
        .map_err(|e| ApiError::invalid_field(&pointer(e.path()), &e.inner().to_string()))
}

/// `a.b[0]` as a JSON pointer (`/a/b/0`, RFC 6901 escapes); the whole body is "".
fn pointer(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    path.iter()
        .filter_map(|segment| match segment {
            Segment::Seq { index } => Some(index.to_string()),
            Segment::Map { key } => Some(key.replace('~', "~0").replace('/', "~1")),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
        .map(|token| format!("/{token}"))
        .collect()
}

/// `POST messages`: a message from the user (or a named agent) to an agent or a channel.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostMessage {
    pub sender: Option<String>,
    pub recipient: Option<String>,
    pub channel: Option<String>,
    /// `P0`..`P3`; the store checks it (and answers with the reference's message).
    pub priority: Option<String>,
    pub body: Option<String>,
}

/// `POST request-changes`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestChanges {
    pub body: Option<String>,
}

/// A required text field: present and not blank.
pub(crate) fn required(value: Option<String>, field: &str) -> Result<String, ApiError> {
    value.filter(|v| !v.trim().is_empty()).ok_or_else(|| {
        let message = format!("`{field}` is required and must not be empty");
        ApiError::BadRequest {
            message: message.clone(),
            details: vec![super::ErrorDetail { path: format!("/{field}"), message }],
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected<T: DeserializeOwned>(body: &str) -> (String, Vec<(String, String)>) {
        match typed::<T>(serde_json::from_str(body).unwrap()) {
            Err(ApiError::BadRequest { message, details }) => {
                (message, details.into_iter().map(|d| (d.path, d.message)).collect())
            }
            Err(other) => panic!("{body}: expected a 400, got {other:?}"),
            Ok(_) => panic!("{body}: expected a 400, it parsed"),
        }
    }

    #[test]
    fn a_wrong_type_names_the_field() {
        let (message, details) = rejected::<PostMessage>(r#"{"recipient": "pm", "sender": 7, "body": "x"}"#);
        assert_eq!(details, [("/sender".to_string(), "invalid type: integer `7`, expected a string".to_string())]);
        assert_eq!(message, "the request body is invalid: /sender: invalid type: integer `7`, expected a string");
    }

    #[test]
    fn an_unknown_field_is_named_with_the_allowed_ones() {
        let (_, details) = rejected::<PostMessage>(r#"{"recipient": "pm", "bdoy": "x"}"#);
        assert_eq!(details.len(), 1);
        assert_eq!(details[0].0, "/bdoy");
        assert!(details[0].1.starts_with("unknown field `bdoy`, expected one of `sender`"), "{details:?}");
    }

    /// Regression: serde reads an array into a struct by position, so `[1]` was blamed on `/0`.
    #[test]
    fn a_body_that_is_not_an_object_is_refused_as_a_whole() {
        for body in ["[1]", "\"hi\"", "null"] {
            let (_, details) = rejected::<RequestChanges>(body);
            assert_eq!(details, [(String::new(), "the body must be a JSON object".to_string())], "{body}");
        }
    }

    #[test]
    fn nested_paths_become_json_pointers() {
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Outer {
            items: Vec<std::collections::BTreeMap<String, u8>>,
        }
        let (_, details) = rejected::<Outer>(r#"{"items": [{"a/b": 1}, {"c": "x"}]}"#);
        assert_eq!(details[0].0, "/items/1/c");
    }
}
