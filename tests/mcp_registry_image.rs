//! Third-party MCP servers from the registries, in the agent's image: `suzumio image build
//! --base debian --npm @modelcontextprotocol/server-filesystem@… --pip mcp-server-time==…`
//! installs them at build time (on the host, with npm and pip) into the image's read-only
//! `/opt/mcp`, and the README's `mcp:` entries run them as an agent's MCP servers inside its
//! hardened container (no network, read-only root), through the real `suzumio run`. The image is
//! built once per engine and kept: the build itself sees an image made from the same servers and
//! keeps it.

mod support;

use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;
use support::{TempProject, cross_process_lock, suzumio, text};
use suzumio::store::ToolCallStatus;

const IMAGE: &str = "suzumio-runner:test-mcp-registries";
const FILESYSTEM: &str = "@modelcontextprotocol/server-filesystem@2026.8.31";
const TIME: &str = "mcp-server-time==2026.10.19";

/// `suzumio image build` of [`IMAGE`] (building it when the engine has none from these servers);
/// what it printed.
fn registry_image() -> &'static str {
    static PRINTED: OnceLock<String> = OnceLock::new();
    PRINTED.get_or_init(|| {
        let _lock = cross_process_lock("mcp-registries-image");
        let out = Command::new(env!("CARGO_BIN_EXE_suzumio"))
            .args(["image", "build", "--base", "debian", "--npm", FILESYSTEM, "--pip", TIME, "--tag", IMAGE])
            .output()
            .expect("suzumio image build");
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "suzumio image build failed (Docker, mmdebstrap, npm and python3-pip: scripts/setup.sh): {stdout}{}",
            text(&out.stderr)
        );
        stdout
    })
}

fn output_text(call: &(ToolCallStatus, Option<Value>, Option<String>)) -> String {
    call.1.as_ref().and_then(|o| o.get("output")).and_then(Value::as_str).unwrap_or_default().to_string()
}

#[test]
fn the_build_names_the_servers_commands_and_keeps_the_image_it_made() {
    let printed = registry_image();
    let commands =
        printed.lines().find(|l| l.starts_with("MCP server commands")).unwrap_or_else(|| panic!("{printed}"));
    assert_eq!(
        commands,
        "MCP server commands (for `command:` of an `mcp:` toolpack): /opt/mcp/bin/mcp-server-filesystem, \
         /opt/mcp/bin/mcp-server-time",
        "only the requested packages' commands, not their dependencies'"
    );
    // Asked again for the same servers: kept, not rebuilt, and still named.
    let again = Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["image", "build", "--base", "debian", "--npm", FILESYSTEM, "--pip", TIME, "--tag", IMAGE])
        .output()
        .unwrap();
    let again = text(&again.stdout);
    assert!(again.starts_with(&format!("{IMAGE} is already present")), "{again}");
    assert!(again.contains(commands), "{again}");
    // In the image: owned by root, so not the runner's to change.
    let out = Command::new("docker")
        .args(["run", "--rm", "--read-only", "--network", "none", "--user", "65534:65534", "--entrypoint", "sh", IMAGE])
        .args(["-c", "stat -c '%u %a' /opt/mcp /opt/mcp/bin/mcp-server-time; touch /opt/mcp/x 2>&1; echo $PATH"])
        .output()
        .unwrap();
    let inside = text(&out.stdout);
    assert!(inside.starts_with("0 755\n0 755\n"), "{inside}");
    assert!(inside.contains("Read-only file system") && inside.contains("/opt/mcp/bin:"), "{inside}");
}

#[test]
fn server_filesystem_from_npm_and_a_pypi_server_are_an_agents_mcp_servers_in_the_built_image() {
    registry_image();
    support::static_runner();
    let p = TempProject::copy_of("mcp");
    let unique = p.dir.file_name().unwrap().to_string_lossy().rsplit('-').next().unwrap().to_lowercase();
    // The entries the README shows.
    let yaml = format!(
        r#"name: mcp-registries-{unique}
task: Keep notes with third-party servers.
tools:
  toolpacks:
    - core
    - mcp: {{id: files, command: /opt/mcp/bin/mcp-server-filesystem, args: [/workspace]}}
    - mcp: {{id: time, command: /opt/mcp/bin/mcp-server-time}}
agents:
  counter:
    permissionMode: auto
    tools: [files.write_file, files.read_text_file, time.get_current_time, coordination.wait_for_signal]
    permissions:
      rules:
        - {{tool: files.*, decision: allow, reason: the workspace is the agent's}}
        - {{tool: time.get_current_time, decision: allow, reason: reading the clock}}
backend:
  image: {IMAGE}
  runner:
    model: main
    models:
      providers: {{local: {{type: scripted, script: ./script.yaml}}}}
      presets: {{main: {{provider: local}}}}
"#
    );
    let script = r#"
activations:
  - agent: counter
    steps:
      - call: [{tool: files.write_file, input: {path: /workspace/notes.md, content: "written by server-filesystem\n"}}]
      - call: [{tool: files.read_text_file, input: {path: /workspace/notes.md}}]
      - call: [{tool: files.write_file, input: {path: /etc/evil, content: x}}]
      - call: [{tool: time.get_current_time, input: {timezone: Europe/Paris}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;
    std::fs::write(p.dir.join("suzumio.yaml"), yaml).unwrap();
    std::fs::write(p.dir.join("script.yaml"), script).unwrap();
    let dir = p.dir.to_string_lossy().to_string();
    let sent = suzumio(&p.dir, &["send", &dir, "counter", "Take a note."]);
    assert!(sent.status.success(), "{}", text(&sent.stderr));
    let run = suzumio(&p.dir, &["run", &dir, "--backend", "docker", "--until-idle", "--port", "0"]);
    let log = format!("{}{}", text(&run.stdout), text(&run.stderr));
    assert!(run.status.success(), "{log}");

    let writes = support::tool_calls(&p.dir, "files.write_file");
    assert_eq!(writes.len(), 2, "{writes:?}\n{log}");
    assert_eq!(writes[0].0, ToolCallStatus::Completed, "{writes:?}\n{log}");
    assert_eq!(
        std::fs::read_to_string(p.dir.join("workspaces/counter/notes.md")).unwrap(),
        "written by server-filesystem\n"
    );
    let reads = support::tool_calls(&p.dir, "files.read_text_file");
    assert!(output_text(&reads[0]).contains("written by server-filesystem"), "{reads:?}");
    // The server's own boundary holds (and the root is read-only under it anyway).
    let outside = format!("{:?}", writes[1]);
    assert!(outside.contains("Access denied") || outside.contains("outside allowed"), "{outside}");
    let time = support::tool_calls(&p.dir, "time.get_current_time");
    assert_eq!(time[0].0, ToolCallStatus::Completed, "{time:?}\n{log}");
    assert!(output_text(&time[0]).contains("Europe/Paris"), "{time:?}");
}

#[test]
fn a_package_that_is_not_a_registry_name_is_refused_before_anything_runs() {
    for (flag, spec) in [("--npm", "./my-server"), ("--npm", "git+https://example.org/x.git"), ("--pip", "-r")] {
        let out = Command::new(env!("CARGO_BIN_EXE_suzumio"))
            .args(["image", "build", "--base", "debian", &format!("{flag}={spec}")])
            .output()
            .expect("suzumio image build");
        assert_eq!(out.status.code(), Some(2), "{spec}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(&format!("{flag} {spec:?} is not a registry package")), "{stderr}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["image", "build", "--npm", "left-pad"])
        .output()
        .expect("suzumio image build");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("apply to --base debian only"), "{}", text(&out.stderr));
}
