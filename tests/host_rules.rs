//! Host rules compare canonical hosts (issue [R] point 3), through the real binary: a `deny` on
//! `localhost` and `127.0.0.1` holds against every other spelling of this machine, a CIDR rule
//! covers its block and IPv4-mapped addresses, names are not resolved, and the audit shows the
//! host as the rule matched it.

mod support;

use serde_json::Value;
use support::{suzumio, text};

const PROJECT: &str = r#"name: hosts
task: Fetch the web, but never this machine or the internal network.
tools:
  toolpacks: [core, web]
agents:
  fetcher:
    tools: [web.fetch]
    permissionMode: full-access
    permissions:
      rules:
        - {tool: web.fetch, decision: deny, hosts: [localhost, 127.0.0.1], reason: "not this machine"}
        - {tool: web.fetch, decision: deny, hosts: ["10.0.0.0/8", "fd00::/8"], reason: "not the internal network"}
        - {tool: web.fetch, decision: allow, hosts: ["*.example.com"]}
backend:
  runner:
    model: main
    models:
      providers:
        local: {type: scripted}
      presets:
        main: {provider: local}
"#;

fn project() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("suzumio-hosts-").tempdir().unwrap();
    std::fs::write(dir.path().join("suzumio.yaml"), PROJECT).unwrap();
    dir
}

fn explain(dir: &std::path::Path, url: &str) -> Value {
    let input = serde_json::json!({ "url": url }).to_string();
    let out = suzumio(dir, &["permissions", "explain", ".", "fetcher", "web.fetch", &input, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{url}: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_deny_on_localhost_holds_against_every_spelling_of_this_machine() {
    let dir = project();
    let loopback = [
        "http://localhost/",
        "http://localhost./",
        "http://LocalHost/",
        "http://app.localhost/",
        "http://127.0.0.1/",
        "http://127.0.0.2/",
        "http://127.1/",
        "http://0x7f.1/",
        "http://2130706433/",
        "http://0177.0.0.1/",
        "http://0.0.0.0/",
        "http://0/",
        "http://[::1]/",
        "http://[::]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[0:0:0:0:0:ffff:7f00:1]/",
        "http://127.0.0.1.:8080/x",
    ];
    for url in loopback {
        let decided = explain(dir.path(), url);
        assert_eq!(decided["decision"], "deny", "{url}: {decided}");
        assert!(decided["reason"].as_str().unwrap().starts_with("not this machine"), "{url}: {decided}");
        assert!(decided["reason"].as_str().unwrap().contains("(loopback)"), "{url}: {decided}");
    }
    for url in ["http://10.1.2.3/", "http://[::ffff:10.9.9.9]/", "http://012.1.1.1/", "http://[fd12::1]/"] {
        let decided = explain(dir.path(), url);
        assert_eq!(decided["decision"], "deny", "{url}: {decided}");
        assert!(decided["reason"].as_str().unwrap().starts_with("not the internal network"), "{url}: {decided}");
    }
    for url in ["https://api.example.com/", "https://API.Example.COM./v1"] {
        assert_eq!(explain(dir.path(), url)["decision"], "allow", "{url}");
    }
    // Not resolved: a name that is not loopback's is not matched by an address rule.
    assert_ne!(explain(dir.path(), "https://internal.test/")["decision"], "deny");
}

#[test]
fn the_audit_shows_the_host_as_the_rule_matched_it() {
    let dir = project();
    let d = dir.path().to_str().unwrap();
    let out =
        suzumio(dir.path(), &["tool", "call", d, "--agent", "fetcher", "web.fetch", r#"{"url": "http://0x7f.1:9/"}"#]);
    assert_eq!(out.status.code(), Some(1), "denied: {}", text(&out.stderr));
    let audit = suzumio(dir.path(), &["audit", d, "--json"]);
    let lines: Vec<Value> = text(&audit.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let decision = lines.iter().find(|l| l["tool"] == "web.fetch").expect("a decision line");
    assert_eq!(decision["decision"], "deny", "{decision}");
    assert!(decision["reason"].as_str().unwrap().contains("(host 127.0.0.1 (loopback))"), "{decision}");
}

#[test]
fn host_patterns_that_cannot_match_are_located_errors() {
    let dir = project();
    let yaml = PROJECT.replace(r#"hosts: ["10.0.0.0/8", "fd00::/8"]"#, r#"hosts: ["10.0.0.0/33", "0x7f.1"]"#);
    std::fs::write(dir.path().join("suzumio.yaml"), yaml).unwrap();
    let out = suzumio(dir.path(), &["check", "."]);
    assert_eq!(out.status.code(), Some(2));
    let said = text(&out.stderr);
    assert!(said.contains("suzumio.yaml:12:") && said.contains("`10.0.0.0/33` is not a host pattern"), "{said}");
    assert!(said.contains("`0x7f.1` is not a host pattern"), "{said}");
}
