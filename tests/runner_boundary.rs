//! The runner's boundary, enforced by the build: the crate that runs inside every agent's
//! container (`suzumio-runner`) and the core it shares with the controller (`suzumio-core`)
//! must not link the web stack, the database or the HTTP client, nor the Docker client or the
//! terminal UI. The MCP SDK's client (`rmcp`, for the agent's stdio MCP servers) is allowed, its
//! HTTP transports are not (they would bring hyper and reqwest). `cargo tree` lists what each crate really links (normal dependencies, offline,
//! from the lock file).

use std::collections::BTreeSet;
use std::process::Command;

/// What only the controller may link.
const CONTROLLER_ONLY: &[&str] =
    &["axum", "hyper", "rusqlite", "libsqlite3-sys", "reqwest", "bollard", "indicatif", "rustls", "suzumio"];

fn linked(package: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "--locked", "-p", package, "-e", "normal", "--prefix", "none", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree -p {package} failed: {}", String::from_utf8_lossy(&out.stderr));
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

#[test]
fn the_runner_links_no_web_stack_store_or_model_client() {
    check("suzumio-runner");
    // And it really is the runner: the JavaScript host and the protocol are there.
    let crates = linked("suzumio-runner");
    assert!(crates.contains("suzumio-core") && crates.contains("rquickjs"), "{crates:?}");
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
