//! The read-only git tools (`git.status`, `git.diff`, `git.log`, gitoxide inside the runner)
//! on repositories made here with the `git` CLI: staged, unstaged and untracked changes, path
//! filters, the diff's size cap, a path-filtered log, and a repository that is only found when
//! it lies beneath the roots.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use suzumio_runner::{BuiltinTools, Roots};

struct Repo {
    base: PathBuf,
    tools: BuiltinTools,
    _tmp: tempfile::TempDir,
}

impl Repo {
    /// A sandbox whose `/workspace/project` is a repository with two commits, then a staged
    /// change, an unstaged one, a deletion and an untracked file.
    fn new() -> Repo {
        let tmp = tempfile::Builder::new().prefix("suzumio-git-tools-").tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let roots = Roots { workspace: base.join("ws"), artifacts: base.join("artifacts"), mnt: base.join("mnt") };
        for dir in [&roots.workspace, &roots.artifacts.join("pm"), &roots.mnt] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let repo = Repo { base, tools: BuiltinTools::new(roots, "pm"), _tmp: tmp };
        let dir = repo.project();
        std::fs::create_dir_all(dir.join("src")).unwrap();
        git(&dir, &["init", "-q", "-b", "main"]);
        std::fs::write(dir.join("README.md"), "# Demo\n").unwrap();
        std::fs::write(dir.join("src/lib.rs"), "pub fn one() -> u32 {\n    1\n}\n").unwrap();
        std::fs::write(dir.join("old.txt"), "to be deleted\n").unwrap();
        git(&dir, &["add", "."]);
        git(&dir, &["commit", "-q", "-m", "First commit"]);
        std::fs::write(dir.join("src/lib.rs"), "pub fn one() -> u32 {\n    1\n}\n\npub fn two() -> u32 {\n    2\n}\n")
            .unwrap();
        git(&dir, &["commit", "-q", "-am", "Add two"]);
        std::fs::write(dir.join("README.md"), "# Demo\n\nStaged line.\n").unwrap();
        git(&dir, &["add", "README.md"]);
        std::fs::write(dir.join("src/lib.rs"), "pub fn one() -> u32 {\n    1\n}\n\npub fn two() -> u32 {\n    22\n}\n")
            .unwrap();
        std::fs::remove_file(dir.join("old.txt")).unwrap();
        std::fs::write(dir.join("notes.txt"), "untracked\n").unwrap();
        repo
    }

    fn project(&self) -> PathBuf {
        self.base.join("ws/project")
    }

    async fn ok(&self, tool: &str, input: Value) -> String {
        match self.tools.invoke(tool, input.clone()).await {
            Ok(out) => out.output,
            Err(e) => panic!("{tool} {input}: {e}"),
        }
    }

    async fn err(&self, tool: &str, input: Value) -> String {
        match self.tools.invoke(tool, input.clone()).await {
            Ok(out) => panic!("{tool} {input} should fail: {}", out.output),
            Err(e) => e.message().to_string(),
        }
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Test Author", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"])
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
async fn status_lists_staged_unstaged_and_untracked_files() {
    let r = Repo::new();
    let head = git(&r.project(), &["rev-parse", "--short", "HEAD"]);
    assert_eq!(
        r.ok("git.status", json!({"path": "project"})).await,
        format!(
            "On branch main ({})\nStaged:\n  M README.md\nNot staged:\n  D old.txt\n  M src/lib.rs\nUntracked:\n  ? notes.txt",
            head.trim()
        )
    );
    // From a subdirectory: the same repository, only what is below it.
    let sub = r.ok("git.status", json!({"path": "/workspace/project/src"})).await;
    assert!(sub.ends_with("Not staged:\n  M src/lib.rs"), "{sub}");
}

#[tokio::test]
async fn diff_shows_the_worktree_or_the_index() {
    let r = Repo::new();
    assert_eq!(
        r.ok("git.diff", json!({"path": "project/src"})).await,
        "diff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -3,5 +3,5 @@\n }\n \n pub fn two() -> u32 {\n-    2\n+    22\n }"
    );
    assert_eq!(
        r.ok("git.diff", json!({"path": "project", "staged": true})).await,
        "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1,3 @@\n # Demo\n+\n+Staged line."
    );
    let all = r.ok("git.diff", json!({"path": "project"})).await;
    assert!(all.starts_with("diff --git a/old.txt b/old.txt\ndeleted file\n--- a/old.txt\n+++ /dev/null\n"), "{all}");
    let cut = r.tools.invoke("git.diff", json!({"path": "project", "maxBytes": 40})).await.unwrap();
    assert!(
        cut.output.ends_with("[diff truncated at 40 bytes; give a narrower path or raise maxBytes]"),
        "{}",
        cut.output
    );
    assert_eq!(cut.metadata.unwrap()["truncated"], true);
}

#[tokio::test]
async fn log_lists_commits_newest_first_and_filters_by_path() {
    let r = Repo::new();
    let ids: Vec<String> = git(&r.project(), &["log", "--format=%h"]).lines().map(str::to_string).collect();
    let date = git(&r.project(), &["log", "-1", "--format=%ad", "--date=short"]);
    let date = date.trim();
    assert_eq!(
        r.ok("git.log", json!({"path": "project"})).await,
        format!("{} {date} Test Author: Add two\n{} {date} Test Author: First commit", ids[0], ids[1])
    );
    assert_eq!(
        r.ok("git.log", json!({"path": "project/old.txt"})).await,
        format!("{} {date} Test Author: First commit", ids[1])
    );
    let one = r.ok("git.log", json!({"path": "project", "limit": 1})).await;
    assert_eq!(one, format!("{} {date} Test Author: Add two\n[more commits not shown; raise limit]", ids[0]));
}

#[tokio::test]
async fn a_repository_outside_the_roots_is_never_used() {
    let r = Repo::new();
    // The sandbox itself, above /workspace, is a repository too: not found from the workspace.
    git(&r.base, &["init", "-q"]);
    std::fs::create_dir_all(r.base.join("ws/plain")).unwrap();
    assert_eq!(
        r.err("git.status", json!({"path": "plain"})).await,
        "Not a git repository (nor any parent up to /workspace): /workspace/plain"
    );
    assert_eq!(
        r.err("git.log", json!({"path": "/workspace/../.."})).await,
        "Read path must be under /workspace, /artifacts, or /mnt: /"
    );
    // A link to a repository elsewhere is refused like any read outside the roots.
    std::os::unix::fs::symlink(r.base.join(".git"), r.base.join("ws/plain/.git")).unwrap();
    let err = r.err("git.status", json!({"path": "plain"})).await;
    assert!(err.starts_with("Not a git repository") || err.contains("outside the roots"), "{err}");
}
