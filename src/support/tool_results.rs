//! What the controller makes of a runner-side tool's answer before anyone else sees it: a rich
//! result's `structuredContent` checked against the tool's `outputSchema`, `isError: true` made
//! a failed call, images saved under the agent's artifacts directory, and the paths in a pack's
//! errors (`/toolpacks/<id>/runner.mjs:12:7` as the runner sees them) mapped back to the
//! project's files (`toolpacks/notes/runner.mjs:12:7`).
//!
//! Architecture invariant: like the quota walk, saving an image never follows a link inside the
//! agent's directory: each directory is opened from its parent's fd with `O_NOFOLLOW`, and the
//! file is created with `O_EXCL`.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use rustix::fs::{CWD, Mode, OFlags};
use serde_json::Value;

use super::{ToolHost, ToolOutput};
use crate::backend::RunnerBackend;
use crate::rpc;
use crate::toolpack::{PackSource, ToolError, output};

/// The directory under an agent's artifacts where the images of tool results are kept.
pub const IMAGES_DIR: &str = "tool-images";

/// A runner's successful reply, checked and adapted (see the module header).
pub fn adapt(host: &ToolHost, agent: &str, tool: &str, reply: rpc::ToolOutput) -> Result<ToolOutput, ToolError> {
    let mut out = ToolOutput::from(reply);
    if let Some((_, def)) = host.project.snapshot().registry.tool(tool) {
        output::check_structured(def, &out).map_err(ToolError::Failed)?;
    }
    if out.is_error {
        let text = if out.output.trim().is_empty() { format!("{tool} reported an error") } else { out.output };
        return Err(ToolError::Failed(text));
    }
    if out.images().next().is_some() {
        let saved = save_images(&host.project.config.root, agent, &out).map_err(|e| {
            ToolError::Internal(format!("cannot save the images of {tool}'s result in the agent's artifacts: {e}"))
        })?;
        let shown: Vec<Value> = saved.iter().map(|p| Value::String(p.display().to_string())).collect();
        out.metadata.get_or_insert_with(Default::default).insert("imageArtifacts".into(), Value::Array(shown));
    }
    Ok(out)
}

/// Each image of `out` written to `<root>/artifacts/<agent>/tool-images/<uuid>.<ext>`; the paths
/// returned are relative to the project.
fn save_images(root: &Path, agent: &str, out: &ToolOutput) -> std::io::Result<Vec<PathBuf>> {
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let agent_dir = crate::backend::spec::artifacts_dir(root, agent);
    std::fs::create_dir_all(&agent_dir)?;
    let parent = rustix::fs::openat(CWD, &agent_dir, dir_flags, Mode::empty())?;
    match rustix::fs::mkdirat(&parent, IMAGES_DIR, Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let images = rustix::fs::openat(&parent, IMAGES_DIR, dir_flags, Mode::empty())?;
    let mut saved = Vec::new();
    for (mime, data) in out.images() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        let ext = mime.strip_prefix("image/").unwrap_or("bin");
        let name = format!("{}.{ext}", uuid::Uuid::now_v7().simple());
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&images, name.as_str(), flags, Mode::from_raw_mode(0o644))?;
        std::io::Write::write_all(&mut std::fs::File::from(fd), &bytes)?;
        saved.push(Path::new("artifacts").join(agent).join(IMAGES_DIR).join(name));
    }
    Ok(saved)
}

/// A runner-side error of a local pack's tool with the pack's paths as the runner sees them
/// replaced by the project's (relative to the project directory when inside it).
pub fn relocate(host: &ToolHost, backend: &dyn RunnerBackend, tool: &str, message: String) -> String {
    let served = host.project.snapshot();
    let Some((pack, _)) = served.registry.tool(tool) else { return message };
    let PackSource::Local { root, .. } = &pack.source else { return message };
    let project = &host.project.config.root;
    let project = project.canonicalize().unwrap_or_else(|_| project.clone());
    let canonical = root.canonicalize().unwrap_or_else(|_| root.clone());
    let shown = canonical.strip_prefix(&project).map(Path::to_path_buf).unwrap_or_else(|_| canonical.clone());
    let mut message = message;
    for seen in [backend.pack_root_in_runner(&pack.id, root), canonical, root.clone()] {
        let seen = format!("{}/", seen.display());
        if seen != "/" {
            message = message.replace(&seen, &format!("{}/", shown.display()));
        }
    }
    message
}
