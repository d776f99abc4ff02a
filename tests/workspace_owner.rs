//! The workspace a user fills is the agent's to edit: an agent's container runs as the owner of
//! the project directory (root's projects keep uid 65534), so a file a non-root user put into
//! `workspaces/<agent>/` on the host is edited by `file.edit` in the real, hardened container,
//! and stays the user's. What the container's user cannot change is named by `check` and `run`
//! with the `chown` that fixes it, and the fix is applied here as printed. Needs Docker and the
//! static runner.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use support::{TempProject, suzumio, text};

/// The host user who owns the projects here (no such account is needed: a uid is enough).
const USER: u32 = 4321;

/// `script` run by `sh` in `dir` as [`USER`], as that user would on the host.
fn as_user(dir: &Path, script: &str) {
    let out = Command::new("sh").args(["-c", script]).current_dir(dir).uid(USER).gid(USER).output().unwrap();
    assert!(out.status.success(), "{script}: {}", text(&out.stderr));
}

fn chown_all(dir: &Path, owner: &str) {
    let out = Command::new("chown").args(["-R", owner]).arg(dir).output().unwrap();
    assert!(out.status.success(), "chown: {}", text(&out.stderr));
}

/// The user's project: every file theirs, as after a clone.
fn give_to_user(dir: &Path) {
    chown_all(dir, &format!("{USER}:{USER}"));
}

fn workspace_warning(stderr: &str) -> Option<&str> {
    stderr.lines().find(|l| l.contains("cannot change") && l.contains("in its workspace"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_a_user_put_into_the_workspace_is_edited_by_the_agent_in_its_container() {
    let s = support::containers::start_prepared("owner", |dir| {
        give_to_user(dir);
        as_user(dir, "mkdir -p workspaces/a/repo && printf 'hello world\\n' > workspaces/a/repo/notes.txt");
    })
    .await;
    let notes = s.project.dir.join("workspaces/a/repo/notes.txt");

    let diff = s
        .call("a", "file.edit", json!({"path": "repo/notes.txt", "oldText": "world", "newText": "agent"}))
        .await
        .unwrap_or_else(|e| panic!("file.edit: {e}"));
    assert!(diff.contains("-hello world\n+hello agent"), "{diff}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "hello agent\n");
    let meta = std::fs::metadata(&notes).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (USER, USER), "the edited file is still the user's");
    s.call("a", "file.write", json!({"path": "repo/new.txt", "content": "made by the agent\n"})).await.unwrap();
    let made = std::fs::metadata(s.project.dir.join("workspaces/a/repo/new.txt")).unwrap();
    assert_eq!((made.uid(), made.gid()), (USER, USER), "what the agent makes is the user's");

    // Still the hardened container: not root, no capabilities, no new privileges, no network,
    // a read-only root.
    let inside = s.sh("a", "id -u; id -g; grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status; ls /sys/class/net; touch /etc/x 2>&1; echo HOME=$HOME").await;
    let inside = inside.replace('\t', "");
    let lines: Vec<&str> = inside.lines().map(str::trim).collect();
    let output = lines.iter().position(|l| *l == "[stdout]").map_or(&lines[..], |i| &lines[i + 1..]);
    assert_eq!(&output[..2], [USER.to_string(), USER.to_string()], "{inside}");
    for line in ["CapEff:0000000000000000", "CapPrm:0000000000000000", "NoNewPrivs:1", "lo", "HOME=/workspace"] {
        assert!(output.contains(&line), "{line} missing: {inside}");
    }
    assert!(!inside.contains("eth") && inside.contains("Read-only file system"), "{inside}");

    // The control socket takes the owner's uid (and the controller's), nobody else's.
    std::fs::set_permissions(&s.project.dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let token = s.runners.admit_runner("b").unwrap();
    let out = tokio::process::Command::new(support::static_runner())
        .env_clear()
        .env("SUZUMIO_SOCKET", s.project.dir.join(".suzumio/run/b/control.sock"))
        .env("SUZUMIO_TOKEN", &token)
        .uid(1234)
        .gid(1234)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let refusals: Vec<Value> =
        s.tools.store.events_of_kind("security.session_refused", 100).unwrap().into_iter().map(|e| e.data()).collect();
    let reasons: Vec<&str> = refusals.iter().filter_map(|e| e["reason"].as_str()).collect();
    assert!(reasons.contains(&format!("peer uid 1234 is not the runner's ({USER} or 0)").as_str()), "{reasons:?}");
}

/// The warning `check` and `run` print for the data set below, in the project at `dir`.
fn expected_warning(dir: &Path) -> String {
    format!(
        "workspaces/a: agent a cannot change 2 of the 2 entries in its workspace (e.g. workspaces/a/data, owned by \
         uid 0 gid 0, mode 755): its container runs as uid {USER} gid {USER}, the owner of the project directory; \
         fix, as root: chown -R {USER}:{USER} {}",
        dir.join("workspaces/a").display()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn check_and_run_name_a_workspace_its_agent_cannot_change_and_the_printed_fix_works() {
    // A data set copied in as root (`sudo cp -r`) into the user's project.
    let s = support::containers::start_prepared("ownfix", |dir| {
        give_to_user(dir);
        as_user(dir, "mkdir -p workspaces/a");
        std::fs::create_dir(dir.join("workspaces/a/data")).unwrap();
        std::fs::write(dir.join("workspaces/a/data/rows.csv"), "id,name\n1,one\n").unwrap();
        // `run` names it as it starts (before this test's own runners take the sockets).
        let run = suzumio(dir, &["run", ".", "--backend", "docker", "--until-idle", "--port", "0"]);
        let log = format!("{}{}", text(&run.stdout), text(&run.stderr));
        assert!(run.status.success() && log.contains(&expected_warning(dir)), "run names it too:\n{log}");
    })
    .await;
    let dir = s.project.dir.clone();
    let expected = expected_warning(&dir);
    let check = suzumio(&dir, &["check", "."]);
    let stderr = text(&check.stderr);
    assert!(check.status.success(), "{stderr}");
    assert_eq!(
        workspace_warning(&stderr).map(|l| l.trim_start_matches("warning: ")),
        Some(expected.as_str()),
        "{stderr}"
    );
    let before = s.call("a", "file.edit", json!({"path": "data/rows.csv", "oldText": "one", "newText": "uno"})).await;
    assert!(before.as_ref().is_err_and(|e| e.contains("Permission denied")), "{before:?}");

    // The fix, as printed.
    let fix = expected.rsplit("fix, as root: ").next().unwrap();
    let out = Command::new("sh").args(["-c", fix]).output().unwrap();
    assert!(out.status.success(), "{fix}: {}", text(&out.stderr));
    let check = suzumio(&dir, &["check", "."]);
    assert_eq!(workspace_warning(&text(&check.stderr)), None, "{}", text(&check.stderr));
    s.call("a", "file.edit", json!({"path": "data/rows.csv", "oldText": "one", "newText": "uno"}))
        .await
        .unwrap_or_else(|e| panic!("file.edit after the fix: {e}"));
    assert_eq!(std::fs::read_to_string(dir.join("workspaces/a/data/rows.csv")).unwrap(), "id,name\n1,uno\n");
}

/// A project of root's keeps the runner user, and a file another user put there is named with
/// the fix for that user (no Docker needed: `check` reads the files).
#[test]
fn a_root_owned_project_keeps_uid_65534_and_names_what_it_cannot_change() {
    let p = TempProject::copy_of("containers");
    // The user made the workspace; root still owns the project.
    std::fs::create_dir_all(p.dir.join("workspaces/a")).unwrap();
    std::fs::write(p.dir.join("workspaces/a/notes.txt"), "the user's").unwrap();
    std::fs::set_permissions(p.dir.join("workspaces/a/notes.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();
    chown_all(&p.dir.join("workspaces/a"), &format!("{USER}:{USER}"));
    let check = suzumio(&p.dir, &["check", "."]);
    let stderr = text(&check.stderr);
    let expected = format!(
        "workspaces/a: agent a cannot change 1 of the 1 entries in its workspace (e.g. workspaces/a/notes.txt, owned \
         by uid {USER} gid {USER}, mode 644): its container runs as uid 65534 gid 65534, the runner user, as root owns the \
         project directory (the containers of a project directory of yours run as you); fix, as root: chown -R \
         65534:65534 {}",
        p.dir.join("workspaces/a").display()
    );
    assert_eq!(
        workspace_warning(&stderr).map(|l| l.trim_start_matches("warning: ")),
        Some(expected.as_str()),
        "{stderr}"
    );
}
