//! Rules and modes changed while a team runs, end to end: the real `suzumio run` (the process
//! backend; Docker where the runner's path checks are the point), the real CLI writing the shared
//! SQLite store from another process, the real HTTP API and a real Chromium for the WebUI.
//! The `approvals` fixture's `danger.remove` needs approval, so the first call of an activation
//! parks on a request — something observable to change a rule or a mode against before the
//! activation goes on — and every real run of it is counted on the controller side.

mod support;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use support::{Controller, TempProject, cli, http, refused, suzumio, text, wait_for};
use suzumio::store::{ActivationStatus, ApprovalRecord, Event};
use suzumio::support::ToolHost;

/// The fixture under a name of its own, with `script`.
fn project(script: &str) -> TempProject {
    let project = TempProject::copy_of("approvals");
    let unique = project.dir.file_name().unwrap().to_string_lossy().rsplit('-').next().unwrap().to_string();
    let path = project.dir.join("suzumio.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap().replace("name: approvals", &format!("name: live-{unique}"));
    std::fs::write(&path, yaml).unwrap();
    std::fs::write(project.dir.join("script.yaml"), script).unwrap();
    project
}

fn dir_arg(dir: &Path) -> String {
    dir.to_string_lossy().to_string()
}

fn say(dir: &Path, to: &str, body: &str) {
    cli(dir, &["send", &dir_arg(dir), to, "--priority", "P2", body]);
}

fn store(dir: &Path) -> Arc<ToolHost> {
    suzumio::controller::open_read_only(dir).unwrap_or_else(|e| panic!("{e}"))
}

fn pending(dir: &Path, n: usize, ctl: &Controller) -> Vec<ApprovalRecord> {
    wait_for(&format!("{n} pending approval request(s)"), Some(ctl), || {
        let p = store(dir).store.approvals(true, 100).unwrap();
        (p.len() == n).then_some(p)
    })
}

fn activation_ended(dir: &Path, id: &str, ctl: &Controller) -> suzumio::store::ActivationRecord {
    wait_for(&format!("activation {id} to end"), Some(ctl), || {
        store(dir).store.activation(id).unwrap().filter(|a| a.ended_at.is_some())
    })
}

/// How many times `danger.remove` really ran, and on which paths.
fn runs(dir: &Path) -> (u64, Vec<Value>) {
    let state = store(dir).state.read("danger", "runs.json").unwrap();
    state.map_or((0, Vec::new()), |v| (v["runs"].as_u64().unwrap(), v["paths"].as_array().unwrap().clone()))
}

/// The tool results of an activation, as its history recorded them.
fn results(dir: &Path, activation: &str) -> Vec<Value> {
    store(dir)
        .store
        .activation_history(activation)
        .unwrap()
        .iter()
        .filter(|h| h.kind() == "tool_result")
        .map(|h| h.content())
        .collect()
}

fn audit(dir: &Path) -> Vec<Value> {
    let out = cli(dir, &["audit", &dir_arg(dir), "--json"]);
    out.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect()
}

fn events(dir: &Path) -> Vec<Event> {
    store(dir).store.events_after(0, 10_000).unwrap().into_iter().map(|e| e.event).collect()
}

/// Two removals, then the end of the activation.
const TWO_REMOVALS: &str = r#"
activations:
  - agent: writer
    steps:
      - call: [{tool: danger.remove, input: {path: a.txt}}]
      - call: [{tool: danger.remove, input: {path: b.txt}}]
      - say: "Done."
        call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
  - agent: writer
    steps:
      - call: [{tool: danger.remove, input: {path: c.txt}}]
      - say: "Done again."
        call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;

/// The issue's scenario: while writer's activation waits on its first call, a person adds a
/// deny rule from the CLI (another process); the activation's next call is denied by it, with
/// the rule named as the source in the model's result, the audit and the events. Removing the
/// rule restores the previous decision (the next activation's call asks again).
#[test]
fn a_rule_added_by_the_cli_while_an_activation_runs_decides_its_next_call_and_rm_restores_the_previous() {
    let p = project(TWO_REMOVALS);
    let dir = dir_arg(&p.dir);
    say(&p.dir, "writer", "Clean up.");
    let ctl = Controller::start(&p.dir, &[]);
    let first = pending(&p.dir, 1, &ctl).remove(0);
    let act = first.activation_id.clone();

    let added = cli(
        &p.dir,
        &[
            "permissions",
            "add",
            &dir,
            "--agent",
            "writer",
            "danger.remove",
            "deny",
            "--reason",
            "no more removals today",
        ],
    );
    assert!(
        added.starts_with("live rule 1: danger.remove deny — no more removals today (agent writer, added by cli ("),
        "{added}"
    );
    let listed = cli(&p.dir, &["permissions", "list", &dir, "--agent", "writer"]);
    assert!(listed.contains("live rule 1: danger.remove deny"), "{listed}");
    let checked = cli(&p.dir, &["check", &dir]);
    assert!(checked.contains("    live rule 1: danger.remove deny"), "{checked}");
    assert!(checked.contains("deny danger.remove (live rule 1 (agent writer, added by cli ("), "{checked}");

    // The call that waited was asked before the rule: a person's allow runs it. The next one
    // meets the rule.
    cli(&p.dir, &["approvals", "allow", &dir, &first.id]);
    let ended = activation_ended(&p.dir, &act, &ctl);
    assert_eq!(ended.status, ActivationStatus::Completed, "{ended:?}");
    assert_eq!(runs(&p.dir), (1, vec![json!("a.txt")]), "b.txt never ran");
    let results = results(&p.dir, &act);
    let denied = results[1]["content"].as_str().unwrap_or_default().to_string();
    assert!(denied.contains("Permission denied for danger.remove: no more removals today"), "{results:?}");
    assert!(denied.contains("(decided by live rule 1 (agent writer, added by cli ("), "{denied}");
    assert_eq!(store(&p.dir).store.approvals(false, 100).unwrap().len(), 1, "the second call was not asked");

    let entries = audit(&p.dir);
    let change = entries.iter().find(|e| e["kind"] == "rule").expect("the rule's audit line");
    assert_eq!(
        (&change["userAction"], &change["source"], &change["agent"]),
        (&json!("add"), &json!("live rule 1"), &json!("writer"))
    );
    assert!(change["by"].as_str().unwrap().starts_with("cli ("), "{change}");
    let decision = entries
        .iter()
        .find(|e| e["kind"] == "decision" && e["arguments"]["path"] == "b.txt")
        .expect("the second call's decision");
    assert_eq!(decision["decision"], "deny");
    assert!(decision["source"].as_str().unwrap().starts_with("live rule 1 (agent writer"), "{decision}");
    let all = events(&p.dir);
    assert!(all.iter().any(|e| matches!(e, Event::PermissionRuleAdded { rule_id: 1, .. })), "{all:?}");
    assert!(
        all.iter().any(|e| matches!(e, Event::PermissionDecided { source, .. } if source.starts_with("live rule 1"))),
        "{all:?}"
    );

    let removed = cli(&p.dir, &["permissions", "rm", &dir, "1"]);
    assert!(removed.starts_with("removed live rule 1: danger.remove deny"), "{removed}");
    assert!(refused(&p.dir, &["permissions", "rm", &dir, "1"]).contains("Unknown permission rule: 1"));
    let explained = cli(&p.dir, &["permissions", "explain", &dir, "writer", "danger.remove", r#"{"path": "c.txt"}"#]);
    assert!(explained.starts_with("decision: ask\nsource: requiresApproval\n"), "{explained}");
    // The next activation's call is asked again, as before the rule.
    say(&p.dir, "writer", "Once more.");
    let again = pending(&p.dir, 1, &ctl).remove(0);
    assert_eq!(again.input, json!({"path": "c.txt"}));
    let entries = audit(&p.dir);
    assert!(entries.iter().any(|e| e["kind"] == "rule" && e["userAction"] == "remove" && e["source"] == "live rule 1"));
    assert!(events(&p.dir).iter().any(|e| matches!(e, Event::PermissionRuleRemoved { rule_id: 1, .. })));
    cli(&p.dir, &["approvals", "deny", &dir, &again.id]);
    activation_ended(&p.dir, &again.activation_id, &ctl);
    assert_eq!(ctl.stop(), Some(0));
}

/// The bounds, against someone trying to get around them: a live `allow` never beats a config
/// `deny` (pm's `rm *`), not for the agent and not for every agent; a live `allow` for a tool
/// outside the agent's allowlist is refused when added, and the call is still rejected; bad
/// arguments are refused naming the argument (exit 2), and the controller keeps serving.
#[test]
fn a_live_allow_cannot_beat_a_config_deny_nor_reach_past_the_allowlist() {
    let p = TempProject::copy_of("permissions");
    let dir = dir_arg(&p.dir);
    let ctl = Controller::start(&p.dir, &[]);
    cli(&p.dir, &["permissions", "add", &dir, "--agent", "pm", "shell.exec", "allow", "--commands", "rm *"]);
    cli(&p.dir, &["permissions", "add", &dir, "*", "allow"]);
    let call =
        |agent: &str, tool: &str, input: &str| suzumio(&p.dir, &["tool", "call", &dir, "--agent", agent, tool, input]);
    let out = call("pm", "shell.exec", r#"{"command": "rm -rf notes"}"#);
    assert_ne!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("Permission denied for shell.exec") && stderr.contains("agent pm rule 1"), "{stderr}");
    let explained =
        cli(&p.dir, &["permissions", "explain", &dir, "pm", "shell.exec", r#"{"command": "rm -rf notes"}"#]);
    assert!(explained.starts_with("decision: deny\nsource: agent pm rule 1"), "{explained}");

    // worker may not call shell.exec: an allow for it is refused, whoever it is for…
    let why = refused(&p.dir, &["permissions", "add", &dir, "--agent", "worker", "shell.exec", "allow"]);
    assert!(
        why.contains("<tool-pattern>: an allow rule cannot reach past the allowlist: worker may not call shell.exec"),
        "{why}"
    );
    // …and the "allow everything" rule added above does not make the call reach it.
    let out = call("worker", "shell.exec", r#"{"command": "true"}"#);
    assert_eq!(out.status.code(), Some(2), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stderr).contains("Tool not allowed for worker: shell.exec"), "{}", text(&out.stderr));
    // Nor does a live allow beat worker's config deny of messages.send.
    cli(&p.dir, &["permissions", "add", &dir, "--agent", "worker", "messages.send", "allow"]);
    let explained = cli(
        &p.dir,
        &["permissions", "explain", &dir, "worker", "messages.send", r#"{"recipient": "pm", "body": "hi"}"#],
    );
    assert!(explained.starts_with("decision: deny\nsource: agent worker rule 1"), "{explained}");

    for (args, needle) in [
        (vec!["shell.exec", "maybe"], "<allow|ask|deny>: `maybe` is not a decision: use one of allow, ask, deny"),
        (vec!["shell exec", "deny"], "<tool-pattern>: invalid tool pattern `shell exec`"),
        (vec!["shell.exec", "deny", "--hosts", "example.com"], "--hosts: hosts apply to web.fetch calls only"),
        (vec!["shell.exec", "deny", "--commands", "rm x; ls"], "--commands #1: `rm x; ls` contains `;`"),
        (
            vec!["shell.exec", "deny", "--paths", "[x", "--commands", "rm *"],
            "the rule: a rule takes one of paths, commands or hosts",
        ),
        (vec!["shell.exec", "deny", "--paths", "ok/**", "--paths", "[x"], "--paths #2: `[x` is not a valid glob"),
        (vec!["--agent", "wrker", "shell.exec", "deny"], "--agent: Unknown agent: wrker (did you mean `worker`?"),
        (
            vec!["shell.exce", "deny"],
            "<tool-pattern>: `shell.exce` matches no tool of this project (did you mean `shell.exec`?)",
        ),
    ] {
        let mut full = vec!["permissions", "add", dir.as_str()];
        full.extend(args.iter().copied());
        let why = refused(&p.dir, &full);
        assert!(why.contains(needle), "{args:?}: {why}");
    }
    let why = refused(&p.dir, &["permissions", "mode", &dir, "pm", "yolo"]);
    assert!(why.contains("`yolo` is not a permission mode: use one of default, auto, full-access"), "{why}");
    assert!(refused(&p.dir, &["permissions", "rm", &dir, "seven"]).contains("`seven` is not a live rule's id"));
    let why = refused(&p.dir, &["permissions", "rm", &dir, "perm_01"]);
    assert!(why.contains("is a remembered decision, not a live rule: suzumio approvals forget"), "{why}");
    // Still serving: the API answers.
    let health = http("GET", &ctl.url("/health"), &[], None);
    assert_eq!(health.status, 200, "{}", health.body);
    assert_eq!(ctl.stop(), Some(0));
}

/// One removal that parks, then another: the mode in force decides the second.
const REMOVE_TWICE: &str = r#"
activations:
  - agent: writer
    steps:
      - call: [{tool: danger.remove, input: {path: a.txt}}]
      - call: [{tool: danger.remove, input: {path: b.txt}}]
      - say: "Done."
        call: [{tool: coordination.wait_for_signal, input: {reason: done}}]
"#;

/// After the switch, the call that asked in `default` mode (requiresApproval) runs without a
/// request: the audit line of its decision says `mode full-access`.
fn assert_decided_by_full_access(dir: &Path, act: &str, ctl: &Controller) {
    let ended = activation_ended(dir, act, ctl);
    assert_eq!(ended.status, ActivationStatus::Completed, "{ended:?}");
    assert_eq!(runs(dir), (2, vec![json!("a.txt"), json!("b.txt")]));
    assert_eq!(store(dir).store.approvals(false, 100).unwrap().len(), 1, "the second call was not asked");
    let entries = audit(dir);
    let decision = entries
        .iter()
        .find(|e| e["kind"] == "decision" && e["arguments"]["path"] == "b.txt")
        .expect("the second call's decision");
    assert_eq!(
        (&decision["decision"], &decision["source"], &decision["mode"]),
        (&json!("allow"), &json!("mode full-access"), &json!("full-access"))
    );
    assert!(entries.iter().any(|e| e["kind"] == "mode" && e["mode"] == "full-access"), "{entries:?}");
}

#[test]
fn a_mode_switched_from_the_cli_decides_the_next_call_and_reset_restores_the_config_mode() {
    let p = project(REMOVE_TWICE);
    let dir = dir_arg(&p.dir);
    say(&p.dir, "writer", "Clean up.");
    let ctl = Controller::start(&p.dir, &[]);
    let first = pending(&p.dir, 1, &ctl).remove(0);
    let out = cli(&p.dir, &["permissions", "mode", &dir, "writer", "full-access"]);
    assert!(
        out.starts_with(
            "writer: permission mode full-access (set at run time; suzumio.yaml says default; was default)"
        ),
        "{out}"
    );
    let explained = cli(&p.dir, &["permissions", "explain", &dir, "writer", "danger.remove", r#"{"path": "x"}"#]);
    assert!(explained.contains("mode: full-access (set by cli ("), "{explained}");
    assert!(explained.contains("; suzumio.yaml: default)"), "{explained}");
    cli(&p.dir, &["approvals", "allow", &dir, &first.id]);
    assert_decided_by_full_access(&p.dir, &first.activation_id, &ctl);
    assert!(
        events(&p.dir)
            .iter()
            .any(|e| matches!(e, Event::PermissionModeChanged { mode, live: true, .. } if mode == "full-access"))
    );

    let out = cli(&p.dir, &["permissions", "mode", &dir, "writer", "--reset"]);
    assert!(out.starts_with("writer: permission mode default (suzumio.yaml's; was full-access)"), "{out}");
    let explained = cli(&p.dir, &["permissions", "explain", &dir, "writer", "danger.remove", r#"{"path": "x"}"#]);
    assert!(
        explained.starts_with("decision: ask\nsource: requiresApproval\n") && explained.contains("mode: default\n"),
        "{explained}"
    );
    assert_eq!(ctl.stop(), Some(0));
}

/// The API: add (201, the rule with its source), list, get, delete (then 404) a live rule;
/// switch a mode and back; every bad body a 400 naming the field as a JSON pointer; an unknown
/// agent a 404; a request from another site's page refused before it changes anything.
#[test]
fn the_api_adds_lists_and_removes_live_rules_and_switches_modes_and_names_bad_fields() {
    let p = project(REMOVE_TWICE);
    let ctl = Controller::start(&p.dir, &[]);
    let name = store(&p.dir).project.config.name.clone();
    let api = |path: &str| ctl.url(&format!("/api/projects/{name}{path}"));
    let rules = api("/permissions/rules");

    let created = http(
        "POST",
        &rules,
        &[],
        Some(r#"{"agent": "writer", "tool": "danger.*", "decision": "ask", "reason": "look first"}"#),
    );
    assert_eq!(created.status, 201, "{}", created.body);
    let rule = created.json()["rule"].clone();
    let id = rule["id"].as_i64().unwrap();
    assert_eq!(
        (&rule["tool"], &rule["decision"], &rule["agentId"], &rule["createdBy"]),
        (&json!("danger.*"), &json!("ask"), &json!("writer"), &json!("api"))
    );
    assert!(
        rule["source"].as_str().unwrap().starts_with(&format!("live rule {id} (agent writer, added by api at ")),
        "{rule}"
    );
    let webui =
        http("POST", &rules, &[("X-Suzumio-Client", "webui")], Some(r#"{"tool": "danger.tally", "decision": "deny"}"#));
    assert_eq!((webui.status, &webui.json()["rule"]["createdBy"]), (201, &json!("webui")), "{}", webui.body);

    for (body, pointer, needle) in [
        (r#"{"tool": "danger.remove", "decision": "maybe"}"#, "/decision", "is not a decision"),
        (r#"{"decision": "deny"}"#, "/tool", "is required"),
        (r#"{"tool": "danger.remove", "decision": "deny", "when": "now"}"#, "/when", "unknown field `when`"),
        (r#"{"tool": "danger.remove", "decision": "deny", "paths": "a"}"#, "/paths", "invalid type"),
        (r#"{"tool": "danger.remove", "decision": "deny", "paths": []}"#, "/paths", "is empty"),
        (
            r#"{"tool": "danger.remove", "decision": "deny", "hosts": ["ex ample"]}"#,
            "/hosts",
            "hosts apply to web.fetch calls only",
        ),
        (
            r#"{"agent": "pm", "tool": "danger.remove", "decision": "allow"}"#,
            "/tool",
            "cannot reach past the allowlist: pm may not call danger.remove",
        ),
        (r#"{"agent": "nobody", "tool": "danger.remove", "decision": "deny"}"#, "/agent", "Unknown agent: nobody"),
        ("[1]", "", "must be a JSON object"),
    ] {
        let bad = http("POST", &rules, &[], Some(body));
        assert_eq!(bad.status, 400, "{body}: {}", bad.body);
        let details = bad.json()["details"].clone();
        let hit = details
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["path"] == pointer && d["message"].as_str().unwrap().contains(needle));
        assert!(hit, "{body}: {pointer} {needle:?} in {}", bad.body);
    }
    // Another site's page: refused before any handler runs, nothing added.
    let cross =
        http("POST", &rules, &[("Origin", "http://evil.example")], Some(r#"{"tool": "*", "decision": "allow"}"#));
    assert_eq!(cross.status, 403, "{}", cross.body);

    let listed = http("GET", &rules, &[], None).json();
    let live: Vec<i64> = listed["liveRules"].as_array().unwrap().iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(live, [id, id + 1], "{listed}");
    // The tool catalog (the Tools page) shows what the live rules decide, with their source.
    let catalog = http("GET", &api("/tools"), &[], None).json();
    let tally = catalog.as_array().unwrap().iter().find(|e| e["name"] == "danger.tally").unwrap().clone();
    let shown = &tally["decisions"]["writer"];
    assert_eq!(shown["decision"], "deny", "{tally}");
    assert!(shown["source"].as_str().unwrap().starts_with(&format!("live rule {}", id + 1)), "{tally}");
    let one = api(&format!("/permissions/rules/{id}"));
    assert_eq!(http("GET", &one, &[], None).json()["reason"], "look first");
    assert_eq!(http("DELETE", &one, &[], None).status, 200);
    assert_eq!(http("DELETE", &one, &[], None).status, 404);
    assert_eq!(http("GET", &one, &[], None).status, 404);

    let mode = api("/agents/writer/permission-mode");
    let set = http("PUT", &mode, &[], Some(r#"{"mode": "auto"}"#));
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(
        (&set.json()["mode"], &set.json()["previous"], &set.json()["live"]),
        (&json!("auto"), &json!("default"), &json!(true))
    );
    let agents = http("GET", &api("/agents"), &[], None).json();
    let writer = agents.as_array().unwrap().iter().find(|a| a["id"] == "writer").unwrap().clone();
    assert_eq!(
        (&writer["permissionMode"], &writer["configPermissionMode"], &writer["permissionModeSet"]["setBy"]),
        (&json!("auto"), &json!("default"), &json!("api"))
    );
    let bad = http("PUT", &mode, &[], Some(r#"{"mode": "sometimes"}"#));
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.json()["details"][0]["path"], "/mode", "{}", bad.body);
    assert_eq!(http("PUT", &api("/agents/nobody/permission-mode"), &[], Some(r#"{"mode": "auto"}"#)).status, 404);
    let back = http("PUT", &mode, &[], Some(r#"{"mode": null}"#));
    assert_eq!((&back.json()["mode"], &back.json()["live"]), (&json!("default"), &json!(false)), "{}", back.body);
    assert_eq!(http("GET", &mode, &[], None).json()["live"], false);
    assert_eq!(ctl.stop(), Some(0));
}

/// The issue's browser test: the agent card's mode switch, in a real Chromium, switches a running
/// agent to full-access while its first call waits; its next call is decided by the new mode.
/// The Approvals page then adds a live rule and removes it.
#[tokio::test(flavor = "multi_thread")]
async fn the_webui_switches_a_running_agents_mode_and_adds_and_removes_a_live_rule() {
    let p = project(REMOVE_TWICE);
    say(&p.dir, "writer", "Clean up.");
    let ctl = tokio::task::block_in_place(|| Controller::start(&p.dir, &[]));
    let first = tokio::task::block_in_place(|| pending(&p.dir, 1, &ctl)).remove(0);
    let b = webdriver::Browser::start().await.unwrap_or_else(|e| panic!("the browser tests need Chromium: {e}"));
    let outcome = webui_scenario(&b, &ctl, &p.dir, &first).await;
    if let Err(e) = outcome {
        let html = b.source().await.unwrap_or_default();
        panic!("{e}\npage:\n{html}\ncontroller:\n{}", ctl.stderr());
    }
    assert_eq!(tokio::task::block_in_place(|| ctl.stop()), Some(0));
}

async fn webui_scenario(
    b: &webdriver::Browser,
    ctl: &Controller,
    dir: &Path,
    first: &ApprovalRecord,
) -> webdriver::Result<()> {
    b.goto(&ctl.url("/")).await?;
    // The roster redraws as events come in: the switch is found and changed in one step.
    let switch = r#"select[data-permission-mode="writer"]"#;
    b.wait_until(&format!("!!document.querySelector('{switch}')")).await?;
    b.execute(
        &format!(
            "const s = document.querySelector('{switch}'); s.value = 'full-access'; \
             s.dispatchEvent(new Event('change', {{ bubbles: true }}));"
        ),
        vec![],
    )
    .await?;
    b.wait_for_text(r#"[data-permission-mode-status="writer"]"#, "set by webui").await?;
    let set = store(dir).store.permission_mode_override("writer").unwrap().expect("the mode is set");
    assert_eq!((set.mode.as_str(), set.set_by.as_str()), ("full-access", "webui"));

    let owned = dir.to_path_buf();
    let (id, act) = (first.id.clone(), first.activation_id.clone());
    tokio::task::block_in_place(|| {
        cli(&owned, &["approvals", "allow", &dir_arg(&owned), &id]);
        assert_decided_by_full_access(&owned, &act, ctl);
    });

    b.goto(&ctl.url("/#/approvals")).await?;
    let form = b.find("form[data-live-rule-form]").await?;
    let tool = b.find_in(&form, r#"input[name="tool"]"#).await?;
    tool.send_keys("danger.remove").await?;
    b.find_in(&form, r#"input[name="reason"]"#).await?.send_keys("hands off").await?;
    b.click(&b.find_in(&form, r#"button[type="submit"]"#).await?).await?;
    let (_, shown) = b.wait_for_text_of("tr[data-live-rule]", "danger.remove").await?;
    assert!(
        shown.contains("every agent") && shown.contains("hands off") && shown.contains("added by webui"),
        "{shown}"
    );
    let explained = tokio::task::block_in_place(|| {
        cli(&owned, &["permissions", "explain", &dir_arg(&owned), "writer", "danger.remove", r#"{"path": "z"}"#])
    });
    assert!(
        explained.starts_with("decision: deny\nsource: live rule 1 (every agent, added by webui at "),
        "{explained}"
    );
    b.click_css("button[data-remove-live-rule]").await?;
    b.find(r#"[data-empty="live-rules"]"#).await?;
    assert!(store(dir).store.live_rules(None).unwrap().is_empty());
    Ok(())
}

/// A live `deny` path rule reaches the runner's path checks, as the config's do: a link the
/// agent made walks around the lexical match, and the runner, which resolves it, refuses.
#[tokio::test(flavor = "multi_thread")]
async fn a_live_path_deny_reaches_the_runner_so_a_link_does_not_walk_around_it() {
    support::static_runner();
    let s = support::containers::start_fixture("path-rules", "lpr", None, suzumio::config::BackendKind::Docker).await;
    s.sh("a", "mkdir -p vault && echo 'needle VAULTED' > vault/k && ln -s vault vlink").await;
    let read = |path: &str| s.call("a", "file.read", json!({ "path": path }));
    assert!(read("vlink/k").await.unwrap().contains("VAULTED"), "readable before the rule");
    let dir = s.project.dir.clone();
    tokio::task::block_in_place(|| {
        cli(
            &dir,
            &["permissions", "add", &dir_arg(&dir), "--agent", "a", "file.*", "deny", "--paths", "/workspace/vault/**"],
        )
    });
    let err = read("vlink/k").await.expect_err("the link leads into the denied directory");
    assert!(err.contains("Permission denied") && !err.contains("VAULTED"), "{err}");
    assert!(
        err.contains("`vlink/k` resolves to /workspace/vault/k, which live rule 1 (agent a, added by cli ("),
        "{err}"
    );
    let err = read("vault/k").await.expect_err("the direct path");
    assert!(err.contains("live rule 1"), "{err}");
}
