//! Path rules against what hides a path from a lexical match, in agent `a`'s real, hardened
//! container through the real path (allowlist, rules, socket, runner): links made by the agent
//! itself with `ln -s` (`slink -> secrets`, `klink -> secrets/k`), walks from a parent
//! (`file.grep`/`file.list`/`file.glob` on `/workspace`, a directory `file.read`), a link
//! swapped between two calls, an `ask` rule met only through a link, the words of a command
//! line, `git.status`/`git.diff`, and `check`'s warning for a deny rule the agent's commands walk
//! around. The fixture is
//! `tests/fixtures/projects/path-rules`. Needs a Docker engine (scripts/setup.sh) and the
//! static runner; without them these tests fail, saying so.

mod support;

use serde_json::json;
use suzumio::config::BackendKind;

const SECRET: &str = "needle TOPSECRET";

/// The fixture's container, with `secrets/k`, `notes/n`, `src/a.txt`, `src/k` and the links
/// made by the agent's own commands.
async fn setup() -> support::containers::ContainerProject {
    let s = support::containers::start_fixture("path-rules", "pr", None, BackendKind::Docker).await;
    s.sh(
        "a",
        &format!(
            "mkdir -p secrets notes src && echo '{SECRET}' > secrets/k && echo note > notes/n \
             && echo 'needle public' > src/a.txt && echo 'public k' > src/k \
             && ln -s secrets slink && ln -s secrets/k klink && ln -s notes nlink"
        ),
    )
    .await;
    s
}

fn denied(result: Result<String, String>, what: &str) -> String {
    let err = result.expect_err(what);
    assert!(err.contains("Permission denied"), "{what}: {err}");
    assert!(!err.contains("TOPSECRET"), "{what}: {err}");
    err
}

#[tokio::test]
async fn file_tools_through_a_link_are_decided_on_the_path_they_open() {
    let s = setup().await;
    let err = denied(s.call("a", "file.read", json!({"path": "slink/k"})).await, "file.read slink/k");
    assert!(
        err.contains("`slink/k` resolves to /workspace/secrets/k, which project rule 1 (suzumio.yaml:10) denies"),
        "{err}"
    );
    let err = denied(s.call("a", "file.read", json!({"path": "klink"})).await, "file.read klink");
    assert!(err.contains("`klink` resolves to /workspace/secrets/k"), "{err}");
    denied(s.call("a", "file.read", json!({"path": "/workspace/slink/../slink/k"})).await, "normalized");
    for (tool, input) in [
        ("file.write", json!({"path": "slink/k", "content": "overwritten"})),
        ("file.write", json!({"path": "klink", "content": "overwritten"})),
        ("file.write", json!({"path": "slink/new", "content": "planted"})),
        ("file.edit", json!({"path": "klink", "oldText": "TOPSECRET", "newText": "x"})),
        ("file.edit", json!({"path": "slink/k", "oldText": "TOPSECRET", "newText": "x"})),
    ] {
        denied(s.call("a", tool, input.clone()).await, &format!("{tool} {input}"));
    }
    // Nothing was written: the secret is as it was, and nothing was planted beside it.
    let now = s.sh("a", "cat secrets/k; ls secrets").await;
    assert!(now.ends_with(&format!("\n{SECRET}\nk")), "{now}");
    // What the links do not lead into still works through them.
    let through = s.call("a", "file.read", json!({"path": "slink/../src/a.txt"})).await.unwrap();
    assert!(through.contains("needle public"), "{through}");
}

/// A unified diff names its files inside its text: the controller reads them for the rules (a
/// diff that also touches a denied file is denied whole, nothing written), and a link in a
/// diff's path is decided where it leads, as for every file tool.
#[tokio::test]
async fn a_unified_diff_is_decided_on_every_file_it_names() {
    let s = setup().await;
    let hunk = |old: &str, new: &str| format!("@@ -1 +1 @@\n-{old}\n+{new}\n");
    let public = format!("--- a/src/a.txt\n+++ b/src/a.txt\n{}", hunk("needle public", "needle patched"));
    let secret = format!("--- a/secrets/k\n+++ b/secrets/k\n{}", hunk(SECRET, "stolen"));
    let err =
        denied(s.call("a", "file.patch", json!({ "diff": format!("{public}{secret}") })).await, "diff into secrets");
    assert!(err.contains("project rule 1 (suzumio.yaml:10)"), "{err}");
    let through_link = format!("--- a/klink\n+++ b/klink\n{}", hunk(SECRET, "stolen"));
    denied(s.call("a", "file.patch", json!({ "diff": through_link })).await, "diff through a link");
    let now = s.sh("a", "cat secrets/k src/a.txt").await;
    assert!(now.ends_with(&format!("\n{SECRET}\nneedle public")), "{now}");
    // The public part alone applies, in the container, and shows what it wrote.
    let done = s.call("a", "file.patch", json!({ "diff": public })).await.expect("public diff");
    assert!(done.starts_with("Updated /workspace/src/a.txt (+1 -1)") && done.contains("+needle patched"), "{done}");
    assert_eq!(s.sh("a", "cat src/a.txt").await.lines().last(), Some("needle patched"));
}

#[tokio::test]
async fn a_link_swapped_between_calls_is_decided_on_where_it_leads_now() {
    let s = setup().await;
    s.sh("a", "ln -s src swap").await;
    let public = s.call("a", "file.read", json!({"path": "swap/k"})).await.unwrap();
    assert!(public.contains("public k"), "{public}");
    s.sh("a", "ln -sfn secrets swap").await;
    let err = denied(s.call("a", "file.read", json!({"path": "swap/k"})).await, "swap/k after the swap");
    assert!(err.contains("`swap/k` resolves to /workspace/secrets/k"), "{err}");
    s.sh("a", "ln -sfn src swap").await;
    assert!(s.call("a", "file.read", json!({"path": "swap/k"})).await.unwrap().contains("public k"));
}

#[tokio::test]
async fn walks_from_a_parent_withhold_what_a_rule_covers_and_say_so() {
    let s = setup().await;
    let grep = s.call("a", "file.grep", json!({"pattern": "needle", "path": "/workspace"})).await.unwrap();
    assert!(grep.contains("/workspace/src/a.txt"), "{grep}");
    assert!(!grep.contains("TOPSECRET") && !grep.contains("secrets/k"), "{grep}");
    assert!(grep.contains("withheld by permission rules]"), "{grep}");

    let list = s.call("a", "file.list", json!({"path": "/workspace", "depth": 3})).await.unwrap();
    let lines: Vec<&str> = list.lines().collect();
    assert!(lines.contains(&"src/a.txt") && lines.contains(&"secrets/"), "{list}");
    // `secrets/k` and `klink` (which leads to it) are withheld; `notes/n` needs approval.
    assert!(!list.contains("secrets/k") && !list.contains("klink") && !list.contains("notes/n"), "{list}");
    assert!(lines.contains(&"[2 entries withheld by permission rules]"), "{list}");
    assert!(list.contains("[1 entry withheld: a permission rule asks a person to approve them"), "{list}");

    let glob = s.call("a", "file.glob", json!({"pattern": "**/k*", "path": "/workspace"})).await.unwrap();
    assert!(glob.contains("/workspace/src/k"), "{glob}");
    assert!(!glob.contains("secrets/k") && !glob.contains("klink"), "{glob}");
    assert!(glob.contains("withheld by permission rules]"), "{glob}");

    // Walking through the link, and listing the denied directory itself.
    let through = s.call("a", "file.list", json!({"path": "slink"})).await.unwrap();
    assert!(
        !through.lines().any(|l| l == "k") && through.contains("[1 entry withheld by permission rules]"),
        "{through}"
    );
    let dir = s.call("a", "file.read", json!({"path": "secrets"})).await.unwrap();
    assert!(!dir.lines().any(|l| l == "k") && dir.contains("[1 entry withheld by permission rules]"), "{dir}");
}

#[tokio::test]
async fn an_ask_rule_met_only_through_a_link_is_refused_with_what_to_ask_for() {
    let s = setup().await;
    let err = s.call("a", "file.read", json!({"path": "nlink/n"})).await.unwrap_err();
    assert!(
        err.contains("`nlink/n` resolves to /workspace/notes/n, which needs a person's approval (project rule 2 (suzumio.yaml:11) asks for it)"),
        "{err}"
    );
    assert!(err.contains("Call the tool again with the path /workspace/notes/n itself"), "{err}");
}

#[tokio::test]
async fn shell_path_rules_see_the_paths_a_line_names_and_check_warns_about_file_only_rules() {
    let s = setup().await;
    for line in ["cat private/p", "cat /workspace/private/p", "echo x > private/p", "tar cf /tmp/t private"] {
        let err = s.call("a", "shell.exec", json!({ "command": line })).await.unwrap_err();
        assert!(err.contains("Permission denied") && err.contains("agent a rule 1"), "{line}: {err}");
    }
    assert!(s.sh("a", "ls").await.contains("src"));

    // Project rule 1 keeps /workspace/secrets from a's file tools only; a can also run commands.
    let project = s.tools.project.snapshot();
    let warnings = &project.warnings.warnings;
    let warning = warnings
        .iter()
        .find(|w| w.path == "permissions.rules[0]")
        .unwrap_or_else(|| panic!("no warning for permissions.rules[0]: {warnings:?}"));
    assert!(warning.message.contains("not from shell.exec/shell.start, which a can also call"), "{warning:?}");
    assert_eq!(warning.loc.as_ref().map(|l| l.line), Some(10), "{warning:?}");
    // The ask rule and the shell rule get none.
    assert!(
        !warnings.iter().any(|w| w.path == "permissions.rules[1]"
            || w.path == "permissions.rules[2]"
            || w.path.starts_with("agents.a.permissions")),
        "{warnings:?}"
    );
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "safe.directory=*", "-c", "user.name=Test Author", "-c", "user.email=test@example.com"])
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("the git CLI");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test]
async fn git_status_and_diff_withhold_the_changes_a_rule_covers() {
    let s = setup().await;
    let ws = s.tools.project.snapshot().config.root.join("workspaces").join("a");
    git(&ws, &["init", "-q", "-b", "main"]);
    git(&ws, &["add", "src", "secrets"]);
    git(&ws, &["commit", "-q", "-m", "Initial import"]);
    let out = std::process::Command::new("chown").args(["-R", "65534:65534"]).arg(&ws).output().unwrap();
    assert!(out.status.success(), "chown: {}", String::from_utf8_lossy(&out.stderr));
    s.sh("a", "echo 'needle changed' > src/a.txt && echo 'needle TOPSECRET 2' > secrets/k").await;

    let status = s.call("a", "git.status", json!({})).await.unwrap();
    assert!(status.contains("M src/a.txt") && !status.contains("secrets/k"), "{status}");
    assert!(status.contains("[1 entry withheld by permission rules]"), "{status}");
    let diff = s.call("a", "git.diff", json!({})).await.unwrap();
    assert!(diff.contains("+needle changed") && !diff.contains("TOPSECRET"), "{diff}");
    assert!(diff.contains("[1 entry withheld by permission rules]"), "{diff}");
}
