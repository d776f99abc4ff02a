//! The search, edit and git tools in the minimal image's real, hardened container (no `git`
//! or `grep` binary in it), through the real path (allowlist, schema, socket, runner): a
//! fixture tree made here on the host in the agent's `/workspace` (a `.gitignore`, a binary
//! file, a 10 MB file, a name that is not UTF-8, a link to `/etc`), and a repository made with
//! the `git` CLI as the agent's `/workspace`. Needs a Docker engine (scripts/setup.sh) and the
//! static runner; without them these tests fail, saying so.

mod support;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;
use suzumio::config::BackendKind;

type Setup = support::containers::ContainerProject;

/// The project with agent `a`'s container started, and its `/workspace` on the host.
async fn setup() -> (Setup, PathBuf) {
    let s = support::containers::start("ft", None, BackendKind::Docker).await;
    s.sh("a", "true").await;
    let workspace = s.tools.project.config.root.join("workspaces").join("a");
    (s, workspace)
}

/// What the test made as root becomes the runner's (uid 65534), as an agent's own files are.
fn hand_over(dir: &Path) {
    let out = Command::new("chown").args(["-R", "65534:65534"]).arg(dir).output().unwrap();
    assert!(out.status.success(), "chown: {}", String::from_utf8_lossy(&out.stderr));
}

fn write(dir: &Path, relative: &str, content: impl AsRef<[u8]>) {
    let path = dir.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

#[tokio::test]
async fn search_and_edit_tools_work_on_a_fixture_tree_in_the_minimal_image() {
    let (s, ws) = setup().await;
    write(&ws, ".gitignore", "build/\n*.log\n");
    write(&ws, "src/app.txt", "alpha\nneedle one\nbeta\n");
    write(&ws, "build/out.txt", "needle built\n");
    write(&ws, "run.log", "needle logged\n");
    write(&ws, "blob.bin", b"needle\0binary\n");
    let mut big = "filler\n".repeat(10 * 1024 * 1024 / 7);
    big.push_str("needle at the end\n");
    write(&ws, "big.txt", &big);
    std::fs::write(ws.join(OsStr::from_bytes(b"caf\xe9.txt")), "needle\n").unwrap();
    std::os::unix::fs::symlink("/etc", ws.join("etc-link")).unwrap();
    hand_over(&ws);
    assert_eq!(s.sh("a", "command -v git grep rg || echo none").await.lines().last(), Some("none"));

    let list = s.call("a", "file.list", json!({"depth": 3})).await.unwrap();
    let lines: Vec<&str> = list.lines().collect();
    assert!(lines.contains(&"caf\u{fffd}.txt") && lines.contains(&"src/app.txt"), "{list}");
    assert!(lines.iter().any(|l| l.starts_with("etc-link -> /etc")), "{list}");
    assert!(!list.contains("build") && !list.contains("run.log"), "{list}");

    let glob = s.call("a", "file.glob", json!({"pattern": "**/*.txt"})).await.unwrap();
    let mut found: Vec<&str> = glob.lines().collect();
    found.sort();
    assert_eq!(found, ["/workspace/big.txt", "/workspace/caf\u{fffd}.txt", "/workspace/src/app.txt"]);

    let lines_in_big = big.lines().count();
    assert_eq!(
        s.call("a", "file.grep", json!({"pattern": "needle"})).await.unwrap(),
        format!(
            "/workspace/big.txt:{lines_in_big}:needle at the end\n/workspace/caf\u{fffd}.txt:1:needle\n/workspace/src/app.txt:2:needle one\n[1 binary file skipped]"
        )
    );
    assert_eq!(
        s.call(
            "a",
            "file.grep",
            json!({"pattern": "NEEDLE", "caseInsensitive": true, "outputMode": "counts", "path": "src"})
        )
        .await
        .unwrap(),
        "/workspace/src/app.txt:1"
    );

    // Confinement: a link out of the roots and `..` are refused.
    let err = s.call("a", "file.grep", json!({"pattern": "root", "path": "etc-link/passwd"})).await.unwrap_err();
    assert!(err.contains("Read path must be under"), "{err}");
    let err = s.call("a", "file.glob", json!({"pattern": "*", "path": "/workspace/../etc"})).await.unwrap_err();
    assert!(err.contains("Read path must be under") && err.ends_with(": /etc"), "{err}");
    let err = s.call("a", "file.delete", json!({"path": "etc-link/passwd"})).await.unwrap_err();
    assert!(err.contains("Write path must be under"), "{err}");

    write(&ws, "edit.txt", "same\nsame\nonce\n");
    hand_over(&ws.join("edit.txt"));
    let err =
        s.call("a", "file.edit", json!({"path": "edit.txt", "oldText": "absent", "newText": "x"})).await.unwrap_err();
    assert!(err.starts_with("oldText not found in /workspace/edit.txt"), "{err}");
    let err =
        s.call("a", "file.edit", json!({"path": "edit.txt", "oldText": "same", "newText": "x"})).await.unwrap_err();
    assert!(err.starts_with("oldText matches 2 times in /workspace/edit.txt"), "{err}");
    let diff =
        s.call("a", "file.edit", json!({"path": "edit.txt", "oldText": "once", "newText": "twice"})).await.unwrap();
    assert!(diff.contains("\n-once\n+twice"), "{diff}");
    s.call("a", "file.edit", json!({"path": "edit.txt", "oldText": "same", "newText": "x", "replaceAll": true}))
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(ws.join("edit.txt")).unwrap(), "x\nx\ntwice\n");

    assert_eq!(
        s.call("a", "file.move", json!({"from": "edit.txt", "to": "src/moved.txt"})).await.unwrap(),
        "Moved /workspace/edit.txt to /workspace/src/moved.txt"
    );
    let err = s.call("a", "file.move", json!({"from": "src/moved.txt", "to": "src/app.txt"})).await.unwrap_err();
    assert!(err.contains("already exists"), "{err}");
    s.call("a", "file.delete", json!({"path": "build", "recursive": true})).await.unwrap();
    s.call("a", "file.delete", json!({"path": "etc-link"})).await.unwrap();
    assert!(!ws.join("build").exists() && ws.join("etc-link").symlink_metadata().is_err());
    assert!(Path::new("/etc/passwd").exists());
}

/// The `git` CLI as the test's user (root) in a workspace the runner's uid owns.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "safe.directory=*", "-c", "user.name=Test Author", "-c", "user.email=test@example.com"])
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("the git CLI");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn git_tools_read_a_repository_mounted_at_the_workspace() {
    let (s, ws) = setup().await;
    git(&ws, &["init", "-q", "-b", "main"]);
    write(&ws, "main.py", "print('one')\n");
    write(&ws, "docs/guide.md", "# Guide\n");
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-q", "-m", "Initial import"]);
    write(&ws, "docs/guide.md", "# Guide\n\nMore.\n");
    git(&ws, &["commit", "-q", "-am", "Extend the guide"]);
    write(&ws, "main.py", "print('two')\n");
    write(&ws, "staged.txt", "new\n");
    git(&ws, &["add", "staged.txt"]);
    write(&ws, "scratch.txt", "untracked\n");
    hand_over(&ws);
    let head = git(&ws, &["rev-parse", "--short", "HEAD"]);

    assert_eq!(
        s.call("a", "git.status", json!({})).await.unwrap(),
        format!(
            "On branch main ({})\nStaged:\n  A staged.txt\nNot staged:\n  M main.py\nUntracked:\n  ? scratch.txt",
            head.trim()
        )
    );
    assert_eq!(
        s.call("a", "git.diff", json!({})).await.unwrap(),
        "diff --git a/main.py b/main.py\n--- a/main.py\n+++ b/main.py\n@@ -1 +1 @@\n-print('one')\n+print('two')"
    );
    let staged = s.call("a", "git.diff", json!({"staged": true})).await.unwrap();
    assert!(
        staged.starts_with("diff --git a/staged.txt b/staged.txt\nnew file\n--- /dev/null\n+++ b/staged.txt\n"),
        "{staged}"
    );
    let log = s.call("a", "git.log", json!({})).await.unwrap();
    let subjects: Vec<&str> = log.lines().map(|l| l.rsplit(": ").next().unwrap()).collect();
    assert_eq!(subjects, ["Extend the guide", "Initial import"]);
    let docs = s.call("a", "git.log", json!({"path": "/workspace/docs/guide.md", "limit": 5})).await.unwrap();
    assert_eq!(docs.lines().count(), 2, "{docs}");
    let main = s.call("a", "git.log", json!({"path": "main.py"})).await.unwrap();
    assert!(main.ends_with("Test Author: Initial import") && main.lines().count() == 1, "{main}");
    // Agent `b`'s allowlist has no git tools.
    let err = s.call("b", "git.status", json!({})).await.unwrap_err();
    assert!(err.contains("git.status"), "{err}");
}
