//! The Debian runner image (`suzumio image build --base debian`): built offline by mmdebstrap
//! from the machine's Debian sources once (kept in the engine between runs), then an agent's
//! hardened container made from it runs python3, git, node, ripgrep and bash through
//! `shell.exec` with no network and as the runner user.

mod support;

use std::process::Command;

use support::{containers, debian_image};
use suzumio::backend::DEBIAN_IMAGE;

#[tokio::test(flavor = "multi_thread")]
async fn the_debian_image_runs_real_tools_in_a_hardened_container() {
    debian_image();
    let project = containers::start_with_image("debian", DEBIAN_IMAGE).await;

    let python = project.sh("a", "python3 -c 'import sys; print(sum(range(10)), sys.version_info.major)'").await;
    assert!(python.contains("45 3"), "{python}");
    let git = project.sh("a", "git --version && git init -q /tmp/r && git -C /tmp/r status --short --branch").await;
    assert!(git.contains("git version 2."), "{git}");
    assert!(git.contains("## "), "{git}");
    let node = project.sh("a", "node -e 'console.log([1,2,3].map(x => x * 2).join(\",\"))'").await;
    assert!(node.contains("2,4,6"), "{node}");
    let rg = project.sh("a", "printf 'alpha\\nbeta\\n' > /tmp/f && rg -n beta /tmp/f").await;
    assert!(rg.contains("2:beta"), "{rg}");
    let bash = project.sh("a", "bash -c 'x=(a b c); echo ${#x[@]}'").await;
    assert!(bash.contains('3'), "{bash}");

    // Still the hardened container: the runner user, a read-only root, no network.
    let id = project.sh("a", "id -un; id -u").await;
    assert!(id.contains("runner") && id.contains("65534"), "{id}");
    let root = project.call("a", "shell.exec", serde_json::json!({"command": "touch /usr/x"})).await;
    assert!(format!("{root:?}").contains("Read-only file system"), "{root:?}");
    let net = project.sh("a", "python3 -c 'import socket; print([name for _, name in socket.if_nameindex()])'").await;
    assert!(net.contains("['lo']"), "{net}");
}

#[test]
fn a_bad_package_name_is_refused_before_anything_runs() {
    let out = Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["image", "build", "--base", "debian", "--packages", "jq;rm"])
        .output()
        .expect("suzumio image build");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("\"jq;rm\" is not a Debian package name"), "{stderr}");
}
