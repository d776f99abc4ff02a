//! A stop stops everything (issue [R] point 5), in a real container: the runner is the child
//! subreaper of what its commands start, so processes that left the command's group — through
//! `setsid`, a double fork, a `nohup`-style child — are still the command's: the end of `shell.exec`,
//! `shell.stop` and a time-out leave none of them behind, and a background command has ended
//! only when all of them have. Needs a Docker engine (scripts/setup.sh) and the static runner.

mod support;

use serde_json::json;
use suzumio::config::BackendKind;

type Setup = support::containers::ContainerProject;

async fn setup(prefix: &str) -> Setup {
    support::containers::start(prefix, None, BackendKind::Docker).await
}

/// The escapes: a new session, a double fork, what `nohup` does (SIGHUP ignored; the minimal
/// image's busybox has no `nohup` applet), a new session started from a subshell that exits at
/// once; each sleeps with a distinct length so `ps` can find it.
const ESCAPES: &str = "setsid sleep 3101 & (sleep 3102 &) & (trap '' HUP; exec sleep 3103) >/dev/null 2>&1 & (setsid sh -c 'sleep 3104 &' &)";

/// The `sleep 310x` processes alive in the container.
async fn survivors(s: &Setup, agent: &str) -> Vec<String> {
    let listed = s.sh(agent, "ps -o pid,stat,args | grep '[s]leep 310' || true").await;
    // The first line echoes the command (`$ ps …`); a shell whose script names the sleeps is not
    // one of them: only the `sleep` processes count.
    listed
        .lines()
        .filter(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            fields.len() >= 4 && fields[1] != "Z" && fields[2].ends_with("sleep") && fields[3].starts_with("310")
        })
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn the_end_of_shell_exec_leaves_nothing_it_started_behind() {
    let s = setup("tree-exec").await;
    let out = s.sh("a", &format!("{ESCAPES}; echo started")).await;
    assert!(out.contains("started"), "{out}");
    assert_eq!(survivors(&s, "a").await, Vec::<String>::new(), "setsid, double-fork and nohup children are gone");
}

#[tokio::test]
async fn shell_stop_stops_every_process_of_a_background_command() {
    let s = setup("tree-stop").await;
    let started = s
        .call("b", "shell.start", json!({"command": format!("{ESCAPES}; sleep 3105"), "name": "escapes"}))
        .await
        .unwrap();
    let id = started.split_whitespace().find(|w| w.starts_with("cmd_")).unwrap().trim_end_matches(',').to_string();
    // Every escape is running before the stop.
    support::wait_for_async("the escapes to start", async || {
        let found = survivors(&s, "b").await;
        (found.len() == 5).then_some(())
    })
    .await;
    let stopped = s.call("b", "shell.stop", json!({"id": id})).await.unwrap();
    assert!(stopped.contains(&id), "{stopped}");
    let ended = s.call("b", "shell.check", json!({"id": id, "waitMs": 10000})).await.unwrap();
    assert!(!ended.contains("running"), "{ended}");
    assert_eq!(survivors(&s, "b").await, Vec::<String>::new(), "nothing of the command survives shell.stop");
}

#[tokio::test]
async fn a_timed_out_shell_exec_leaves_nothing_behind() {
    let s = setup("tree-timeout").await;
    // The command sleeps for an hour: that the call returns at all is the time-out.
    let result =
        s.call("a", "shell.exec", json!({"command": format!("{ESCAPES}; sleep 3106"), "timeoutMs": 1000})).await;
    let said = format!("{result:?}");
    assert!(said.contains("sleep 3106"), "{said}");
    assert_eq!(survivors(&s, "a").await, Vec::<String>::new());
}
