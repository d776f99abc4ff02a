//! The packaged JavaScript packs (`scheduler`, `plan`) embedded in the binary, so a project
//! registers them by id (`tools.toolpacks: [scheduler]`) without a path into this repository.
//!
//! They are local packs (runner and controller modules), which need a root on disk to be mounted
//! and loaded: the embedded files are written once into the project's
//! `.suzumio/packs/<id>/<content-hash>/` and the pack is loaded from there like any local pack.
//! The content hash in the path means a new binary with changed files never reuses old ones.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// One embedded pack: its id and its files (relative name, contents).
pub struct PackagedPack {
    pub id: &'static str,
    pub files: &'static [(&'static str, &'static str)],
}

pub const PACKS: &[PackagedPack] = &[
    PackagedPack {
        id: "scheduler",
        files: &[
            ("suzumio.toolpack.json", include_str!("../../../../toolpacks/scheduler/suzumio.toolpack.json")),
            ("runner.mjs", include_str!("../../../../toolpacks/scheduler/runner.mjs")),
            ("controller.mjs", include_str!("../../../../toolpacks/scheduler/controller.mjs")),
        ],
    },
    PackagedPack {
        id: "plan",
        files: &[
            ("suzumio.toolpack.json", include_str!("../../../../toolpacks/plan/suzumio.toolpack.json")),
            ("runner.mjs", include_str!("../../../../toolpacks/plan/runner.mjs")),
            ("controller.mjs", include_str!("../../../../toolpacks/plan/controller.mjs")),
        ],
    },
];

/// The ids of the packaged packs, for messages.
pub const NAMES: &[&str] = &["scheduler", "plan"];

pub fn find(id: &str) -> Option<&'static PackagedPack> {
    PACKS.iter().find(|p| p.id == id)
}

impl PackagedPack {
    /// A short hash of the pack's files, naming the directory they are written to.
    pub fn version_hash(&self) -> String {
        let mut h = Sha256::new();
        for (name, text) in self.files {
            h.update((name.len() as u64).to_le_bytes());
            h.update(name.as_bytes());
            h.update((text.len() as u64).to_le_bytes());
            h.update(text.as_bytes());
        }
        hex::encode(&h.finalize()[..6])
    }

    /// Write the files into `dir` (which must exist).
    pub fn write_into(&self, dir: &Path) -> std::io::Result<()> {
        for (name, text) in self.files {
            std::fs::write(dir.join(name), text)?;
        }
        Ok(())
    }

    /// The pack's root under `project_dir`, written there if it is missing. The files go to a
    /// fresh sibling directory that is then renamed into place, so a reader never sees half a
    /// pack, and two processes materializing at once both end with the same complete directory.
    pub fn materialize(&self, project_dir: &Path) -> std::io::Result<PathBuf> {
        let parent = project_dir.join(".suzumio").join("packs").join(self.id);
        let root = parent.join(self.version_hash());
        if root.join(crate::toolpack::registry::MANIFEST_FILE).is_file() {
            return Ok(root);
        }
        std::fs::create_dir_all(&parent)?;
        let mut nonce = [0u8; 6];
        getrandom::fill(&mut nonce).map_err(std::io::Error::other)?;
        let staging = parent.join(format!(".tmp-{}-{}", std::process::id(), hex::encode(nonce)));
        std::fs::create_dir(&staging)?;
        let written = self.write_into(&staging).and_then(|()| std::fs::rename(&staging, &root));
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&staging);
            // Another process won the rename: its directory is complete.
            if !root.join(crate::toolpack::registry::MANIFEST_FILE).is_file() {
                return Err(e);
            }
        }
        Ok(root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn materialize_writes_once_and_reuses() {
        let dir = tempfile_dir();
        let pack = find("scheduler").unwrap();
        let root = pack.materialize(&dir).unwrap();
        assert!(root.starts_with(dir.join(".suzumio/packs/scheduler")));
        for (name, text) in pack.files {
            assert_eq!(&std::fs::read_to_string(root.join(name)).unwrap(), text);
        }
        assert_eq!(pack.materialize(&dir).unwrap(), root);
        let entries = std::fs::read_dir(root.parent().unwrap()).unwrap().count();
        assert_eq!(entries, 1, "no staging directory is left behind");
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        let mut nonce = [0u8; 6];
        getrandom::fill(&mut nonce).unwrap();
        let dir = std::env::temp_dir().join(format!("suzumio-packaged-{}", hex::encode(nonce)));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
