//! The built-in runner tools against real directories and real processes: every input rule,
//! output format and error text (reference §4.5–§4.8), symlink escapes, patch atomicity, shell
//! timeouts that kill the whole process group, and output caps.
//!
//! Tools see `/workspace`, `/artifacts` and `/mnt`; here those map to temporary directories.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use suzumio::rpc::ToolOutput;
use suzumio::toolpack::ToolError;
use suzumio_runner::{BuiltinTool, BuiltinTools, Roots};
use tokio::sync::Notify;

struct Sandbox {
    base: PathBuf,
    roots: Roots,
    tools: BuiltinTools,
    _tmp: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let tmp = tempfile::Builder::new().prefix("suzumio-tools-").tempdir().unwrap();
        let base = tmp.path().to_path_buf();
        let roots = Roots { workspace: base.join("ws"), artifacts: base.join("artifacts"), mnt: base.join("mnt") };
        for dir in [&roots.workspace, &roots.artifacts.join("pm"), &roots.artifacts.join("qa"), &roots.mnt.join("data")]
        {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::create_dir_all(base.join("outside")).unwrap();
        let base = base.canonicalize().unwrap();
        let roots = Roots { workspace: base.join("ws"), artifacts: base.join("artifacts"), mnt: base.join("mnt") };
        let tools = BuiltinTools::new(roots.clone(), "pm");
        Sandbox { base, roots, tools, _tmp: tmp }
    }

    /// Where a tool path is on disk.
    fn disk(&self, shown: &str) -> PathBuf {
        for (root, dir) in
            [("/workspace", &self.roots.workspace), ("/artifacts", &self.roots.artifacts), ("/mnt", &self.roots.mnt)]
        {
            if let Some(rest) = shown.strip_prefix(root) {
                return dir.join(rest.trim_start_matches('/'));
            }
        }
        self.base.join(shown.trim_start_matches('/'))
    }

    fn write(&self, shown: &str, content: &str) {
        let path = self.disk(shown);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    fn read(&self, shown: &str) -> Option<String> {
        std::fs::read_to_string(self.disk(shown)).ok()
    }

    fn outside(&self) -> PathBuf {
        self.base.join("outside")
    }

    async fn run(&self, tool: &str, input: Value) -> Result<ToolOutput, ToolError> {
        self.tools.invoke(tool, input).await
    }

    /// The tool's output text, or its error text.
    async fn check(&self, tool: &str, input: Value, expected: Result<&str, &str>) {
        let got = self.run(tool, input.clone()).await;
        let got = got.as_ref().map(|o| o.output.as_str()).map_err(ToolError::message);
        assert_eq!(got, expected, "{tool} {input}");
    }
}

fn numbered(lines: std::ops::RangeInclusive<usize>) -> String {
    lines.map(|n| format!("{n}: line {n}")).collect::<Vec<_>>().join("\n")
}

fn file_of_lines(count: usize) -> String {
    (1..=count).map(|n| format!("line {n}\n")).collect()
}

// ---- file.read ----

#[tokio::test]
async fn read_shows_numbered_lines() {
    let s = Sandbox::new();
    s.write("/workspace/a.txt", "alpha\nbeta\r\ngamma");
    s.check("file.read", json!({"path": "/workspace/a.txt"}), Ok("1: alpha\n2: beta\n3: gamma")).await;
}

#[tokio::test]
async fn read_resolves_relative_paths_under_the_workspace() {
    let s = Sandbox::new();
    s.write("/workspace/dir/a.txt", "x\n");
    s.check("file.read", json!({"path": "dir/a.txt"}), Ok("1: x")).await;
    s.check("file.read", json!({"path": "./dir/../dir/a.txt"}), Ok("1: x")).await;
}

#[tokio::test]
async fn read_pages_with_offset_and_limit() {
    let s = Sandbox::new();
    s.write("/workspace/a.txt", &file_of_lines(10));
    let page = format!("{}\n[lines 4-6 of 10; continue with offset 7]", numbered(4..=6));
    s.check("file.read", json!({"path": "a.txt", "offset": 4, "limit": 3}), Ok(&page)).await;
    s.check("file.read", json!({"path": "a.txt", "offset": 9}), Ok(&numbered(9..=10))).await;
    s.check("file.read", json!({"path": "a.txt", "offset": 11}), Ok("(no lines at offset 11; the file has 10 lines)"))
        .await;
}

#[tokio::test]
async fn read_reports_its_window_in_metadata() {
    let s = Sandbox::new();
    s.write("/workspace/a.txt", &file_of_lines(10));
    let out = s.run("file.read", json!({"path": "a.txt", "offset": 2, "limit": 3})).await.unwrap();
    assert_eq!(out.title.as_deref(), Some("/workspace/a.txt"));
    assert_eq!(
        Value::Object(out.metadata.unwrap()),
        json!({"path": "/workspace/a.txt", "kind": "file", "lines": 3, "totalLines": 10, "offset": 2, "limit": 3, "truncated": true})
    );
    let out = s.run("file.read", json!({"path": "a.txt"})).await.unwrap();
    assert_eq!(out.metadata.unwrap()["truncated"], false);
}

#[tokio::test]
async fn read_numbers_must_be_positive() {
    let s = Sandbox::new();
    s.write("/workspace/a.txt", "x");
    for (key, value) in [("offset", json!(0)), ("limit", json!(-5)), ("maxBytes", json!("10")), ("offset", json!(0.5))]
    {
        s.check("file.read", json!({"path": "a.txt", key: value}), Err("Expected a positive number")).await;
    }
}

#[tokio::test]
async fn read_caps_the_limit_at_2000_lines() {
    let s = Sandbox::new();
    s.write("/workspace/a.txt", &file_of_lines(2500));
    let out = s.run("file.read", json!({"path": "a.txt", "limit": 5000, "maxBytes": 100000})).await.unwrap();
    let meta = out.metadata.unwrap();
    assert_eq!((meta["lines"].clone(), meta["limit"].clone()), (json!(2000), json!(2000)));
    let end = "\n2000: line 2000\n[lines 1-2000 of 2500; continue with offset 2001]";
    assert!(out.output.ends_with(end), "{}", &out.output[out.output.len() - 80..]);
}

#[tokio::test]
async fn read_cuts_lines_over_2000_characters() {
    let s = Sandbox::new();
    s.write("/workspace/a.txt", &format!("{}\nshort\n", "é".repeat(2500)));
    let expected = format!("1: {}... (line truncated)\n2: short", "é".repeat(2000));
    s.check("file.read", json!({"path": "a.txt"}), Ok(&expected)).await;
}

#[tokio::test]
async fn read_caps_output_bytes() {
    let s = Sandbox::new();
    s.write("/workspace/a.txt", "abcdefghij\nklmnopqrst\n");
    // "1: abcdefghij\n2: klmnopqrst" is 27 bytes; 10 are kept.
    s.check("file.read", json!({"path": "a.txt", "maxBytes": 10}), Ok("1: abcdefg\n[truncated 17 bytes]")).await;
    let out = s.run("file.read", json!({"path": "a.txt", "maxBytes": 10})).await.unwrap();
    assert_eq!(out.metadata.unwrap()["truncated"], true);
}

#[tokio::test]
async fn read_lists_directories_sorted_with_a_slash_on_subdirectories() {
    let s = Sandbox::new();
    s.write("/workspace/b.txt", "");
    s.write("/workspace/a.txt", "");
    s.write("/workspace/src/main.rs", "");
    s.check("file.read", json!({"path": "/workspace"}), Ok("a.txt\nb.txt\nsrc/")).await;
    s.check("file.read", json!({"path": "/workspace", "offset": 2, "limit": 1}), Ok("b.txt")).await;
    let out = s.run("file.read", json!({"path": "."})).await.unwrap();
    assert_eq!(
        Value::Object(out.metadata.unwrap()),
        json!({"path": "/workspace", "kind": "directory", "entries": 3, "totalEntries": 3, "offset": 1, "limit": 200, "truncated": false})
    );
    s.check("file.read", json!({"path": "/artifacts"}), Ok("pm/\nqa/")).await;
}

#[tokio::test]
async fn read_says_when_there_is_nothing() {
    let s = Sandbox::new();
    s.write("/workspace/empty.txt", "");
    std::fs::create_dir_all(s.disk("/workspace/empty")).unwrap();
    s.check("file.read", json!({"path": "empty.txt"}), Ok("(empty file)")).await;
    s.check("file.read", json!({"path": "empty"}), Ok("(empty directory)")).await;
    s.check("file.read", json!({"path": "missing.txt"}), Err("No such file or directory: /workspace/missing.txt"))
        .await;
}

#[tokio::test]
async fn read_refuses_special_files_instead_of_hanging() {
    let s = Sandbox::new();
    let fifo = s.disk("/workspace/pipe");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    s.check(
        "file.read",
        json!({"path": "pipe"}),
        Err("Cannot read /workspace/pipe: it is not a regular file or a directory"),
    )
    .await;
}

#[tokio::test]
async fn read_allows_artifacts_of_every_agent_and_mounts() {
    let s = Sandbox::new();
    s.write("/artifacts/qa/report.md", "qa says hi");
    s.write("/mnt/data/input.csv", "a,b");
    s.check("file.read", json!({"path": "/artifacts/qa/report.md"}), Ok("1: qa says hi")).await;
    s.check("file.read", json!({"path": "/mnt/data/input.csv"}), Ok("1: a,b")).await;
}

#[tokio::test]
async fn read_refuses_paths_outside_the_roots() {
    let s = Sandbox::new();
    for (path, shown) in [
        ("/etc/passwd", "/etc/passwd"),
        ("../etc/passwd", "/etc/passwd"),
        ("/workspace/../../etc/passwd", "/etc/passwd"),
        ("/workspaces/x", "/workspaces/x"),
        ("/", "/"),
    ] {
        let error = format!("Read path must be under /workspace, /artifacts, or /mnt: {shown}");
        s.check("file.read", json!({"path": path}), Err(&error)).await;
    }
    s.check("file.read", json!({"path": 5}), Err("path must be a string")).await;
    s.check("file.read", json!("a.txt"), Err("Tool input must be an object")).await;
}

#[tokio::test]
async fn read_refuses_a_symlink_that_leaves_the_roots() {
    let s = Sandbox::new();
    std::fs::write(s.outside().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(s.outside(), s.disk("/workspace/out")).unwrap();
    std::os::unix::fs::symlink("/etc", s.disk("/workspace/etc")).unwrap();
    std::os::unix::fs::symlink(s.outside().join("secret.txt"), s.disk("/workspace/secret.txt")).unwrap();
    for path in ["/workspace/out/secret.txt", "/workspace/etc/passwd", "/workspace/etc", "secret.txt"] {
        let shown = suzumio_runner::paths::Roots::normalize(path);
        let error = format!("Read path must be under /workspace, /artifacts, or /mnt: {shown}");
        s.check("file.read", json!({"path": path}), Err(&error)).await;
    }
}

#[tokio::test]
async fn read_follows_a_symlink_that_stays_inside() {
    let s = Sandbox::new();
    s.write("/artifacts/qa/notes.md", "shared");
    std::os::unix::fs::symlink(s.disk("/artifacts/qa"), s.disk("/workspace/qa")).unwrap();
    std::os::unix::fs::symlink("qa/notes.md", s.disk("/workspace/notes.md")).unwrap();
    s.check("file.read", json!({"path": "qa/notes.md"}), Ok("1: shared")).await;
    s.check("file.read", json!({"path": "notes.md"}), Ok("1: shared")).await;
}

// ---- file.write ----

#[tokio::test]
async fn write_creates_and_replaces_files() {
    let s = Sandbox::new();
    s.check("file.write", json!({"path": "a.txt", "content": "hello"}), Ok("Wrote 5 chars to /workspace/a.txt")).await;
    assert_eq!(s.read("/workspace/a.txt").as_deref(), Some("hello"));
    s.check(
        "file.write",
        json!({"path": "/workspace/a.txt", "content": "héllo wörld"}),
        Ok("Wrote 11 chars to /workspace/a.txt"),
    )
    .await;
    assert_eq!(s.read("/workspace/a.txt").as_deref(), Some("héllo wörld"));
    let leftovers: Vec<_> = std::fs::read_dir(s.disk("/workspace")).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "temporary files left behind");
}

#[tokio::test]
async fn write_keeps_the_mode_of_the_file_it_replaces() {
    use std::os::unix::fs::PermissionsExt;
    let s = Sandbox::new();
    s.write("/workspace/run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(s.disk("/workspace/run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    s.run("file.write", json!({"path": "run.sh", "content": "#!/bin/sh\necho hi\n"})).await.unwrap();
    let mode = std::fs::metadata(s.disk("/workspace/run.sh")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
}

#[tokio::test]
async fn write_content_must_be_a_string() {
    let s = Sandbox::new();
    s.check("file.write", json!({"path": "a.txt", "content": 5}), Err("content must be a string")).await;
    s.check("file.write", json!({"path": "a.txt"}), Err("content must be a string")).await;
    s.check(
        "file.write",
        json!({"path": "a.txt", "content": "", "createDirs": "yes"}),
        Err("createDirs must be a boolean"),
    )
    .await;
}

#[tokio::test]
async fn write_needs_create_dirs_for_missing_parents() {
    let s = Sandbox::new();
    s.check(
        "file.write",
        json!({"path": "new/dir/a.txt", "content": "x"}),
        Err("Parent directory does not exist: /workspace/new/dir (set createDirs: true to create it)"),
    )
    .await;
    s.check(
        "file.write",
        json!({"path": "new/dir/a.txt", "content": "x", "createDirs": true}),
        Ok("Wrote 1 chars to /workspace/new/dir/a.txt"),
    )
    .await;
    assert_eq!(s.read("/workspace/new/dir/a.txt").as_deref(), Some("x"));
}

#[tokio::test]
async fn write_is_limited_to_the_workspace_and_own_artifacts() {
    let s = Sandbox::new();
    s.check(
        "file.write",
        json!({"path": "/artifacts/pm/out.md", "content": "ok"}),
        Ok("Wrote 2 chars to /artifacts/pm/out.md"),
    )
    .await;
    for path in ["/artifacts/qa/x.md", "/artifacts/x.md", "/mnt/data/x", "/etc/x", "../x", "/artifacts/pmx/a"] {
        let shown = suzumio_runner::paths::Roots::normalize(path);
        let error = format!("Write path must be under /workspace or /artifacts/pm: {shown}");
        s.check("file.write", json!({"path": path, "content": "x"}), Err(&error)).await;
    }
    s.check(
        "file.write",
        json!({"path": "/workspace", "content": "x"}),
        Err("Cannot write /workspace: it is a directory"),
    )
    .await;
}

#[tokio::test]
async fn write_refuses_symlinks_out_of_the_write_roots_even_dangling_ones() {
    let s = Sandbox::new();
    std::os::unix::fs::symlink(s.outside().join("planted.txt"), s.disk("/workspace/dangling")).unwrap();
    std::os::unix::fs::symlink(s.disk("/artifacts/qa"), s.disk("/workspace/qa")).unwrap();
    for path in ["dangling", "qa/report.md"] {
        let shown = suzumio_runner::paths::Roots::normalize(path);
        let error = format!("Write path must be under /workspace or /artifacts/pm: {shown}");
        s.check("file.write", json!({"path": path, "content": "x"}), Err(&error)).await;
    }
    assert!(!s.outside().join("planted.txt").exists());
    assert!(!s.disk("/artifacts/qa/report.md").exists());
}

#[tokio::test]
async fn write_roots_follow_the_artifacts_dir() {
    let s = Sandbox::new();
    let tools = BuiltinTools::with_artifacts_dir(s.roots.clone(), "/artifacts/qa".into());
    assert_eq!(tools.artifacts_dir(), "/artifacts/qa");
    let out = tools.invoke("file.write", json!({"path": "/artifacts/qa/r.md", "content": "x"})).await.unwrap();
    assert_eq!(out.output, "Wrote 1 chars to /artifacts/qa/r.md");
    let error = tools.invoke("file.write", json!({"path": "/artifacts/pm/r.md", "content": "x"})).await.unwrap_err();
    assert_eq!(
        error,
        ToolError::Failed("Write path must be under /workspace or /artifacts/qa: /artifacts/pm/r.md".into())
    );
}

// ---- file.patch ----

#[tokio::test]
async fn patch_adds_updates_and_deletes_with_one_line_each() {
    let s = Sandbox::new();
    s.write("/workspace/a.txt", "one two three");
    s.write("/workspace/old.txt", "bye");
    let ops = json!({"operations": [
        {"op": "add", "path": "b.txt", "content": "new"},
        {"op": "update", "path": "a.txt", "search": "two", "replace": "2"},
        {"op": "delete", "path": "/workspace/old.txt"},
    ]});
    s.check(
        "file.patch",
        ops,
        Ok("Added /workspace/b.txt (3 chars)\nUpdated /workspace/a.txt (1 replacement)\nDeleted /workspace/old.txt"),
    )
    .await;
    assert_eq!(s.read("/workspace/a.txt").as_deref(), Some("one 2 three"));
    assert_eq!(s.read("/workspace/b.txt").as_deref(), Some("new"));
    assert_eq!(s.read("/workspace/old.txt"), None);
}

/// Three files, one hunk of which does not match: every rejected hunk is named with its file and
/// line, and no file changes — then the corrected diff applies to all three.
#[tokio::test]
async fn a_unified_diff_applies_to_every_file_or_to_none() {
    let s = Sandbox::new();
    s.write("/workspace/src/a.rs", "fn a() {\n    1\n}\n");
    s.write("/workspace/src/b.rs", "one\ntwo\nthree\nfour\n");
    s.write("/workspace/gone.txt", "bye\n");
    let diff = |b_context: &str| {
        format!(
            "diff --git a/src/a.rs b/src/a.rs\n--- a/src/a.rs\n+++ b/src/a.rs\n@@ -1,3 +1,3 @@\n fn a() {{\n-    1\n+    2\n }}\n\
             --- a/src/b.rs\n+++ b/src/b.rs\n@@ -1,2 +1,2 @@\n-one\n+ONE\n two\n@@ -3,2 +3,2 @@\n {b_context}\n-four\n+FOUR\n\
             --- /dev/null\n+++ b/docs/new.md\n@@ -0,0 +1,2 @@\n+# New\n+text\n\
             --- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
        )
    };
    let bad = s.run("file.patch", json!({ "diff": diff("THREE") })).await.expect_err("a hunk does not match");
    assert_eq!(
        bad.message(),
        "The diff was not applied; no file was changed:\n/workspace/src/b.rs: hunk 2 (diff line 15) rejected: @@ -3,2 +3,2 @@: line 3 is `three` where the diff expects `THREE`, and the hunk's lines are found nowhere after the previous hunk"
    );
    assert_eq!(s.read("/workspace/src/a.rs").as_deref(), Some("fn a() {\n    1\n}\n"));
    assert_eq!(s.read("/workspace/src/b.rs").as_deref(), Some("one\ntwo\nthree\nfour\n"));
    assert_eq!(s.read("/workspace/docs/new.md"), None);
    assert_eq!(s.read("/workspace/gone.txt").as_deref(), Some("bye\n"));

    let done = s.run("file.patch", json!({ "diff": diff("three") })).await.expect("the diff applies");
    assert_eq!(s.read("/workspace/src/a.rs").as_deref(), Some("fn a() {\n    2\n}\n"));
    assert_eq!(s.read("/workspace/src/b.rs").as_deref(), Some("ONE\ntwo\nthree\nFOUR\n"));
    assert_eq!(s.read("/workspace/docs/new.md").as_deref(), Some("# New\ntext\n"));
    assert_eq!(s.read("/workspace/gone.txt"), None);
    let first_lines: Vec<&str> = done.output.lines().take(4).collect();
    assert_eq!(
        first_lines,
        [
            "Updated /workspace/src/a.rs (+1 -1)",
            "Updated /workspace/src/b.rs (+2 -2)",
            "Added /workspace/docs/new.md (+2)",
            "Deleted /workspace/gone.txt (-1)"
        ]
    );
    // The resulting diff shows what was written.
    for line in ["--- a/workspace/src/b.rs", "+FOUR", "+++ b/workspace/docs/new.md", "+++ /dev/null", "-bye"] {
        assert!(done.output.lines().any(|l| l == line), "{line} in {}", done.output);
    }
}

#[tokio::test]
async fn a_unified_diff_is_refused_with_a_located_reason() {
    let s = Sandbox::new();
    s.write("/workspace/a.txt", "a\n");
    let s = &s;
    let refused = |diff: &'static str| async move { s.run("file.patch", json!({ "diff": diff })).await.unwrap_err() };
    let e = refused("--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n-a\n+b\n").await;
    assert!(
        e.message().starts_with("Cannot read the diff: diff line 5: the diff ends inside the hunk"),
        "{}",
        e.message()
    );
    let e = refused("--- /dev/null\n+++ b/a.txt\n@@ -0,0 +1 @@\n+x\n").await;
    assert_eq!(
        e.message(),
        "The diff was not applied; no file was changed:\n/workspace/a.txt (diff line 1): the diff creates it (--- /dev/null) but it already exists"
    );
    let e = refused("--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-root\n+me\n").await;
    assert!(matches!(e, ToolError::Denied(_) | ToolError::Failed(_) | ToolError::Rejected(_)));
    assert!(e.message().contains("passwd"), "{}", e.message());
    let both = s.run("file.patch", json!({"diff": "x", "operations": [{"op": "delete", "path": "a.txt"}]})).await;
    assert_eq!(both.unwrap_err().message(), "give either operations or diff, not both");
    assert_eq!(s.read("/workspace/a.txt").as_deref(), Some("a\n"));
}

#[tokio::test]
async fn edit_replaces_a_line_range_checked_against_the_expected_text() {
    let s = Sandbox::new();
    s.write("/workspace/f.txt", "one\ntwo\nthree\n");
    let stale = s
        .run(
            "file.edit",
            json!({"path": "f.txt", "startLine": 2, "endLine": 3, "expectedText": "two\n3", "newText": "X"}),
        )
        .await
        .expect_err("the lines are not the expected text");
    assert_eq!(
        stale.message(),
        "Lines 2-3 of /workspace/f.txt are not the expectedText; the file is unchanged. They are now:\n     2\ttwo\n     3\tthree"
    );
    assert_eq!(s.read("/workspace/f.txt").as_deref(), Some("one\ntwo\nthree\n"));
    let done = s
        .run(
            "file.edit",
            json!({"path": "f.txt", "startLine": 2, "endLine": 3, "expectedText": "two\nthree", "newText": "X"}),
        )
        .await
        .expect("the range matches");
    assert_eq!(s.read("/workspace/f.txt").as_deref(), Some("one\nX\n"));
    assert!(done.output.starts_with("Edited /workspace/f.txt (lines 2-3 replaced)\n"), "{}", done.output);
    assert!(done.output.lines().any(|l| l == "-three") && done.output.lines().any(|l| l == "+X"), "{}", done.output);
    s.run("file.edit", json!({"path": "f.txt", "startLine": 1, "endLine": 0, "newText": "zero"}))
        .await
        .expect("insert");
    assert_eq!(s.read("/workspace/f.txt").as_deref(), Some("zero\none\nX\n"));
    let both = s.run("file.edit", json!({"path": "f.txt", "startLine": 1, "oldText": "zero", "newText": "0"})).await;
    assert_eq!(both.unwrap_err().message(), "give either oldText or startLine/endLine, not both");
    let past = s.run("file.edit", json!({"path": "f.txt", "startLine": 9, "newText": "?"})).await.unwrap_err();
    assert_eq!(
        past.message(),
        "/workspace/f.txt has 3 line(s): lines 9-9 are not in it (read it again with file.read)"
    );
}

#[tokio::test]
async fn patch_update_replace_defaults_to_empty_and_replace_all_replaces_every_match() {
    let s = Sandbox::new();
    s.write("/workspace/a.txt", "x-x-x");
    s.check(
        "file.patch",
        json!({"operations": [{"op": "update", "path": "a.txt", "search": "-", "replaceAll": true}]}),
        Ok("Updated /workspace/a.txt (2 replacements)"),
    )
    .await;
    assert_eq!(s.read("/workspace/a.txt").as_deref(), Some("xxx"));
}

#[tokio::test]
async fn patch_errors_are_the_reference_texts() {
    let s = Sandbox::new();
    s.write("/workspace/a.txt", "x-x-x");
    let update =
        |search: &str| json!({"operations": [{"op": "update", "path": "a.txt", "search": search, "replace": "y"}]});
    s.check("file.patch", update("zzz"), Err("Patch search text not found in /workspace/a.txt")).await;
    s.check(
        "file.patch",
        update("x"),
        Err("Patch search text matched 3 times in /workspace/a.txt; set replaceAll:true or make search text unique"),
    )
    .await;
    s.check("file.patch", update(""), Err("Patch search text is required for update: /workspace/a.txt")).await;
    s.check(
        "file.patch",
        json!({"operations": [{"op": "rename", "path": "a.txt"}]}),
        Err("Unsupported patch op: rename"),
    )
    .await;
    s.check("file.patch", json!({"operations": []}), Err("operations must be a non-empty array")).await;
    s.check(
        "file.patch",
        json!({"operations": [{"op": "add", "path": "/artifacts/qa/x", "content": ""}]}),
        Err("Write path must be under /workspace or /artifacts/pm: /artifacts/qa/x"),
    )
    .await;
    s.check(
        "file.patch",
        json!({"operations": [{"op": "delete", "path": "nope.txt"}]}),
        Err("No such file or directory: /workspace/nope.txt"),
    )
    .await;
    s.check(
        "file.patch",
        json!({"operations": [{"op": "update", "path": "nope.txt", "search": "a"}]}),
        Err("No such file or directory: /workspace/nope.txt"),
    )
    .await;
    assert_eq!(s.read("/workspace/a.txt").as_deref(), Some("x-x-x"));
}

#[tokio::test]
async fn patch_is_all_or_nothing_when_a_later_operation_fails() {
    let s = Sandbox::new();
    s.write("/workspace/a.txt", "keep me");
    s.write("/workspace/c.txt", "and me");
    let ops = json!({"operations": [
        {"op": "update", "path": "a.txt", "search": "keep", "replace": "changed"},
        {"op": "add", "path": "new/deep/b.txt", "content": "b", "createDirs": true},
        {"op": "delete", "path": "c.txt"},
        {"op": "update", "path": "a.txt", "search": "not there"},
    ]});
    s.check("file.patch", ops, Err("Patch search text not found in /workspace/a.txt")).await;
    assert_eq!(s.read("/workspace/a.txt").as_deref(), Some("keep me"));
    assert_eq!(s.read("/workspace/c.txt").as_deref(), Some("and me"));
    assert!(!s.disk("/workspace/new").exists(), "directories of a failed patch must not be created");
    let names: Vec<_> = std::fs::read_dir(s.disk("/workspace")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[tokio::test]
async fn patch_operations_see_the_results_of_earlier_ones() {
    let s = Sandbox::new();
    let ops = json!({"operations": [
        {"op": "add", "path": "c.txt", "content": "draft"},
        {"op": "update", "path": "c.txt", "search": "draft", "replace": "final"},
        {"op": "add", "path": "tmp.txt", "content": "t"},
        {"op": "delete", "path": "tmp.txt"},
    ]});
    s.run("file.patch", ops).await.unwrap();
    assert_eq!(s.read("/workspace/c.txt").as_deref(), Some("final"));
    assert!(!s.disk("/workspace/tmp.txt").exists());
    // Updating a file deleted earlier in the same patch fails, and so nothing happens.
    s.write("/workspace/d.txt", "d");
    let ops = json!({"operations": [
        {"op": "delete", "path": "d.txt"},
        {"op": "update", "path": "d.txt", "search": "d"},
    ]});
    s.check("file.patch", ops, Err("No such file or directory: /workspace/d.txt")).await;
    assert_eq!(s.read("/workspace/d.txt").as_deref(), Some("d"));
}

#[tokio::test]
async fn patch_add_needs_create_dirs_for_missing_parents() {
    let s = Sandbox::new();
    s.check(
        "file.patch",
        json!({"operations": [{"op": "add", "path": "x/y.txt", "content": "1"}]}),
        Err("Parent directory does not exist: /workspace/x (set createDirs: true to create it)"),
    )
    .await;
    // A directory created by an earlier operation counts.
    let ops = json!({"operations": [
        {"op": "add", "path": "x/y.txt", "content": "1", "createDirs": true},
        {"op": "add", "path": "x/z.txt", "content": "2"},
    ]});
    s.run("file.patch", ops).await.unwrap();
    assert_eq!(s.read("/workspace/x/z.txt").as_deref(), Some("2"));
}

// ---- file.list ----

#[tokio::test]
async fn list_shows_one_level_sorted_with_directories_marked() {
    let s = Sandbox::new();
    s.write("/workspace/b.txt", "b");
    s.write("/workspace/a/inner.txt", "i");
    s.write("/workspace/c/deep/x.txt", "x");
    s.check("file.list", json!({}), Ok("a/\nb.txt\nc/")).await;
    s.check("file.list", json!({"path": "/workspace"}), Ok("a/\nb.txt\nc/")).await;
}

#[tokio::test]
async fn list_descends_to_the_requested_depth() {
    let s = Sandbox::new();
    s.write("/workspace/b.txt", "b");
    s.write("/workspace/a/inner.txt", "i");
    s.write("/workspace/c/deep/x.txt", "x");
    s.check("file.list", json!({"depth": 2}), Ok("a/\na/inner.txt\nb.txt\nc/\nc/deep/")).await;
    s.check("file.list", json!({"depth": 3}), Ok("a/\na/inner.txt\nb.txt\nc/\nc/deep/\nc/deep/x.txt")).await;
    s.check("file.list", json!({"path": "c", "depth": 5}), Ok("deep/\ndeep/x.txt")).await;
}

#[tokio::test]
async fn list_stops_at_the_limit_and_says_how_many_were_left_out() {
    let s = Sandbox::new();
    for i in 0..7 {
        s.write(&format!("/workspace/f{i}.txt"), "x");
    }
    let out = s.run("file.list", json!({"limit": 3})).await.unwrap();
    assert_eq!(out.output, "f0.txt\nf1.txt\nf2.txt\n[4 more entries not shown; raise limit or list a subdirectory]");
    let meta = Value::Object(out.metadata.unwrap());
    assert_eq!(meta, json!({"path": "/workspace", "entries": 3, "depth": 1, "limit": 3, "truncated": true}));
}

#[tokio::test]
async fn list_never_follows_symbolic_links() {
    let s = Sandbox::new();
    s.write("/workspace/real/a.txt", "a");
    std::fs::write(s.outside().join("secret.txt"), "s").unwrap();
    std::os::unix::fs::symlink(s.outside(), s.disk("/workspace/escape")).unwrap();
    std::os::unix::fs::symlink(s.disk("/workspace"), s.disk("/workspace/real/loop")).unwrap();
    let out = s.run("file.list", json!({"depth": 10})).await.unwrap();
    assert!(!out.output.contains("secret.txt"), "{}", out.output);
    let lines: Vec<&str> = out.output.lines().collect();
    assert_eq!(lines.len(), 4, "{}", out.output);
    assert!(lines[0].starts_with("escape -> "), "{}", out.output);
    assert_eq!(&lines[1..3], ["real/", "real/a.txt"]);
    assert!(lines[3].starts_with("real/loop -> "), "{}", out.output);
}

#[tokio::test]
async fn list_refuses_paths_outside_the_roots_and_files() {
    let s = Sandbox::new();
    s.write("/workspace/a.txt", "a");
    s.check("file.list", json!({"path": "/etc"}), Err("Read path must be under /workspace, /artifacts, or /mnt: /etc"))
        .await;
    s.check("file.list", json!({"path": "a.txt"}), Err("Not a directory: /workspace/a.txt (use file.read for files)"))
        .await;
    s.check("file.list", json!({"path": "missing"}), Err("No such file or directory: /workspace/missing")).await;
    std::fs::create_dir_all(s.disk("/workspace/empty")).unwrap();
    s.check("file.list", json!({"path": "empty"}), Ok("(empty directory)")).await;
}

// ---- shell.exec ----

#[tokio::test]
async fn shell_shows_the_command_and_its_streams() {
    let s = Sandbox::new();
    s.check("shell.exec", json!({"command": "echo hi"}), Ok("$ echo hi\n[stdout]\nhi")).await;
    s.check(
        "shell.exec",
        json!({"command": "echo out; echo err >&2"}),
        Ok("$ echo out; echo err >&2\n[stdout]\nout\n[stderr]\nerr"),
    )
    .await;
    s.check("shell.exec", json!({"command": "true"}), Ok("$ true")).await;
}

#[tokio::test]
async fn shell_reports_a_non_zero_exit_without_failing() {
    let s = Sandbox::new();
    let out = s.run("shell.exec", json!({"command": "echo no >&2; exit 3"})).await.unwrap();
    assert_eq!(out.output, "$ echo no >&2; exit 3\n[stderr]\nno");
    assert_eq!(
        Value::Object(out.metadata.unwrap()),
        json!({"exitCode": 3, "signal": null, "cwd": "/workspace", "timedOut": false, "truncated": false, "stoppedBackground": false})
    );
    assert_eq!(out.title.as_deref(), Some("exit code 3"));
}

#[tokio::test]
async fn shell_runs_in_the_workspace_or_the_given_directory() {
    let s = Sandbox::new();
    s.write("/workspace/marker.txt", "in workspace");
    s.write("/workspace/sub/marker.txt", "in sub");
    s.write("/artifacts/pm/marker.txt", "in artifacts");
    s.check("shell.exec", json!({"command": "cat marker.txt"}), Ok("$ cat marker.txt\n[stdout]\nin workspace")).await;
    s.check("shell.exec", json!({"command": "cat marker.txt", "cwd": "sub"}), Ok("$ cat marker.txt\n[stdout]\nin sub"))
        .await;
    let out = s.run("shell.exec", json!({"command": "cat marker.txt", "cwd": "/artifacts/pm"})).await.unwrap();
    assert_eq!(out.output, "$ cat marker.txt\n[stdout]\nin artifacts");
    assert_eq!(out.metadata.unwrap()["cwd"], "/artifacts/pm");
    let outside = s.outside().to_string_lossy().into_owned();
    std::fs::write(s.outside().join("marker.txt"), "anywhere").unwrap();
    s.check(
        "shell.exec",
        json!({"command": "cat marker.txt", "cwd": outside}),
        Ok("$ cat marker.txt\n[stdout]\nanywhere"),
    )
    .await;
    s.check(
        "shell.exec",
        json!({"command": "pwd", "cwd": "nope"}),
        Err("Working directory does not exist: /workspace/nope"),
    )
    .await;
}

#[tokio::test]
async fn shell_uses_bash_when_there_is_one() {
    let s = Sandbox::new();
    let out = s.run("shell.exec", json!({"command": "echo \"${BASH_VERSION:+bash}\""})).await.unwrap();
    let has_bash = std::env::split_paths(&std::env::var_os("PATH").unwrap()).any(|d| d.join("bash").is_file());
    assert_eq!(out.output.ends_with("\nbash"), has_bash, "{}", out.output);
}

#[tokio::test]
async fn shell_inputs_are_checked() {
    let s = Sandbox::new();
    s.check("shell.exec", json!({}), Err("command must be a string")).await;
    s.check("shell.exec", json!({"command": "true", "timeoutMs": 0}), Err("Expected a positive number")).await;
    s.check("shell.exec", json!({"command": "true", "maxOutputBytes": -1}), Err("Expected a positive number")).await;
    s.check("shell.exec", json!({"command": "true", "cwd": 1}), Err("cwd must be a string")).await;
}

#[tokio::test]
async fn shell_caps_output_and_marks_it_truncated() {
    let s = Sandbox::new();
    let command = "head -c 300000 /dev/zero | tr '\\0' a; echo done >&2";
    let out = s.run("shell.exec", json!({"command": command, "maxOutputBytes": 1000})).await.unwrap();
    assert_eq!(out.output, format!("$ {command}\n[stdout]\n{}\n[truncated]", "a".repeat(1000)));
    let meta = out.metadata.unwrap();
    assert_eq!((meta["truncated"].clone(), meta["exitCode"].clone()), (json!(true), json!(0)));
    // The cap covers stdout and stderr together.
    let out = s.run("shell.exec", json!({"command": "echo 12345; echo 67890 >&2", "maxOutputBytes": 8})).await.unwrap();
    assert_eq!(out.output, "$ echo 12345; echo 67890 >&2\n[stdout]\n12345\n[stderr]\n67\n[truncated]");
}

/// Whether a process is gone (or a zombie waiting for init to reap it).
fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// Whether `pid` is gone within a deadline that only guards against a process that never goes.
async fn wait_gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if is_gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn pid_in(s: &Sandbox, file: &str) -> i32 {
    s.read(file).unwrap().trim().parse().unwrap()
}

#[tokio::test]
async fn shell_timeout_kills_the_whole_process_group() {
    let s = Sandbox::new();
    let command = "sleep 30 & echo $! > child.pid; echo started; wait";
    let out = s.run("shell.exec", json!({"command": command, "timeoutMs": 1500})).await.unwrap();
    assert_eq!(out.output, format!("$ {command}\n[stdout]\nstarted"));
    let meta = out.metadata.unwrap();
    assert_eq!(
        (meta["timedOut"].clone(), meta["signal"].clone(), meta["exitCode"].clone()),
        (json!(true), json!("SIGTERM"), Value::Null)
    );
    assert_eq!(out.title.as_deref(), Some("timed out after 1500 ms"));
    assert!(wait_gone(pid_in(&s, "/workspace/child.pid")).await, "the background sleep survived the timeout");
}

#[tokio::test]
async fn shell_timeout_sends_sigkill_to_a_group_that_ignores_sigterm() {
    let s = Sandbox::new();
    let command = "trap '' TERM; sleep 30 & echo $! > child.pid; wait";
    // Long enough for `bash -l` to start and set the trap, even on a loaded machine.
    let out = s.run("shell.exec", json!({"command": command, "timeoutMs": 1500})).await.unwrap();
    // SIGKILL is named only when SIGTERM did not end the group (the trap held through the grace).
    let meta = out.metadata.unwrap();
    assert_eq!((meta["timedOut"].clone(), meta["signal"].clone()), (json!(true), json!("SIGKILL")));
    assert!(wait_gone(pid_in(&s, "/workspace/child.pid")).await);
}

#[tokio::test]
async fn shell_is_stopped_by_cancel() {
    let s = Sandbox::new();
    let cancel = Arc::new(Notify::new());
    let run = s.tools.run(
        BuiltinTool::from_name("shell.exec").expect("shell.exec is a runner built-in"),
        json!({"command": "sleep 30 & echo $! > c.pid; wait"}),
        Some(cancel.clone()),
    );
    let pid_file = s.roots.workspace.join("c.pid");
    let (result, _) = tokio::join!(run, async {
        // Cancelled once the command runs (it has written its child's pid), not after a pause.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !std::fs::read_to_string(&pid_file).is_ok_and(|pid| pid.ends_with('\n')) {
            assert!(Instant::now() < deadline, "the command never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cancel.notify_one();
    });
    // Without the cancel the call would have run for the 30 s of its sleep and succeeded.
    assert_eq!(
        result.unwrap_err(),
        ToolError::Cancelled("shell.exec was cancelled: sleep 30 & echo $! > c.pid; wait".into())
    );
    assert!(wait_gone(pid_in(&s, "/workspace/c.pid")).await);
}

#[tokio::test]
async fn shell_returns_when_the_command_exits_even_if_a_background_process_keeps_the_pipe() {
    let s = Sandbox::new();
    // Had it waited for the pipe, "late" would be in the output.
    let out =
        s.run("shell.exec", json!({"command": "(sleep 5; echo late) & echo now", "timeoutMs": 20000})).await.unwrap();
    assert_eq!(
        out.output,
        "$ (sleep 5; echo late) & echo now\n[stdout]\nnow\n[processes it left running in the background were \
         stopped: shell.exec returns only when nothing it started runs]"
    );
    assert_eq!(out.metadata.unwrap()["stoppedBackground"], true);
}

/// Regression: `for i in $(seq 200); do sleep 20 & done` returned at once and left the sleeps
/// running, so the next calls failed with "can't fork" until they ended (the container's pid
/// limit). Nothing a call starts outlives it.
#[tokio::test]
async fn background_processes_do_not_outlive_the_call() {
    let s = Sandbox::new();
    let out = s
        .run(
            "shell.exec",
            json!({"command": "for i in $(seq 50); do sleep 30 & done; echo $$ > group.pid; echo started"}),
        )
        .await
        .unwrap();
    assert!(out.output.contains("started"), "{}", out.output);
    let group = pid_in(&s, "/workspace/group.pid");
    // Killed processes are reaped by init (in a container, the runner's `--init`), so they may
    // linger as zombies for a moment: count only the ones still alive.
    let mut left = String::new();
    for _ in 0..100 {
        let listed = std::process::Command::new("pgrep")
            .args(["-g", &group.to_string(), "-r", "R,S,D,T,t"])
            .output()
            .expect("pgrep runs");
        left = String::from_utf8_lossy(&listed.stdout).trim().to_string();
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(left, "", "the call's process group is gone");
    let next = s.run("shell.exec", json!({"command": "echo next"})).await.unwrap();
    assert!(next.output.ends_with("[stdout]\nnext"), "{}", next.output);
    let quiet = s.run("shell.exec", json!({"command": "echo alone"})).await.unwrap();
    assert_eq!(quiet.metadata.unwrap()["stoppedBackground"], false);
}

#[tokio::test]
async fn unknown_tools_are_refused() {
    let s = Sandbox::new();
    s.check("web.fetch", json!({}), Err("Unknown tool: web.fetch")).await;
}
