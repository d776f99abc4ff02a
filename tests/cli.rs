//! The CLI on the example projects: `check` and `tools` output (golden files), exit codes, help.

mod support;

use support::{golden, repo_root, suzumio, text};

#[test]
fn seed_001_project_loads_as_written_and_shows_the_reviewer_tools() {
    let dir = repo_root().join("projects/seed-001");
    let out = suzumio(&dir, &["check", "."]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let reviewer = stdout.lines().skip_while(|l| !l.starts_with("agent reviewer")).nth(1).unwrap_or_default();
    for tool in ["messages.send", "coordination.wait_for_signal", "plan.create", "schedule.once", "review.summarize"] {
        assert!(reviewer.contains(tool), "reviewer should be allowed {tool}: {reviewer}");
    }
    assert!(!reviewer.contains("file.read"), "reviewer must not see file.read: {reviewer}");
    golden("seed-001.check.stdout").assert_eq(&stdout);
    assert_eq!(text(&out.stderr), "", "no warnings expected");
}

#[test]
fn demo_project_checks() {
    let out = suzumio(&repo_root(), &["check", "projects/demo"]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", text(&out.stderr));
    golden("demo.check.stdout").assert_eq(&text(&out.stdout));
}

#[test]
fn tools_table_for_one_agent() {
    let out = suzumio(&repo_root().join("projects/seed-001"), &["tools", ".", "--agent", "reviewer"]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", text(&out.stderr));
    golden("seed-001.tools.reviewer.txt").assert_eq(&text(&out.stdout));
}

#[test]
fn tools_json_lists_every_tool_with_allowed_agents() {
    let out = suzumio(&repo_root().join("projects/seed-001"), &["tools", ".", "--json"]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", text(&out.stderr));
    let tools: serde_json::Value = serde_json::from_slice(&out.stdout).expect("valid JSON");
    let summarize = tools.as_array().unwrap().iter().find(|t| t["name"] == "review.summarize").expect("listed");
    assert_eq!(summarize["toolpack"], "review-tools");
    assert_eq!(summarize["allowedAgents"], serde_json::json!(["reviewer"]));
    golden("seed-001.tools.json").assert_eq(&text(&out.stdout));
}

#[test]
fn tools_for_an_unknown_agent_is_an_input_error() {
    let out = suzumio(&repo_root().join("projects/seed-001"), &["tools", ".", "--agent", "nobody"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr), "error: Unknown agent: nobody (agents: pm, reviewer)\n");
}

#[test]
fn missing_project_directory_is_an_input_error() {
    let out = suzumio(&repo_root(), &["check", "projects/does-not-exist"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).starts_with("error: project directory projects/does-not-exist cannot be opened"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn every_command_has_help() {
    for args in [&["--help"][..], &["check", "--help"], &["tools", "--help"]] {
        let out = suzumio(&repo_root(), args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(text(&out.stdout).contains("Usage: suzumio"), "{args:?}: {}", text(&out.stdout));
    }
}

#[test]
fn runner_binary_reports_its_version() {
    let out = std::process::Command::new(support::runner_binary()).arg("--version").output().expect("runs");
    assert_eq!(text(&out.stdout), format!("suzumio-runner {}\n", env!("CARGO_PKG_VERSION")));
}

#[test]
fn ui_runs_a_webui_entry_against_the_project_state() {
    let project = support::TempProject::copy_of("review");
    let dir = project.dir.to_str().unwrap();
    let out = suzumio(&repo_root(), &["ui", dir, "review-tools/review.rebuild", r#"{"scope": "all"}"#]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "Review cache rebuilt\nRebuilt all reviews (1 rebuilds so far).\n");
    let out = suzumio(&repo_root(), &["ui", dir, "core/project.stats", "--json"]);
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(stats["metadata"]["metrics"][0], serde_json::json!({"label": "Status", "value": "initialized"}));
}

#[test]
fn ui_input_errors_exit_2_and_pack_failures_exit_1() {
    let project = support::TempProject::copy_of("review");
    let dir = project.dir.to_str().unwrap();
    let cases: [(&[&str], i32, &str); 5] = [
        (
            &["review-tools/review.rebuild", r#"{"scope": "everything"}"#],
            2,
            "error: input does not match the schema: /scope:",
        ),
        (&["review-tools/review.rebuild", "{oops"], 2, "error: the input is not valid JSON"),
        (&["review-tools"], 2, "error: `review-tools` is not <toolpack>/<entry>"),
        (&["nope/x"], 2, "error: Unknown toolpack: nope"),
        (&["slow/slow.throw"], 1, "error: toolpack slow: RangeError: scope out of range"),
    ];
    for (args, code, message) in cases {
        let mut full = vec!["ui", dir];
        full.extend_from_slice(args);
        let out = suzumio(&repo_root(), &full);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).lines().any(|l| l.starts_with(message)), "{args:?}: {}", text(&out.stderr));
    }
}

#[test]
fn start_tick_and_signals_from_the_terminal() {
    let project = support::TempProject::copy_of("review");
    let dir = project.dir.to_str().unwrap();
    let run = |args: &[&str]| {
        let mut full = args.to_vec();
        full.insert(1, dir);
        let out = suzumio(&repo_root(), &full);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(
        run(&["tick"]),
        "project review-demo is initialized; only running projects are scheduled (suzumio start)\n"
    );
    assert_eq!(run(&["start"]), "project review-demo: initialized -> running\n");
    run(&["ui", "core/messages.send", r#"{"recipient": "reviewer", "body": "Review PR 7", "priority": "P2"}"#]);
    let pending = run(&["signals", "--agent", "reviewer", "--status", "pending"]);
    assert!(pending.lines().nth(1).is_some_and(|l| l.contains("message.created") && l.contains("P2")), "{pending}");
    let ticked = run(&["tick"]);
    assert!(ticked.lines().any(|l| l.starts_with("started act_") && l.contains(" for reviewer with sig_")), "{ticked}");
    let delivered = run(&["signals", "--agent", "reviewer", "--json"]);
    let list: serde_json::Value = serde_json::from_str(&delivered).unwrap();
    assert_eq!(list[0]["status"], "delivered");
    let out = suzumio(&repo_root(), &["signals", dir, "--agent", "nobody"]);
    assert_eq!(
        (out.status.code(), text(&out.stderr)),
        (Some(2), "error: Unknown agent: nobody (agents: pm, reviewer)\n".to_string())
    );
}

#[test]
fn enum_arguments_are_checked_by_the_parser_and_list_their_values() {
    let project = support::TempProject::copy_of("review");
    let dir = project.dir.to_str().unwrap();
    let cases: [(&[&str], &str); 3] = [
        (&["send", dir, "pm", "--priority", "p2", "hi"], "[possible values: P0, P1, P2, P3]"),
        (&["signals", dir, "--status", "open"], "[possible values: pending, delivered, closed]"),
        (
            &["tool", "call", dir, "--agent", "pm", "--backend", "vm", "messages.send"],
            "[possible values: docker, process]",
        ),
    ];
    for (args, values) in cases {
        let out = suzumio(&repo_root(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains(values), "{args:?}: {}", text(&out.stderr));
    }
    let out = suzumio(&repo_root(), &["send", dir, "pm", "--priority", "P1", "hi"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("sent msg_"), "{}", text(&out.stdout));
}
