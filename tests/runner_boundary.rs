//! The runner's boundary, enforced by the build: the crate that runs inside every agent's
//! container (`suzumio-runner`) and the core it shares with the controller (`suzumio-core`)
//! must not link the web stack, the database or the HTTP client, nor the Docker client or the
//! terminal UI. The MCP SDK's client (`rmcp`, for the agent's stdio MCP servers) is allowed, its
//! HTTP transports are not (they would bring hyper and reqwest). `cargo tree` lists what each
//! crate really links (normal dependencies, offline, from the lock file). For the binary that
//! ships, what counts is the command that builds it (features are resolved per command): the
//! runner build of `scripts/test.sh` is resolved with its own flags, and run again to list every
//! unit it compiles.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// What only the controller may link.
const CONTROLLER_ONLY: &[&str] =
    &["axum", "hyper", "rusqlite", "libsqlite3-sys", "reqwest", "bollard", "indicatif", "rustls", "suzumio"];

fn linked(package: &str) -> BTreeSet<String> {
    tree(&["-p", package])
}

/// The crates `cargo tree` lists (normal dependencies) for the package selection `selection`.
fn tree(selection: &[&str]) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "--locked", "-e", "normal", "--prefix", "none", "--format", "{p}"])
        .args(selection)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree {selection:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

fn check(package: &str) {
    let crates = linked(package);
    assert!(crates.contains(package), "cargo tree did not list {package} itself: {crates:?}");
    let leaked: Vec<&&str> = CONTROLLER_ONLY.iter().filter(|c| crates.contains(**c)).collect();
    assert!(leaked.is_empty(), "{package} links controller-only crates {leaked:?}");
}

/// The arguments of the `cargo build` in `scripts/test.sh` that builds the static runner.
fn shipped_build() -> Vec<String> {
    let script = std::fs::read_to_string(repo().join("scripts/test.sh")).expect("read scripts/test.sh");
    let line = script
        .lines()
        .find(|l| !l.trim_start().starts_with('#') && l.contains("cargo build") && l.contains("suzumio-runner"))
        .expect("scripts/test.sh builds the runner with `cargo build`");
    let (_, args) = line.split_once("cargo build").expect("a cargo build line");
    args.split_whitespace().map(str::to_string).collect()
}

/// `cargo tree`'s arguments for the same build: package, target and features (a profile changes
/// no dependency).
fn tree_arguments(build: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = build.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quiet" | "-q" | "--release" | "--locked" | "--offline" | "--frozen" => {}
            "--profile" => {
                args.next();
            }
            "-p" | "--package" | "--target" | "--features" | "-F" => {
                out.push(arg.clone());
                out.push(args.next().unwrap_or_else(|| panic!("{arg} without a value in {build:?}")).clone());
            }
            "--no-default-features" | "--all-features" => out.push(arg.clone()),
            other => {
                panic!("the runner build in scripts/test.sh has {other}: say here what it means for its dependencies")
            }
        }
    }
    out
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `RUSTFLAGS` the runner build in `scripts/test.sh` sets (another value would be another
/// build, compiled again).
fn shipped_rustflags() -> String {
    let script = std::fs::read_to_string(repo().join("scripts/test.sh")).expect("read scripts/test.sh");
    let line = script.lines().find(|l| l.contains("cargo build") && l.contains("suzumio-runner")).unwrap_or_default();
    line.split_once("RUSTFLAGS='")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(flags, _)| flags.to_string())
        .unwrap_or_default()
}

/// Every package cargo compiles for `build` (`cargo build --message-format json`: one artifact
/// per unit, the fresh ones included; run after scripts/test.sh built it, everything is fresh).
fn built_packages(build: &[String]) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .arg("build")
        .args(build.iter().filter(|a| !matches!(a.as_str(), "--quiet" | "-q")))
        .args(["--offline", "--locked", "--message-format", "json"])
        .env("RUSTFLAGS", shipped_rustflags())
        .current_dir(repo())
        .output()
        .expect("cargo build runs");
    assert!(out.status.success(), "cargo build {build:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter_map(|m| m["package_id"].as_str().map(package_name))
        .collect()
}

/// The name in a package id: `registry+…#hyper@1.8.1`, `path+file:///…/crates/core#suzumio-core@0.1.0`,
/// or `path+file:///…/crates/runner#0.1.0` (named as its directory).
fn package_name(id: &str) -> String {
    let (source, spec) = id.rsplit_once('#').unwrap_or(("", id));
    match spec.split_once('@') {
        Some((name, _)) => name.to_string(),
        None => source.rsplit('/').next().unwrap_or(source).to_string(),
    }
}

#[test]
fn the_runner_links_no_web_stack_store_or_model_client() {
    check("suzumio-runner");
    // And it really is the runner: the JavaScript host and the protocol are there.
    let crates = linked("suzumio-runner");
    assert!(crates.contains("suzumio-core") && crates.contains("rquickjs"), "{crates:?}");
}

#[test]
fn the_runner_build_that_ships_links_no_controller_only_crate() {
    let build = shipped_build();
    // `--bin` alone resolves the features of the whole workspace (the controller's included).
    assert!(
        build.windows(2).any(|w| matches!(w[0].as_str(), "-p" | "--package") && w[1] == "suzumio-runner"),
        "scripts/test.sh builds the runner without `-p suzumio-runner`: {build:?}"
    );
    let selection = tree_arguments(&build);
    let crates = tree(&selection.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(crates.contains("suzumio-runner") && crates.contains("rquickjs"), "{selection:?}: {crates:?}");
    let leaked: Vec<&&str> = CONTROLLER_ONLY.iter().filter(|c| crates.contains(**c)).collect();
    assert!(leaked.is_empty(), "the runner build {build:?} links controller-only crates {leaked:?}");
}

/// What cargo compiles for that command: no controller-only crate, nor the controller.
#[test]
fn the_runner_build_that_ships_compiles_no_controller_only_crate() {
    let build = shipped_build();
    let built = built_packages(&build);
    assert!(built.contains("suzumio-runner") && built.contains("rquickjs"), "{build:?}: {built:?}");
    let leaked: Vec<&&str> = CONTROLLER_ONLY.iter().filter(|c| built.contains(**c)).collect();
    assert!(leaked.is_empty(), "the runner build {build:?} compiles controller-only crates {leaked:?}");
}

#[test]
fn the_core_links_no_web_stack_store_or_model_client() {
    check("suzumio-core");
}

#[test]
fn the_controller_is_where_those_crates_are() {
    // The check above can fail: the controller does link what the runner must not.
    let crates = linked("suzumio");
    for needed in ["axum", "rusqlite", "reqwest", "bollard"] {
        assert!(crates.contains(needed), "the controller no longer links {needed}: update CONTROLLER_ONLY");
    }
}
