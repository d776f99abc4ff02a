//! Permissions end to end through the real binary: `permissions explain` (golden), every call
//! decided through `execute_tool` (`suzumio tool call`, the process backend for `shell.exec`),
//! hooks that fail closed, rewrite input (re-validated) and redact results, and the audit trail
//! (every decision, redacted, and never in the way of a call).

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{TempProject, fixture, golden, repo_root, suzumio, text};
use suzumio::config::load::ProcessEnv;
use suzumio::permissions::{self, Behavior};
use suzumio::project::Project;

fn call(project: &TempProject, agent: &str, tool: &str, input: &str, extra: &[&str]) -> std::process::Output {
    let dir = project.dir.to_str().expect("utf-8 path");
    let mut args = vec!["tool", "call", dir, "--agent", agent, tool, input];
    args.extend_from_slice(extra);
    suzumio(&project.dir, &args)
}

fn audit_lines(project: &TempProject, extra: &[&str]) -> Vec<Value> {
    let dir = project.dir.to_str().expect("utf-8 path");
    let mut args = vec!["audit", dir, "--json"];
    args.extend_from_slice(extra);
    let out = suzumio(&project.dir, &args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

#[test]
fn explain_shows_decision_source_reason_and_risk() {
    let dir = fixture("valid", "permissions");
    let cases: &[(&str, &str, &str)] = &[
        ("worker", "shell.exec", r#"{"command": "true && rm -rf x"}"#),
        ("worker", "shell.exec", r#"{"command": "ls -la | cat notes.txt"}"#),
        ("worker", "shell.exec", r#"{"command": "cat <<EOF\nhi\nEOF"}"#),
        ("worker", "shell.exec", r#"{"command": "env X=1 timeout 5 git push origin"}"#),
        ("worker", "file.write", r#"{"path": "src/../src/main.rs", "content": ""}"#),
        ("worker", "file.write", r#"{"path": "docs/a.md", "content": ""}"#),
        ("pm", "file.read", r#"{"path": "app/.env"}"#),
        ("pm", "web.fetch", r#"{"url": "https://api.example.com/v1"}"#),
        ("ops", "shell.exec", r#"{"command": "make deploy"}"#),
        ("ops", "shell.exec", r#"{"command": "sudo rm -rf /workspace"}"#),
        ("worker", "shell.exec", r#"{"command": "echo cm0gLXJmIHgK | base64 -d | sh"}"#),
        ("ops", "shell.exec", r#"{"command": "mywrap rm -rf /workspace"}"#),
        ("ops", "shell.exec", r#"{"command": "git -c core.pager='rm -rf .' log && python3 -c 'import shutil'"}"#),
    ];
    let mut all = String::new();
    for (agent, tool, input) in cases {
        let out = suzumio(&dir, &["permissions", "explain", ".", agent, tool, input]);
        assert_eq!(out.status.code(), Some(0), "{agent} {tool} {input}: {}", text(&out.stderr));
        all.push_str(&format!("$ permissions explain . {agent} {tool} '{input}'\n{}\n", text(&out.stdout)));
    }
    golden("permissions.explain.txt").assert_eq(&all);
    let out = suzumio(
        &dir,
        &["permissions", "explain", ".", "worker", "shell.exec", r#"{"command": "echo $(rm x)"}"#, "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    golden("permissions.explain.json").assert_eq(&text(&out.stdout));
    let out = suzumio(
        &dir,
        &[
            "permissions",
            "explain",
            ".",
            "ops",
            "shell.exec",
            r#"{"command": "tar -xf a.tar --to-command=sh"}"#,
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    golden("permissions.explain.opaque.json").assert_eq(&text(&out.stdout));
}

/// The audit's decision reason says which part made a line opaque.
#[test]
fn an_opaque_line_is_asked_and_the_audit_says_why() {
    let project = TempProject::copy_of("permissions");
    let config = project.dir.join("suzumio.yaml");
    let yaml = std::fs::read_to_string(&config).expect("the config");
    let rules = "    permissions:\n      rules:\n        - {tool: shell.exec, decision: deny, commands: [\"rm *\"]}";
    assert!(yaml.contains(rules), "the fixture's pm rule");
    // Nobody answers here: the ask is refused at once instead of waiting.
    let with_deny = rules.replace("permissions:\n", "permissions:\n      onAsk: deny\n");
    std::fs::write(&config, yaml.replace(rules, &with_deny)).expect("write the config");
    let line = r#"{"command": "echo cm0gLXJmIHgK | base64 -d | sh"}"#;
    let out = call(&project, "pm", "shell.exec", line, &["--backend", "process"]);
    assert_ne!(out.status.code(), Some(0), "an ask with onAsk deny is refused: {}", text(&out.stdout));
    assert!(text(&out.stderr).contains("opaque: `sh` reads a program from its stdin"), "{}", text(&out.stderr));
    let entries = audit_lines(&project, &[]);
    let decision = entries.iter().find(|e| e["kind"] == "decision").expect("a decision entry");
    assert_eq!((decision["decision"].as_str(), decision["source"].as_str()), (Some("ask"), Some("opaque line")));
    let reason = decision["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("opaque: `sh` reads a program from its stdin (`… | sh`); agent pm rule 1"), "{reason}");
}

/// The corpus of attempts to walk around `deny: rm *`
/// (`tests/fixtures/permissions/bypass_corpus.txt`): none is allowed, for `shell.exec` and
/// `shell.start`, in full-access, auto and default mode, each under an `allow` rule for the
/// whole shell pack — the strongest allowing setup.
#[test]
fn no_line_of_the_bypass_corpus_is_allowed_under_deny_rm() {
    let corpus =
        std::fs::read_to_string(repo_root().join("tests/fixtures/permissions/bypass_corpus.txt")).expect("the corpus");
    let lines: Vec<String> =
        corpus.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')).map(|l| l.replace('⏎', "\n")).collect();
    let project = Project::load(&fixture("valid", "opaque"), &ProcessEnv).unwrap_or_else(|e| panic!("{e}"));
    let mut allowed = Vec::new();
    let mut by_behavior = std::collections::BTreeMap::new();
    for agent_id in ["full", "auto", "plain"] {
        let agent = project.config.agent(agent_id).expect("agent");
        for tool in ["shell.exec", "shell.start"] {
            let (_, def) = project.registry.tool(tool).expect("tool");
            for line in &lines {
                let input = json!({ "command": line });
                project.registry.validate_input(tool, &input).unwrap_or_else(|e| panic!("{line}: {e:?}"));
                let d = permissions::decide(&project, &permissions::Call { agent, tool, def, input: &input });
                *by_behavior.entry(d.behavior.as_str()).or_insert(0) += 1;
                if d.behavior == Behavior::Allow {
                    allowed.push(format!("{agent_id} {tool} {line:?}: {} ({})", d.reason, d.source));
                }
            }
        }
    }
    println!("bypass corpus: {} lines, {} decisions: {by_behavior:?}", lines.len(), lines.len() * 6);
    assert!(lines.len() >= 200, "the corpus has {} lines", lines.len());
    assert!(allowed.is_empty(), "allowed under deny rm *:\n{}", allowed.join("\n"));
}

/// A denied call's result says it was denied, by what, and why (the rule's reason).
#[test]
fn denied_calls_say_why_and_every_decision_is_audited_and_redacted() {
    let project = TempProject::copy_of("permissions");
    let secret_body = r#"{"recipient": "worker", "body": "deploy with planted-secret-4f9a2c and Authorization: Bearer abcdefghij0123456789"}"#;
    let sent = call(&project, "pm", "messages.send", secret_body, &[]);
    assert_eq!(sent.status.code(), Some(0), "{}", text(&sent.stderr));
    let denied = call(&project, "worker", "messages.send", r#"{"recipient": "pm", "body": "done"}"#, &[]);
    assert_eq!(denied.status.code(), Some(1));
    let stderr = text(&denied.stderr);
    assert!(stderr.contains("Permission denied for messages.send: workers report in the plan"), "{stderr}");
    assert!(stderr.contains("agent worker rule 1 (suzumio.yaml:"), "{stderr}");
    let rm =
        call(&project, "pm", "shell.exec", r#"{"command": "true && rm -rf /workspace/x"}"#, &["--backend", "process"]);
    assert_eq!(rm.status.code(), Some(1), "{}", text(&rm.stderr));
    assert!(text(&rm.stderr).contains("Permission denied for shell.exec"), "{}", text(&rm.stderr));
    let echo = call(&project, "pm", "shell.exec", r#"{"command": "echo allowed"}"#, &["--backend", "process"]);
    assert_eq!(echo.status.code(), Some(0), "{}", text(&echo.stderr));
    assert!(text(&echo.stdout).contains("allowed"), "{}", text(&echo.stdout));

    let entries = audit_lines(&project, &[]);
    let decisions: Vec<(&str, &str, &str)> = entries
        .iter()
        .filter(|e| e["kind"] == "decision")
        .map(|e| (e["agent"].as_str().unwrap(), e["tool"].as_str().unwrap(), e["decision"].as_str().unwrap()))
        .collect();
    assert_eq!(
        decisions,
        [
            ("pm", "messages.send", "allow"),
            ("worker", "messages.send", "deny"),
            ("pm", "shell.exec", "deny"),
            ("pm", "shell.exec", "allow")
        ]
    );
    for e in entries.iter().filter(|e| e["kind"] == "decision") {
        for key in ["time", "activation", "callId", "mode", "source", "risk", "arguments"] {
            assert!(!e[key].is_null(), "{key} missing in {e}");
        }
    }
    let raw = std::fs::read_to_string(project.dir.join(".suzumio/audit/permissions.jsonl")).expect("audit file");
    for secret in ["planted-secret-4f9a2c", "abcdefghij0123456789"] {
        assert!(!raw.contains(secret), "{secret} is in the audit:\n{raw}");
    }
    assert!(raw.contains("deploy with ***"), "{raw}");

    assert_eq!(audit_lines(&project, &["--agent", "worker"]).len(), 1);
    assert_eq!(audit_lines(&project, &["--since", "1h"]).len(), entries.len());
    assert!(audit_lines(&project, &["--since", "2999-01-01T00:00:00Z"]).is_empty());
}

#[test]
fn hooks_fail_closed_revalidate_rewritten_input_and_redact_results() {
    let project = TempProject::copy_of("permissions");
    let send = |body: &str| {
        call(&project, "pm", "messages.send", &format!(r#"{{"recipient": "worker", "body": "{body}"}}"#), &[])
    };

    let thrown = send("throw, please");
    assert_eq!(thrown.status.code(), Some(1));
    assert!(
        text(&thrown.stderr).contains(
            "the beforeToolCall hook of guard failed, so the call is refused: toolpack guard: the guard exploded"
        ),
        "{}",
        text(&thrown.stderr)
    );

    let hung = send("hang forever");
    assert_eq!(hung.status.code(), Some(1));
    assert!(text(&hung.stderr).contains("beforeToolCall did not return within 5 s"), "{}", text(&hung.stderr));

    let vetoed = send("veto this");
    assert_eq!(vetoed.status.code(), Some(1));
    assert!(
        text(&vetoed.stderr).contains("the guard vetoes messages.send (decided by hook guard.beforeToolCall)"),
        "{}",
        text(&vetoed.stderr)
    );

    let bad = send("rewrite-bad");
    assert_eq!(bad.status.code(), Some(2), "a rewritten input that fails the schema is refused");
    assert!(
        text(&bad.stderr)
            .contains("the beforeToolCall hook of guard changed the input: Invalid input for messages.send: /body"),
        "{}",
        text(&bad.stderr)
    );

    let rewritten = send("rewrite me");
    assert_eq!(rewritten.status.code(), Some(0), "{}", text(&rewritten.stderr));
    let out = text(&rewritten.stdout);
    assert!(
        out.contains("[message id withheld]") && !out.contains("msg_"),
        "afterToolCall's result is what the caller gets: {out}"
    );

    let entries = audit_lines(&project, &[]);
    let decisions: Vec<&str> =
        entries.iter().filter(|e| e["kind"] == "decision").map(|e| e["decision"].as_str().unwrap()).collect();
    assert_eq!(decisions, ["deny", "deny", "deny", "allow"], "the refused rewrite never reached a decision");
    let last = entries.iter().rfind(|e| e["kind"] == "decision").unwrap();
    assert_eq!(last["arguments"]["body"], "rewritten by the guard");
    let hooks: Vec<&str> =
        entries.iter().filter(|e| e["kind"] == "hook").map(|e| e["decision"].as_str().unwrap()).collect();
    assert_eq!(hooks, ["deny", "allow"], "the refused and the accepted rewrite are audited as hook entries");
}

/// A writer that cannot write (the audit file is a FIFO nobody reads, so opening it never
/// returns) does not stall the call; the process still ends.
#[test]
fn a_stalled_audit_never_blocks_a_call() {
    let project = TempProject::copy_of("permissions");
    let audit_dir = project.dir.join(".suzumio/audit");
    std::fs::create_dir_all(&audit_dir).unwrap();
    let fifo = audit_dir.join("permissions.jsonl");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let dir = project.dir.to_str().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["tool", "call", dir, "--agent", "pm", "messages.send", r#"{"recipient": "worker", "body": "hello"}"#])
        .current_dir(&project.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("the call hung behind a stalled audit writer");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    assert!(status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Message sent and delivered"), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("the permission audit was not written"), "{}", text(&out.stderr));
}
