//! The demo project end to end on the real Docker engine: three agents in containers, the
//! scripted model, a plan that gets completed, a scheduled message that fires, the local
//! review-tools pack, artifacts and a final report — as `scripts/demo.sh` runs it.

mod support;

use std::process::Command;

use support::{repo_root, text};

fn suzumio(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(args)
        .env("SUZUMIO_RUNNER_BIN", support::static_runner())
        .output()
        .expect("suzumio runs")
}

#[test]
fn the_demo_runs_to_a_submitted_report() {
    let project = support::TempProject::copy_of_path(&repo_root().join("projects/demo"));
    let dir = project.dir.to_str().unwrap().to_string();
    // The packaged packs are registered by id: the copy runs as it is, anywhere.
    for args in [vec!["start", &dir], vec!["send", &dir, "pm", "--priority", "P2", "Start the report."]] {
        let out = suzumio(&args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
    }
    let out = suzumio(&["run", &dir, "--port", "0", "--until-idle"]);
    assert_eq!(out.status.code(), Some(0), "stdout:\n{}\nstderr:\n{}", text(&out.stdout), text(&out.stderr));

    for worker in ["worker-1", "worker-2"] {
        let section = std::fs::read_to_string(project.dir.join(format!("artifacts/{worker}/section.md"))).unwrap();
        assert!(section.starts_with(&format!("## Section by {worker}")), "{section}");
        let draft = std::fs::read_to_string(project.dir.join(format!("workspaces/{worker}/draft.md"))).unwrap();
        assert!(draft.contains("probability k/i"), "the shell ran in the container's /workspace");
    }
    let report = std::fs::read_to_string(project.dir.join("final-report.md")).unwrap();
    assert!(report.contains("Plan \"Sampling report\" completed."), "{report}");
    let status = text(&suzumio(&["status", &dir]).stdout);
    assert!(status.starts_with("project demo: submitted"), "{status}");
    assert!(status.contains("0 failed"), "{status}");
    let plan = text(&suzumio(&["ui", &dir, "plan/plan.board", r#"{"includeArchived": true}"#]).stdout);
    assert!(plan.contains("[done] Sampling report"), "the plan was completed and archived: {plan}");
    let jobs = text(&suzumio(&["ui", &dir, "scheduler/schedule.jobs", r#"{"includeInactive": true}"#]).stdout);
    assert!(jobs.contains("[done/once]") && jobs.contains("sent 1"), "the scheduled message fired: {jobs}");
    let tools = text(&suzumio(&["ui", &dir, "core/file.activity"]).stdout);
    assert!(tools.contains("file.write: 2 call(s), 0 failed"), "{tools}");

    // The manager read the sections only once both were written, whichever came first (it read
    // worker-1's at the first message, and found nothing when worker-2 had been quicker).
    let host = suzumio::controller::open_read_only(&project.dir).unwrap_or_else(|e| panic!("{e}"));
    let calls = |tool: &str, agent: &str| host.store.list_tool_calls(Some(tool), Some(agent), None, 10).unwrap();
    let written: Vec<_> =
        ["worker-1", "worker-2"].iter().flat_map(|w| calls("file.write", w)).filter_map(|c| c.finished_at).collect();
    assert_eq!(written.len(), 2, "both sections were written");
    let reads = calls("file.read", "pm");
    assert_eq!(reads.len(), 2, "{reads:?}");
    for read in &reads {
        assert_eq!(read.status, suzumio::store::ToolCallStatus::Completed, "{read:?}");
        assert!(written.iter().all(|w| *w <= read.started_at), "read before both were written: {read:?} {written:?}");
    }
}
