//! Module resolution and loading confined to one toolpack root.
//!
//! Relative specifiers (`./x.mjs`, `../lib/y.js`) resolve against the importing module's
//! directory, are normalized, followed through symlinks and must still be inside the pack root,
//! and must end in `.mjs` or `.js`. The Node-compatible modules (`node:path`, or bare `path`;
//! see [`super::node`]) are served from memory; any other module name (`lodash`, `node:net`)
//! is refused with the list of what is available, as are URLs and absolute paths. Internal modules (`suzumio:*`, the glue) are served from memory
//! and only to the host, never to a pack's module.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use rquickjs::loader::{Loader, Resolver};
use rquickjs::module::Declared;
use rquickjs::{Ctx, Error, Module, Result};

pub struct PackResolver {
    root: PathBuf,
    pack_id: String,
    /// The whole text of the last refusal: QuickJS cuts exception messages at 255 bytes.
    last_refusal: Arc<Mutex<Option<String>>>,
}

impl PackResolver {
    pub fn new(root: PathBuf, pack_id: String) -> Self {
        PackResolver { root, pack_id, last_refusal: Arc::default() }
    }

    /// Where the whole text of the last refusal is kept (see [`full_refusal`]).
    pub fn last_refusal(&self) -> Arc<Mutex<Option<String>>> {
        self.last_refusal.clone()
    }

    fn refuse(&self, base: &str, name: &str, why: &str) -> Error {
        let message = format!("toolpack {}: {why}", self.pack_id);
        let whole = format!("Error resolving module '{name}' from '{base}': {message}");
        *self.last_refusal.lock().unwrap_or_else(|p| p.into_inner()) = Some(whole);
        Error::new_resolving_message(base, name, message)
    }
}

/// `message` (a load error as JavaScript reported it) with the whole text of the refusal it
/// reports, when it is that refusal cut short.
pub fn full_refusal(message: String, last_refusal: &Mutex<Option<String>>) -> String {
    let whole = last_refusal.lock().unwrap_or_else(|p| p.into_inner()).take();
    match whole {
        Some(whole) if message.strip_prefix("ReferenceError: ").is_some_and(|cut| whole.starts_with(cut)) => {
            format!("ReferenceError: {whole}")
        }
        _ => message,
    }
}

impl Resolver for PackResolver {
    fn resolve<'js>(
        &mut self,
        _ctx: &Ctx<'js>,
        base: &str,
        name: &str,
        _attributes: Option<rquickjs::loader::ImportAttributes<'js>>,
    ) -> Result<String> {
        if name.starts_with("suzumio:") {
            // Internal modules are the host's (the glue); a pack module's name is its path.
            if Path::new(base).is_absolute() {
                return Err(self.refuse(
                    base,
                    name,
                    "suzumio: modules are internal to the host and cannot be imported",
                ));
            }
            return Ok(name.to_string());
        }
        if let Some(module) = super::node::canonical(name) {
            return Ok(module.to_string());
        }
        if super::node::is_module_name(name) && !name.contains("://") && !name.starts_with("data:") {
            let why = format!(
                "module '{name}' is not available in toolpacks (no packages are installed). They can import relative \
                 modules such as ./lib.mjs and these built-in modules (also without `node:`): {}",
                super::node::supported()
            );
            return Err(self.refuse(base, name, &why));
        }
        // The glue imports the pack module by its absolute path; pack code may not.
        let from_glue = base.starts_with("suzumio:") && name.starts_with('/');
        if !(name.starts_with("./") || name.starts_with("../") || from_glue) {
            let why = if name.contains("://") || name.starts_with("data:") {
                "URL imports are not allowed; ship the module inside the toolpack"
            } else if name.starts_with('/') {
                "absolute imports are not allowed; use a path relative to the importing module"
            } else {
                "bare module specifiers are not allowed (no packages are installed); use a relative path such as ./lib.mjs"
            };
            return Err(self.refuse(base, name, why));
        }
        let base_dir = if base.starts_with("suzumio:") {
            self.root.clone()
        } else {
            Path::new(base).parent().map(Path::to_path_buf).unwrap_or_else(|| self.root.clone())
        };
        let mut joined = PathBuf::new();
        for c in base_dir.join(name).components() {
            match c {
                Component::ParentDir => {
                    joined.pop();
                }
                Component::CurDir => {}
                other => joined.push(other),
            }
        }
        if joined.extension().is_none_or(|e| e != "mjs" && e != "js") {
            return Err(self.refuse(base, name, "only .mjs and .js modules can be imported"));
        }
        let canonical_root = self.root.canonicalize().unwrap_or_else(|_| self.root.clone());
        let resolved = joined.canonicalize().map_err(|_| self.refuse(base, name, "module file does not exist"))?;
        if !resolved.starts_with(&canonical_root) {
            return Err(self.refuse(base, name, "imports must stay inside the toolpack directory"));
        }
        Ok(resolved.to_string_lossy().into_owned())
    }
}

/// Loads resolved files from disk, and internal modules from memory.
pub struct PackLoader {
    pub internal: HashMap<String, String>,
}

impl Loader for PackLoader {
    fn load<'js>(
        &mut self,
        ctx: &Ctx<'js>,
        name: &str,
        _attributes: Option<rquickjs::loader::ImportAttributes<'js>>,
    ) -> Result<Module<'js, Declared>> {
        let source = match self.internal.get(name) {
            Some(source) => source.clone(),
            None => std::fs::read_to_string(name).map_err(|e| Error::new_loading_message(name, e.to_string()))?,
        };
        Module::declare(ctx.clone(), name, source)
    }
}
