//! Mount lists (`backend.docker.mounts`, `agents.<id>.mounts`): sources resolved against the
//! file that declares them and required to exist, targets absolute, normalized and off the
//! paths the controller owns.

use std::path::{Component, Path, PathBuf};

use crate::config::diag::{Diagnostics, display_path};
use crate::config::load::base_dir;
use crate::config::model::MountConfig;
use crate::config::node::{Loc, Node, Value};
use crate::config::read::{Obj, index};

/// Container paths the controller owns; a configured mount may not land on or under them.
pub const RESERVED_MOUNT_TARGETS: [&str; 5] =
    ["/workspace", "/artifacts", "/toolpacks", "/run/suzumio", "/opt/suzumio"];

const MOUNT_KEYS: &[&str] = &["source", "target", "readonly", "description"];

pub(super) fn read(node: &Node, path: &str, d: &mut Diagnostics) -> Vec<MountConfig> {
    let Value::Seq(items) = &node.value else {
        d.error(Some(&node.loc), path, format!("expected a list of mounts, got {}", node.kind_name()));
        return Vec::new();
    };
    let mut out: Vec<MountConfig> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let item_path = index(path, i);
        let Some(m) = Obj::open(item, &item_path, MOUNT_KEYS, &[], d) else {
            continue;
        };
        let source = m.req_string("source", d);
        let target = m.req_string("target", d);
        let readonly = m.bool("readonly", d).unwrap_or(true);
        let description = m.string("description", d);
        let source = source.and_then(|s| {
            // Relative sources are resolved against the file that declares them.
            let p = base_dir(&item.loc.file).join(&s);
            match p.canonicalize() {
                Ok(p) => Some(p),
                Err(_) => {
                    d.error(
                        Some(&m.key_loc("source")),
                        m.path_of("source"),
                        format!("Mount source does not exist: {}", display_path(&p)),
                    );
                    None
                }
            }
        });
        let target = target.and_then(|t| check_target(&t, &m.key_loc("target"), &m.path_of("target"), d));
        if let (Some(source), Some(target)) = (source, target) {
            if out.iter().any(|o| o.target == target) {
                d.error(
                    Some(&m.key_loc("target")),
                    m.path_of("target"),
                    format!("Docker mount target is used twice: {target}"),
                );
                continue;
            }
            out.push(MountConfig { source, target, readonly, description });
        }
    }
    out
}

/// Targets must be absolute, normalized, and stay off the controller's reserved paths.
fn check_target(target: &str, loc: &Loc, path: &str, d: &mut Diagnostics) -> Option<String> {
    if !target.starts_with('/') {
        d.error(Some(loc), path, format!("Docker mount target must be absolute: {target}"));
        return None;
    }
    let p = Path::new(target);
    if p.components().any(|c| matches!(c, Component::ParentDir | Component::CurDir)) {
        d.error(Some(loc), path, format!("Docker mount target must not contain . or .. segments: {target}"));
        return None;
    }
    let normalized: PathBuf = p.components().collect();
    // On or under a reserved path, or above one (a mount at /run would cover /run/suzumio).
    let is_reserved =
        RESERVED_MOUNT_TARGETS.iter().any(|r| normalized.starts_with(r) || Path::new(r).starts_with(&normalized));
    if is_reserved {
        d.error(Some(loc), path, format!("Docker mount target is reserved: {target}"));
        return None;
    }
    Some(normalized.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    // String: a config diagnostic's message; the caller adds where it was written.
    fn target(t: &str) -> Result<String, String> {
        let mut d = Diagnostics::default();
        let loc = Loc::file(Path::new("c.yaml").into());
        check_target(t, &loc, "m", &mut d).ok_or_else(|| d.errors[0].message.clone())
    }

    #[test]
    fn mount_targets_are_checked() {
        assert_eq!(target("/mnt/data"), Ok("/mnt/data".into()));
        assert_eq!(target("/mnt//data/"), Ok("/mnt/data".into()));
        assert_eq!(target("data"), Err("Docker mount target must be absolute: data".into()));
        for reserved in
            ["/workspace", "/workspace/x", "/artifacts/pm", "/toolpacks", "/run/suzumio/s", "/", "/run", "/opt"]
        {
            assert_eq!(target(reserved), Err(format!("Docker mount target is reserved: {reserved}")), "{reserved}");
        }
        assert_eq!(target("/run/other"), Ok("/run/other".into()));
        assert_eq!(target("/workspacex"), Ok("/workspacex".into()));
        assert!(target("/mnt/../workspace").is_err());
    }
}
