//! Shared helpers for the integration tests: run the real `suzumio` binary and compare what it
//! prints with golden files. Set `UPDATE_EXPECT=1` to rewrite the golden files from the output
//! (then review the diff before committing).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(kind: &str, name: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(kind).join(name)
}

/// Run `suzumio <args>` in `cwd` with a clean, fixed environment.
pub fn suzumio(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SUZUMIO_TEST_VALUE", "from-env")
        .output()
        .expect("the suzumio binary runs")
}

/// Compare `actual` with the golden file `path` (or rewrite it when UPDATE_EXPECT is set).
pub fn assert_golden(path: &Path, actual: &str) {
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(path, actual).expect("golden file written");
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!("golden file {} is missing ({e}); run with UPDATE_EXPECT=1 to create it", path.display())
    });
    assert_eq!(actual, expected, "output differs from {}", path.display());
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
