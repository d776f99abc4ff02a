//! A fallback says why (issue [Q] point 4): a real `suzumio run` (process backend) with three
//! agents whose model lists start with a broken model served on 127.0.0.1 in the OpenAI wire
//! format (`support/model_stream.rs`) — one that answers HTTP 500 with a message, one whose
//! stream is malformed, one whose stream stalls past `chunkTimeoutMs` — and go on with a
//! working second model. Each activation completes on the second model, and the cause of the
//! fallback is in the run's live lines, in `suzumio show`, in the activation's timeline (the
//! API, and its page in a real browser) and in the `model.fallback` event.

#[path = "support/model_stream.rs"]
mod model_stream;
mod support;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::time::Duration;

use model_stream::{Reply, StreamServer, Turn};
use serde_json::Value;
use support::Controller;

const P: &str = "/api/projects/fallbacks";

/// One agent's case: its first (broken) model's replies, its provider's extra settings, and what
/// `show` must say about the fallback.
struct Case {
    agent: &'static str,
    replies: Vec<Reply>,
    provider_extra: &'static str,
    cause: &'static str,
    status: Option<u64>,
    shown: &'static str,
    error: &'static str,
}

fn cases() -> Vec<Case> {
    let crashed = r#"{"error": {"message": "the upstream model crashed", "type": "server_error"}}"#;
    let role = model_stream::openai_frames(&Turn::new(&["Thinking"])).remove(0);
    vec![
        Case {
            agent: "crashes",
            // The first answer and every retry (3 by default) of a 500.
            replies: (0..4).map(|_| Reply::Status(500, crashed.to_string())).collect(),
            provider_extra: "",
            cause: "http_error",
            status: Some(500),
            shown: "failed (HTTP 500), continued with backup-crashes (m-good)",
            error: "HTTP 500: the upstream model crashed [server_error]",
        },
        Case {
            agent: "garbles",
            replies: vec![Reply::stream(vec![role.clone(), "data: {\"choices\": [{\"delta\"\n\n".into()], GAP)],
            provider_extra: "",
            cause: "malformed_stream",
            status: None,
            shown: "failed (malformed stream), continued with backup-garbles (m-good)",
            error: "a chunk is not JSON",
        },
        Case {
            agent: "stalls",
            // Had the chunk timeout not fired, the stream would have gone on after a minute.
            replies: vec![Reply::stalling(
                model_stream::openai_frames(&Turn::new(&["Thinking ", "slowly"])),
                2,
                Duration::from_secs(60),
            )],
            provider_extra: ", chunkTimeoutMs: 300",
            cause: "stream_stalled",
            status: None,
            shown: "failed (stream stalled past chunkTimeoutMs), continued with backup-stalls (m-good)",
            error: "nothing arrived for 300 ms",
        },
    ]
}

const GAP: Duration = Duration::from_millis(5);

/// What the working second model answers: a message to the user (a useful effect), then a wait.
fn good_replies(agent: &str) -> Vec<Reply> {
    let send = Turn::new(&["Reporting."]).call(
        "call_send",
        "messages_send",
        &[&format!("{{\"recipient\": \"user\", \"body\": \"{agent} reports\"}}")],
    );
    let wait =
        Turn::new(&["Waiting."]).call("call_wait", "coordination_wait_for_signal", &["{\"reason\": \"reported\"}"]);
    [send, wait].iter().map(|t| Reply::stream(model_stream::openai_frames(t), GAP)).collect()
}

fn client() -> reqwest::Client {
    suzumio::support::web_fetch::tls_provider();
    reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(60)).build().unwrap()
}

async fn get(c: &Controller, path: &str) -> Value {
    let response = client().get(c.url(path)).send().await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fallback_names_its_cause_in_the_live_lines_show_the_timeline_and_an_event() {
    let cases = cases();
    let mut servers = Vec::new();
    let (mut providers, mut presets, mut agents) = (String::new(), String::new(), String::new());
    for case in &cases {
        let (broken, good) =
            (StreamServer::start(case.replies.clone()).await, StreamServer::start(good_replies(case.agent)).await);
        let a = case.agent;
        providers += &format!(
            "        broken-{a}: {{type: openai-compatible, baseURL: '{}/v1'{}}}\n        good-{a}: {{type: openai-compatible, baseURL: '{}/v1'}}\n",
            broken.url, case.provider_extra, good.url
        );
        presets += &format!(
            "        first-{a}: {{provider: broken-{a}, model: m-broken}}\n        backup-{a}: {{provider: good-{a}, model: m-good}}\n        list-{a}: {{model-list: [first-{a}, backup-{a}]}}\n"
        );
        agents += &format!("  {a}: {{model: list-{a}, tools: [messages.send, coordination.wait_for_signal]}}\n");
        servers.push((broken, good));
    }
    let dir = tempfile::Builder::new().prefix("suzumio-fallback-").tempdir().unwrap();
    std::fs::write(
        dir.path().join("suzumio.yaml"),
        format!(
            "name: fallbacks\ntask: Report to the user.\ntools:\n  toolpacks: [core]\nagents:\n{agents}backend:\n  runner:\n    model: list-crashes\n    models:\n      providers:\n{providers}      presets:\n{presets}"
        ),
    )
    .unwrap();
    let root = dir.path().to_string_lossy().to_string();
    for args in [
        vec!["start", "."],
        vec!["send", ".", "crashes", "Report."],
        vec!["send", ".", "garbles", "Report."],
        vec!["send", ".", "stalls", "Report."],
    ] {
        let out = support::suzumio(dir.path(), &args);
        assert!(out.status.success(), "suzumio {args:?}: {}", support::text(&out.stderr));
    }
    let c = Controller::start(dir.path(), &[]);

    let mut ended = Vec::new();
    for (case, (broken, good)) in cases.iter().zip(&servers) {
        let a = case.agent;
        let activation = support::wait_for_async(&format!("{a}'s activation to end"), async || {
            let host = suzumio::controller::open_read_only(dir.path()).ok()?;
            host.store.latest_activation(a, None).ok()?.filter(|x| x.ended_at.is_some())
        })
        .await;
        assert_eq!(activation.status.as_str(), "completed", "{a}: {:?}\n{}", activation.error, c.stderr());
        assert!(!broken.requests().is_empty() && good.requests().len() == 2, "{a}: the second model finished the work");

        // `suzumio show`: the fallback step, between the prompt and the second model's turns.
        let shown = support::suzumio(dir.path(), &["show", &root, &activation.id]);
        let shown = support::text(&shown.stdout);
        let step = shown
            .lines()
            .position(|l| l.contains("fallback at"))
            .unwrap_or_else(|| panic!("{a}: no fallback step:\n{shown}"));
        let lines: Vec<&str> = shown.lines().collect();
        assert!(lines[step].contains(&format!("model first-{a} (m-broken) {}", case.shown)), "{a}:\n{shown}");
        assert!(lines[step + 1].contains(case.error), "{a}:\n{shown}");
        assert!(lines[..step].iter().any(|l| l.contains("prompt at")), "{a}:\n{shown}");
        assert!(lines[step..].iter().any(|l| l.contains("model m-good at")), "{a}:\n{shown}");

        // The timeline the WebUI reads.
        let timeline = get(&c, &format!("{P}/activations/{}/timeline", activation.id)).await;
        let items = timeline["items"].as_array().unwrap();
        let kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds[..2], ["prompt", "model_fallback"], "{a}: {kinds:?}");
        let fallback = &items[1];
        assert_eq!(fallback["cause"], case.cause, "{a}: {fallback}");
        assert_eq!(fallback["status"].as_u64(), case.status, "{a}: {fallback}");
        assert_eq!(fallback["to"], format!("backup-{a} (m-good)"));
        assert!(fallback["error"].as_str().unwrap().contains(case.error), "{a}: {fallback}");

        // The event, and the run's live line for it.
        let host = suzumio::controller::open_read_only(dir.path()).unwrap();
        let query = suzumio::store::EventQuery {
            agent_id: Some(a.to_string()),
            kind: Some("model.fallback".into()),
            after_id: None,
            limit: Some(10),
        };
        let events = host.store.list_events(&query).unwrap();
        assert_eq!(events.len(), 1, "{a}: {events:?}");
        assert_eq!(events[0].data()["cause"], case.cause);
        assert_eq!(events[0].data()["activationId"], activation.id.as_str());
        let live = support::wait_for_async(&format!("{a}'s live line"), async || {
            c.stdout().lines().find(|l| l.starts_with(&format!("{a}: model first-{a}"))).map(str::to_string)
        })
        .await;
        assert!(live.contains(case.shown.split(", continued").next().unwrap()) && live.contains(case.error), "{live}");
        let words = case.shown.trim_start_matches("failed (").split(')').next().unwrap();
        ended.push((activation.id.clone(), words));
    }

    // The activation page of the WebUI shows each fallback step with its cause and error.
    let b = webdriver::Browser::start().await.unwrap_or_else(|e| panic!("this test needs Chromium: {e}"));
    for (id, cause) in &ended {
        let shown = async {
            b.goto(&c.url(&format!("/#/activations/{id}"))).await?;
            b.wait_for_text("ol.timeline > li[data-kind=model_fallback] [data-fallback-cause]", cause).await?;
            let error = b.find("ol.timeline > li[data-kind=model_fallback] pre[data-error]").await?;
            Ok::<String, webdriver::Error>(error.text().await?)
        };
        let error = shown.await.unwrap_or_else(|e| panic!("{id}: {e}\n{}", c.stderr()));
        assert!(error.contains("provider `broken-"), "{id}: {error}");
    }

    let types = get(&c, "/api/event-types").await;
    assert!(types["types"].as_array().unwrap().iter().any(|t| t["name"] == "model.fallback"), "{types}");
    c.stop();
}
