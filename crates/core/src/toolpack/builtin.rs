//! The built-in `core`, `shell`, `web` and `git` packs, declared as manifests embedded in the binary and
//! read by the same parser as local packs (so their schemas are compiled and checked the same
//! way). Their handlers are Rust code elsewhere; these files only declare names and schemas.

use std::path::Path;
use std::sync::Arc;

use crate::config::diag::Diagnostics;
use crate::config::model::BuiltinPack;
use crate::config::node::parse_json;
use crate::toolpack::manifest::{Manifest, ManifestOrigin, parse_manifest};

fn source(pack: BuiltinPack) -> &'static str {
    match pack {
        BuiltinPack::Core => include_str!("builtin/core.json"),
        BuiltinPack::Shell => include_str!("builtin/shell.json"),
        BuiltinPack::Web => include_str!("builtin/web.json"),
        BuiltinPack::Git => include_str!("builtin/git.json"),
    }
}

/// The manifest of a built-in pack. The embedded files are checked by the tests below, so a
/// failure here is a bug in this binary, reported as diagnostics like any other manifest.
pub fn manifest(pack: BuiltinPack) -> Result<Manifest, Diagnostics> {
    let name: Arc<Path> = Arc::from(Path::new(&format!("builtin:{}", pack.id())));
    let mut d = Diagnostics::default();
    let node = parse_json(source(pack), name).map_err(|e| {
        d.error(Some(&e.loc), "", e.message);
        d.clone()
    })?;
    match parse_manifest(&node, ManifestOrigin::Builtin, &mut d) {
        Some(m) if !d.has_errors() => Ok(m),
        _ => Err(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_manifests_are_valid_and_complete() {
        let expect = [
            (
                BuiltinPack::Core,
                vec![
                    "messages.send",
                    "coordination.wait_for_signal",
                    "completion.submit",
                    "tool_search",
                    "ask_user",
                    "file.read",
                    "file.write",
                    "file.patch",
                    "file.list",
                    "file.glob",
                    "file.grep",
                    "file.edit",
                    "file.delete",
                    "file.move",
                ],
            ),
            (BuiltinPack::Shell, vec!["shell.exec", "shell.start", "shell.check", "shell.stop", "shell.list"]),
            (BuiltinPack::Web, vec!["web.fetch"]),
            (BuiltinPack::Git, vec!["git.status", "git.diff", "git.log"]),
        ];
        for (pack, tools) in expect {
            let m = manifest(pack).unwrap_or_else(|d| panic!("{}: {:?}", pack.id(), d.errors));
            assert_eq!(m.id, pack.id());
            assert_eq!(m.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), tools);
            assert!(m.runner.is_none() && m.controller.is_none());
        }
        let core = manifest(BuiltinPack::Core).unwrap();
        let entries: Vec<&str> = core.webui.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(
            entries,
            [
                "project.stats",
                "messages.conversation",
                "messages.send",
                "coordination.signals",
                "completion.report",
                "file.activity"
            ]
        );
    }
}
