//! Model providers: the one place that speaks to a model. It owns the provider-neutral request and
//! response types the model loop uses, model selection (a preset expanded through `model-list`,
//! reference §6.4), tool-name sanitizing for models (reference §4), and the three providers:
//! `openai-compatible`/`openai` (Chat Completions with tools, `openai.rs`), `anthropic` (Messages
//! API with `tool_use`, `anthropic.rs`) and the deterministic `scripted` provider (`scripted.rs`).
//! HTTP plumbing shared by the two HTTP providers (client, retries, streamed answers, error
//! mapping, key redaction) is in `http.rs`. Both HTTP providers stream ([`ModelProvider::stream`]):
//! the caller picks `stream` or `complete` by the preset's `stream` key.
//!
//! It does not run tools, store history or decide when an activation ends: that is the loop's job.
//! The types here are internal; only `openai.rs` and `anthropic.rs` know wire formats.
//!
//! Build providers once per run and share them ([`ProviderPool`] does this): a provider holds its
//! HTTP connection pool, and the scripted provider remembers which script entries each agent used.

mod anthropic;
mod http;
mod openai;
mod scripted;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::config::{ModelsConfig, PresetConfig, PresetTarget, ProviderConfig, ProviderKind};
use crate::toolpack::sanitize_tool_name;

pub use scripted::{ScriptedCallSite, ScriptedProvider, entry_plays_for, script_calls};

// ---------------------------------------------------------------------------------------------
// Provider-neutral request and response

/// One message of the conversation sent to a model.
#[derive(Clone, Debug, PartialEq)]
pub enum ChatMessage {
    System(String),
    User(String),
    /// What the model said earlier: text (may be empty) and the tools it called.
    Assistant {
        text: String,
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, answering the call with the same `call_id`.
    ToolResult {
        call_id: String,
        name: String,
        content: String,
        is_error: bool,
        /// A rich result's images, sent where the provider takes them (Anthropic: image
        /// blocks in the `tool_result`; OpenAI-compatible: a user message after the results).
        images: Vec<crate::store::ToolImage>,
    },
}

/// A tool call made by a model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The provider's id for the call; a tool result must quote it.
    pub id: String,
    /// The model-facing (sanitized) name the model used, e.g. `messages_send`.
    pub name: String,
    /// The parsed arguments. When the model sent arguments that are not valid JSON they are kept
    /// as `{"__invalid_json": "<text>"}` (see [`INVALID_JSON_KEY`]) so the loop can answer the
    /// model with an error instead of failing the activation.
    pub arguments: Value,
}

/// The key under which unparsable tool-call arguments are kept.
pub use crate::toolpack::INVALID_JSON_KEY;

impl ToolCall {
    /// The raw text of the arguments when the model sent invalid JSON.
    pub fn invalid_arguments(&self) -> Option<&str> {
        invalid_arguments(&self.arguments)
    }
}

/// Arguments that could not be parsed, kept as text for the loop to report back to the model.
pub(crate) fn invalid_json(text: &str) -> Value {
    let mut map = serde_json::Map::new();
    map.insert(INVALID_JSON_KEY.to_string(), Value::String(text.to_string()));
    Value::Object(map)
}

fn invalid_arguments(arguments: &Value) -> Option<&str> {
    let map = arguments.as_object()?;
    if map.len() != 1 {
        return None;
    }
    map.get(INVALID_JSON_KEY)?.as_str()
}

/// A tool offered to the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelTool {
    /// The model-facing (sanitized) name; see [`safe_tool_names`].
    pub name: String,
    pub description: String,
    /// The tool's input JSON Schema.
    pub parameters: Value,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    /// The model must call a tool.
    Required,
    /// The model must not call a tool.
    None,
}

impl ToolChoice {
    /// The preset's `toolChoice`, else `auto` when there are tools, else `none` (reference §6.4).
    pub fn from_preset(configured: Option<&str>, has_tools: bool) -> ToolChoice {
        match configured {
            Some("required") => ToolChoice::Required,
            Some("none") => ToolChoice::None,
            Some("auto") => ToolChoice::Auto,
            _ if has_tools => ToolChoice::Auto,
            _ => ToolChoice::None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
            ToolChoice::None => "none",
        }
    }
}

/// One model call.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequest {
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ModelTool>,
    pub tool_choice: ToolChoice,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub reasoning_effort: Option<String>,
    /// The preset's `providerOptions`: objects keyed by namespace (`openai`, `openaiCompatible`,
    /// `anthropic`, or the provider id) whose fields are added to the request body.
    pub provider_options: Value,
    /// Extra HTTP headers from the preset (added after the provider's own headers).
    pub headers: BTreeMap<String, String>,
    /// The model name sent to the API (the preset's `apiModel`, else its `model`).
    pub model: String,
    /// The agent the call is for (the scripted provider plays per agent).
    pub agent_id: String,
    /// The activation the call belongs to (the scripted provider starts a script entry on the
    /// first call of each activation).
    pub activation_id: String,
    /// How many leading messages are the replayed history, which the next activation's request
    /// starts with too. Providers that cache only at explicit markers (Anthropic) put one at its
    /// end; 0 means none.
    pub cache_prefix: usize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Every input token, cached ones included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The part of `input_tokens` the provider read from its prompt cache.
    pub cached_input_tokens: u64,
}

/// Why the model stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// It finished its turn.
    EndTurn,
    /// It called tools and waits for their results.
    ToolUse,
    /// It hit the output-token limit.
    MaxTokens,
    /// Anything else the provider reported (`content_filter`, `refusal`, …).
    Other(String),
}

/// What one model call returned.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelResponse {
    /// The model's text; empty when it only called tools.
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub stop: StopReason,
}

pub type ProviderFuture<'a> = Pin<Box<dyn Future<Output = Result<ModelResponse, ProviderError>> + Send + 'a>>;

/// Where a streamed answer's text goes as it arrives (see [`ModelProvider::stream`]). The pieces,
/// in order, add up to the response's `text`.
pub trait DeltaSink: Send + Sync {
    fn text(&self, delta: &str);
}

/// A model endpoint. Implementations are cheap to share (`Arc`) and safe to call concurrently.
pub trait ModelProvider: Send + Sync {
    fn complete(&self, request: ModelRequest) -> ProviderFuture<'_>;
    /// The same call with the answer streamed (SSE from the provider): its text goes to `sink`
    /// as it arrives, tool-call arguments are assembled from the pieces, and the result is the
    /// [`ModelResponse`] that `complete` would have returned. A provider that cannot stream
    /// answers as `complete` does and sends nothing to `sink`.
    fn stream<'a>(&'a self, request: ModelRequest, sink: &'a dyn DeltaSink) -> ProviderFuture<'a> {
        let _ = sink;
        self.complete(request)
    }
    /// A one-line description for logs and errors (never contains a key).
    fn describe(&self) -> String;
}

// ---------------------------------------------------------------------------------------------
// Errors

/// Why a model call (or building a provider) failed. Messages never contain an API key: every
/// text that comes from a server or from reqwest is redacted before it is stored here.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("{provider}: HTTP {status}: {message}")]
    Http { provider: String, status: u16, message: String },
    #[error("{provider}: no complete response within {after_ms} ms (raise the provider's timeoutMs)")]
    Timeout { provider: String, after_ms: u64 },
    #[error("{provider}: rate limited (HTTP 429) after {retries} retries: {message}")]
    RateLimited { provider: String, retries: u32, message: String },
    /// The request does not fit the model (reference §6.6); the loop compacts history and retries.
    #[error("{provider}: the request exceeds the model's context window: {message}")]
    ContextOverflow { provider: String, message: String },
    /// A streamed answer stopped arriving.
    #[error(
        "{provider}: the streamed answer stalled: nothing arrived for {after_ms} ms (raise the provider's chunkTimeoutMs)"
    )]
    StreamStalled { provider: String, after_ms: u64 },
    /// A streamed answer failed after it started: the server sent an error event, broke off, or
    /// sent something unreadable.
    #[error("{provider}: the streamed answer failed: {message}")]
    Stream { provider: String, message: String },
    #[error("{provider}: cannot reach the server: {message}")]
    Network { provider: String, message: String },
    #[error("provider `{provider}` needs an API key: {}", missing_key_hint(.provider, .env.as_deref()))]
    MissingKey { provider: String, env: Option<String> },
    #[error("{provider}: unexpected response: {message}")]
    BadResponse { provider: String, message: String },
    /// A provider or script that cannot be used as configured.
    #[error("{0}")]
    Config(String),
    /// A scripted `error:` step (for testing how the loop handles model failures).
    #[error("{provider}: {message}")]
    Scripted { provider: String, message: String },
}

fn missing_key_hint(provider: &str, env: Option<&str>) -> String {
    match env {
        Some(env) => format!("set the environment variable {env}"),
        None => format!("set apiKeyEnv (or apiKey) in backend.runner.models.providers.{provider}"),
    }
}

impl ProviderError {
    pub fn is_context_overflow(&self) -> bool {
        matches!(self, ProviderError::ContextOverflow { .. })
    }

    /// What kind of failure this is, as a fallback records it (`model.fallback`'s `cause`).
    pub fn cause(&self) -> &'static str {
        match self {
            ProviderError::Http { .. } => "http_error",
            ProviderError::RateLimited { .. } => "rate_limited",
            ProviderError::Timeout { .. } => "timeout",
            ProviderError::StreamStalled { .. } => "stream_stalled",
            ProviderError::Stream { .. } => "malformed_stream",
            ProviderError::BadResponse { .. } => "bad_response",
            ProviderError::ContextOverflow { .. } => "context_overflow",
            ProviderError::Network { .. } => "network",
            ProviderError::MissingKey { .. } => "missing_key",
            ProviderError::Config(_) => "config",
            ProviderError::Scripted { .. } => "scripted",
        }
    }

    /// The HTTP status the server answered with, when it answered with an error status.
    pub fn status(&self) -> Option<u16> {
        match self {
            ProviderError::Http { status, .. } => Some(*status),
            ProviderError::RateLimited { .. } => Some(429),
            _ => None,
        }
    }
}

/// Error texts that mean "the request does not fit the context window" (reference §6.6).
const CONTEXT_OVERFLOW_MARKERS: [&str; 11] = [
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "max context",
    "too many tokens",
    "input exceeds",
    "exceeds the context",
    "exceeded the context",
    "prompt is too long",
    "request too large",
];

/// True when an error text says the request exceeded the model's context (case-insensitive).
pub fn is_context_overflow(text: &str) -> bool {
    let lower = text.to_lowercase();
    CONTEXT_OVERFLOW_MARKERS.iter().any(|m| lower.contains(m))
}

// ---------------------------------------------------------------------------------------------
// Tool names

/// `(real, safe)` pairs for the given tool names, in order (a name listed twice appears once).
/// Fails with the reference's text when two names map to the same safe name.
// String: the reference's text, with which the activation fails; nothing decides on it.
pub fn safe_tool_names(names: &[String]) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(names.len());
    for name in names {
        let safe = sanitize_tool_name(name);
        match out.iter().find(|(_, s)| *s == safe) {
            Some((real, _)) if real == name => continue,
            Some((real, _)) => return Err(format!("Tool names {real} and {name} both map to {safe}")),
            None => out.push((name.clone(), safe)),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Model selection

/// One concrete preset, with its provider, ready to build a provider and requests from.
#[derive(Clone)]
pub struct ResolvedModel {
    /// The concrete preset (its target is a single model).
    pub preset: PresetConfig,
    pub provider: ProviderConfig,
    pub model: String,
    pub api_model: Option<String>,
}

impl std::fmt::Debug for ResolvedModel {
    // By hand: `ProviderConfig` holds the API key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedModel")
            .field("preset", &self.preset.id)
            .field("provider", &self.provider.id)
            .field("model", &self.model)
            .field("api_model", &self.api_model)
            .finish()
    }
}

impl ResolvedModel {
    pub fn preset_id(&self) -> &str {
        &self.preset.id
    }

    /// The model name sent to the API.
    pub fn api_model(&self) -> &str {
        self.api_model.as_deref().unwrap_or(&self.model)
    }

    /// The script a scripted provider plays: the preset's, else the provider's.
    pub fn script(&self) -> Option<&Path> {
        self.preset.script.as_deref().or(self.provider.script.as_deref())
    }

    /// A request carrying this preset's parameters (reference §6.4) for the given conversation.
    pub fn request(
        &self,
        agent_id: &str,
        activation_id: &str,
        messages: Vec<ChatMessage>,
        tools: Vec<ModelTool>,
    ) -> ModelRequest {
        let tool_choice = ToolChoice::from_preset(self.preset.tool_choice.as_deref(), !tools.is_empty());
        ModelRequest {
            messages,
            tools,
            tool_choice,
            temperature: self.preset.temperature,
            top_p: self.preset.top_p,
            top_k: self.preset.top_k,
            max_output_tokens: self.preset.max_output_tokens,
            reasoning_effort: self.preset.reasoning_effort.clone(),
            provider_options: self.preset.provider_options.clone(),
            headers: self.preset.headers.clone(),
            model: self.api_model().to_string(),
            agent_id: agent_id.to_string(),
            activation_id: activation_id.to_string(),
            cache_prefix: 0,
        }
    }
}

/// Expand a preset into the concrete presets to try, in order, following `model-list`
/// recursively. Errors use the reference's texts (§6.4).
// String: the reference's texts (§6.4), with which the activation fails.
pub fn resolve_presets(models: &ModelsConfig, preset: &str) -> Result<Vec<ResolvedModel>, String> {
    if preset.is_empty() {
        return Err("No model preset selected. Set backend.runner.model or agents.<id>.model explicitly.".to_string());
    }
    let mut out = Vec::new();
    expand_preset(models, preset, &mut Vec::new(), &mut out)?;
    Ok(out)
}

// String: activation/run.rs ends the activation with this text (`Ending::Failed`).
fn expand_preset(
    models: &ModelsConfig,
    id: &str,
    chain: &mut Vec<String>,
    out: &mut Vec<ResolvedModel>,
) -> Result<(), String> {
    if chain.iter().any(|c| c == id) {
        return Err(format!("Circular model-list preset: {} -> {id}", chain.join(" -> ")));
    }
    let preset = models.preset(id).ok_or_else(|| format!("Model preset not found: {id}"))?;
    match &preset.target {
        PresetTarget::Model { provider, model, api_model } => {
            let provider = models.provider(provider).ok_or_else(|| format!("Provider not found: {provider}"))?;
            out.push(ResolvedModel {
                preset: preset.clone(),
                provider: provider.clone(),
                model: model.clone(),
                api_model: api_model.clone(),
            });
        }
        PresetTarget::List(list) => {
            chain.push(id.to_string());
            for entry in list {
                expand_preset(models, entry, chain, out)?;
            }
            chain.pop();
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Building providers

pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// Connecting must not take longer than this (nor longer than the whole-request timeout).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

type SleepFn = dyn Fn(Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync;

/// When the HTTP providers retry: up to `max_retries` more attempts after 429, 500, 502, 503,
/// 504, 529 and connection errors, waiting `base_delay × 2^n` (500 ms, 1 s, 2 s by default), or
/// what the server asks for in `Retry-After` / `retry-after-ms`, capped at `max_retry_after`.
/// Other 4xx answers and timeouts are not retried (a timeout already waited `timeoutMs`).
#[derive(Clone)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub base_delay: Duration,
    pub max_retry_after: Duration,
    sleep: Arc<SleepFn>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_retry_after: Duration::from_secs(30),
            sleep: Arc::new(|d| Box::pin(tokio::time::sleep(d))),
        }
    }
}

impl std::fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_retries", &self.max_retries)
            .field("base_delay", &self.base_delay)
            .field("max_retry_after", &self.max_retry_after)
            .finish_non_exhaustive()
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        RetryPolicy { max_retries: 0, ..RetryPolicy::default() }
    }

    /// Replace how the policy waits (tests record the delays instead of sleeping).
    pub fn with_sleep(
        mut self,
        sleep: impl Fn(Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync + 'static,
    ) -> Self {
        self.sleep = Arc::new(sleep);
        self
    }

    /// The wait before retry number `retry` (0-based), given the server's `Retry-After` /
    /// `retry-after-ms` header values if it sent any.
    pub fn delay(&self, retry: u32, retry_after: Option<&str>, retry_after_ms: Option<&str>) -> Duration {
        let asked = retry_after_ms
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|ms| ms / 1000.0)
            .or_else(|| retry_after.and_then(|v| v.trim().parse::<f64>().ok()))
            .filter(|s| s.is_finite() && *s >= 0.0);
        match asked {
            Some(seconds) => Duration::from_secs_f64(seconds.min(self.max_retry_after.as_secs_f64())),
            None => self.base_delay.saturating_mul(2u32.saturating_pow(retry)),
        }
    }

    pub(crate) async fn sleep(&self, delay: Duration) {
        (self.sleep)(delay).await
    }
}

/// Build the provider a resolved model names, with the default retry policy.
pub fn build_provider(
    model: &ResolvedModel,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Box<dyn ModelProvider>, ProviderError> {
    build_provider_with(model, env, RetryPolicy::default())
}

/// Build the provider a resolved model names. The API key comes from `apiKey`, else the variable
/// `apiKeyEnv` names, else (for `openai`/`anthropic`) `OPENAI_API_KEY`/`ANTHROPIC_API_KEY`; the
/// base URL from `baseURL`, else the variable `baseURLEnv` names, else the kind's default.
pub fn build_provider_with(
    model: &ResolvedModel,
    env: &dyn Fn(&str) -> Option<String>,
    retry: RetryPolicy,
) -> Result<Box<dyn ModelProvider>, ProviderError> {
    let config = &model.provider;
    match config.kind {
        ProviderKind::Scripted => Ok(Box::new(ScriptedProvider::load(&config.id, model.script())?)),
        ProviderKind::OpenAi | ProviderKind::OpenAiCompatible => {
            let settings = http_settings(config, env, retry)?;
            Ok(Box::new(openai::OpenAiProvider::new(config, settings)?))
        }
        ProviderKind::Anthropic => {
            let settings = http_settings(config, env, retry)?;
            Ok(Box::new(anthropic::AnthropicProvider::new(config, settings)?))
        }
    }
}

/// What an HTTP provider needs besides its config: the resolved key and base URL.
pub(crate) struct HttpSettings {
    pub api_key: Option<String>,
    pub base_url: String,
    pub retry: RetryPolicy,
}

fn http_settings(
    config: &ProviderConfig,
    env: &dyn Fn(&str) -> Option<String>,
    retry: RetryPolicy,
) -> Result<HttpSettings, ProviderError> {
    let non_empty = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let default_key_env = match config.kind {
        ProviderKind::OpenAi => Some("OPENAI_API_KEY"),
        ProviderKind::Anthropic => Some("ANTHROPIC_API_KEY"),
        ProviderKind::OpenAiCompatible | ProviderKind::Scripted => None,
    };
    let api_key = match (non_empty(config.api_key.clone()), &config.api_key_env) {
        (Some(key), _) => Some(key),
        (None, Some(var)) => Some(
            non_empty(env(var))
                .ok_or_else(|| ProviderError::MissingKey { provider: config.id.clone(), env: Some(var.clone()) })?,
        ),
        (None, None) => match default_key_env {
            Some(var) => Some(non_empty(env(var)).ok_or_else(|| ProviderError::MissingKey {
                provider: config.id.clone(),
                env: Some(var.to_string()),
            })?),
            // A local OpenAI-compatible server (Ollama, vLLM, llama.cpp) often needs no key.
            None => None,
        },
    };
    let default_base = match config.kind {
        ProviderKind::OpenAi => Some(OPENAI_DEFAULT_BASE_URL),
        ProviderKind::Anthropic => Some(ANTHROPIC_DEFAULT_BASE_URL),
        ProviderKind::OpenAiCompatible | ProviderKind::Scripted => None,
    };
    let base_url = match (non_empty(config.base_url.clone()), &config.base_url_env) {
        (Some(url), _) => url,
        (None, Some(var)) => non_empty(env(var)).ok_or_else(|| {
            ProviderError::Config(format!(
                "provider `{}`: baseURLEnv names {var}, but that environment variable is not set",
                config.id
            ))
        })?,
        (None, None) => match default_base {
            Some(url) => url.to_string(),
            None => {
                return Err(ProviderError::Config(format!(
                    "provider `{}` ({}) needs a base URL: set baseURL (e.g. http://127.0.0.1:11434/v1) or baseURLEnv",
                    config.id,
                    config.kind.as_str()
                )));
            }
        },
    };
    let base_url = base_url.trim().trim_end_matches('/').to_string();
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        let shown = http::Redactor::new(api_key.iter().cloned()).redact(&base_url);
        return Err(ProviderError::Config(format!(
            "provider `{}`: base URL must start with http:// or https://, got `{shown}`",
            config.id
        )));
    }
    Ok(HttpSettings { api_key, base_url, retry })
}

/// Providers built once and shared, keyed by provider id and script: every activation of a run
/// uses the same HTTP connection pool, and the scripted provider keeps its per-agent state.
pub struct ProviderPool {
    env: Box<EnvFn>,
    retry: RetryPolicy,
    built: Mutex<HashMap<PoolKey, Arc<dyn ModelProvider>>>,
}

type EnvFn = dyn Fn(&str) -> Option<String> + Send + Sync;
/// Provider id and script path.
type PoolKey = (String, Option<PathBuf>);

impl ProviderPool {
    pub fn new(env: impl Fn(&str) -> Option<String> + Send + Sync + 'static, retry: RetryPolicy) -> Self {
        ProviderPool { env: Box::new(env), retry, built: Mutex::new(HashMap::new()) }
    }

    /// The provider for a resolved model, built on first use. Build errors are not cached (the
    /// environment may be fixed in the meantime).
    pub fn get(&self, model: &ResolvedModel) -> Result<Arc<dyn ModelProvider>, ProviderError> {
        let key = (model.provider.id.clone(), model.script().map(Path::to_path_buf));
        let mut built = self.built.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(provider) = built.get(&key) {
            return Ok(provider.clone());
        }
        let provider: Arc<dyn ModelProvider> = Arc::from(build_provider_with(model, &*self.env, self.retry.clone())?);
        built.insert(key, provider.clone());
        Ok(provider)
    }
}

/// Add `providerOptions.<ns>` fields to a request body, for each namespace in order (later ones
/// win). Top-level camelCase keys become snake_case (`reasoningEffort` → `reasoning_effort`), so
/// options written for the reference's AI SDK work; nested values are sent as written.
pub(crate) fn merge_provider_options(body: &mut Value, options: &Value, namespaces: &[&str]) {
    let Some(body) = body.as_object_mut() else {
        return;
    };
    for ns in namespaces {
        let Some(fields) = options.get(*ns).and_then(Value::as_object) else {
            continue;
        };
        for (key, value) in fields {
            body.insert(snake_case(key), value.clone());
        }
    }
}

fn snake_case(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for (i, c) in key.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_case_converts_camel_keys() {
        assert_eq!(snake_case("reasoningEffort"), "reasoning_effort");
        assert_eq!(snake_case("parallel_tool_calls"), "parallel_tool_calls");
    }

    #[test]
    fn retry_delay_doubles_and_honours_the_server() {
        let p = RetryPolicy::default();
        let ms = |d: Duration| d.as_millis();
        assert_eq!([0, 1, 2].map(|n| ms(p.delay(n, None, None))), [500, 1000, 2000]);
        assert_eq!(ms(p.delay(0, Some("3"), None)), 3000);
        assert_eq!(ms(p.delay(0, Some("120"), None)), 30_000, "capped");
        assert_eq!(ms(p.delay(0, Some("1"), Some("250"))), 250, "retry-after-ms is more precise");
        assert_eq!(ms(p.delay(1, Some("Wed, 21 Oct 2015 07:28:00 GMT"), None)), 1000, "dates fall back");
    }

    #[test]
    fn overflow_markers_are_case_insensitive() {
        assert!(is_context_overflow("Prompt is too long: 210000 tokens"));
        assert!(!is_context_overflow("invalid api key"));
    }
}
