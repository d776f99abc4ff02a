//! Project configuration: `<dir>/suzumio.yaml` loaded (env substitution, `@import`, `extends`),
//! validated section by section with every error collected (file:line, key path, "did you
//! mean", or why a key was retired), and turned into the typed [`ProjectConfig`]. It does not
//! read toolpack manifests (see `toolpack`).

pub mod diag;
pub mod load;
pub mod model;
pub mod node;
pub mod read;
pub mod validate;

use std::path::{Path, PathBuf};

pub use diag::{Diagnostic, Diagnostics, InvalidInput};
pub use model::*;

pub const CONFIG_FILE: &str = "suzumio.yaml";

/// Find the config file: `<dir>/suzumio.yaml`, or the path itself when it names a file.
pub fn locate(path: &Path) -> Result<(PathBuf, PathBuf), InvalidInput> {
    let fail = |message: String| {
        let mut d = Diagnostics::default();
        d.error(None, "", message);
        InvalidInput(d)
    };
    let canonical =
        path.canonicalize().map_err(|e| fail(format!("project directory {} cannot be opened: {e}", path.display())))?;
    let (root, file) = if canonical.is_dir() {
        let file = canonical.join(CONFIG_FILE);
        if !file.is_file() {
            let mut d = Diagnostics::default();
            let hint = format!("`suzumio init {}` writes a new project there", path.display());
            d.error_hint(None, "", format!("no {CONFIG_FILE} in {}", path.display()), Some(hint));
            return Err(InvalidInput(d));
        }
        (canonical, file)
    } else {
        let root = canonical.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/"));
        (root, canonical)
    };
    Ok((root, file))
}

/// The outcome of reading a config: the config when it is valid, the toolpack list as far as it
/// could be read (so toolpack errors can be reported alongside config errors), and diagnostics.
pub struct Loaded {
    pub config: Option<ProjectConfig>,
    pub toolpacks: Vec<ToolpackRef>,
    pub diagnostics: Diagnostics,
}

/// Load and validate a project config, collecting every problem.
pub fn load_config(path: &Path, env: &dyn load::EnvSource) -> Result<Loaded, InvalidInput> {
    let (root, file) = locate(path)?;
    let mut loader = load::Loader::new(env);
    let tree = loader.load_root(&file);
    let mut diagnostics = loader.diags;
    let (config, toolpacks) = match tree {
        Some(tree) => validate::validate(&tree, &file, &root, &mut diagnostics),
        None => (None, Vec::new()),
    };
    Ok(Loaded { config, toolpacks, diagnostics })
}
