//! `suzumio init` and `suzumio toolpack new` from an empty temporary directory, with nothing
//! from this repository but the binaries: the written project checks, its new pack's tool runs
//! through `tool call`, and the scripted model runs it to a submitted report. The packaged
//! `scheduler` and `plan` packs registered by id.

mod support;

use std::path::Path;

use support::{suzumio, text};

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
        ok(cwd, &["send", template, "pm", "Start the report."]);
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
