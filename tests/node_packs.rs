//! A local pack's controller side with the Node-compatible modules, through the real controller
//! path (config loader, SQLite store, `ToolHost`, the embedded engine): `node:fs/promises` keeps
//! files in the pack's `toolpack-state/<id>/` (found from `context.store.paths.root`, as packs
//! written for the original do), reads its own pack directory, and is refused everywhere else
//! (`..`, absolute paths, a link out of the state directory, writes into the pack);
//! `node:child_process` is refused with the reason. The fixture is `workpack`.

mod support;

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use serde_json::{Value, json};
use support::TempProject;
use suzumio::clock::ManualClock;
use suzumio::config::load::ProcessEnv;
use suzumio::project::Project;
use suzumio::store::{StateFiles, Store};
use suzumio::support::ToolHost;

struct Fixture {
    project: TempProject,
    host: Arc<ToolHost>,
}

impl Fixture {
    fn new() -> Fixture {
        let project = TempProject::copy_of("workpack");
        let config = project.dir.join("suzumio.yaml");
        let yaml = std::fs::read_to_string(&config).unwrap().replace("${WORKPACK_CONTROLLER_SECRET}", "sk-test");
        std::fs::write(&config, yaml).unwrap();
        let loaded = Project::load(&project.dir, &ProcessEnv).unwrap_or_else(|e| panic!("fixture loads: {e:?}"));
        let clock = Arc::new(ManualClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).single().unwrap()));
        let store = Store::open(&loaded.config, clock).unwrap();
        let state = StateFiles::new(&loaded.config.root);
        Fixture { host: ToolHost::new(Arc::new(loaded), store, state), project }
    }

    async fn call(&self, tool: &str, input: Value) -> Value {
        let out = self.host.support("a", "act_1", "work", tool, input).await.unwrap_or_else(|e| panic!("{tool}: {e}"));
        serde_json::from_str(&out.output).unwrap_or_else(|e| panic!("{tool}: {e}: {}", out.output))
    }
}

#[tokio::test]
async fn node_fs_promises_keeps_files_in_the_packs_state_directory() {
    let f = Fixture::new();
    let result = f.call("work.note", json!({"name": "n1", "text": "first note"})).await;
    let back = result["back"].as_str().unwrap();
    assert!(back.starts_with("first note\n") && back.len() == "first note\n".len() + 36, "{back}");
    assert_eq!(result["relative"], back, "relative paths resolve in the state directory");
    assert_eq!(result["listed"], json!(["n1.txt"]));
    assert_eq!(result["exists"], true);
    let on_disk = std::fs::read_to_string(f.project.dir.join("toolpack-state/work/notes/n1.txt")).unwrap();
    assert_eq!(on_disk, back);
}

#[tokio::test]
async fn node_fs_is_refused_outside_the_pack_and_child_process_entirely() {
    let f = Fixture::new();
    let state = f.project.dir.join("toolpack-state/work");
    std::fs::create_dir_all(&state).unwrap();
    std::os::unix::fs::symlink("/etc", state.join("outside-link")).unwrap();
    let result = f.call("work.escape", json!({})).await;
    let only_state = format!("EACCES: controller.mjs may write only in its state directory {}", state.display());
    for key in ["writeRoot", "writeUp", "readEtc", "writeOwnPack"] {
        let said = result[key].as_str().unwrap();
        assert!(said.starts_with(&only_state), "{key}: {said}");
    }
    let through_link = result["readThroughLink"].as_str().unwrap();
    assert!(through_link.starts_with("EACCES: ") && through_link.contains("leads outside"), "{through_link}");
    assert_eq!(result["readOwnManifest"], true);
    let exec = result["exec"].as_str().unwrap();
    assert!(exec.contains("node:child_process is available only in a pack's runner.mjs"), "{exec}");
    assert!(!f.project.dir.join("escaped.txt").exists());
    assert!(!f.project.dir.join("toolpack-state/escaped.txt").exists());
    assert!(!f.project.dir.join("toolpacks/work/planted.mjs").exists());
}

/// Packs written for the original import `node:crypto`, `node:fs/promises` and `node:path` and
/// keep their state under `context.store.paths.root`: such a module loads and works unmodified.
#[tokio::test]
async fn a_pack_written_for_the_original_loads_and_keeps_its_state() {
    use suzumio::js::{CONTROLLER_GLUE, CallScope, HostOps, JsCall, JsHost, JsLimits, ModuleSpec};
    use suzumio::support::ops::ControllerOps;

    let f = Fixture::new();
    let root = support::repo_root().join("tests/fixtures/node-style");
    let spec = ModuleSpec {
        pack_id: "scheduler".into(),
        module: root.join("controller.mjs"),
        root,
        glue: CONTROLLER_GLUE,
        limits: JsLimits::default(),
    };
    let ops: Arc<dyn HostOps> =
        Arc::new(ControllerOps::new(f.host.project.snapshot(), f.host.store.clone(), f.host.state.clone()));
    let js = JsHost::spawn(spec, ops).await.unwrap_or_else(|e| panic!("loads: {e}"));
    let call = |tool: &str, input: Value| JsCall {
        export: "support",
        args: vec![json!({"project": "workpack", "agent": {"id": "a"}}).to_string(), tool.into(), input.to_string()],
        scope: CallScope { agent_id: Some("a".into()), activation_id: Some("act_1".into()) },
    };
    for body in ["first", "second"] {
        js.call(call("schedule.once", json!({"body": body}))).await.unwrap_or_else(|e| panic!("{e}"));
    }
    let listed = js.call(call("schedule.list", json!({}))).await.unwrap();
    let jobs = listed["metadata"]["jobs"].as_array().unwrap();
    assert_eq!(jobs.iter().map(|j| j["body"].clone()).collect::<Vec<_>>(), [json!("first"), json!("second")]);
    let saved: Value = serde_json::from_str(
        &std::fs::read_to_string(f.project.dir.join("toolpack-state/scheduler/jobs.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(saved["jobs"].as_array().unwrap().len(), 2);
    assert!(saved["jobs"][0]["id"].as_str().unwrap().starts_with("sch_"));
}
