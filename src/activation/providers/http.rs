//! HTTP plumbing shared by the OpenAI-style and Anthropic providers: one rustls `reqwest::Client`
//! per provider (with `timeoutMs` and a connect timeout), POSTing JSON with retries (see
//! [`RetryPolicy`]), reading a streamed answer as server-sent events, and turning failures into
//! [`ProviderError`]s whose messages never carry the API key. It knows nothing about either wire
//! format.
//!
//! Deadlines: `timeoutMs` bounds the whole request, a streamed body included; on a stream,
//! `chunkTimeoutMs` (else `timeoutMs`) also bounds the wait for each next piece of it. Retries
//! happen only before an answer starts: once a stream has begun, part of it was already shown.

use std::time::Duration;

use eventsource_stream::{EventStreamError, Eventsource};
use futures_util::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::{
    CONNECT_TIMEOUT, HttpSettings, ModelRequest, ModelResponse, ProviderError, RetryPolicy, is_context_overflow,
};
use crate::config::ProviderConfig;

/// What is wrong with a provider's answer (an event, a chunk, the final JSON), in the wire
/// format's own terms: [`HttpClient`] names the provider and redacts secrets when it makes a
/// [`ProviderError`] of it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BadAnswer(pub String);

impl From<&str> for BadAnswer {
    fn from(message: &str) -> Self {
        BadAnswer(message.to_string())
    }
}

impl From<String> for BadAnswer {
    fn from(message: String) -> Self {
        BadAnswer(message)
    }
}

/// A provider that POSTs one JSON body and reads one JSON answer (the OpenAI-style and the
/// Anthropic wire formats): what [`complete`] needs of it.
pub(crate) trait JsonWire {
    fn http(&self) -> &HttpClient;
    fn url(&self) -> String;
    fn body(&self, request: &ModelRequest) -> Value;
    fn headers(&self, request: &ModelRequest) -> Result<HeaderMap, ProviderError>;
    fn parse(&self, answer: &Value) -> Result<ModelResponse, ProviderError>;
}

/// One call without streaming, the same for every JSON wire format.
pub(crate) async fn complete(wire: &impl JsonWire, request: &ModelRequest) -> Result<ModelResponse, ProviderError> {
    let body = wire.body(request);
    let headers = wire.headers(request)?;
    let answer = wire.http().post_json(&wire.url(), headers, &body, credential_values(&request.headers)).await?;
    wire.parse(&answer)
}

/// Longest server text kept in an error message.
const MAX_ERROR_CHARS: usize = 2000;
/// Shorter strings are not treated as secrets (a dummy key like `x` would mangle every message).
const MIN_SECRET_LEN: usize = 4;

/// Replaces every secret (the API key, credential-like header values) in a text.
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut redactor = Redactor::default();
        redactor.add(secrets);
        redactor
    }

    fn add(&mut self, secrets: impl IntoIterator<Item = String>) {
        for secret in secrets {
            let secret = secret.trim().to_string();
            if secret.len() >= MIN_SECRET_LEN && !self.secrets.contains(&secret) {
                self.secrets.push(secret);
            }
        }
        // Longest first, so a secret that contains another is replaced whole.
        self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), "[redacted]");
            }
        }
        out
    }
}

/// Header names whose values we treat as credentials.
fn is_credential_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["auth", "key", "token", "secret", "cookie"].iter().any(|w| name.contains(w))
}

pub(crate) fn credential_values(headers: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    headers.iter().filter(|(k, _)| is_credential_header(k)).map(|(_, v)| v.clone()).collect()
}

pub(crate) struct HttpClient {
    client: reqwest::Client,
    /// `provider `id` (kind)`, the prefix of every error.
    label: String,
    redactor: Redactor,
    retry: RetryPolicy,
    timeout_ms: Option<u64>,
    /// The longest wait for the next piece of a streamed answer.
    idle_ms: Option<u64>,
}

/// What a streamed POST got back.
pub(crate) enum Streamed {
    /// The events were handed to the caller, to the end of the stream.
    Events,
    /// The server answered with plain JSON instead (it ignored `stream: true`).
    Json(Value),
}

/// What the caller of [`HttpClient::post_stream`] says after each event.
pub(crate) enum Flow {
    More,
    /// The answer is complete (`[DONE]`, `message_stop`): stop reading.
    Done,
}

impl HttpClient {
    pub fn new(label: String, config: &ProviderConfig, settings: &HttpSettings) -> Result<Self, ProviderError> {
        let mut secrets = credential_values(&config.headers);
        secrets.extend(settings.api_key.iter().cloned());
        let timeout = config.timeout_ms.map(Duration::from_millis);
        let connect_timeout = timeout.map_or(CONNECT_TIMEOUT, |t| t.min(CONNECT_TIMEOUT));
        crate::support::web_fetch::tls_provider();
        let mut builder = reqwest::Client::builder().connect_timeout(connect_timeout);
        if let Some(timeout) = timeout {
            builder = builder.timeout(timeout);
        }
        let client = builder.build().map_err(|e| {
            ProviderError::Config(format!("{label}: cannot create the HTTP client: {}", e.without_url()))
        })?;
        Ok(HttpClient {
            client,
            label,
            redactor: Redactor::new(secrets),
            retry: settings.retry.clone(),
            timeout_ms: config.timeout_ms,
            idle_ms: config.chunk_timeout_ms.or(config.timeout_ms),
        })
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn redact(&self, text: &str) -> String {
        self.redactor.redact(text)
    }

    /// The request's headers: the provider's own (`auth`, e.g. its key), then the configured
    /// ones, then the request's.
    pub fn request_headers(
        &self,
        auth: Vec<(String, String)>,
        configured: &[(String, String)],
        request: &ModelRequest,
    ) -> Result<HeaderMap, ProviderError> {
        let mut pairs = auth;
        pairs.extend(configured.iter().cloned());
        pairs.extend(request.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.headers(&pairs)
    }

    /// An answer read by the provider's parser; a failure names the provider, secrets redacted.
    pub fn parse(
        &self,
        answer: &serde_json::Value,
        parse: impl FnOnce(&serde_json::Value) -> Result<ModelResponse, BadAnswer>,
    ) -> Result<ModelResponse, ProviderError> {
        parse(answer)
            .map_err(|e| ProviderError::BadResponse { provider: self.label.clone(), message: self.redact(&e.0) })
    }

    /// Build a header map; values are marked sensitive so they never show in `Debug` output.
    pub fn headers(&self, pairs: &[(String, String)]) -> Result<HeaderMap, ProviderError> {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ProviderError::Config(format!("{}: invalid HTTP header name `{name}`", self.label)))?;
            let mut value = HeaderValue::from_str(value).map_err(|_| {
                ProviderError::Config(format!("{}: the value of HTTP header `{name}` is not valid", self.label))
            })?;
            value.set_sensitive(true);
            map.insert(header, value);
        }
        Ok(map)
    }

    /// POST `body` as JSON and return the parsed JSON answer, retrying as the policy says.
    /// `extra_secrets` are redacted too (credential-like headers of this request).
    pub async fn post_json(
        &self,
        url: &str,
        headers: HeaderMap,
        body: &Value,
        extra_secrets: Vec<String>,
    ) -> Result<Value, ProviderError> {
        let redactor = self.redactor_with(extra_secrets);
        let response = self.send(url, headers, body, &redactor).await?;
        self.read_json(response, &redactor).await
    }

    /// POST `body` and read the answer as server-sent events, handing each event's name and
    /// data to `on_event` until it says [`Flow::Done`] or the stream ends. An error `on_event`
    /// returns ends the call as [`ProviderError::Stream`].
    pub async fn post_stream(
        &self,
        url: &str,
        headers: HeaderMap,
        body: &Value,
        extra_secrets: Vec<String>,
        mut on_event: impl FnMut(&str, &str) -> Result<Flow, BadAnswer>,
    ) -> Result<Streamed, ProviderError> {
        let redactor = self.redactor_with(extra_secrets);
        let response = self.send(url, headers, body, &redactor).await?;
        let is_json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/json"));
        if is_json {
            return self.read_json(response, &redactor).await.map(Streamed::Json);
        }
        // `chunk()` needs no extra reqwest feature; the decoder wants a stream of byte chunks.
        let chunks = futures_util::stream::try_unfold(response, |mut response| async move {
            Ok::<_, reqwest::Error>(response.chunk().await?.map(|chunk| (chunk, response)))
        });
        let mut events = std::pin::pin!(chunks.eventsource());
        loop {
            let next = match self.idle_ms {
                Some(ms) => tokio::time::timeout(Duration::from_millis(ms), events.next())
                    .await
                    .map_err(|_| ProviderError::StreamStalled { provider: self.label.clone(), after_ms: ms })?,
                None => events.next().await,
            };
            let event = match next {
                None => return Ok(Streamed::Events),
                Some(Ok(event)) => event,
                Some(Err(EventStreamError::Transport(e))) => return Err(self.transport_error(e, &redactor)),
                Some(Err(e)) => {
                    return Err(self.stream_error(&format!("the event stream is malformed: {e}"), &redactor));
                }
            };
            match on_event(&event.event, &event.data) {
                Ok(Flow::More) => {}
                Ok(Flow::Done) => return Ok(Streamed::Events),
                Err(e) => return Err(self.stream_error(&e.0, &redactor)),
            }
        }
    }

    fn redactor_with(&self, extra_secrets: Vec<String>) -> Redactor {
        let mut redactor = self.redactor.clone();
        redactor.add(extra_secrets);
        redactor
    }

    /// Send until a successful answer's headers are in, retrying as the policy says.
    async fn send(
        &self,
        url: &str,
        headers: HeaderMap,
        body: &Value,
        redactor: &Redactor,
    ) -> Result<reqwest::Response, ProviderError> {
        let mut retries = 0u32;
        loop {
            let sent = self.client.post(url).headers(headers.clone()).json(body).send().await;
            let (delay, reason) = match sent {
                Ok(response) => {
                    let status = response.status();
                    if status.is_success() {
                        return Ok(response);
                    }
                    let header =
                        |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
                    let (retry_after, retry_after_ms) = (header("retry-after"), header("retry-after-ms"));
                    // Reading an error body can fail too; the status alone still says what happened.
                    let text = response.text().await.unwrap_or_default();
                    if !is_retryable(status) || retries >= self.retry.max_retries {
                        return Err(self.status_error(status, &text, retries, redactor));
                    }
                    let delay = self.retry.delay(retries, retry_after.as_deref(), retry_after_ms.as_deref());
                    (delay, format!("HTTP {}", status.as_u16()))
                }
                Err(error) => {
                    let connection_failed = error.is_connect() || (error.is_request() && !error.is_timeout());
                    if !connection_failed || retries >= self.retry.max_retries {
                        return Err(self.transport_error(error, redactor));
                    }
                    (self.retry.delay(retries, None, None), "connection error".to_string())
                }
            };
            retries += 1;
            tracing::warn!(
                provider = %self.label,
                %reason,
                retry = retries,
                delay_ms = delay.as_millis() as u64,
                "model request failed; retrying"
            );
            self.retry.sleep(delay).await;
        }
    }

    async fn read_json(&self, response: reqwest::Response, redactor: &Redactor) -> Result<Value, ProviderError> {
        let text = response.text().await.map_err(|e| self.transport_error(e, redactor))?;
        serde_json::from_str(&text).map_err(|e| ProviderError::BadResponse {
            provider: self.label.clone(),
            message: format!("the answer is not JSON ({e}): {}", excerpt(&redactor.redact(&text))),
        })
    }

    /// A failure the server reported inside a stream (or a stream we cannot read). The texts
    /// that mean "too long" still count as a context overflow.
    fn stream_error(&self, message: &str, redactor: &Redactor) -> ProviderError {
        let provider = self.label.clone();
        let message = excerpt(&redactor.redact(message));
        if is_context_overflow(&message) {
            return ProviderError::ContextOverflow { provider, message };
        }
        ProviderError::Stream { provider, message }
    }

    fn transport_error(&self, error: reqwest::Error, redactor: &Redactor) -> ProviderError {
        if error.is_timeout() && !error.is_connect() {
            let after_ms = self.timeout_ms.unwrap_or(CONNECT_TIMEOUT.as_millis() as u64);
            return ProviderError::Timeout { provider: self.label.clone(), after_ms };
        }
        let message = redactor.redact(&error_chain(&error.without_url()));
        ProviderError::Network { provider: self.label.clone(), message }
    }

    fn status_error(&self, status: StatusCode, body: &str, retries: u32, redactor: &Redactor) -> ProviderError {
        let provider = self.label.clone();
        let message = excerpt(&redactor.redact(&error_message(body)));
        if is_context_overflow(body) {
            return ProviderError::ContextOverflow { provider, message };
        }
        if status == StatusCode::TOO_MANY_REQUESTS {
            return ProviderError::RateLimited { provider, retries, message };
        }
        ProviderError::Http { provider, status: status.as_u16(), message }
    }
}

fn is_retryable(status: StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 500 | 502 | 503 | 504 | 529)
}

/// The readable part of an error body: `error.message` (OpenAI and Anthropic both use it) with
/// the error code or type, else the body itself.
pub(crate) fn error_message(body: &str) -> String {
    let trimmed = body.trim();
    if trimmed.is_empty() {
        return "(empty response body)".to_string();
    }
    let Ok(json) = serde_json::from_str::<Value>(trimmed) else {
        return trimmed.to_string();
    };
    let error = json.get("error").unwrap_or(&json);
    let message = match error {
        Value::String(s) => Some(s.clone()),
        _ => error.get("message").and_then(Value::as_str).map(str::to_string),
    };
    let code = error.get("code").and_then(Value::as_str).or_else(|| error.get("type").and_then(Value::as_str));
    match (message, code) {
        (Some(m), Some(c)) => format!("{m} [{c}]"),
        (Some(m), None) => m,
        _ => trimmed.to_string(),
    }
}

/// An error and its causes, `a: b: c` (reqwest's own message is only "error sending request").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

fn excerpt(text: &str) -> String {
    match text.char_indices().nth(MAX_ERROR_CHARS) {
        Some((cut, _)) => format!("{}… (truncated)", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_replaces_every_occurrence_longest_first() {
        let r = Redactor::new(["sk-abc".to_string(), "sk-abcdef".to_string(), "x".to_string()]);
        assert_eq!(r.redact("key sk-abcdef and sk-abc, x"), "key [redacted] and [redacted], x");
    }

    #[test]
    fn error_messages_prefer_the_json_message() {
        assert_eq!(error_message(r#"{"error":{"message":"bad","code":"c1"}}"#), "bad [c1]");
        assert_eq!(
            error_message(r#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#),
            "busy [overloaded_error]"
        );
        assert_eq!(error_message("plain text"), "plain text");
        assert_eq!(error_message(""), "(empty response body)");
    }
}
