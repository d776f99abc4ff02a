//! `suzumio init` and `suzumio toolpack new` from an empty temporary directory, with nothing
//! from this repository but the binaries: the written project checks, its new pack's tool runs
//! through `tool call`, and the scripted model runs it to a submitted report. The packaged
//! `scheduler` and `plan` packs registered by id.

mod support;

use std::path::Path;

use serde_json::Value;
use support::{repo_root, suzumio, text};

fn ok(cwd: &Path, args: &[&str]) -> String {
    let out = suzumio(cwd, args);
    assert_eq!(out.status.code(), Some(0), "{args:?}\nstdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    assert!(!text(&out.stderr).contains("warning:"), "{args:?} warned:\n{}", text(&out.stderr));
    text(&out.stdout)
}

/// Add the lines `toolpack new` prints: the pack under tools.toolpacks, its tool in pm's list.
fn register_pack(project: &Path, name: &str) {
    let path = project.join("suzumio.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let yaml = yaml.replacen("    - shell\n", &format!("    - shell\n    - path: ./toolpacks/{name}\n"), 1).replacen(
        "    tools: [",
        &format!("    tools: [{name}.hello, "),
        1,
    );
    std::fs::write(path, yaml).unwrap();
}

#[test]
fn init_then_toolpack_new_checks_calls_and_runs_in_an_empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    let written = ok(cwd, &["init", "hello"]);
    assert!(written.contains("suzumio.yaml") && written.contains("script.yaml"), "{written}");
    assert!(written.contains("suzumio check hello") && written.contains("suzumio run hello --until-idle"), "{written}");
    let yaml = std::fs::read_to_string(cwd.join("hello/suzumio.yaml")).unwrap();
    assert!(yaml.contains("name: hello") && yaml.contains("type: scripted"), "{yaml}");
    assert!(yaml.contains("#   type: openai-compatible") && yaml.contains("#   type: anthropic"), "{yaml}");

    let scaffold = ok(cwd, &["toolpack", "new", "hello/toolpacks/greet"]);
    assert!(scaffold.contains("- path: ./toolpacks/greet") && scaffold.contains("greet.hello"), "{scaffold}");
    for file in ["suzumio.toolpack.json", "runner.mjs", "controller.mjs", "README.md"] {
        assert!(cwd.join("hello/toolpacks/greet").join(file).is_file(), "{file} written");
    }
    register_pack(&cwd.join("hello"), "greet");
    let check = ok(cwd, &["check", "hello"]);
    assert!(check.contains("greet (local, 1 tool, 2 WebUI entries)"), "{check}");
    assert!(check.contains("mounted toolpacks: greet"), "{check}");

    let called = ok(
        cwd,
        &["tool", "call", "hello", "--agent", "pm", "greet.hello", r#"{"name": "Ada"}"#, "--backend", "process"],
    );
    assert!(called.contains("Wrote greetings/Ada.txt (12 bytes). Ada was greeted 1 time(s)."), "{called}");
    let greeting = std::fs::read_to_string(cwd.join("hello/workspaces/pm/greetings/Ada.txt")).unwrap();
    assert_eq!(greeting, "Hello, Ada!\n", "context.fs wrote into the agent's workspace");
    let panel = ok(cwd, &["ui", "hello", "greet/greet.greetings"]);
    assert!(panel.contains("Ada: 1"), "the controller's state counts the greeting: {panel}");
    ok(cwd, &["ui", "hello", "greet/greet.reset", r#"{"reason": "test"}"#]);
    assert!(ok(cwd, &["ui", "hello", "greet/greet.greetings"]).contains("Nobody was greeted yet."));

    ok(cwd, &["send", "hello", "pm", "Start the report."]);
    let run = ok(cwd, &["run", "hello", "--port", "0", "--backend", "process", "--until-idle"]);
    assert!(run.contains("project is submitted"), "{run}");
    let note = std::fs::read_to_string(cwd.join("hello/artifacts/pm/hello.md")).unwrap();
    assert!(note.contains("Written by pm."), "{note}");
    assert!(std::fs::read_to_string(cwd.join("hello/final-report.md")).unwrap().contains("hello.md"));
}

#[test]
fn the_team_and_demo_templates_run_to_a_submitted_report() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    for template in ["team", "demo"] {
        ok(cwd, &["init", template, "--template", template]);
        ok(cwd, &["check", template]);
        // No `send`: the templates say `kickoff: true`, so the first run sends the task.
        let run = ok(cwd, &["run", template, "--port", "0", "--backend", "process", "--until-idle"]);
        assert!(run.contains("project is submitted"), "{template}: {run}");
        let status = ok(cwd, &["status", template]);
        assert!(status.starts_with(&format!("project {template}: submitted")), "{status}");
    }
    for worker in ["worker-1", "worker-2"] {
        let part = std::fs::read_to_string(cwd.join(format!("team/artifacts/{worker}/part.md"))).unwrap();
        assert!(part.contains(&format!("Hello from {worker}.")), "{part}");
    }
    // The demo registers the packaged packs by id: they were written into the project.
    for pack in ["scheduler", "plan"] {
        let dir = cwd.join("demo/.suzumio/packs").join(pack);
        let versions: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(versions.len(), 1, "one materialized version of {pack}");
    }
}

/// The bodies of the messages the user sent `agent`, oldest first, from the real CLI.
fn user_messages(dir: &str, agent: &str) -> Vec<String> {
    let out = suzumio(Path::new(dir), &["signals", dir, "--agent", agent, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let signals: Vec<Value> = serde_json::from_slice(&out.stdout).expect("signals JSON");
    let mut from_user: Vec<(String, String)> = signals
        .iter()
        .filter(|s| s["kind"] == "message.created" && s["payload"]["sender"] == "user")
        .map(|s| {
            (
                s["createdAt"].as_str().unwrap_or_default().into(),
                s["payload"]["body"].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    from_user.sort();
    from_user.into_iter().map(|(_, body)| body).collect()
}

/// `suzumio run <dir> --until-idle` (the process backend) with `extra`, which must succeed:
/// stdout and stderr.
fn run_until_idle(dir: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec!["run", dir, "--port", "0", "--backend", "process", "--until-idle"];
    args.extend_from_slice(extra);
    let out = suzumio(Path::new(dir), &args);
    assert_eq!(out.status.code(), Some(0), "{args:?}\nstdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));
    (text(&out.stdout), text(&out.stderr))
}

/// "Copy the demo and run it": `--kickoff` sends the task to the coordinator and the scripted
/// run reaches its report; a later run with `--kickoff` does not send it again.
#[test]
fn a_copied_demo_run_with_kickoff_sends_its_task_once_and_runs_to_its_report() {
    let project = support::TempProject::copy_of_path(&repo_root().join("projects/demo"));
    let dir = project.dir.to_str().expect("utf-8 path").to_string();
    // The flag, not the config, is what sends it here.
    let config = project.dir.join("suzumio.yaml");
    let yaml = std::fs::read_to_string(&config).unwrap();
    assert!(yaml.contains("\nkickoff: true\n"), "the demo kicks off by itself: {yaml}");
    std::fs::write(&config, yaml.replace("\nkickoff: true\n", "\n")).unwrap();

    let (printed, said) = run_until_idle(&dir, &["--kickoff"]);
    assert!(printed.contains("project is submitted"), "{printed}\n{said}");
    let task = std::fs::read_to_string(project.dir.join("fragments/task.md")).unwrap();
    assert_eq!(user_messages(&dir, "pm"), [task.trim()], "the task, as the user's first message");
    let report = std::fs::read_to_string(project.dir.join("final-report.md")).unwrap();
    assert!(report.contains("Plan \"Sampling report\" completed."), "{report}");

    // Run again with the flag (a restart): the task is not sent a second time.
    let (_, said) = run_until_idle(&dir, &["--kickoff"]);
    assert!(said.contains("kickoff: not sent: the project has messages already"), "{said}");
    assert_eq!(user_messages(&dir, "pm"), [task.trim()], "still one");
}

/// Regression: `run --until-idle` on a project with nothing pending ended silently. It says
/// what to do, and that `--kickoff` would send the task while the project has no message.
#[test]
fn a_run_with_nothing_to_do_says_to_send_a_message_first() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    ok(cwd, &["init", "hello"]);
    let config = cwd.join("hello/suzumio.yaml");
    let yaml = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, yaml.replace("\nkickoff: true\n", "\n")).unwrap();
    let dir = cwd.join("hello").to_str().expect("utf-8 path").to_string();
    let (_, said) = run_until_idle(&dir, &[]);
    let hint = format!(
        "suzumio: nothing to do: send a message first (suzumio send {dir} pm \"…\"), or run with --kickoff to send \
         the project's task\n"
    );
    assert!(said.contains(&hint), "{said}");
    assert!(user_messages(&dir, "pm").is_empty());
}

/// `--kickoff` and `kickoff: true` need a coordinator to send the task to: named, located.
#[test]
fn kickoff_without_a_coordinator_agent_is_refused_with_where() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    ok(cwd, &["init", "solo"]);
    let config = cwd.join("solo/suzumio.yaml");
    let yaml = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, yaml.replace("\n  pm:\n", "\n  writer:\n")).unwrap();
    let checked = suzumio(cwd, &["check", "solo"]);
    assert_eq!(checked.status.code(), Some(2), "{}", text(&checked.stdout));
    let said = format!("{}{}", text(&checked.stdout), text(&checked.stderr));
    let line = yaml.lines().position(|l| l == "kickoff: true").expect("the template kicks off") + 1;
    assert!(said.contains(&format!("suzumio.yaml:{line}:1: kickoff:")), "{said}");
    assert!(
        said.contains(
            "kickoff sends the project's task to the coordinator, but the project has none: name one with communication.coordinatorAgent (agents: writer)"
        ),
        "{said}"
    );

    std::fs::write(&config, yaml.replace("\n  pm:\n", "\n  writer:\n").replace("kickoff: true\n", "")).unwrap();
    let run = suzumio(cwd, &["run", "solo", "--port", "0", "--backend", "process", "--until-idle", "--kickoff"]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run.stderr));
    assert!(
        text(&run.stderr).contains("--kickoff: kickoff sends the project's task to the coordinator"),
        "{}",
        text(&run.stderr)
    );
}

#[test]
fn init_refuses_a_non_empty_directory_unless_forced() {
    let tmp = tempfile::tempdir().unwrap();
    let out = suzumio(tmp.path(), &["check", "."]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no suzumio.yaml in . (`suzumio init .` writes a new project there)"),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(tmp.path().join("notes.txt"), "mine").unwrap();
    let out = suzumio(tmp.path(), &["init", "."]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("is not empty"), "{}", text(&out.stderr));
    assert!(!tmp.path().join("suzumio.yaml").exists(), "nothing written");
    let out = suzumio(tmp.path(), &["toolpack", "new", "."]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    ok(tmp.path(), &["init", ".", "--force"]);
    assert_eq!(std::fs::read_to_string(tmp.path().join("notes.txt")).unwrap(), "mine", "other files are kept");
    ok(tmp.path(), &["check", "."]);
}

#[test]
fn copy_packs_registers_editable_copies_by_path() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    ok(cwd, &["init", "p", "--template", "team", "--copy-packs"]);
    let yaml = std::fs::read_to_string(cwd.join("p/suzumio.yaml")).unwrap();
    assert!(yaml.contains("- path: ./toolpacks/scheduler") && yaml.contains("- path: ./toolpacks/plan"), "{yaml}");
    assert!(cwd.join("p/toolpacks/plan/controller.mjs").is_file());
    let check = ok(cwd, &["check", "p"]);
    assert!(check.contains("scheduler (local, 6 tools") && check.contains("plan (local, 5 tools"), "{check}");
    assert!(!cwd.join("p/.suzumio/packs").exists(), "packs registered by path are not materialized");

    // Listed by id as well: the path wins, with a warning.
    std::fs::write(cwd.join("p/suzumio.yaml"), yaml.replacen("  toolpacks:\n", "  toolpacks:\n    - scheduler\n", 1))
        .unwrap();
    let out = suzumio(cwd, &["check", "p"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let warned = text(&out.stderr);
    assert!(warned.contains("`scheduler` is also registered by path; the pack at that path is used"), "{warned}");
    assert!(!cwd.join("p/.suzumio/packs").exists(), "the packaged copy is not written");
}

#[test]
fn packaged_packs_by_id_check_and_a_scheduler_tool_call_works() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    ok(cwd, &["init", "p", "--template", "team"]);
    let check = ok(cwd, &["check", "p"]);
    assert!(check.contains("scheduler (local, 6 tools") && check.contains("plan (local, 5 tools"), "{check}");
    let input = r#"{"afterSeconds": 600, "recipient": "pm", "body": "Check the plan."}"#;
    let scheduled = ok(cwd, &["tool", "call", "p", "--agent", "pm", "schedule.once", input, "--backend", "process"]);
    let jobs = ok(cwd, &["ui", "p", "scheduler/schedule.jobs", "{}"]);
    assert!(jobs.contains("Check the plan."), "the job was stored ({scheduled}): {jobs}");
    // A second load reuses the written files.
    ok(cwd, &["check", "p"]);
    assert_eq!(std::fs::read_dir(cwd.join("p/.suzumio/packs/scheduler")).unwrap().count(), 1);
}
