//! Where a pack's JavaScript went wrong, in the author's terms: `suzumio check` compiles every
//! module of a local pack and loads its runner module in a sandbox to see that each declared
//! tool has a handler; and the stacks of errors at run time are cut to the pack's own frames.
//!
//! The sandbox is a [`JsHost`] whose [`HostOps`] refuse every operation: a module loaded for the
//! check gets no store, no state, no file system and no process of the host, whatever it asks
//! for, and its evaluation has the pack's deadline and heap limit.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use super::{CallScope, HostFuture, HostOps, JsCall, JsError, JsHost, JsLimits, ModuleSpec, RUNNER_GLUE};
use crate::toolpack::ToolError;

/// One problem with a pack module, located in the file that has it when JavaScript said where.
#[derive(Clone, Debug, PartialEq)]
pub struct ModuleProblem {
    pub file: PathBuf,
    /// 1-based line and column; `None` when QuickJS gave no position.
    pub position: Option<(usize, usize)>,
    pub message: String,
}

/// Parse a module without evaluating it: the first syntax error with its position. Its imports
/// are resolved as a pack's are (relative modules beneath `root`, the built-in `node:`
/// modules), so an imported module's syntax error is found too, in its own file.
pub fn compile_module(path: &Path, root: &Path, pack_id: &str) -> Result<(), ModuleProblem> {
    let problem = |message: String| ModuleProblem { file: path.to_path_buf(), position: None, message };
    let source = std::fs::read_to_string(path).map_err(|e| problem(format!("cannot read the module: {e}")))?;
    let runtime = rquickjs::Runtime::new().map_err(|e| problem(e.to_string()))?;
    runtime.set_memory_limit(64 << 20);
    let internal = super::node::sources().map(|(name, source)| (name.to_string(), source.to_string())).collect();
    runtime.set_loader(
        super::loader::PackResolver::new(root.to_path_buf(), pack_id.to_string()),
        super::loader::PackLoader { internal },
    );
    let context = rquickjs::Context::full(&runtime).map_err(|e| problem(e.to_string()))?;
    let name = path.to_string_lossy().into_owned();
    context.with(|ctx| {
        use rquickjs::CatchResultExt;
        match rquickjs::Module::declare(ctx.clone(), name.clone(), source).catch(&ctx) {
            Ok(_) => Ok(()),
            Err(rquickjs::CaughtError::Exception(e)) => {
                let kind = e.get::<_, String>("name").unwrap_or_else(|_| "SyntaxError".into());
                let message = format!("{kind}: {}", e.message().unwrap_or_default());
                let located = e.stack().as_deref().and_then(first_location);
                Err(match located {
                    Some((file, line, col)) => {
                        ModuleProblem { file: PathBuf::from(file), position: Some((line, col)), message }
                    }
                    None => problem(message),
                })
            }
            Err(other) => Err(problem(other.to_string())),
        }
    })
}

/// The first `file:line:col` of a QuickJS stack (`    at f (/p/runner.mjs:12:7)` or
/// `    at /p/runner.mjs:12:7`), skipping the host's own frames.
pub fn first_location(stack: &str) -> Option<(String, usize, usize)> {
    stack.lines().filter_map(location_of).find(|(file, _, _)| !file.starts_with("suzumio:"))
}

fn location_of(line: &str) -> Option<(String, usize, usize)> {
    let frame = line.trim().strip_prefix("at ")?;
    let place = match (frame.rfind('('), frame.ends_with(')')) {
        (Some(open), true) => &frame[open + 1..frame.len() - 1],
        _ => frame,
    };
    let (rest, col) = place.rsplit_once(':')?;
    let (file, line) = rest.rsplit_once(':')?;
    Some((file.to_string(), line.parse().ok()?, col.parse().ok()?))
}

/// A stack without the host's frames (the glue, native functions): what a pack author can act on.
pub fn pack_frames(stack: &str) -> String {
    stack
        .lines()
        .filter(|line| {
            let line = line.trim();
            !line.is_empty() && !line.contains("suzumio:") && line != "at <anonymous>" && !line.contains("(native)")
        })
        .map(|line| format!("    {}", line.trim()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Load a runner module as the runner would (its factory called with a context whose operations
/// all refuse) and return the names of the tools it has handlers for.
pub async fn runner_handlers(
    pack_id: &str,
    root: &Path,
    module: &Path,
    limits: JsLimits,
) -> Result<Vec<String>, ModuleProblem> {
    let spec = ModuleSpec {
        pack_id: pack_id.to_string(),
        root: root.to_path_buf(),
        module: module.to_path_buf(),
        glue: RUNNER_GLUE,
        limits,
    };
    let host = JsHost::spawn(spec, Arc::new(Sandbox)).await.map_err(|e| problem_of(module, e))?;
    let base = json!({
        "project": "check",
        "agentId": "check",
        "activationId": null,
        "workspace": "/workspace",
        "toolpackId": pack_id,
    });
    let call = JsCall { export: "load", args: vec![base.to_string(), "[]".into()], scope: CallScope::default() };
    let names = host.call(call).await.map_err(|e| problem_of(module, e))?;
    Ok(names.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string).collect())
}

/// Load a controller module (its top level evaluated, imports resolved) in the sandbox.
pub async fn load_controller(pack_id: &str, root: &Path, module: &Path, limits: JsLimits) -> Result<(), ModuleProblem> {
    let spec = ModuleSpec {
        pack_id: pack_id.to_string(),
        root: root.to_path_buf(),
        module: module.to_path_buf(),
        glue: super::CONTROLLER_GLUE,
        limits,
    };
    JsHost::spawn(spec, Arc::new(Sandbox)).await.map(drop).map_err(|e| problem_of(module, e))
}

/// A sandboxed load's error, located in the file its stack names first.
fn problem_of(module: &Path, error: JsError) -> ModuleProblem {
    let (message, stack) = match &error {
        JsError::Exception { message, stack, .. } => (message.clone(), stack.clone()),
        JsError::Load { message, .. } => (message.clone(), Some(message.clone())),
        other => (other.to_string(), None),
    };
    // A load error's message carries the stack lines after the first line.
    let headline = message.lines().next().unwrap_or_default().to_string();
    match stack.as_deref().and_then(first_location) {
        Some((file, line, col)) => {
            ModuleProblem { file: PathBuf::from(file), position: Some((line, col)), message: headline }
        }
        None => ModuleProblem { file: module.to_path_buf(), position: None, message: headline },
    }
}

/// The check's host: every operation refused, so nothing a module does while it is checked
/// reaches the controller or the machine.
struct Sandbox;

const SANDBOXED: &str = "is not available while `suzumio check` loads the module";

impl HostOps for Sandbox {
    fn call(&self, _pack_id: &str, _scope: &CallScope, op: &str, _args: Value) -> Result<Value, ToolError> {
        Err(ToolError::Failed(format!("{op} {SANDBOXED}")))
    }

    fn call_async(&self, _pack_id: &str, _scope: &CallScope, op: &str, _args: Value) -> HostFuture {
        let message = format!("{op} {SANDBOXED}");
        Box::pin(async move { Err(ToolError::Failed(message)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_from_frames() {
        assert_eq!(location_of("    at f (/p/runner.mjs:12:7)"), Some(("/p/runner.mjs".into(), 12, 7)));
        assert_eq!(location_of("    at /p/runner.mjs:3:1"), Some(("/p/runner.mjs".into(), 3, 1)));
        assert_eq!(location_of("    at <anonymous>"), None);
        assert_eq!(
            first_location("    at invoke (suzumio:glue:60:9)\n    at add (/p/lib.mjs:2:3)"),
            Some(("/p/lib.mjs".into(), 2, 3))
        );
    }

    #[test]
    fn a_syntax_error_is_located() {
        let dir = std::env::temp_dir().join(format!("suzumio-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("runner.mjs");
        std::fs::write(&path, "export const a = 1;\nconst b = = 2;\n").unwrap();
        let problem = compile_module(&path, &dir, "p").unwrap_err();
        assert_eq!(problem.file, path);
        assert_eq!(problem.position.map(|p| p.0), Some(2), "{problem:?}");
        assert!(problem.message.starts_with("SyntaxError: "), "{problem:?}");
        std::fs::write(&path, "export const a = 1;\n").unwrap();
        assert_eq!(compile_module(&path, &dir, "p"), Ok(()));
        // Imports resolve as a pack's do: a relative module (whose own syntax error is found
        // in its file) and the built-in node: modules.
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::write(dir.join("lib/util.mjs"), "export const u = 1;\n").unwrap();
        std::fs::write(
            &path,
            "import { u } from './lib/util.mjs';\nimport path from 'node:path';\nexport const a = u;\n",
        )
        .unwrap();
        assert_eq!(compile_module(&path, &dir, "p"), Ok(()));
        std::fs::write(dir.join("lib/util.mjs"), "export const u = = 1;\n").unwrap();
        let problem = compile_module(&path, &dir, "p").unwrap_err();
        assert_eq!(problem.file, dir.join("lib/util.mjs"), "{problem:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
