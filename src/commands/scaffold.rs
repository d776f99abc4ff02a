//! `suzumio init` and `suzumio toolpack new`: write a runnable project or a starter toolpack
//! from templates embedded in the binary (`templates/`, `projects/demo`), so neither needs this
//! repository at run time.

use std::fmt::Write as _;
use std::path::{Component, Path, PathBuf};

use super::{CliError, Output};
use crate::toolpack::packaged;
use crate::toolpack::registry::MANIFEST_FILE;

/// What `suzumio init` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum Template {
    /// One agent that writes a file and submits.
    Minimal,
    /// A coordinator `pm` and two workers under the communication policy.
    Team,
    /// The demo project: plan, scheduler and a local review pack.
    Demo,
}

pub struct InitOptions {
    pub template: Template,
    /// Write into a directory that is not empty (files of the template are overwritten).
    pub force: bool,
    /// Copy the packaged `scheduler` and `plan` packs into `toolpacks/` and register them by path.
    pub copy_packs: bool,
}

const MINIMAL: &[(&str, &str)] = &[
    ("suzumio.yaml", include_str!("../../templates/minimal/suzumio.yaml")),
    ("script.yaml", include_str!("../../templates/minimal/script.yaml")),
];
const TEAM: &[(&str, &str)] = &[
    ("suzumio.yaml", include_str!("../../templates/team/suzumio.yaml")),
    ("script.yaml", include_str!("../../templates/team/script.yaml")),
];
const DEMO: &[(&str, &str)] = &[
    ("suzumio.yaml", include_str!("../../projects/demo/suzumio.yaml")),
    ("script.yaml", include_str!("../../projects/demo/script.yaml")),
    ("fragments/task.md", include_str!("../../projects/demo/fragments/task.md")),
    (
        "toolpacks/review/suzumio.toolpack.json",
        include_str!("../../projects/demo/toolpacks/review/suzumio.toolpack.json"),
    ),
    ("toolpacks/review/runner.mjs", include_str!("../../projects/demo/toolpacks/review/runner.mjs")),
    ("toolpacks/review/controller.mjs", include_str!("../../projects/demo/toolpacks/review/controller.mjs")),
];
const TOOLPACK: &[(&str, &str)] = &[
    (MANIFEST_FILE, include_str!("../../templates/toolpack/suzumio.toolpack.json")),
    ("runner.mjs", include_str!("../../templates/toolpack/runner.mjs")),
    ("controller.mjs", include_str!("../../templates/toolpack/controller.mjs")),
    ("README.md", include_str!("../../templates/toolpack/README.md")),
];

/// The commented real providers, for the demo's config (the other templates have them inline).
const PROVIDER_COMMENTS: &str = "          script: ./script.yaml
        # A real model instead of the script: uncomment a provider here and point the presets
        # below at it (keys come from the environment, never from this file).
        # openai:
        #   type: openai-compatible
        #   baseURL: https://api.openai.com/v1
        #   apiKeyEnv: OPENAI_API_KEY      # the key is read from $OPENAI_API_KEY
        # anthropic:
        #   type: anthropic
        #   apiKeyEnv: ANTHROPIC_API_KEY   # the key is read from $ANTHROPIC_API_KEY
";

/// `suzumio init <dir>`.
pub fn init(dir: &Path, options: &InitOptions) -> Result<Output, CliError> {
    refuse_non_empty(dir, options.force, "--force")?;
    let name = project_name(dir);
    let mut files: Vec<(String, String)> = match options.template {
        Template::Minimal => MINIMAL,
        Template::Team => TEAM,
        Template::Demo => DEMO,
    }
    .iter()
    .map(|(path, text)| (path.to_string(), text.to_string()))
    .collect();
    for (path, text) in &mut files {
        if path == "suzumio.yaml" {
            *text = match options.template {
                Template::Demo => text.replacen("name: demo\n", &format!("name: {name}\n"), 1).replacen(
                    "          script: ./script.yaml\n",
                    PROVIDER_COMMENTS,
                    1,
                ),
                _ => text.replace("__NAME__", &name),
            };
            if options.copy_packs {
                *text = register_packs_by_path(text);
            }
        }
    }
    if options.copy_packs {
        for pack in packaged::PACKS {
            for (file, text) in pack.files {
                files.push((format!("toolpacks/{}/{file}", pack.id), text.to_string()));
            }
        }
    }
    write_all(dir, &files)?;
    let shown = dir.display();
    let mut out = format!("suzumio: wrote a {} project in {shown}:\n", options.template);
    for (path, _) in &files {
        let _ = writeln!(out, "  {path}");
    }
    let _ = write!(
        out,
        "\nNext:\n  suzumio check {shown}\n  suzumio run {shown} --until-idle    \
         # sends the task to pm first (kickoff: true); Docker, or --backend process without containers (no isolation)\n  \
         then open the WebUI: suzumio run {shown} serves it at http://127.0.0.1:39400\n\
         The model is scripted (script.yaml): no API key needed. To use a real one, see the comments \
         under backend.runner.models in suzumio.yaml.\n"
    );
    Ok(out.into())
}

/// `suzumio toolpack new <dir>`: the pack's id is the directory's name.
pub fn toolpack_new(dir: &Path, force: bool) -> Result<Output, CliError> {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if !crate::toolpack::is_valid_pack_id(&name) {
        return Err(CliError::Input(format!(
            "cannot name a toolpack {name:?} after its directory: use only A-Z, a-z, 0-9, dot, underscore or dash"
        )));
    }
    refuse_non_empty(dir, force, "--force")?;
    let files: Vec<(String, String)> =
        TOOLPACK.iter().map(|(path, text)| (path.to_string(), text.replace("__NAME__", &name))).collect();
    write_all(dir, &files)?;
    // Under <project>/toolpacks/<name> the entry is relative to the project; otherwise as given.
    let in_project = dir.parent().and_then(Path::file_name).is_some_and(|p| p == "toolpacks");
    let entry = if in_project { format!("./toolpacks/{name}") } else { dir.display().to_string() };
    let mut out = format!("suzumio: wrote toolpack {name} in {}:\n", dir.display());
    for (path, _) in &files {
        let _ = writeln!(out, "  {path}");
    }
    let project = if in_project { dir.parent().and_then(Path::parent) } else { None };
    let project = project.map_or_else(|| "<project>".to_string(), |p| p.display().to_string());
    let _ = write!(
        out,
        "\nAdd two lines to {project}/suzumio.yaml:\n  \
         under tools.toolpacks:        - path: {entry}\n  \
         in an agent's tools list:     {name}.hello    (e.g. tools: [file.*, {name}.hello])\n\
         Then:\n  suzumio check {project}\n  suzumio tool call {project} --agent <agent> {name}.hello \
         '{{\"name\": \"Ada\"}}' --backend process\n"
    );
    Ok(out.into())
}

/// A directory that exists with anything in it is refused unless `force`.
fn refuse_non_empty(dir: &Path, force: bool, flag: &str) -> Result<(), CliError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() && !force {
                return Err(CliError::Input(format!(
                    "{} is not empty: choose a new or empty directory, or pass {flag} to write into it \
                     (files of the same name are overwritten)",
                    dir.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            Err(CliError::Input(format!("{} is a file, not a directory", dir.display())))
        }
        Err(e) => Err(CliError::Failed(format!("cannot read {}: {e}", dir.display()))),
    }
}

fn write_all(dir: &Path, files: &[(String, String)]) -> Result<(), CliError> {
    for (rel, text) in files {
        let path: PathBuf = dir.join(rel);
        debug_assert!(Path::new(rel).components().all(|c| matches!(c, Component::Normal(_))));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| CliError::Failed(format!("cannot create {}: {e}", parent.display())))?;
        }
        std::fs::write(&path, text).map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display())))?;
    }
    Ok(())
}

/// The project's name from its directory, kept to the characters names use.
fn project_name(dir: &Path) -> String {
    let base = std::path::absolute(dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let name: String =
        base.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') { c } else { '-' }).collect();
    let name = name.trim_matches('-');
    if name.is_empty() { "project".to_string() } else { name.to_string() }
}

/// Point `tools.toolpacks` at the copies in `toolpacks/`: a `- scheduler`/`- plan` entry becomes
/// a path entry, and a list without them gets both.
fn register_packs_by_path(yaml: &str) -> String {
    let mut out = String::new();
    let mut added = false;
    for line in yaml.lines() {
        let id = line.trim_start().strip_prefix("- ").filter(|id| packaged::find(id.trim()).is_some());
        match id {
            Some(id) => {
                let indent = &line[..line.len() - line.trim_start().len()];
                let id = id.trim();
                let _ = writeln!(out, "{indent}- path: ./toolpacks/{id}\n{indent}  id: {id}");
                added = true;
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    if added {
        return out;
    }
    let entries: String =
        packaged::PACKS.iter().map(|p| format!("    - path: ./toolpacks/{id}\n      id: {id}\n", id = p.id)).collect();
    out.replacen("  toolpacks:\n", &format!("  toolpacks:\n{entries}"), 1)
}
