//! The packaged plan toolpack (`toolpacks/plan`, reference §5.2) through the real controller
//! path: a fixture project loaded by the config loader, a real SQLite store, the pack's
//! `controller.mjs` running in the embedded JavaScript engine behind `ToolHost` (tools, WebUI
//! entries, scheduler hook). Time comes from a `ManualClock`; nothing sleeps.

mod support;

use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Duration, TimeZone, Utc};
use serde_json::{Value, json};
use support::TempProject;
use suzumio::clock::{ManualClock, iso};
use suzumio::config::load::ProcessEnv;
use suzumio::js::{CONTROLLER_GLUE, CallScope, HostOps, JsCall, JsHost, JsLimits, ModuleSpec};
use suzumio::project::Project;
use suzumio::store::{ActivationOutcome, AgentStatus, SignalQuery, SignalRecord, SignalStatus, StateFiles, Store};
use suzumio::support::ops::ControllerOps;
use suzumio::support::{HookOutcome, ToolHost, ToolOutput};

// ---------------------------------------------------------------------------------------------
// helpers

const NUDGE: &str = "plan.continuation_nudge";
const TAIL: &str = "After meaningful progress, call plan.set_item_status to mark items done or wont_do. \
                    Use plan.status if you need the current plan state.";

fn start_time() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).single().expect("valid time")
}

fn pack_root() -> PathBuf {
    support::repo_root().join("toolpacks/plan")
}

/// A copy of `tests/fixtures/projects/plan` with its own store, clock and tool host.
struct Fixture {
    project: TempProject,
    clock: Arc<ManualClock>,
    host: Arc<ToolHost>,
}

impl Fixture {
    fn new() -> Fixture {
        let project = TempProject::copy_of("plan");
        // The fixture names the pack relative to its place in the repository; the copy lives
        // elsewhere, so point it at the same directory by absolute path.
        let config_file = project.dir.join("suzumio.yaml");
        let yaml = std::fs::read_to_string(&config_file).expect("fixture config");
        let yaml = yaml.replace("../../../../toolpacks/plan", &pack_root().display().to_string());
        std::fs::write(&config_file, yaml).expect("fixture config rewritten");
        let loaded = Project::load(&project.dir, &ProcessEnv).unwrap_or_else(|e| panic!("fixture loads: {e:?}"));
        let clock = Arc::new(ManualClock::new(start_time()));
        let store = Store::open(&loaded.config, clock.clone()).expect("store opens");
        let state = StateFiles::new(&loaded.config.root);
        let host = ToolHost::new(Arc::new(loaded), store, state);
        Fixture { project, clock, host }
    }

    fn now(&self) -> String {
        iso(self.host.store.now())
    }

    fn advance(&self, seconds: i64) {
        self.clock.advance(Duration::seconds(seconds));
    }

    /// A model tool call by `pm` (the support broker's checks are not part of this test).
    async fn call(&self, tool: &str, input: Value) -> Result<ToolOutput, String> {
        self.host.support("pm", "act_test", "plan", tool, input).await.map_err(|e| strip_pack(&e.to_string()))
    }

    async fn ok(&self, tool: &str, input: Value) -> ToolOutput {
        let shown = input.to_string();
        self.call(tool, input).await.unwrap_or_else(|e| panic!("{tool} {shown} failed: {e}"))
    }

    async fn err(&self, tool: &str, input: Value) -> String {
        let shown = input.to_string();
        match self.call(tool, input).await {
            Ok(out) => panic!("{tool} {shown} succeeded:\n{}", out.output),
            Err(e) => e,
        }
    }

    async fn webui(&self, entry: &str, input: Value) -> Result<ToolOutput, String> {
        self.host.invoke_webui("plan", entry, input).await.map_err(|e| strip_pack(&e.to_string()))
    }

    /// A call straight into the pack's `support` export, past the schema check in front of it,
    /// to exercise the module's own runtime checks. Uses a runtime of its own.
    async fn raw(&self, tool: &str, input: Value) -> Result<Value, String> {
        let root = pack_root();
        let spec = ModuleSpec {
            pack_id: "plan".into(),
            module: root.join("controller.mjs"),
            root,
            glue: CONTROLLER_GLUE,
            limits: JsLimits::default(),
        };
        let ops: Arc<dyn HostOps> = Arc::new(ControllerOps::new(
            self.host.project.snapshot(),
            self.host.store.clone(),
            self.host.state.clone(),
        ));
        let js = JsHost::spawn(spec, ops).await.expect("the plan controller loads");
        let base =
            json!({"project": "plan-demo", "agent": {"id": "pm"}, "activationId": "act_test", "toolpackId": "plan"});
        let scope = CallScope { agent_id: Some("pm".into()), activation_id: Some("act_test".into()) };
        let call = JsCall { export: "support", args: vec![base.to_string(), tool.into(), input.to_string()], scope };
        js.call(call).await.map_err(|e| strip_pack(&e.to_string()))
    }

    fn state_file(&self) -> PathBuf {
        self.project.dir.join("toolpack-state/plan/state.json")
    }

    fn state(&self) -> Value {
        let text = std::fs::read_to_string(self.state_file()).expect("state.json exists");
        assert!(text.ends_with("}\n"), "pretty JSON with a trailing newline");
        serde_json::from_str(&text).expect("state.json is JSON")
    }

    fn active(&self) -> Value {
        self.state()["activePlan"].clone()
    }

    /// Create a plan for the default target and return its id.
    async fn create(&self, items: &str) -> String {
        let out = self.ok("plan.create", json!({"title": "Ship the release", "itemsText": items})).await;
        plan_id(&out)
    }

    async fn tick(&self) -> HookOutcome {
        let outcomes = self.host.run_scheduler_hooks().await;
        let outcome = outcomes.into_iter().find(|o| o.pack == "plan").expect("the plan pack has a scheduler hook");
        assert!(outcome.errors.is_empty(), "hook errors: {:?}", outcome.errors);
        outcome
    }

    fn nudges(&self) -> Vec<SignalRecord> {
        let query = SignalQuery { target_agent: None, status: None, limit: Some(500), kind: None, before_id: None };
        let mut all = self.host.store.list_signals(&query).expect("signals listed");
        all.retain(|s| s.kind == NUDGE);
        all.reverse(); // oldest first
        all
    }

    /// Let `agent` run one activation that carries `signals`, ending as `outcome`.
    fn run_activation(&self, agent: &str, signals: &[String], outcome: ActivationOutcome) {
        let activation = self.host.store.start_activation(agent, "prompt", signals).expect("activation starts");
        self.host.store.finish_activation(&activation.id, outcome, None, None).expect("activation ends");
    }
}

fn strip_pack(message: &str) -> String {
    message.strip_prefix("toolpack plan: ").unwrap_or(message).to_string()
}

fn plan_id(out: &ToolOutput) -> String {
    let meta = out.metadata.as_ref().expect("metadata");
    meta["activePlan"]["id"].as_str().expect("an active plan").to_string()
}

fn metrics(out: &ToolOutput) -> Vec<(String, Value)> {
    let meta = out.metadata.as_ref().expect("metadata");
    meta["metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .map(|m| (m["label"].as_str().expect("label").to_string(), m["value"].clone()))
        .collect()
}

fn metric_row(status: &str, tbd: u64, done: u64, wont_do: u64, nudges: u64) -> Vec<(String, Value)> {
    [("Status", json!(status)), ("TBD", json!(tbd)), ("Done", json!(done)), ("Won't do", json!(wont_do))]
        .into_iter()
        .chain([("Nudges", json!(nudges))])
        .map(|(l, v)| (l.to_string(), v))
        .collect()
}

fn item_texts(plan: &Value) -> Vec<(String, String, String)> {
    plan["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            let s = |k: &str| i[k].as_str().unwrap_or_default().to_string();
            (s("id"), s("status"), s("text"))
        })
        .collect()
}

fn items(list: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    list.iter().map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string())).collect()
}

// ---------------------------------------------------------------------------------------------
// §10 item 11: create, item statuses, auto-finalize, board, close into the archive

#[tokio::test]
async fn plan_lifecycle_from_create_to_archive() {
    let fx = Fixture::new();
    let created = fx
        .ok("plan.create", json!({"title": "Ship the release", "itemsText": "- Write notes\n2) Tag v1\n* Publish"}))
        .await;
    assert_eq!(created.title.as_deref(), Some("plan created"));
    let id = plan_id(&created);
    assert!(id.starts_with("pln_") && id.len() == 4 + 36, "{id}");
    assert!(created.output.starts_with(&format!("Created plan {id} with 3 items.\nPlan {id}: Ship the release\n")));
    let t0 = fx.now();
    assert_eq!(
        fx.state(),
        json!({
            "version": 1,
            "activePlan": {
                "id": id, "status": "active", "title": "Ship the release", "targetAgent": "pm",
                "items": [
                    {"id": "item_1", "text": "Write notes", "status": "tbd", "createdAt": t0, "updatedAt": t0},
                    {"id": "item_2", "text": "Tag v1", "status": "tbd", "createdAt": t0, "updatedAt": t0},
                    {"id": "item_3", "text": "Publish", "status": "tbd", "createdAt": t0, "updatedAt": t0},
                ],
                "nextItemNumber": 4, "nudgeCooldownMs": 60000, "maxNudges": 0, "nudgeCount": 0,
                "createdAt": t0, "updatedAt": t0,
            },
            "archivedPlans": [],
        })
    );

    fx.advance(60);
    let marked =
        fx.ok("plan.set_item_status", json!({"itemId": "item_1", "status": "done", "note": "in NOTES.md"})).await;
    assert_eq!(marked.title.as_deref(), Some("plan item updated"));
    assert!(marked.output.starts_with("Marked item_1 done.\n"), "{}", marked.output);
    assert_eq!(metrics(&marked), metric_row("active", 2, 1, 0, 0));
    let item = &fx.active()["items"][0];
    assert_eq!((&item["note"], &item["updatedAt"]), (&json!("in NOTES.md"), &json!(fx.now())));

    fx.ok("plan.set_item_status", json!({"itemIndex": 2, "status": "wont_do", "note": "no tags this time"})).await;
    assert_eq!(fx.active()["status"], "active", "one item is still tbd");
    fx.advance(60);
    let last = fx
        .ok("plan.set_item_status", json!({"itemIndex": 3, "status": "done", "text": "Publish to the registry"}))
        .await;
    assert!(
        last.output.starts_with(
            "Marked item_3 done.\nEvery item is done or wont_do, so the plan is done. Close it with plan.close.\n"
        ),
        "{}",
        last.output
    );
    let plan = fx.active();
    assert_eq!((&plan["status"], &plan["completedAt"]), (&json!("done"), &json!(fx.now())), "finalized, still active");
    assert_eq!(plan["items"][2]["text"], "Publish to the registry");

    let board = fx.webui("plan.board", json!({})).await.expect("board");
    assert_eq!(board.title.as_deref(), Some("plan status"));
    assert_eq!(metrics(&board), metric_row("done", 0, 2, 1, 0));
    assert!(board.output.contains("\nStatus: done\n"), "{}", board.output);
    assert!(board.output.contains("\n2. item_2 [wont_do] Tag v1 — no tags this time\n"), "{}", board.output);

    fx.advance(60);
    let closed = fx.ok("plan.close", json!({"reason": "released"})).await;
    assert_eq!(closed.title.as_deref(), Some("plan closed"));
    assert!(closed.output.starts_with(&format!("Closed plan {id} as done.\n")), "{}", closed.output);
    let state = fx.state();
    assert_eq!(state["activePlan"], Value::Null);
    let archived = &state["archivedPlans"][0];
    assert_eq!(
        (&archived["id"], &archived["status"], &archived["closedAt"], &archived["closeReason"]),
        (&json!(id), &json!("done"), &json!(fx.now()), &json!("released"))
    );
    assert_eq!(closed.metadata.as_ref().expect("metadata")["closedPlan"], *archived);

    let board = fx.webui("plan.board", json!({"includeArchived": true})).await.expect("board");
    assert_eq!(
        board.output,
        format!("No active plan.\nArchived plans:\n- {id} [done] Ship the release ({})", fx.now())
    );
    assert_eq!(metrics(&board), metric_row("none", 0, 0, 0, 0));
    assert_eq!(board.metadata.as_ref().expect("metadata")["archivedPlans"], state["archivedPlans"]);
}

#[tokio::test]
async fn status_text_lists_every_field_and_item() {
    let fx = Fixture::new();
    let input = json!({
        "title": "Ship the release", "itemsText": "Write notes\nTag v1\nPublish",
        "instructions": "Keep the changelog short.", "targetAgent": "worker", "maxNudges": 3,
    });
    let id = plan_id(&fx.ok("plan.create", input).await);
    fx.ok("plan.set_item_status", json!({"itemId": "item_1", "status": "done", "note": "in NOTES.md"})).await;
    let expected = format!(
        "Plan {id}: Ship the release\nStatus: active\nTarget: worker\nItems: 2 tbd, 1 done, 0 wont_do\nNudges: 0\n\
         Instructions: Keep the changelog short.\nItems:\n1. item_1 [done] Write notes — in NOTES.md\n\
         2. item_2 [tbd] Tag v1\n3. item_3 [tbd] Publish"
    );
    let status = fx.ok("plan.status", json!({})).await;
    assert_eq!(status.title.as_deref(), Some("plan status"));
    assert_eq!(status.output, expected);
    let meta = status.metadata.as_ref().expect("metadata");
    assert_eq!(meta["activePlan"], fx.active());
    assert!(meta.get("archivedPlans").is_none(), "archived plans only when asked for");
    assert_eq!(meta["metrics"][4], json!({"label": "Nudges", "value": 0, "description": "max 3"}));
    let board = fx.webui("plan.board", json!({})).await.expect("board");
    assert_eq!((board.output, board.metadata), (status.output, status.metadata), "the board is plan.status");

    let with_archive = fx.ok("plan.status", json!({"includeArchived": true})).await;
    assert_eq!(with_archive.output, format!("{expected}\nArchived plans:\n- none"));
}

/// One case per line: the items `itemsText` becomes.
#[tokio::test]
async fn item_lines_lose_their_list_markers() {
    let fx = Fixture::new();
    let cases: &[(&str, &[&str])] = &[
        ("- one\n* two\n1. three\n12) four", &["one", "two", "three", "four"]),
        ("  -   padded  \n\n   \n*\n-", &["padded"]),
        ("1.5 kg of flour\n-v flag\n*bold*", &["1.5 kg of flour", "-v flag", "*bold*"]),
        ("- - nested\r\n3.  spaced\rold mac", &["- nested", "spaced", "old mac"]),
        ("plain", &["plain"]),
    ];
    for (text, expected) in cases {
        let input = json!({"title": "t", "itemsText": text, "replaceActive": true});
        let plan = fx.ok("plan.create", input).await.metadata.expect("metadata")["activePlan"].clone();
        let got: Vec<&str> =
            plan["items"].as_array().expect("items").iter().map(|i| i["text"].as_str().unwrap()).collect();
        assert_eq!(&got, expected, "itemsText {text:?}");
    }
}

#[tokio::test]
async fn create_refuses_an_unfinished_plan_replaces_it_on_request_and_archives_a_finished_one() {
    let fx = Fixture::new();
    let first = fx.create("a\nb").await;
    let refused = fx.err("plan.create", json!({"title": "Second", "itemsText": "x"})).await;
    assert_eq!(refused, format!("Active plan already exists: {first}. Use plan.update or pass replaceActive:true."));
    assert_eq!(fx.active()["id"], first, "nothing changed");

    fx.advance(5);
    let out = fx.ok("plan.create", json!({"title": "Second", "itemsText": "x", "replaceActive": true})).await;
    let second = plan_id(&out);
    assert!(out.output.starts_with(&format!("Archived the previous plan {first} as replaced.\nCreated plan {second}")));
    let replaced = &fx.state()["archivedPlans"][0];
    assert_eq!(
        (&replaced["id"], &replaced["status"], &replaced["closeReason"], &replaced["closedAt"]),
        (&json!(first), &json!("replaced"), &json!("replaced by new plan"), &json!(fx.now()))
    );

    fx.ok("plan.set_item_status", json!({"itemIndex": 1, "status": "done"})).await;
    let third = plan_id(&fx.ok("plan.create", json!({"title": "Third", "itemsText": "y"})).await);
    let state = fx.state();
    assert_eq!(state["activePlan"]["id"], third);
    let archived: Vec<(&Value, &Value)> =
        state["archivedPlans"].as_array().unwrap().iter().map(|p| (&p["id"], &p["status"])).collect();
    assert_eq!(archived, [(&json!(second), &json!("done")), (&json!(first), &json!("replaced"))], "newest first");
}

#[tokio::test]
async fn update_changes_fields_appends_and_replaces_items_and_reopens_a_done_plan() {
    let fx = Fixture::new();
    fx.create("a\nb").await;
    fx.ok("plan.set_item_status", json!({"itemId": "item_1", "status": "done"})).await;
    fx.ok("plan.set_item_status", json!({"itemId": "item_2", "status": "wont_do"})).await;
    assert_eq!(fx.active()["status"], "done");

    fx.advance(10);
    let out = fx.ok("plan.update", json!({"itemsText": "- c\n- d"})).await;
    assert_eq!(out.title.as_deref(), Some("plan updated"));
    assert!(
        out.output.starts_with(&format!(
            "Updated plan {}: 2 items appended.\nThe plan has tbd items again and is active.\n",
            plan_id(&out)
        )),
        "{}",
        out.output
    );
    let plan = fx.active();
    assert_eq!((&plan["status"], plan.get("completedAt")), (&json!("active"), None), "back to active");
    assert_eq!(plan["updatedAt"], json!(fx.now()));
    assert_eq!(
        item_texts(&plan),
        items(&[("item_1", "done", "a"), ("item_2", "wont_do", "b"), ("item_3", "tbd", "c"), ("item_4", "tbd", "d")])
    );

    let input = json!({
        "title": "Renamed", "targetAgent": "worker", "instructions": "Be brief.",
        "nudgeCooldownMs": 0, "maxNudges": 4, "itemsText": "x\ny", "itemMode": "replace",
    });
    fx.ok("plan.update", input).await;
    let plan = fx.active();
    assert_eq!(
        (&plan["title"], &plan["targetAgent"], &plan["instructions"], &plan["nudgeCooldownMs"], &plan["maxNudges"]),
        (&json!("Renamed"), &json!("worker"), &json!("Be brief."), &json!(0), &json!(4))
    );
    assert_eq!(
        item_texts(&plan),
        items(&[("item_5", "tbd", "x"), ("item_6", "tbd", "y")]),
        "numbering continues, so an id from an old nudge never names a new item"
    );

    fx.ok("plan.update", json!({"instructions": ""})).await;
    assert!(fx.active().get("instructions").is_none(), "an empty text clears the instructions");

    fx.ok("plan.set_item_status", json!({"itemId": "item_5", "status": "done"})).await;
    fx.ok("plan.set_item_status", json!({"itemId": "item_6", "status": "done"})).await;
    assert_eq!(fx.active()["status"], "done");
    let reopened = fx.ok("plan.set_item_status", json!({"itemId": "item_6", "status": "tbd", "note": ""})).await;
    assert!(reopened.output.contains("The plan has tbd items again and is active."), "{}", reopened.output);
    assert_eq!(fx.active()["status"], "active");
}

// ---------------------------------------------------------------------------------------------
// errors

/// Every error a model or the WebUI can get, with the exact text; nothing is written by a
/// rejected call.
#[tokio::test]
async fn every_error_has_its_exact_text_and_changes_nothing() {
    let fx = Fixture::new();
    let no_plan = "No active plan. Use plan.create first.";
    let without_plan = [
        ("plan.update", json!({"title": "x"}), no_plan),
        ("plan.set_item_status", json!({"itemId": "item_1", "status": "done"}), no_plan),
        ("plan.close", json!({}), no_plan),
        (
            "plan.create",
            json!({"title": "t", "itemsText": "\n - \n"}),
            "plan.create requires at least one item in itemsText",
        ),
        ("plan.create", json!({"title": "  ", "itemsText": "a"}), "plan.create requires a title"),
        (
            "plan.create",
            json!({"title": "t", "itemsText": "a", "targetAgent": "nobody"}),
            "Unknown targetAgent: nobody",
        ),
        ("plan.create", json!({"title": "t", "itemsText": "a", "targetAgent": "user"}), "Unknown targetAgent: user"),
    ];
    for (tool, input, expected) in without_plan {
        assert_eq!(fx.err(tool, input.clone()).await, expected, "{tool} {input}");
    }
    assert!(!fx.state_file().exists(), "no rejected call wrote the state");

    fx.create("a\nb").await;
    let before = std::fs::read_to_string(fx.state_file()).expect("state");
    let with_plan = [
        ("plan.set_item_status", json!({"status": "done"}), "plan.set_item_status requires itemId or itemIndex"),
        ("plan.set_item_status", json!({"itemId": "item_9", "status": "done"}), "Unknown plan item: item_9"),
        ("plan.set_item_status", json!({"itemIndex": 3, "status": "done"}), "Unknown plan item index: 3"),
        (
            "plan.set_item_status",
            json!({"itemId": "item_1", "itemIndex": 2, "status": "done"}),
            "itemId item_1 is item 1, not itemIndex 2; give one of them",
        ),
        (
            "plan.set_item_status",
            json!({"itemId": "item_1", "status": "done", "text": " - "}),
            "text must not be empty",
        ),
        (
            "plan.close",
            json!({}),
            "Cannot close plan as done while items are still tbd; mark them done or wont_do first, or close as abandoned.",
        ),
        ("plan.update", json!({"targetAgent": "ghost"}), "Unknown targetAgent: ghost"),
        ("plan.update", json!({"title": " "}), "title must not be empty"),
        (
            "plan.update",
            json!({"itemMode": "replace"}),
            "plan.update with itemMode replace requires at least one item in itemsText",
        ),
        (
            "plan.update",
            json!({"itemsText": ""}),
            "plan.update requires at least one of title, targetAgent, instructions, itemsText, nudgeCooldownMs or maxNudges",
        ),
    ];
    for (tool, input, expected) in with_plan {
        assert_eq!(fx.err(tool, input.clone()).await, expected, "{tool} {input}");
    }
    assert_eq!(std::fs::read_to_string(fx.state_file()).expect("state"), before, "no rejected call wrote the state");
}

/// The schemas reject bad enums before the pack runs (the model's input is checked against
/// `inputSchema` in `execute_tool`); a `callSupport` is not held to the public schema (the plan
/// pack declares no `supportInputSchema`), so the module checks again, with the reference's
/// texts. `items` (not in the schema) works there.
#[tokio::test]
async fn runtime_checks_behind_the_schema() {
    let fx = Fixture::new();
    let project = fx.host.project.snapshot();
    let registry = &project.registry;
    assert!(registry.validate_input("plan.close", &json!({"status": "finished"})).is_err());
    assert_eq!(fx.err("plan.close", json!({"status": "finished"})).await, "Invalid close status: finished");
    let model_input = json!({"title": "t", "itemsText": "a", "items": ["b"]});
    let schema_error = registry.validate_input("plan.create", &model_input).expect_err("no `items` in the schema");
    assert!(format!("{schema_error:?}").contains("items"), "the model schema has no `items`: {schema_error:?}");

    let created = fx.raw("plan.create", json!({"title": "From a list", "items": ["- one", "  ", "2. two"]})).await;
    let plan = &created.expect("items array accepted")["metadata"]["activePlan"];
    assert_eq!(item_texts(plan), items(&[("item_1", "tbd", "one"), ("item_2", "tbd", "two")]));
    let both = fx.raw("plan.update", json!({"itemsText": "three", "items": ["four"]})).await.expect("update");
    let texts: Vec<String> = item_texts(&both["metadata"]["activePlan"]).into_iter().map(|t| t.2).collect();
    assert_eq!(texts, ["one", "two", "three", "four"], "itemsText lines first, then items");

    let cases = [
        ("plan.update", json!({"itemMode": "merge", "itemsText": "x"}), "Invalid itemMode: merge"),
        ("plan.set_item_status", json!({"itemId": "item_1", "status": "finished"}), "Invalid item status: finished"),
        ("plan.set_item_status", json!({"itemId": "item_1"}), "Invalid item status: undefined"),
        ("plan.set_item_status", json!({"itemIndex": 0, "status": "done"}), "Unknown plan item index: 0"),
        ("plan.set_item_status", json!({"itemIndex": 1.5, "status": "done"}), "Unknown plan item index: 1.5"),
        ("plan.close", json!({"status": "finished"}), "Invalid close status: finished"),
        ("plan.create", json!({"title": "t", "items": "a"}), "items must be an array of strings"),
        (
            "plan.create",
            json!({"title": "t", "itemsText": "a", "maxNudges": -1}),
            "maxNudges must be a non-negative integer, got -1",
        ),
        (
            "plan.create",
            json!({"title": "t", "itemsText": "a", "replaceActive": "yes"}),
            "replaceActive must be a boolean, got \"yes\"",
        ),
        ("plan.status", json!([1]), "Tool input must be an object"),
    ];
    for (tool, input, expected) in cases {
        assert_eq!(fx.raw(tool, input.clone()).await.expect_err(expected), expected, "{tool} {input}");
    }
}

#[tokio::test]
async fn the_default_target_is_the_coordinator_and_any_agent_may_be_named() {
    let fx = Fixture::new();
    fx.create("a").await;
    assert_eq!(fx.active()["targetAgent"], "pm");
    let out = fx
        .ok("plan.create", json!({"title": "w", "itemsText": "a", "targetAgent": "worker", "replaceActive": true}))
        .await;
    assert!(out.output.contains("\nTarget: worker\n"), "{}", out.output);
}

// ---------------------------------------------------------------------------------------------
// §10 item 12 and the rest of the continuation nudge

#[tokio::test]
async fn nudge_waits_for_the_target_activation_then_lists_the_remaining_items_at_p2() {
    let fx = Fixture::new();
    let input =
        json!({"title": "Ship the release", "itemsText": "Write notes\nTag v1\nPublish", "instructions": "Be brief."});
    let id = plan_id(&fx.ok("plan.create", input).await);
    fx.ok("plan.set_item_status", json!({"itemId": "item_3", "status": "wont_do"})).await;

    let activation = fx.host.store.start_activation("pm", "p", &[]).expect("pm runs");
    let outcome = fx.tick().await;
    assert_eq!((outcome.recorded.len(), outcome.wake_at), (0, None), "no nudge while pm's model is alive");
    assert!(fx.nudges().is_empty());

    fx.advance(3);
    fx.host.store.finish_activation(&activation.id, ActivationOutcome::Completed, None, None).expect("pm ends");
    let outcome = fx.tick().await;
    assert_eq!(outcome.recorded.len(), 1, "one nudge once pm is idle");
    let nudges = fx.nudges();
    let nudge = &nudges[0];
    assert_eq!(outcome.recorded[0], nudge.id);
    assert_eq!(
        (nudge.target_agent.as_deref(), nudge.priority.as_str(), nudge.status, nudge.useful_effect),
        (Some("pm"), "P2", SignalStatus::Pending, false)
    );
    assert_eq!((nudge.source_agent.as_deref(), nudge.source_activation.as_deref()), (None, None));
    let message = format!(
        "Continue the active plan before routine queued work.\nPlan: Ship the release\nPlan id: {id}\nTarget: pm\n\
         Instructions: Be brief.\nRemaining TBD items:\n- item_1: Write notes\n- item_2: Tag v1\n{TAIL}"
    );
    assert_eq!(
        nudge.payload,
        json!({
            "planId": id,
            "title": "Ship the release",
            "message": message,
            "remainingItems": [{"id": "item_1", "text": "Write notes"}, {"id": "item_2", "text": "Tag v1"}],
            "nudgeCount": 1,
        })
    );
    let plan = fx.active();
    assert_eq!((&plan["nudgeCount"], &plan["lastNudgeAt"]), (&json!(1), &json!(fx.now())));
    let status = fx.ok("plan.status", json!({})).await;
    assert!(status.output.contains(&format!("\nNudges: 1, last {}\n", fx.now())), "{}", status.output);

    let outcome = fx.tick().await;
    assert_eq!((outcome.recorded.len(), outcome.wake_at), (0, None), "a pending nudge is not repeated");
    fx.advance(600);
    assert!(fx.tick().await.recorded.is_empty(), "not even after the cooldown while one is pending");
    assert_eq!(fx.nudges().len(), 1);
}

#[tokio::test]
async fn cooldown_holds_the_next_nudge_and_asks_to_be_woken_when_it_ends() {
    let fx = Fixture::new();
    fx.create("a\nb").await;
    fx.tick().await;
    let first = fx.nudges()[0].clone();
    let sent_at = fx.now();
    fx.advance(20);
    fx.run_activation("pm", std::slice::from_ref(&first.id), ActivationOutcome::Completed);

    let held = fx.tick().await;
    assert!(held.recorded.is_empty(), "inside the 60 s cooldown");
    let expected_wake =
        chrono::DateTime::parse_from_rfc3339(&sent_at).expect("iso").with_timezone(&Utc) + Duration::seconds(60);
    assert_eq!(held.wake_at, Some(expected_wake), "wake when the cooldown ends");

    fx.advance(39);
    assert!(fx.tick().await.recorded.is_empty(), "59 s after the nudge");
    fx.advance(1);
    let second = fx.tick().await;
    assert_eq!((second.recorded.len(), second.wake_at), (1, None), "60 s after the nudge");
    assert_eq!(fx.nudges()[1].payload["nudgeCount"], 2);

    // Without a cooldown the next nudge follows as soon as the previous one was taken.
    fx.ok("plan.update", json!({"nudgeCooldownMs": 0})).await;
    fx.run_activation("pm", std::slice::from_ref(&fx.nudges()[1].id), ActivationOutcome::Completed);
    assert_eq!(fx.tick().await.recorded.len(), 1);
    assert_eq!(fx.nudges().len(), 3);
}

#[tokio::test]
async fn max_nudges_caps_the_nudges_and_stops_asking_for_wake_ups() {
    let fx = Fixture::new();
    fx.ok("plan.create", json!({"title": "Capped", "itemsText": "a", "maxNudges": 2, "nudgeCooldownMs": 1000})).await;
    for n in 1..=4 {
        let outcome = fx.tick().await;
        let expected = usize::from(n <= 2);
        assert_eq!((outcome.recorded.len(), outcome.wake_at), (expected, None), "tick {n}");
        if let Some(nudge) = fx.nudges().into_iter().find(|s| s.status == SignalStatus::Pending) {
            fx.run_activation("pm", &[nudge.id], ActivationOutcome::Completed);
        }
        fx.advance(2);
    }
    assert_eq!(fx.nudges().len(), 2);
    assert_eq!(fx.active()["nudgeCount"], 2);

    fx.ok("plan.update", json!({"maxNudges": 0})).await;
    assert_eq!(fx.tick().await.recorded.len(), 1, "0 means no limit");
}

#[tokio::test]
async fn a_failed_target_is_not_nudged_and_the_pause_is_shown_until_it_recovers() {
    let fx = Fixture::new();
    fx.create("a\nb").await;
    fx.host.store.set_agent_status("pm", AgentStatus::Failed).expect("pm failed");
    let outcome = fx.tick().await;
    assert_eq!((outcome.recorded.len(), outcome.wake_at), (0, None));
    assert_eq!(fx.active()["nudgeBlocked"], "target pm is failed");
    let status = fx.ok("plan.status", json!({})).await;
    assert!(status.output.contains("\nNudges: 0\nNudges paused: target pm is failed\n"), "{}", status.output);
    let board = fx.webui("plan.board", json!({})).await.expect("board");
    assert!(board.output.contains("\nNudges paused: target pm is failed\n"), "{}", board.output);
    assert_eq!(
        board.metadata.as_ref().expect("metadata")["metrics"][4],
        json!({"label": "Nudges", "value": 0, "description": "paused: target pm is failed"})
    );
    let written = std::fs::read_to_string(fx.state_file()).expect("state");
    fx.tick().await;
    assert_eq!(
        std::fs::read_to_string(fx.state_file()).expect("state"),
        written,
        "an unchanged pause is not rewritten"
    );

    fx.host.store.set_agent_status("pm", AgentStatus::Quiet).expect("pm recovered");
    assert_eq!(fx.tick().await.recorded.len(), 1, "nudged once it recovers");
    assert!(fx.active().get("nudgeBlocked").is_none());
    assert!(!fx.ok("plan.status", json!({})).await.output.contains("Nudges paused"));

    // A failed activation makes the agent failed, with the same effect.
    let pending = fx.nudges()[0].id.clone();
    fx.run_activation("pm", &[pending], ActivationOutcome::Failed);
    fx.advance(120);
    assert!(fx.tick().await.recorded.is_empty(), "not after its activation failed");
    assert_eq!(fx.active()["nudgeBlocked"], "target pm is failed");
}

#[tokio::test]
async fn nudges_go_to_the_plan_target_and_stop_when_the_plan_is_done_or_closed() {
    let fx = Fixture::new();
    assert_eq!(fx.tick().await.recorded.len(), 0, "no plan, no nudge");
    assert!(!fx.state_file().exists(), "a tick without a plan writes nothing");

    fx.ok("plan.create", json!({"title": "w", "itemsText": "a", "targetAgent": "worker", "nudgeCooldownMs": 0})).await;
    let _pm_busy = fx.host.store.start_activation("pm", "p", &[]).expect("pm runs");
    assert_eq!(fx.tick().await.recorded.len(), 1, "pm being busy does not matter");
    let nudge = fx.nudges().remove(0);
    assert_eq!(nudge.target_agent.as_deref(), Some("worker"));
    fx.run_activation("worker", &[nudge.id], ActivationOutcome::Completed);

    fx.ok("plan.set_item_status", json!({"itemIndex": 1, "status": "done"})).await;
    assert_eq!(fx.tick().await.recorded.len(), 0, "a done plan is not nudged");
    fx.ok("plan.close", json!({})).await;
    assert_eq!(fx.tick().await.recorded.len(), 0, "a closed plan is not nudged");
    assert_eq!(fx.nudges().len(), 1);
}

/// A pending nudge for another plan does not hold this plan's nudge back; one whose payload
/// names no plan cannot be told apart and does.
#[tokio::test]
async fn dedupe_is_per_plan() {
    let fx = Fixture::new();
    fx.create("a").await;
    fx.tick().await;
    fx.ok("plan.create", json!({"title": "Next", "itemsText": "b", "replaceActive": true})).await;
    assert_eq!(fx.tick().await.recorded.len(), 1, "the old plan's pending nudge is not this plan's");

    fx.ok("plan.create", json!({"title": "Third", "itemsText": "c", "replaceActive": true})).await;
    let request = suzumio::store::SignalRequest {
        kind: NUDGE.into(),
        target_agent: Some("pm".into()),
        payload: json!("not an object"),
        ..Default::default()
    };
    fx.host.store.record_signal(request).expect("recorded");
    assert_eq!(fx.tick().await.recorded.len(), 0);
}

// ---------------------------------------------------------------------------------------------
// archive, concurrency, damaged state, WebUI

#[tokio::test]
async fn the_archive_keeps_the_newest_twenty() {
    let fx = Fixture::new();
    let mut ids = Vec::new();
    for n in 0..23 {
        let input = json!({"title": format!("Plan {n}"), "itemsText": "a", "replaceActive": true});
        ids.push(plan_id(&fx.ok("plan.create", input).await));
        fx.advance(1);
    }
    let state = fx.state();
    let archived: Vec<&str> =
        state["archivedPlans"].as_array().expect("archive").iter().map(|p| p["id"].as_str().unwrap()).collect();
    let expected: Vec<&str> = ids[2..22].iter().rev().map(String::as_str).collect();
    assert_eq!(archived, expected, "newest first, capped at 20");
    let status = fx.ok("plan.status", json!({"includeArchived": true})).await;
    let lines: Vec<&str> = status.output.lines().skip_while(|l| *l != "Archived plans:").skip(1).collect();
    assert_eq!(lines.len(), 20);
    assert!(lines[0].starts_with(&format!("- {} [replaced] Plan 21 (", ids[21])), "{}", lines[0]);
}

/// Tool calls, WebUI calls and ticks arriving together are applied one after another: none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_never_lose_an_update() {
    let fx = Fixture::new();
    let lines: Vec<String> = (1..=10).map(|n| format!("task {n}")).collect();
    fx.ok("plan.create", json!({"title": "Busy", "itemsText": lines.join("\n"), "nudgeCooldownMs": 0})).await;

    let mut calls = tokio::task::JoinSet::new();
    for n in 1..=10 {
        let host = fx.host.clone();
        calls.spawn(async move {
            let input = json!({"itemId": format!("item_{n}"), "status": "done", "note": format!("note {n}")});
            host.support("pm", "act_test", "plan", "plan.set_item_status", input).await.map(|_| ())
        });
        let host = fx.host.clone();
        calls.spawn(async move {
            let input = json!({"itemsText": format!("extra {n}")});
            host.invoke_webui("plan", "plan.update", input).await.map(|_| ())
        });
        let host = fx.host.clone();
        calls.spawn(async move {
            host.run_scheduler_hooks().await;
            Ok(())
        });
    }
    while let Some(joined) = calls.join_next().await {
        joined.expect("task ran").expect("call succeeded");
    }

    let plan = fx.active();
    let all = item_texts(&plan);
    assert_eq!(all.len(), 20, "{all:?}");
    for n in 1..=10 {
        assert_eq!(all[n - 1], (format!("item_{n}"), "done".into(), format!("task {n}")));
        assert_eq!(plan["items"][n - 1]["note"], format!("note {n}"));
    }
    let mut extras: Vec<&str> = all[10..].iter().map(|i| i.2.as_str()).collect();
    extras.sort_by_key(|t| t[6..].parse::<u32>().unwrap_or(0));
    assert_eq!(extras, (1..=10).map(|n| format!("extra {n}")).collect::<Vec<_>>());
    let mut ids: Vec<&str> = all.iter().map(|i| i.0.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!((ids.len(), &plan["nextItemNumber"]), (20, &json!(21)), "every id given once");
    assert_eq!(plan["status"], "active", "the appended items are tbd");
}

#[tokio::test]
async fn state_that_is_not_json_is_reported_and_kept_aside() {
    let fx = Fixture::new();
    let file = fx.state_file();
    std::fs::create_dir_all(file.parent().expect("dir")).expect("dir");
    std::fs::write(&file, "{\"version\": 1, \"activePlan\": ").expect("written");
    let error = fx.err("plan.status", json!({})).await;
    assert!(error.contains("is not valid JSON") && error.contains("moved aside"), "{error}");
    let kept: Vec<PathBuf> = std::fs::read_dir(file.parent().unwrap())
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("state.json.corrupt-"))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(std::fs::read_to_string(&kept[0]).expect("kept"), "{\"version\": 1, \"activePlan\": ");
}

#[tokio::test]
async fn state_of_the_wrong_shape_is_reported_and_never_overwritten() {
    let fx = Fixture::new();
    let file = fx.state_file();
    std::fs::create_dir_all(file.parent().expect("dir")).expect("dir");
    let cases = [
        (r#"{"version": 2, "activePlan": null, "archivedPlans": []}"#, "version is 2, expected 1"),
        (r#"[]"#, "the document is not a JSON object"),
        (r#"{"version": 1, "activePlan": {"id": "pln_x"}, "archivedPlans": []}"#, "activePlan.title is not a string"),
        (
            r#"{"version": 1, "activePlan": null, "archivedPlans": [{"id": "a", "title": "t", "targetAgent": "pm", "status": "done", "items": [{"id": "item_1", "text": "x", "status": "maybe"}]}]}"#,
            "archivedPlans[0].items[0].status is \"maybe\"",
        ),
    ];
    for (text, problem) in cases {
        std::fs::write(&file, text).expect("written");
        let expected = format!(
            "toolpack-state/plan/state.json is not a plan state document ({problem}); it was left unchanged: repair or remove it"
        );
        assert_eq!(fx.err("plan.create", json!({"title": "t", "itemsText": "a"})).await, expected);
        assert_eq!(fx.err("plan.status", json!({})).await, expected);
        let outcome = fx.host.run_scheduler_hooks().await.into_iter().find(|o| o.pack == "plan").expect("hook ran");
        assert!(outcome.errors.iter().any(|e| e.contains(&expected)), "{:?}", outcome.errors);
        assert_eq!(std::fs::read_to_string(&file).expect("state"), text, "left exactly as it was");
    }
}

#[tokio::test]
async fn webui_actions_drive_the_same_plan() {
    let fx = Fixture::new();
    let created = fx
        .webui("plan.create", json!({"title": "From the board", "itemsText": "a\nb", "targetAgent": "worker"}))
        .await
        .expect("created");
    assert_eq!(created.title.as_deref(), Some("plan created"));
    let updated = fx.webui("plan.update", json!({"itemsText": "c"})).await.expect("updated");
    assert_eq!(updated.title.as_deref(), Some("plan updated"));
    for index in 1..=3 {
        fx.webui("plan.set_item_status", json!({"itemIndex": index, "status": "done"})).await.expect("set");
    }
    let error = fx.webui("plan.set_item_status", json!({"itemIndex": 9, "status": "done"})).await.expect_err("index 9");
    assert_eq!(error, "Unknown plan item index: 9");
    let schema = fx.webui("plan.close", json!({"status": "later"})).await.expect_err("bad enum");
    assert!(schema.starts_with("input does not match the schema"), "{schema}");
    let closed =
        fx.webui("plan.close", json!({"status": "abandoned", "reason": "changed course"})).await.expect("closed");
    assert!(closed.output.contains("\nStatus: abandoned\n") && closed.output.contains("\nReason: changed course\n"));
    let archived = &fx.state()["archivedPlans"][0];
    assert_eq!((&archived["status"], &archived["targetAgent"]), (&json!("abandoned"), &json!("worker")));
    assert_eq!(fx.webui("plan.board", json!(null)).await.expect("board").output, "No active plan.");
}
