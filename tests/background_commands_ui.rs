//! The WebUI's background-commands section in a real browser (headless Chromium through
//! chromedriver, `scripts/setup.sh` installs them) against `suzumio run` on Docker: the agent's
//! History page lists its running command with its output, and the Stop button stops it (its
//! process is gone from the container); a command whose container was killed stays listed as
//! lost, with its cause.

mod support;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::time::Duration;

use support::{Controller, TempProject, static_runner, text};
use webdriver::Browser;

const SCRIPT: &str = r#"
activations:
  - agent: worker
    steps:
      - call: [{tool: shell.start, input: {command: "echo ui-visible-output; sleep 300", name: forever}}]
      - call: [{tool: coordination.wait_for_signal, input: {reason: "waiting"}}]
"#;

/// Whether the worker's container runs the command's `sleep 300` (`docker top` reads its
/// processes from the host).
fn sleeps_in_container() -> bool {
    sleeps_in("bg-ui")
}

fn sleeps_in(project: &str) -> bool {
    let container = suzumio::backend::container_name(project, "worker");
    let out =
        std::process::Command::new("docker").args(["top", &container, "-o", "pid,args"]).output().expect("docker top");
    assert!(out.status.success(), "docker top {container}: {}", text(&out.stderr));
    // Each line is the pid, then the command line.
    text(&out.stdout).lines().any(|l| l.split_whitespace().skip(1).collect::<Vec<_>>() == ["sleep", "300"])
}

/// The project `name` whose worker plays [`SCRIPT`], served on Docker.
fn served(name: &str) -> (TempProject, Controller) {
    let project = TempProject::scripted(
        "review",
        SCRIPT,
        &[("name: review-demo", &format!("name: {name}")), support::BACKGROUND_WORKER],
    );
    let dir = project.dir.to_str().unwrap().to_string();
    assert_eq!(support::suzumio(&project.dir, &["start", &dir]).status.code(), Some(0));
    let sent = support::suzumio(&project.dir, &["send", &dir, "worker", "start it"]);
    assert_eq!(sent.status.code(), Some(0), "{}", text(&sent.stderr));
    let runner = static_runner();
    let c = Controller::start_with_env(
        &project.dir,
        &["--backend", "docker"],
        &[("SUZUMIO_RUNNER_BIN", runner.to_str().unwrap())],
    );
    (project, c)
}

#[tokio::test]
async fn the_history_page_lists_a_running_command_and_its_stop_button_stops_it() {
    let (_project, mut c) = served("bg-ui");

    let mut b = Browser::start().await.unwrap_or_else(|e| panic!("the browser tests need Chromium: {e}"));
    b.patience = Duration::from_secs(60);
    let outcome = async {
        b.goto(&c.url("/#/history/worker")).await?;
        let row = b.wait_for_text("section.background-commands li[data-command]", "ui-visible-output").await?;
        let shown = row.text().await?;
        assert!(shown.contains("echo ui-visible-output; sleep 300") && shown.contains("running"), "{shown}");
        assert!(sleeps_in_container(), "the command runs in the container before the click");
        b.click(&b.find("section.background-commands li[data-command] button").await?).await?;
        b.wait_for_text("section.background-commands li[data-command] .pill", "stopped").await?;
        // The pill says stopped once the runner saw the command end: its process is gone.
        assert!(!sleeps_in_container(), "the stopped command's process is still in the container");
        webdriver::Result::Ok(())
    }
    .await;
    if let Err(e) = outcome {
        let html = b.source().await.unwrap_or_default();
        let tail = html.char_indices().rev().nth(3000).map_or(0, |(i, _)| i);
        panic!("{e}\npage:\n{}\ncontroller log:\n{}", &html[tail..], c.stderr());
    }
    assert_eq!(c.terminate(), Some(0), "{}", c.stderr());
}

#[tokio::test]
async fn a_command_whose_container_was_killed_stays_listed_as_lost_with_its_cause() {
    let (_project, mut c) = served("bg-ui-lost");
    let mut b = Browser::start().await.unwrap_or_else(|e| panic!("the browser tests need Chromium: {e}"));
    b.patience = Duration::from_secs(60);
    let outcome = async {
        b.goto(&c.url("/#/history/worker")).await?;
        b.wait_for_text("section.background-commands li[data-command] .pill", "running").await?;
        assert!(sleeps_in("bg-ui-lost"), "the command runs in the container before the kill");
        let container = suzumio::backend::container_name("bg-ui-lost", "worker");
        let killed = std::process::Command::new("docker").args(["kill", &container]).output().expect("docker kill");
        assert!(killed.status.success(), "docker kill: {}", text(&killed.stderr));
        let row = b.wait_for_text("section.background-commands li[data-command]", "lost (killed)").await?;
        let shown = row.text().await?;
        assert!(
            shown.contains("echo ui-visible-output; sleep 300")
                && shown.contains("Lost: the runner that ran it was lost: killed"),
            "{shown}"
        );
        webdriver::Result::Ok(())
    }
    .await;
    if let Err(e) = outcome {
        let html = b.source().await.unwrap_or_default();
        let tail = html.char_indices().rev().nth(3000).map_or(0, |(i, _)| i);
        panic!("{e}\npage:\n{}\ncontroller log:\n{}", &html[tail..], c.stderr());
    }
    assert_eq!(c.terminate(), Some(0), "{}", c.stderr());
}
