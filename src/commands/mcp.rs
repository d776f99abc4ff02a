//! `suzumio mcp <dir> --agent ID`: one agent's allowed tools, and its artifacts as read-only
//! resources, served over MCP stdio (the official Rust SDK, `rmcp`). Every call takes the path
//! of `suzumio tool call`: a short activation around `execute_tool`, so the allowlist, the
//! schema, the permission engine (an `ask` waits for `suzumio approvals allow`), the records and
//! the audit all apply. stdout is the protocol; logs go to stderr.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock as McpBlock, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use rustix::fs::{CWD, Mode, OFlags};
use serde_json::Value;

use super::CliError;
use crate::activation::RunnerTools;
use crate::config::BackendKind;
use crate::support::ToolHost;
use crate::support::runners::AgentRunners;
use crate::toolpack::output::{ContentBlock, ToolOutput};

/// At most this many bytes of one artifact returned by `resources/read`.
const MAX_RESOURCE_BYTES: u64 = 4 << 20;

/// `suzumio mcp`: serve until the client closes stdin.
pub async fn serve(dir: &Path, agent: &str, backend: Option<BackendKind>) -> Result<(), CliError> {
    let host = crate::controller::open(dir)?;
    if host.project.config.agent(agent).is_none() {
        return Err(super::unknown_agent(&host.project.config, agent));
    }
    let kind = backend.unwrap_or(host.project.config.backend.kind);
    let server = Arc::new(McpServer { host, agent: agent.to_string(), kind, runners: tokio::sync::OnceCell::new() });
    let running = Arc::clone(&server)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| CliError::Failed(format!("starting the MCP session: {e}")))?;
    let ended = running.waiting().await;
    if let Some(r) = server.runners.get() {
        r.shutdown().await;
    }
    if !server.host.audit.flush_async(crate::controller::AUDIT_FLUSH).await {
        tracing::warn!("the permission audit was not written within {} s", crate::controller::AUDIT_FLUSH.as_secs());
    }
    ended.map(|_| ()).map_err(|e| CliError::Failed(format!("the MCP session ended badly: {e}")))
}

struct McpServer {
    host: Arc<ToolHost>,
    agent: String,
    kind: BackendKind,
    /// Started at the first call that needs the agent's runner, kept for the session.
    runners: tokio::sync::OnceCell<Arc<AgentRunners>>,
}

impl McpServer {
    fn tools(&self) -> Vec<Tool> {
        let registry = &self.host.project.registry;
        let Some(agent) = self.host.project.config.agent(&self.agent) else { return Vec::new() };
        registry
            .resolve_agent(agent)
            .tools
            .iter()
            .filter_map(|name| registry.tool(name))
            .map(|(_, def)| {
                let schema = match &def.input_schema {
                    Value::Object(map) => map.clone(),
                    _ => serde_json::Map::new(),
                };
                let a = &def.annotations;
                let mut annotations = ToolAnnotations::new();
                annotations.title = a.title.clone();
                annotations.read_only_hint = a.read_only_hint;
                annotations.destructive_hint = a.destructive_hint;
                annotations.idempotent_hint = a.idempotent_hint;
                annotations.open_world_hint = a.open_world_hint;
                let mut tool = Tool::new(def.name.clone(), def.description.clone(), Arc::new(schema))
                    .with_annotations(annotations);
                if let Some(label) = def.presentation.as_ref().and_then(|p| p.label.clone()).or(a.title.clone()) {
                    tool = tool.with_title(label);
                }
                tool
            })
            .collect()
    }

    /// One call, framed by its own activation, as `suzumio tool call` does it.
    async fn call(&self, tool: &str, input: Value) -> Result<ToolOutput, String> {
        let host = &self.host;
        // Refused before a runner (or a Docker engine) is asked for, as `suzumio tool call` does.
        let Some((_, def)) = host.project.registry.tool(tool) else { return Err(format!("Unknown tool: {tool}")) };
        if host.project.config.agent(&self.agent).is_none_or(|a| !a.tools.allows(tool)) {
            return Err(format!("Tool not allowed for {}: {tool}", self.agent));
        }
        let needs_runner = def.runs_in == crate::toolpack::RunsIn::Runner;
        let runners = if needs_runner {
            let started = self
                .runners
                .get_or_try_init(|| crate::controller::runners(host, self.kind))
                .await
                .map_err(|e| format!("starting the runner of {}: {e}", self.agent))?;
            Some(started)
        } else {
            None
        };
        let no_runner = crate::activation::NoRunner("not needed".into());
        let runner: &dyn RunnerTools = match runners {
            Some(r) => r.as_ref(),
            None => &no_runner,
        };
        let activation =
            host.store.start_activation(&self.agent, &format!("suzumio mcp {tool}"), &[]).map_err(|e| e.to_string())?;
        let result = crate::activation::run::execute_tool(host, runner, &self.agent, &activation.id, tool, input).await;
        if let Err(e) =
            host.store.finish_activation(&activation.id, crate::store::ActivationOutcome::Completed, None, None)
        {
            tracing::warn!("recording the end of the call's activation: {e}");
        }
        result.map_err(|e| e.to_string())
    }

    fn artifacts_dir(&self) -> PathBuf {
        crate::backend::spec::artifacts_dir(&self.host.project.config.root, &self.agent)
    }

    fn uri_prefix(&self) -> String {
        format!("suzumio://artifacts/{}/", self.agent)
    }
}

/// A tool's result as MCP content: its blocks when it has them, else its text.
fn to_result(out: ToolOutput) -> CallToolResult {
    let blocks: Vec<McpBlock> = if out.content.is_empty() {
        vec![McpBlock::text(out.output)]
    } else {
        out.content
            .into_iter()
            .map(|b| match b {
                ContentBlock::Text { text } => McpBlock::text(text),
                ContentBlock::Image { data, mime_type } => McpBlock::image(data, mime_type),
                ContentBlock::ResourceLink { uri, name } => McpBlock::resource_link(Resource::new(uri, name)),
            })
            .collect()
    };
    let mut result = if out.is_error { CallToolResult::error(blocks) } else { CallToolResult::success(blocks) };
    result.structured_content = out.structured_content;
    result
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools().enable_resources().build();
        ServerConfig::new(capabilities).with_instructions(format!(
            "The Suzumio agent `{}`: its allowed tools, and its artifacts as resources.",
            self.agent
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let input = Value::Object(request.arguments.unwrap_or_default());
        let result = match self.call(&request.name, input).await {
            Ok(out) => to_result(out),
            Err(message) => CallToolResult::error(vec![McpBlock::text(message)]),
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut files = Vec::new();
        list_files(&self.artifacts_dir(), Path::new(""), &mut files);
        files.sort();
        let prefix = self.uri_prefix();
        let resources = files
            .into_iter()
            .map(|(rel, size)| {
                let rel = rel.to_string_lossy().into_owned();
                Resource::new(format!("{prefix}{rel}"), rel).with_size(size)
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let refused =
            || ErrorData::resource_not_found(format!("No such artifact of {}: {}", self.agent, request.uri), None);
        let rel = request.uri.strip_prefix(&self.uri_prefix()).ok_or_else(refused)?;
        let bytes = read_artifact(&self.artifacts_dir(), Path::new(rel)).map_err(|e| match e {
            ReadError::Refused => refused(),
            ReadError::Io(e) => ErrorData::internal_error(format!("reading {}: {e}", request.uri), None),
        })?;
        // Text as text; anything else (the saved images of rich results) as a base64 blob.
        let contents = match String::from_utf8(bytes) {
            Ok(text) => ResourceContents::text(text, request.uri.clone()),
            Err(e) => {
                let blob = base64::engine::general_purpose::STANDARD.encode(e.into_bytes());
                ResourceContents::blob(blob, request.uri.clone()).with_mime_type(mime_type(rel))
            }
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

/// The regular files under `dir` (relative paths and sizes); links are not followed.
fn list_files(dir: &Path, rel: &Path, out: &mut Vec<(PathBuf, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir.join(rel)) else { return };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else { continue };
        let path = rel.join(entry.file_name());
        if kind.is_dir() {
            list_files(dir, &path, out);
        } else if kind.is_file() {
            out.push((path, entry.metadata().map(|m| m.len()).unwrap_or(0)));
        }
    }
}

enum ReadError {
    Refused,
    Io(std::io::Error),
}

/// The type of a binary artifact, from its name.
fn mime_type(name: &str) -> &'static str {
    let ext = Path::new(name).extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        _ => "application/octet-stream",
    }
}

/// The bytes of `rel` under `dir`: plain components only, each directory opened from its parent
/// with `O_NOFOLLOW`, so neither `..` nor a link leads out of the agent's artifacts.
fn read_artifact(dir: &Path, rel: &Path) -> Result<Vec<u8>, ReadError> {
    let parts: Vec<&std::ffi::OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(p) => Ok(p),
            _ => Err(ReadError::Refused),
        })
        .collect::<Result<_, _>>()?;
    let Some((file, dirs)) = parts.split_last() else { return Err(ReadError::Refused) };
    let nofollow = |e: rustix::io::Errno| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR | rustix::io::Errno::NOENT => ReadError::Refused,
        e => ReadError::Io(e.into()),
    };
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut fd = rustix::fs::openat(CWD, dir, dir_flags, Mode::empty()).map_err(nofollow)?;
    for part in dirs {
        fd = rustix::fs::openat(&fd, *part, dir_flags, Mode::empty()).map_err(nofollow)?;
    }
    let file_flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd = rustix::fs::openat(&fd, *file, file_flags, Mode::empty()).map_err(nofollow)?;
    let file = std::fs::File::from(fd);
    if !file.metadata().map_err(ReadError::Io)?.is_file() {
        return Err(ReadError::Refused);
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_RESOURCE_BYTES), &mut bytes)
        .map_err(ReadError::Io)?;
    Ok(bytes)
}
