//! The pack author's documentation cannot rot: the worked example of `docs/toolpacks.md`
//! (`docs/examples/notes/`) passes `suzumio check` and its tools run through the real path on the
//! process backend, and `docs/types/suzumio.d.ts` declares every context field the glue modules
//! give packs.

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::{TempProject, repo_root, text};

fn suzumio(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(args)
        .current_dir(dir)
        .env("SUZUMIO_RUNNER_BIN", support::runner_binary())
        .output()
        .expect("suzumio runs")
}

fn tool_call(dir: &Path, tool: &str, input: Value) -> Value {
    let out = suzumio(
        dir,
        &["tool", "call", ".", "--agent", "pm", "--backend", "process", "--json", tool, &input.to_string()],
    );
    assert_eq!(out.status.code(), Some(0), "{tool}: {}\n{}", text(&out.stdout), text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

#[test]
fn the_worked_example_checks_and_its_tools_run() {
    let project = TempProject::copy_of_path(&repo_root().join("docs/examples/notes"));
    let dir = project.dir.as_path();
    let check = suzumio(dir, &["check", "."]);
    assert_eq!(check.status.code(), Some(0), "check: {}", text(&check.stderr));
    assert!(text(&check.stdout).contains("notes (local, 2 tools, 1 WebUI entry)"), "{}", text(&check.stdout));

    let added =
        tool_call(dir, "notes.add", json!({"title": "Release plan!", "text": "Ship on Friday after the review"}));
    assert_eq!(added["content"][0]["text"], r#"Saved "Release plan!" (6 words) as notes/release-plan.md."#);
    assert_eq!(
        added["content"][1],
        json!({"type": "resource_link", "uri": "file:///workspace/notes/release-plan.md", "name": "notes/release-plan.md"})
    );
    let note = std::fs::read_to_string(dir.join("workspaces/pm/notes/release-plan.md")).expect("the note was written");
    assert_eq!(note, "# Release plan!\n\nShip on Friday after the review\n");
    let index: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("toolpack-state/notes/index.json")).expect("index"))
            .expect("index JSON");
    assert_eq!(index["notes"][0]["path"], "notes/release-plan.md");
    assert_eq!(index["notes"][0]["agent"], "pm");

    let listed = tool_call(dir, "notes.list", json!({}));
    assert_eq!(listed["structuredContent"], json!({"notes": [{"path": "notes/release-plan.md", "bytes": note.len()}]}));
}

/// Field names a glue module gives packs: `name:` at the start of a line (the context objects'
/// members), `context.name =` and `get name()`.
fn glue_fields(source: &str) -> Vec<String> {
    let ident = |s: &str| -> Option<String> {
        let name: String = s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        (!name.is_empty() && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())).then_some(name)
    };
    let mut fields = Vec::new();
    for line in source.lines().map(str::trim_start) {
        if line.starts_with("//") {
            continue;
        }
        if let Some(name) = ident(line).filter(|n| line[n.len()..].starts_with(": ")) {
            fields.push(name);
        }
        for (marker, _) in line.match_indices("context.").chain(line.match_indices("get ")) {
            let rest = &line[marker..];
            let after = rest.split_once(['.', ' ']).map_or("", |(_, a)| a);
            if let Some(name) = ident(after) {
                let tail = after[name.len()..].trim_start();
                if (rest.starts_with("context.") && tail.starts_with('=') && !tail.starts_with("=="))
                    || (rest.starts_with("get ") && tail.starts_with("()"))
                {
                    fields.push(name);
                }
            }
        }
    }
    fields.sort();
    fields.dedup();
    fields
}

/// The body of `interface name { … }` in the declarations.
fn interface<'a>(types: &'a str, name: &str) -> &'a str {
    let start = types.find(&format!("export interface {name} ")).unwrap_or_else(|| panic!("interface {name}"));
    let body = &types[start..];
    &body[..body.find("\n}\n").unwrap_or(body.len())]
}

#[test]
fn the_types_declare_every_context_field_the_glue_provides() {
    let root = repo_root();
    let types = std::fs::read_to_string(root.join("docs/types/suzumio.d.ts")).expect("the .d.ts");
    let sides: [(&str, &[&str]); 2] = [
        ("runner_glue.mjs", &["RunnerContext", "ContainerFs"]),
        (
            "controller_glue.mjs",
            &["ControllerContext", "SchedulerContext", "ControllerStore", "ControllerState", "ControllerTime"],
        ),
    ];
    for (glue, interfaces) in sides {
        let source = std::fs::read_to_string(root.join("crates/core/src/js").join(glue)).expect("glue");
        let fields = glue_fields(&source);
        assert!(fields.len() >= 12, "{glue}: found only {fields:?}");
        let declared: String = interfaces.iter().map(|name| interface(&types, name)).collect();
        let missing: Vec<&String> = fields
            .iter()
            .filter(|f| !["(", ": ", "?: ", "<"].iter().any(|end| declared.contains(&format!(" {f}{end}"))))
            .collect();
        assert!(missing.is_empty(), "docs/types/suzumio.d.ts does not declare {missing:?} of {glue} in {interfaces:?}");
    }
    // The worked example's JSDoc points at the file that exists.
    let runner = root.join("docs/examples/notes/toolpacks/notes/runner.mjs");
    let source = std::fs::read_to_string(&runner).expect("runner.mjs");
    let start = source.find("import(\"").expect("a JSDoc import") + "import(\"".len();
    let target = &source[start..start + source[start..].find('"').expect("closing quote")];
    assert!(runner.parent().unwrap().join(format!("{target}.d.ts")).is_file(), "{target}.d.ts");
}
