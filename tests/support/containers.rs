//! The `containers` fixture project with its agents' runners in real Docker containers (or as
//! local processes): what the container tests share. Each test gets its own project name, so
//! tests running in parallel never share a container; the containers are removed on drop.

use std::sync::Arc;

use serde_json::{Value, json};
use suzumio::calls::execute_tool;
use suzumio::config::BackendKind;
use suzumio::support::ToolHost;
use suzumio::support::runners::AgentRunners;

use super::TempProject;

pub struct ContainerProject {
    pub project: TempProject,
    pub tools: Arc<ToolHost>,
    pub runners: Arc<AgentRunners>,
}

/// The fixture named `<prefix>-<unique>`, with `docker` (the body of a YAML flow mapping such
/// as `diskQuota: 8m`) under `backend.docker` when given, opened with runners of `kind`.
pub async fn start(prefix: &str, docker: Option<&str>, kind: BackendKind) -> ContainerProject {
    start_fixture("containers", prefix, docker, kind).await
}

/// The fixture with the runners in containers of `image` (which must exist).
pub async fn start_with_image(prefix: &str, image: &str) -> ContainerProject {
    start_with_backend("containers", prefix, &format!("  image: {image}\n"), BackendKind::Docker).await
}

/// The fixture (default image) opened after `prepare` had its directory: e.g. to give the
/// project to another user before the runners learn whose it is.
pub async fn start_prepared(prefix: &str, prepare: impl FnOnce(&std::path::Path)) -> ContainerProject {
    start_with_backend_prepared("containers", prefix, "", BackendKind::Docker, prepare).await
}

/// [`start`] with another fixture project, whose name line is `name: <fixture>` and whose
/// agents are `a` and `b` (or a subset).
pub async fn start_fixture(fixture: &str, prefix: &str, docker: Option<&str>, kind: BackendKind) -> ContainerProject {
    let backend = docker.map(|docker| format!("  docker: {{{docker}}}\n"));
    start_with_backend(fixture, prefix, backend.as_deref().unwrap_or(""), kind).await
}

/// The fixture with `lines` (indented YAML keys) added to its `backend:` section.
async fn start_with_backend(fixture: &str, prefix: &str, lines: &str, kind: BackendKind) -> ContainerProject {
    start_with_backend_prepared(fixture, prefix, lines, kind, |_| {}).await
}

async fn start_with_backend_prepared(
    fixture: &str,
    prefix: &str,
    lines: &str,
    kind: BackendKind,
    prepare: impl FnOnce(&std::path::Path),
) -> ContainerProject {
    let project = TempProject::copy_of(fixture);
    let unique = project.dir.file_name().unwrap().to_string_lossy().rsplit('-').next().unwrap().to_string();
    let path = project.dir.join("suzumio.yaml");
    let mut yaml = std::fs::read_to_string(&path)
        .unwrap()
        .replace(&format!("name: {fixture}"), &format!("name: {prefix}-{unique}"));
    if !lines.is_empty() {
        yaml = yaml.replace("backend:\n", &format!("backend:\n{lines}"));
    }
    std::fs::write(&path, yaml).unwrap();
    prepare(&project.dir);
    let tools = suzumio::controller::open(&project.dir).unwrap_or_else(|e| panic!("{e}"));
    let runners = suzumio::controller::runners_with(&tools, kind, super::static_runner())
        .await
        .unwrap_or_else(|e| panic!("{kind:?} backend (for Docker, start it with scripts/setup.sh): {e}"));
    ContainerProject { project, tools, runners }
}

impl ContainerProject {
    /// One tool call in its own short activation (as `suzumio tool call` does); the error as
    /// the model sees it.
    pub async fn call(&self, agent: &str, tool: &str, input: Value) -> Result<String, String> {
        let activation = self.tools.store.start_activation(agent, "test", &[]).unwrap();
        let result = execute_tool(&self.tools, self.runners.as_ref(), agent, &activation.id, tool, input).await;
        self.tools
            .store
            .finish_activation(&activation.id, suzumio::store::ActivationOutcome::Completed, None, None)
            .unwrap();
        result.map(|o| o.output).map_err(|e| e.to_string())
    }

    /// `shell.exec` of `command` that must succeed; its output.
    pub async fn sh(&self, agent: &str, command: &str) -> String {
        self.call(agent, "shell.exec", json!({ "command": command }))
            .await
            .unwrap_or_else(|e| panic!("shell.exec {command}: {e}"))
    }
}

impl Drop for ContainerProject {
    fn drop(&mut self) {
        let name = &self.tools.project.config.name;
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &format!("suzumio-{name}-a"), &format!("suzumio-{name}-b")])
            .output();
    }
}
