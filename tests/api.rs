//! The HTTP API of `suzumio run` over real sockets: tool-ui listing and invocation (built-in and
//! local packs), schema errors, misbehaving packs, tool status, agents, messages, auth, restarts.

mod support;

use std::time::Duration;

use serde_json::json;
use support::{Controller, TempProject, http};

const P: &str = "/api/projects/review-demo";

fn get(c: &Controller, path: &str) -> support::Response {
    http("GET", &c.url(path), &[], None)
}

fn post(c: &Controller, path: &str, body: &str) -> support::Response {
    http("POST", &c.url(path), &[], Some(body))
}

#[test]
fn tool_ui_lists_every_entry_with_its_pack() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    let r = get(&c, &format!("{P}/tool-ui"));
    assert_eq!(r.status, 200, "{}", r.body);
    let entries = r.json();
    let rebuild = entries.as_array().unwrap().iter().find(|e| e["id"] == "review.rebuild").expect("listed");
    assert_eq!(rebuild["toolpackId"], "review-tools");
    assert_eq!(rebuild["toolpackKind"], "local");
    assert_eq!(rebuild["kind"], "action");
    assert_eq!(rebuild["submitLabel"], "Rebuild");
    assert_eq!(rebuild["inputSchema"]["properties"]["scope"]["enum"], json!(["all", "recent"]));
    let stats = entries.as_array().unwrap().iter().find(|e| e["id"] == "project.stats").expect("built-in listed");
    assert_eq!(stats["toolpackKind"], "builtin");
    let ids: Vec<String> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("{}/{}", e["toolpackId"].as_str().unwrap(), e["id"].as_str().unwrap()))
        .collect();
    support::golden("review.tool-ui.ids.txt").assert_eq(&(ids.join("\n") + "\n"));
}

#[test]
fn seed_pack_panel_and_action_over_http() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    let sent = post(&c, &format!("{P}/messages"), r#"{"recipient": "pm", "body": "Please review."}"#);
    assert_eq!(sent.status, 201, "{}", sent.body);

    let stats = post(&c, &format!("{P}/tool-ui/review-tools/review.stats"), "");
    assert_eq!(stats.status, 200, "{}", stats.body);
    let stats = stats.json();
    assert_eq!(stats["metadata"]["stats"]["messages"], 1, "context.store.projectStats() sees the message");
    assert_eq!(stats["metadata"]["metrics"][0], json!({"label": "Messages", "value": 1}));

    let rebuilt = post(&c, &format!("{P}/tool-ui/review-tools/review.rebuild"), r#"{"scope": "all"}"#);
    assert_eq!(rebuilt.status, 200, "{}", rebuilt.body);
    assert_eq!(rebuilt.json()["output"], "Rebuilt all reviews (1 rebuilds so far).");
}

#[test]
fn bad_scope_is_a_400_naming_the_field() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    let r = post(&c, &format!("{P}/tool-ui/review-tools/review.rebuild"), r#"{"scope": "everything"}"#);
    assert_eq!(r.status, 400, "{}", r.body);
    let body = r.json();
    assert_eq!(body["details"][0]["path"], "/scope");
    assert!(body["error"].as_str().unwrap().contains("/scope"), "{body}");
}

#[test]
fn unknown_pack_entry_project_and_traversal_are_404() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    let cases = [
        (format!("{P}/tool-ui/nope/x"), "Unknown toolpack: nope"),
        (format!("{P}/tool-ui/review-tools/review.nope"), "Unknown WebUI tool entry review.nope in review-tools"),
        ("/api/projects/other/tool-ui/core/project.stats".to_string(), "Unknown project: other"),
        ("/api/projects/..%2F..%2Fetc/tool-ui/core/project.stats".to_string(), "Unknown project: ../../etc"),
    ];
    for (path, message) in cases {
        let r = post(&c, &path, "{}");
        assert_eq!((r.status, r.json()["error"].as_str().unwrap().to_string()), (404, message.to_string()), "{path}");
    }
}

#[test]
fn malformed_bodies_are_400_and_non_json_is_415() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    let r = post(&c, &format!("{P}/tool-ui/core/project.stats"), "{not json");
    assert_eq!(r.status, 400);
    assert!(r.json()["error"].as_str().unwrap().starts_with("the request body is not valid JSON"));
    let r = http("POST", &c.url(&format!("{P}/messages")), &[("Content-Type", "text/plain")], Some("hello"));
    assert_eq!(r.status, 415);
    let r = post(&c, &format!("{P}/messages"), r#"{"recipient": "pm"}"#);
    assert_eq!((r.status, r.json()["details"][0]["path"].clone()), (400, json!("/body")));
    let r = post(&c, &format!("{P}/messages"), r#"{"recipient": "nobody", "body": "hi"}"#);
    assert_eq!((r.status, r.json()["error"].clone()), (422, json!("Unknown agent: nobody")));
}

#[test]
fn a_body_that_does_not_fit_the_route_is_a_400_naming_the_field() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    let cases = [
        ("messages", r#"{"recipient": 7, "body": "hi"}"#, "/recipient", "invalid type: integer `7`, expected a string"),
        ("messages", r#"{"recipient": "pm", "body": "hi", "bdoy": "x"}"#, "/bdoy", "unknown field `bdoy`"),
        ("request-changes", r#"{"body": ["x"]}"#, "/body", "invalid type: sequence, expected a string"),
    ];
    for (route, body, path, message) in cases {
        let r = post(&c, &format!("{P}/{route}"), body);
        assert_eq!((r.status, r.json()["details"][0]["path"].clone()), (400, json!(path)), "{body}: {}", r.body);
        assert!(r.json()["details"][0]["message"].as_str().unwrap().starts_with(message), "{body}: {}", r.body);
        assert!(r.json()["error"].as_str().unwrap().contains(path), "{body}: {}", r.body);
    }
}

/// A looping controller is stopped at its deadline while the server keeps answering: /health
/// answers while the looping call is still open (its answer comes only at the deadline).
#[test]
fn looping_pack_times_out_and_health_keeps_answering() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    // Loaded first, so the looping call goes straight into the loop.
    assert_eq!(post(&c, &format!("{P}/tool-ui/slow/slow.ok"), "").status, 200);
    let url = c.url(&format!("{P}/tool-ui/slow/slow.loop"));
    let looping = std::thread::spawn(move || http("POST", &url, &[], Some("{}")));
    let mut answered_while_looping = 0;
    while !looping.is_finished() {
        let health = get(&c, "/health");
        assert_eq!(health.status, 200);
        if !looping.is_finished() {
            answered_while_looping += 1;
        }
    }
    assert!(answered_while_looping > 0, "/health never answered while the pack looped");
    let r = looping.join().unwrap();
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(
        r.json()["error"].as_str().unwrap().starts_with("toolpack slow: the call did not finish within 500 ms"),
        "{}",
        r.body
    );
    let again = post(&c, &format!("{P}/tool-ui/slow/slow.ok"), "");
    assert_eq!((again.status, again.json()["output"].clone()), (200, json!("still here")));
}

#[test]
fn misbehaving_pack_errors_are_422_with_the_pack_named() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    let cases = [
        ("slow.grow", "toolpack slow: out of memory (the limit is 16 MiB"),
        ("slow.throw", "toolpack slow: RangeError: scope out of range"),
        (
            "slow.garbage",
            "toolpack slow (WebUI entry slow.garbage) returned a number, expected an object {output, title?, metadata?}",
        ),
    ];
    for (entry, message) in cases {
        let r = post(&c, &format!("{P}/tool-ui/slow/{entry}"), "");
        assert_eq!(r.status, 422, "{entry}: {}", r.body);
        assert!(r.json()["error"].as_str().unwrap().starts_with(message), "{entry}: {}", r.body);
    }
    assert_eq!(get(&c, "/health").status, 200);
}

#[test]
fn built_in_entries_send_and_show_messages_and_signals() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    let r = post(&c, &format!("{P}/tool-ui/core/messages.send"), r#"{"body": "Start the review.", "priority": "P2"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["output"].as_str().unwrap().contains("user -> pm"), "defaults to the coordinator: {}", r.body);
    let r = post(&c, &format!("{P}/tool-ui/core/messages.send"), r#"{"sender": "ghost", "body": "x"}"#);
    assert_eq!((r.status, r.json()["error"].clone()), (422, json!("Unknown sender: ghost")));
    let r = post(&c, &format!("{P}/tool-ui/core/coordination.signals"), r#"{"targetAgent": "pm"}"#);
    let signals = r.json();
    assert_eq!(signals["metadata"]["signals"][0]["kind"], "message.created");
    assert_eq!(signals["metadata"]["signals"][0]["priority"], "P2");
    let r = post(&c, &format!("{P}/tool-ui/core/messages.conversation"), r#"{"agentA": "user", "agentB": "pm"}"#);
    assert!(r.json()["output"].as_str().unwrap().contains("Start the review."), "{}", r.body);
    let r = post(&c, &format!("{P}/tool-ui/core/messages.conversation"), r#"{"limit": 500}"#);
    assert_eq!(r.status, 400, "limit is capped by the schema: {}", r.body);
}

#[test]
fn tool_status_lists_tools_without_inputs_and_agents_without_tokens() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    let r = get(&c, &format!("{P}/tool-status"));
    assert_eq!(r.status, 200);
    assert!(!r.body.contains("input"), "inputs are never exposed: {}", r.body);
    let status = r.json();
    let names: Vec<&str> = status.as_array().unwrap().iter().map(|t| t["tool"].as_str().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "sorted by name");
    let summarize = status.as_array().unwrap().iter().find(|t| t["tool"] == "review.summarize").unwrap();
    assert_eq!(summarize["enabledForAgents"], json!(["reviewer"]));
    assert_eq!(summarize["callCount"], 0);

    let r = get(&c, &format!("{P}/agents"));
    assert!(!r.body.contains("token"), "{}", r.body);
    let agents = r.json();
    assert_eq!(agents[1]["id"], "reviewer");
    assert_eq!(agents[1]["mountedToolpacks"], json!(["review-tools"]));
}

#[test]
fn state_written_by_a_pack_survives_a_restart() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    let r = post(&c, &format!("{P}/tool-ui/review-tools/review.rebuild"), "{}");
    assert_eq!(r.json()["output"], "Rebuilt recent reviews (1 rebuilds so far).");
    assert_eq!(c.stop(), Some(0), "Ctrl-C stops cleanly");
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(project.dir.join("toolpack-state/review-tools/cache.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state, json!({"rebuilds": 1, "scope": "recent"}));
    let c = Controller::start(&project.dir, &[]);
    let r = post(&c, &format!("{P}/tool-ui/review-tools/review.rebuild"), "{}");
    assert_eq!(r.json()["output"], "Rebuilt recent reviews (2 rebuilds so far).");
}

#[test]
fn cross_origin_posts_are_refused() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    let r = http(
        "POST",
        &c.url(&format!("{P}/messages")),
        &[("Origin", "http://evil.example")],
        Some(r#"{"recipient":"pm","body":"x"}"#),
    );
    assert_eq!(r.status, 403);
}

#[test]
fn non_loopback_needs_a_token_and_then_every_request_carries_it() {
    let project = TempProject::copy_of("review");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["run", project.dir.to_str().unwrap(), "--host", "0.0.0.0", "--port", "0"])
        .env_remove("SUZUMIO_API_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs an API token"));

    let c = Controller::start(&project.dir, &["--token", "s3cret-token"]);
    let path = format!("{P}/tool-status");
    assert_eq!(get(&c, &path).status, 401);
    assert_eq!(http("GET", &c.url(&path), &[("Authorization", "Bearer wrong")], None).status, 401);
    assert_eq!(http("GET", &c.url(&path), &[("Authorization", "Bearer s3cret-token")], None).status, 200);
    assert_eq!(get(&c, "/health").status, 200, "health needs no token");
}

/// Replace what changes from run to run (timestamps, generated ids) so JSON can be golden.
fn normalized(mut v: serde_json::Value) -> serde_json::Value {
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, x) in map.iter_mut() {
                    if k.ends_with("At") || k == "updatedAt" {
                        *x = json!("<time>");
                    } else {
                        walk(x);
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

#[test]
fn golden_tool_ui_tool_status_and_summary() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &["--paused"]);
    for (route, file) in
        [("tool-ui", "review.tool-ui.json"), ("tool-status", "review.tool-status.json"), ("", "review.summary.json")]
    {
        let path = if route.is_empty() { P.to_string() } else { format!("{P}/{route}") };
        let r = get(&c, &path);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let pretty = serde_json::to_string_pretty(&normalized(r.json())).unwrap() + "\n";
        support::golden(file).assert_eq(&pretty);
    }
}

#[test]
fn lists_are_paged_and_secrets_stay_out_of_the_config() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &["--paused"]);
    for i in 0..3 {
        post(&c, &format!("{P}/messages"), &format!(r#"{{"recipient": "pm", "body": "m{i}"}}"#));
    }
    let first = get(&c, &format!("{P}/messages?limit=2")).json();
    assert_eq!(first["items"].as_array().unwrap().len(), 2);
    let next = first["next"].as_str().unwrap();
    let second = get(&c, &format!("{P}/messages?limit=2&before={next}")).json();
    assert_eq!(second["items"][0]["body"], "m0");
    let events = get(&c, &format!("{P}/events?limit=2")).json();
    assert_eq!(events["items"].as_array().unwrap().len(), 2);
    let config = get(&c, &format!("{P}/config"));
    assert_eq!(config.status, 200);
    assert!(!config.body.contains("token") && !config.body.contains("apiKey\""), "{}", config.body);
    let signals = get(&c, &format!("{P}/signals?agent=pm&status=pending")).json();
    assert_eq!(signals["items"].as_array().unwrap().len(), 3);
    assert_eq!(get(&c, &format!("{P}/signals?status=nope")).status, 400);
    let id = first["items"][0]["id"].as_str().unwrap();
    assert_eq!(get(&c, &format!("{P}/messages/{id}")).json()["id"], json!(id));
    assert_eq!(get(&c, &format!("{P}/messages/msg_nope")).status, 404);
}

/// Follow `next` through a list route until it ends; the ids in order.
fn all_pages(c: &Controller, route: &str, limit: usize) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let sep = if route.contains('?') { '&' } else { '?' };
        let url = match &cursor {
            None => format!("{route}{sep}limit={limit}"),
            Some(next) if route.ends_with("/events") => format!("{route}{sep}limit={limit}&after={next}"),
            Some(next) => format!("{route}{sep}limit={limit}&before={next}"),
        };
        let page = get(c, &url);
        assert_eq!(page.status, 200, "{url}: {}", page.body);
        let page = page.json();
        let items = page["items"].as_array().cloned().unwrap_or_default();
        assert!(items.len() <= limit, "{url} gave {} items", items.len());
        ids.extend(items.iter().map(|i| i["id"].to_string()));
        match page["next"].as_str() {
            Some(next) => {
                assert_eq!(items.len(), limit, "{url}: a next cursor only on a full page");
                cursor = Some(next.to_string());
            }
            None => return ids,
        }
        assert!(ids.len() < 10_000, "{route} never ends");
    }
}

/// Regression: `/signals` and `/tool-calls` never paged and `before=zzz` was a 500. Every list
/// route now pages the same way, and a cursor that names nothing is a 400 naming it.
#[test]
fn every_list_route_pages_the_same_way_and_refuses_unknown_cursors() {
    let project = TempProject::copy_of("review");
    let dir = project.dir.to_str().unwrap().to_string();
    for i in 0..5 {
        let input = format!(r#"{{"recipient": "reviewer", "body": "call {i}"}}"#);
        let out = support::suzumio(&project.dir, &["tool", "call", &dir, "--agent", "pm", "messages.send", &input]);
        assert_eq!(out.status.code(), Some(0), "{}", support::text(&out.stderr));
    }
    let c = Controller::start(&project.dir, &["--paused"]);
    for i in 0..4 {
        post(&c, &format!("{P}/messages"), &format!(r#"{{"recipient": "pm", "body": "m{i}"}}"#));
    }
    let routes = [
        (format!("{P}/messages"), 9),
        (format!("{P}/signals"), 9),
        (format!("{P}/tool-calls"), 5),
        (format!("{P}/activations"), 5),
        (format!("{P}/events"), 0),
    ];
    for (route, expected) in &routes {
        let whole = all_pages(&c, route, 500);
        if *expected > 0 {
            assert_eq!(whole.len(), *expected, "{route}");
        }
        for limit in [1, 2, 3] {
            assert_eq!(all_pages(&c, route, limit), whole, "{route} paged by {limit}");
        }
        let unknown = if route.ends_with("/events") { "after=zzz" } else { "before=zzz" };
        let r = get(&c, &format!("{route}?{unknown}"));
        assert_eq!(r.status, 400, "{route}?{unknown}: {}", r.body);
        assert!(r.json()["error"].as_str().unwrap().contains(unknown), "{}", r.body);
        let r = get(&c, &format!("{route}?limit=lots"));
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.json()["error"], "limit must be a whole number, got `lots`");
        // `limit` is clamped, never refused for being large.
        assert_eq!(get(&c, &format!("{route}?limit=100000")).status, 200);
    }
    let history = all_pages(&c, &format!("{P}/agents/pm/history"), 500);
    assert_eq!(all_pages(&c, &format!("{P}/agents/pm/history"), 2), history);
    assert_eq!(get(&c, &format!("{P}/agents/pm/history?before=his_nope")).status, 400);
}

/// Regression: the config view printed the Rust variant (`OpenAiCompatible`) instead of the
/// config's own spelling.
#[test]
fn resolved_config_spells_enums_as_the_config_does_and_hides_keys() {
    let project = TempProject::copy_of("review");
    let config = project.dir.join("suzumio.yaml");
    let yaml = std::fs::read_to_string(&config).unwrap().replace(
        "        local: { type: scripted }\n",
        "        local: { type: scripted }\n        cloud: { type: openai-compatible, baseURL: 'http://127.0.0.1:9/v1', apiKey: sk-SECRET-1 }\n",
    );
    std::fs::write(&config, yaml).unwrap();
    let c = Controller::start(&project.dir, &[]);
    let r = get(&c, &format!("{P}/config/resolved"));
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!r.body.contains("SECRET"), "{}", r.body);
    let backend = &r.json()["backend"];
    assert_eq!(backend["kind"], "docker");
    let providers: Vec<_> =
        backend["models"]["providers"].as_array().unwrap().iter().map(|p| p["type"].clone()).collect();
    assert_eq!(providers, [json!("scripted"), json!("openai-compatible")]);
    assert_eq!(backend["models"]["providers"][1]["hasInlineApiKey"], true);
}

#[test]
fn status_changes_and_request_changes() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    assert_eq!(post(&c, &format!("{P}/start"), "").json()["status"], "running");
    let r = post(&c, &format!("{P}/approve"), "");
    assert_eq!(
        (r.status, r.json()["error"].clone()),
        (422, json!("project review-demo is running; only a submitted project can be approved"))
    );
    let r = post(&c, &format!("{P}/request-changes"), r#"{"body": "Add a summary."}"#);
    assert_eq!(r.status, 201, "{}", r.body);
    let m = get(&c, &format!("{P}/messages/{}", r.json()["messageId"].as_str().unwrap())).json();
    assert_eq!((m["recipient"].clone(), m["priority"].clone()), (json!("pm"), json!("P2")));
    assert_eq!(post(&c, &format!("{P}/stop"), "").json()["status"], "stopped");
}

/// Read SSE events as they stream in: `(id, type)` pairs, until `count` arrived. A frame with an
/// `event:` line fails: the stream sends plain `data:` frames.
fn read_sse(url: &str, last_event_id: Option<&str>, count: usize, mut trigger: impl FnMut()) -> Vec<(i64, String)> {
    use std::io::{BufRead, BufReader};
    let mut request = support::client().get(url).header("Accept", "text/event-stream").timeout(Duration::from_secs(10));
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id);
    }
    // `send` returns once the headers are in; the body is read as it arrives.
    let response = request.send().unwrap();
    assert_eq!(response.status(), 200);
    let mut reader = BufReader::new(response);
    let mut line = String::new();
    trigger();
    let mut events = Vec::new();
    let (mut id, mut kind) = (0i64, String::new());
    while events.len() < count {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let l = line.trim_end();
        assert!(!l.starts_with("event:"), "the stream names no event types: {l}");
        if let Some(v) = l.strip_prefix("id:") {
            id = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = l.strip_prefix("data:") {
            // Plain `data:` frames: the type is the record's own `type`, not an `event:` line.
            let record: serde_json::Value = serde_json::from_str(v.trim()).unwrap();
            kind = record["type"].as_str().unwrap_or_default().to_string();
        } else if l.is_empty() && id > 0 {
            events.push((id, std::mem::take(&mut kind)));
            id = 0;
        }
    }
    events
}

/// Events are pushed when written; a reconnect with Last-Event-ID continues without a gap.
#[test]
fn the_stream_pushes_new_events_and_resumes_from_last_event_id() {
    let project = TempProject::copy_of("review");
    let c = Controller::start(&project.dir, &[]);
    let url = c.url(&format!("{P}/stream"));
    let message_url = c.url(&format!("{P}/messages"));
    let live = read_sse(&url, None, 2, || {
        let r = http("POST", &message_url, &[], Some(r#"{"recipient": "pm", "body": "after connecting"}"#));
        assert_eq!(r.status, 201);
    });
    let kinds: Vec<&str> = live.iter().map(|(_, k)| k.as_str()).collect();
    assert_eq!(kinds, ["message.created", "signal.created"], "{live:?}");
    // Two more messages while nobody listens; resume after the first event seen.
    for body in ["second", "third"] {
        http("POST", &message_url, &[], Some(&format!(r#"{{"recipient": "pm", "body": "{body}"}}"#)));
    }
    let resumed = read_sse(&url, Some(&live[0].0.to_string()), 5, || {});
    let ids: Vec<i64> = resumed.iter().map(|(id, _)| *id).collect();
    let expected: Vec<i64> = (live[0].0 + 1..=live[0].0 + 5).collect();
    assert_eq!(ids, expected, "no gap, no duplicate: {resumed:?}");
}

#[test]
fn a_login_link_works_once_and_opens_a_session() {
    let project = TempProject::copy_of("review");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args([
            "run",
            project.dir.to_str().unwrap(),
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--backend",
            "process",
            "--token",
            "tok-123",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let served = lines.next().unwrap().unwrap();
    assert!(served.contains("on every address of this machine"), "{served}");
    let link_line = lines.next().unwrap().unwrap();
    // Bound to every address, the link names one a browser can open, as printed.
    let link = link_line.split_whitespace().last().unwrap().to_string();
    assert!(link.starts_with("http://127.0.0.1:"), "{link_line}");
    let first = http("GET", &link, &[], None);
    assert_eq!(first.status, 303, "{}", first.body);
    let cookie = first.header("set-cookie").unwrap().to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let session = cookie.split(';').next().unwrap().to_string();
    let base = link.split("/login/").next().unwrap().to_string();
    assert_eq!(http("GET", &format!("{base}{P}/agents"), &[("Cookie", &session)], None).status, 200);
    assert_eq!(http("GET", &format!("{base}{P}/agents"), &[], None).status, 401);
    assert_eq!(http("GET", &link, &[], None).status, 403, "the link works once");
    let _ = child.kill();
    let _ = child.wait();
}

/// Regression: on a fresh project `suzumio send` then `suzumio run --until-idle` printed "the
/// project is idle" with the message still pending: `run` did not start the project. Now it
/// does (unless `--paused`), and a stopped project stays stopped and says so first.
#[test]
fn run_starts_a_new_project_and_a_stopped_one_says_so() {
    let project = TempProject::copy_of("review");
    let dir = project.dir.to_str().unwrap().to_string();
    let sent = support::suzumio(&project.dir, &["send", &dir, "pm", "hello"]);
    assert_eq!(sent.status.code(), Some(0), "{}", support::text(&sent.stderr));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["run", &dir, "--port", "0", "--backend", "process", "--until-idle"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", support::text(&out.stderr));
    let first = support::text(&out.stdout).lines().next().unwrap_or_default().to_string();
    assert!(first.starts_with("suzumio: project review-demo is served at"), "{first}");
    let signals = support::suzumio(&project.dir, &["signals", &dir, "--agent", "pm", "--json"]);
    let signals: Vec<serde_json::Value> = serde_json::from_slice(&signals.stdout).unwrap();
    assert!(signals.iter().all(|s| s["status"] != "pending"), "the message was delivered: {signals:?}");

    assert_eq!(support::suzumio(&project.dir, &["stop", &dir]).status.code(), Some(0));
    let c = Controller::start(&project.dir, &[]);
    assert_eq!(get(&c, P).json()["status"], "stopped", "a stopped project stays stopped");
    drop(c);
    let stopped = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["run", &dir, "--port", "0", "--backend", "process", "--until-idle"])
        .output()
        .unwrap();
    let first = support::text(&stopped.stdout).lines().next().unwrap_or_default().to_string();
    assert!(first.contains("(stopped: no agent runs until `suzumio start`"), "{first}");
}

/// A port already in use fails the run before anything starts: exit 1, status unchanged.
#[test]
fn a_port_in_use_fails_before_anything_changes() {
    let project = TempProject::copy_of("review");
    let dir = project.dir.to_str().unwrap().to_string();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["run", &dir, "--port", &port, "--backend", "process"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", support::text(&out.stderr));
    assert!(support::text(&out.stderr).contains("cannot listen on"), "{}", support::text(&out.stderr));
    let status = support::suzumio(&project.dir, &["status", &dir]);
    assert!(support::text(&status.stdout).contains("initialized"), "{}", support::text(&status.stdout));
}

/// (h) Every list route agrees on cursors: lists paged back in time take `before=<id>` (an
/// opaque id of that list), the events and the stream `after=<event id>`, and the other lists
/// none. A malformed cursor, an unknown one (well formed, naming no row), or the other
/// direction's is a 400 naming the parameter and its value — never silently ignored — and a
/// valid cursor still pages.
#[test]
fn every_list_route_refuses_malformed_unknown_and_unsupported_cursors() {
    let project = TempProject::copy_of("review");
    let dir = project.dir.to_str().unwrap().to_string();
    for i in 0..2 {
        let input = format!(r#"{{"recipient": "reviewer", "body": "call {i}"}}"#);
        let out = support::suzumio(&project.dir, &["tool", "call", &dir, "--agent", "pm", "messages.send", &input]);
        assert_eq!(out.status.code(), Some(0), "{}", support::text(&out.stderr));
    }
    let c = Controller::start(&project.dir, &["--paused"]);
    for i in 0..2 {
        post(&c, &format!("{P}/messages"), &format!(r#"{{"recipient": "pm", "body": "m{i}"}}"#));
    }
    let refused = |url: &str, needles: &[&str]| {
        let r = get(&c, url);
        assert_eq!(r.status, 400, "{url}: {}", r.body);
        let error = r.json()["error"].as_str().unwrap().to_string();
        for needle in needles {
            assert!(error.contains(needle), "{url}: {needle:?} not in {error:?}");
        }
    };

    // Paged back in time, by an id of the list.
    for (route, prefix) in [
        (format!("{P}/messages"), "msg"),
        (format!("{P}/signals"), "sig"),
        (format!("{P}/tool-calls"), "tc"),
        (format!("{P}/activations"), "act"),
        (format!("{P}/agents/pm/history"), "his"),
    ] {
        let first = get(&c, &format!("{route}?limit=1"));
        assert_eq!(first.status, 200, "{route}: {}", first.body);
        let first = first.json();
        // A row of the list, to prove that `after` is refused even when it names one.
        let known = first["items"][0]["id"].as_str().map_or(format!("{prefix}_0000"), str::to_string);
        let unknown = format!("{prefix}_0190a0a0a0a07000800000000000dead");
        refused(&format!("{route}?before=zzz"), &["malformed cursor before=zzz", &format!("{prefix}_")]);
        refused(&format!("{route}?before=sig-1%20or%201"), &["malformed cursor before=sig-1 or 1"]);
        refused(&format!("{route}?before={unknown}"), &[&format!("unknown cursor before={unknown}")]);
        refused(&format!("{route}?after=zzz"), &["unsupported cursor after=zzz", "before=<next>"]);
        refused(&format!("{route}?after={unknown}"), &[&format!("unsupported cursor after={unknown}")]);
        refused(&format!("{route}?after={known}"), &[&format!("unsupported cursor after={known}")]);
        // A valid cursor pages: the page before the first one starts right after it.
        if let Some(next) = first["next"].as_str() {
            let second = get(&c, &format!("{route}?limit=1&before={next}"));
            assert_eq!(second.status, 200, "{route}: {}", second.body);
            let second = second.json();
            assert_ne!(second["items"][0]["id"], first["items"][0]["id"], "{route}: {second}");
            let whole = get(&c, &format!("{route}?limit=500")).json();
            assert_eq!(whole["items"][1]["id"], second["items"][0]["id"], "{route}: {whole}");
        } else {
            assert_eq!(prefix, "his", "{route} has several rows, so a page of one has a next: {first}");
        }
    }

    // Paged forward, by event id; the stream resumes the same way.
    let newest = get(&c, &format!("{P}/events?limit=999")).json()["items"]
        .as_array()
        .unwrap()
        .last()
        .map(|e| e["id"].as_i64().unwrap())
        .unwrap();
    let past = newest + 1000;
    for route in [format!("{P}/events"), format!("{P}/stream")] {
        refused(&format!("{route}?after=zzz"), &["malformed cursor after=zzz", "whole numbers"]);
        refused(&format!("{route}?after=-3"), &["malformed cursor after=-3"]);
        refused(&format!("{route}?after={past}"), &[&format!("unknown cursor after={past}"), "the newest event is"]);
        refused(&format!("{route}?before=zzz"), &["unsupported cursor before=zzz", "after=<next>"]);
        refused(&format!("{route}?before=1"), &["unsupported cursor before=1"]);
    }
    let first = get(&c, &format!("{P}/events?limit=2&after=0")).json();
    let next = first["next"].as_str().unwrap();
    let second = get(&c, &format!("{P}/events?limit=2&after={next}"));
    assert_eq!(second.status, 200, "{}", second.body);
    let third_id = second.json()["items"][0]["id"].as_i64().unwrap();
    assert_eq!(third_id, next.parse::<i64>().unwrap() + 1);
    assert_eq!(get(&c, &format!("{P}/events?after={newest}")).json()["items"], json!([]));

    // Not paged at all: both cursors are refused.
    for route in [
        "/api/projects".to_string(),
        format!("{P}/agents"),
        format!("{P}/agents/pm/commands"),
        format!("{P}/approvals"),
        format!("{P}/approvals?all=true"),
        format!("{P}/permissions/rules"),
        format!("{P}/audit"),
    ] {
        let sep = if route.contains('?') { '&' } else { '?' };
        assert_eq!(get(&c, &route).status, 200, "{route}");
        for cursor in ["before=zzz", "after=zzz", "before=apr_0190a0a0a0a07000800000000000dead", "after=7"] {
            refused(&format!("{route}{sep}{cursor}"), &[&format!("unsupported cursor {cursor}"), "not paged"]);
        }
    }
}
