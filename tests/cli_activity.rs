//! The CLI that follows a team at work, against real runs (scripted model, process backend,
//! real SQLite): `activations`, `show`, `logs`, `history`, `status`/`check` and their `--json`
//! shapes as golden files; exit codes and suggestions for wrong input; `cancel`, `wake` and
//! `logs -f` against a `suzumio run` in another process.

mod support;

use std::io::BufRead;
use std::time::Duration;

use serde_json::Value;
use support::{Controller, TempProject, golden, repo_root, suzumio, text};

const SCRIPT: &str = r#"
activations:
  - agent: reviewer
    when: "Review PR 7"
    steps:
      - say: "Let me write my notes.\nThen I tell the pm."
        call:
          - tool: file.write
            input: {path: "/workspace/notes.md", content: "LGTM"}
          - tool: file.raed
            input: {path: "/workspace/notes.md"}
      - call:
          - tool: file.read
            input: {path: "/workspace/missing.md"}
          - tool: messages.send
            input: {recipient: pm, body: "Review done: LGTM"}
      - say: "All reviewed."
  - agent: reviewer
    when: "slow"
    steps:
      - say: "Starting the long job."
        call: [{tool: shell.exec, input: {command: "sleep 30; echo late"}}]
      - say: "never reached"
  - agent: reviewer
    when: "boundary"
    steps:
      - call: [{tool: shell.exec, input: {command: "sleep 3"}}]
      - say: "Seen the news."
"#;

/// The review fixture with the script above.
fn project() -> TempProject {
    TempProject::scripted("review", SCRIPT, &[])
}

/// `suzumio <args>` with the project directory as the second argument; asserts the exit code.
fn run(dir: &str, args: &[&str], code: i32) -> (String, String) {
    let mut full = args.to_vec();
    full.insert(1, dir);
    let out = suzumio(&repo_root(), &full);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {}{}", text(&out.stdout), text(&out.stderr));
    (text(&out.stdout), text(&out.stderr))
}

/// `suzumio run --until-idle`; its stdout (one line per event: stdout is not a terminal) and
/// its stderr.
fn run_until_idle(dir: &str) -> (String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["run", dir, "--port", "0", "--backend", "process", "--until-idle"])
        .env("SUZUMIO_RUNNER_BIN", support::runner_binary())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    (text(&out.stdout), text(&out.stderr))
}

/// Output with what changes from run to run replaced: ids (`act_<1>`, numbered in order of
/// appearance), timestamps, durations, the temporary directory.
fn normalize(out: &str, dir: &str) -> String {
    let out = out.replace(dir, "<dir>");
    let mut ids: Vec<String> = Vec::new();
    let chars: Vec<char> = out.chars().collect();
    let mut result = String::new();
    let mut i = 0;
    while i < chars.len() {
        let rest: String = chars[i..chars.len().min(i + 40)].iter().collect();
        // ids: `<prefix>_` and 32 hex digits
        if let Some(prefix) = ["act_", "tc_", "sig_", "msg_", "his_"].iter().find(|p| rest.starts_with(**p)) {
            let hex: String = chars[i + prefix.len()..].iter().take_while(|c| c.is_ascii_hexdigit()).collect();
            if hex.len() == 32 {
                let id = format!("{prefix}{hex}");
                let n = match ids.iter().position(|x| *x == id) {
                    Some(n) => n + 1,
                    None => {
                        ids.push(id);
                        ids.len()
                    }
                };
                result.push_str(&format!("{prefix}<{n}>"));
                i += prefix.len() + 32;
                continue;
            }
        }
        // event ids: `#12` (other agents' events interleave)
        if chars[i] == '#' && chars.get(i + 1).is_some_and(|c| c.is_ascii_digit()) {
            result.push_str("#<n>");
            i += 1;
            while chars.get(i).is_some_and(|c| c.is_ascii_digit()) {
                i += 1;
            }
            continue;
        }
        // timestamps: 2026-12-01T11:37:17.145Z
        if rest.len() >= 24 && rest.as_bytes()[4] == b'-' && rest.as_bytes()[10] == b'T' && rest.as_bytes()[23] == b'Z'
        {
            result.push_str("<time>");
            i += 24;
            continue;
        }
        result.push(chars[i]);
        i += 1;
    }
    result.lines().map(duration_free).collect::<Vec<_>>().join("\n") + "\n"
}

/// A table with each run of spaces between its columns made two (the widths follow ids and
/// durations).
fn table(out: &str) -> String {
    let mut result = String::new();
    let mut spaces = 0;
    for c in out.chars() {
        if c == ' ' {
            spaces += 1;
            continue;
        }
        result.push_str(if spaces >= 2 {
            "  "
        } else if spaces == 1 {
            " "
        } else {
            ""
        });
        spaces = 0;
        result.push(c);
    }
    result
}

/// `157ms`, `1.1s`, `3m05s` and `"durationMs": 157` become `<dur>`.
fn duration_free(line: &str) -> String {
    if let Some(at) = line.find("\"durationMs\": ")
        && !line[at..].contains("null")
    {
        return format!("{}\"durationMs\": <dur>{}", &line[..at], if line.ends_with(',') { "," } else { "" });
    }
    line.split(' ')
        .map(|word| {
            let core = word.trim_matches(|c| c == '(' || c == ')' || c == ',');
            let is_duration = |w: &str| {
                let digits = w.trim_end_matches("ms").trim_end_matches('s');
                (w.ends_with("ms") || w.ends_with('s'))
                    && !digits.is_empty()
                    && digits.chars().all(|c| c.is_ascii_digit() || c == '.' || c == 'm')
                    && digits.chars().next().is_some_and(|c| c.is_ascii_digit())
            };
            if is_duration(core) { word.replace(core, "<dur>") } else { word.to_string() }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn a_scripted_run_shown_by_activations_show_logs_and_history() {
    let project = project();
    let dir = project.dir.to_str().unwrap();
    run(dir, &["send", "reviewer", "Review PR 7"], 0);
    let (progress, notes) = run_until_idle(dir);
    // Regression: a model's text replies showed only as "started/completed"; a call of a tool
    // that does not exist showed nothing at all.
    for line in [
        "reviewer: \"Let me write my notes.\"",
        "reviewer: file_raed rejected: Unknown tool: file_raed",
        "reviewer: file.read failed: No such file or directory: /workspace/missing.md",
        "reviewer: \"All reviewed.\"",
    ] {
        assert!(progress.lines().any(|l| l == line), "{line} in:\n{progress}");
    }
    assert!(
        notes.contains(
            "suzumio: 1 tool call(s) were rejected in 1 activation(s): the model called a tool it may not use"
        ),
        "the run says so at its end: {notes}"
    );

    let (list, _) = run(dir, &["activations"], 0);
    golden("review.activations.txt").assert_eq(&table(&normalize(&list, dir)));
    let (json, _) = run(dir, &["activations", "--json", "--agent", "reviewer"], 0);
    let parsed: Vec<Value> = serde_json::from_str(&json).unwrap();
    let id = parsed[0]["id"].as_str().unwrap().to_string();
    golden("review.activations.json").assert_eq(&normalize(&json, dir));

    // A unique prefix is enough, with or without `act_`.
    let (shown, _) = run(dir, &["show", &id[4..16]], 0);
    golden("review.show.txt").assert_eq(&normalize(&shown, dir));
    let (again, _) = run(dir, &["show", &id[..16]], 0);
    assert_eq!(again, shown);
    let (timeline, _) = run(dir, &["show", &id, "--json"], 0);
    golden("review.show.json").assert_eq(&normalize(&timeline, dir));
    let timeline: Value = serde_json::from_str(&timeline).unwrap();
    let kinds: Vec<(&str, &str)> = timeline["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["kind"].as_str().unwrap(), i["tool"].as_str().or(i["model"].as_str()).unwrap_or("")))
        .collect();
    assert_eq!(
        kinds,
        [
            ("prompt", ""),
            ("model_turn", "scripted"),
            ("tool_call", "file.write"),
            ("tool_call", "file_raed"),
            ("model_turn", "scripted"),
            ("tool_call", "file.read"),
            ("tool_call", "messages.send"),
            ("model_turn", "scripted"),
            ("ended", ""),
        ],
        "the timeline is in the order things happened"
    );

    let (logs, _) = run(dir, &["logs", "--agent", "reviewer", "--type", "tool_call"], 0);
    golden("review.logs.txt").assert_eq(&normalize(&logs, dir));
    let (lines, _) = run(dir, &["logs", "--type", "activation.turn", "--json"], 0);
    let turns: Vec<Value> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(turns[0]["data"]["text"], "Let me write my notes.", "{turns:?}");
    let (history, _) = run(dir, &["history", "reviewer"], 0);
    golden("review.history.txt").assert_eq(&normalize(&history, dir));

    let (status, _) = run(dir, &["status", "--json"], 0);
    golden("review.status.json").assert_eq(&normalize(&status, dir));
    let (check, _) = run(dir, &["check", "--json"], 0);
    golden("review.check.json").assert_eq(&normalize(&check, dir));
}

#[test]
fn wrong_input_exits_2_with_suggestions_and_allowed_values_everywhere() {
    let project = project();
    let dir = project.dir.to_str().unwrap();
    let agent_hint = "error: Unknown agent: reviwer (did you mean `reviewer`? agents: pm, reviewer)\n";
    for args in [
        &["tools", "--agent", "reviwer"][..],
        &["signals", "--agent", "reviwer"],
        &["activations", "--agent", "reviwer"],
        &["logs", "--agent", "reviwer"],
        &["history", "reviwer"],
        &["cancel", "reviwer"],
        &["wake", "reviwer"],
        &["send", "reviwer", "hi"],
        &["resume", "reviwer"],
        &["tool", "call", "--agent", "reviwer", "messages.send"],
    ] {
        let mut full = args.to_vec();
        let at = if args[0] == "tool" { 2 } else { 1 };
        full.insert(at, dir);
        let out = suzumio(&repo_root(), &full);
        assert_eq!((out.status.code(), text(&out.stderr)), (Some(2), agent_hint.to_string()), "{args:?}");
    }
    let out = suzumio(&repo_root(), &["tool", "call", dir, "--agent", "reviewer", "file.raed"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        "error: Unknown tool: file.raed (did you mean `file.read`?) (suzumio tools lists them)\n"
    );
    let (_, err) = run(dir, &["ui", "core/messages.snd"], 2);
    assert_eq!(err, "error: Unknown WebUI tool entry messages.snd in core (did you mean `messages.send`?)\n");
    let (_, err) = run(dir, &["ui", "review-tool/review.stats"], 2);
    assert_eq!(err, "error: Unknown toolpack: review-tool (did you mean `review-tools`?)\n");
    let (_, err) = run(dir, &["show", "act_0000"], 2);
    assert_eq!(err, "error: Unknown activation: act_0000 (suzumio activations lists them)\n");
    let (_, err) = run(dir, &["ui", "core/messages.send", r#"{"recipient": "pm", "body": "x", "priority": "P9"}"#], 2);
    assert!(err.starts_with("error: input does not match the schema: /priority: \"P9\""), "{err}");
    assert!(err.ends_with("\nhint: a priority is one of P0, P1, P2, P3\n"), "{err}");
    let (_, err) = run(dir, &["ui", "core/messages.send", "{oops"], 2);
    assert!(err.starts_with("error: the input is not valid JSON"), "{err}");
    for (args, values) in [
        (&["activations", "--status", "done"][..], "[possible values: running, completed, failed, cancelled]"),
        (&["send", "pm", "--priority", "P9", "x"], "[possible values: P0, P1, P2, P3]"),
        (&["run", "--log-format", "xml"], "[possible values: text, json]"),
    ] {
        let (_, err) = run(dir, args, 2);
        assert!(err.contains(values), "{args:?}: {err}");
    }
}

#[test]
fn a_failing_command_given_json_prints_a_json_error_on_stdout() {
    let project = project();
    let dir = project.dir.to_str().unwrap();
    let cases: [(&[&str], i32, &str); 4] = [
        (&["tool", "call", "--agent", "pm", "file.read", r#"{"path": "/x"}"#, "--json"], 2, "rejected"),
        (
            &["tool", "call", "--agent", "pm", "messages.send", r#"{"recipient": "nobody", "body": "x"}"#, "--json"],
            2,
            "rejected",
        ),
        (&["tool", "call", "--agent", "pm", "nothing.here", "--json"], 2, "invalid_input"),
        (&["show", "act_ffff", "--json"], 2, "invalid_input"),
    ];
    for (args, code, kind) in cases {
        let mut full = args.to_vec();
        let at = if args[0] == "tool" { 2 } else { 1 };
        full.insert(at, dir);
        let out = suzumio(&repo_root(), &full);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", text(&out.stderr));
        let error: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_eq!(error["error"]["kind"], kind, "{args:?}: {error}");
        assert_eq!(error["error"]["exitCode"], code, "{args:?}: {error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert_eq!(text(&out.stderr).lines().next().unwrap(), format!("error: {message}"), "{args:?}");
    }
    golden("error.json").assert_eq(&text(
        &suzumio(&repo_root(), &["tool", "call", dir, "--agent", "pm", "file.read", "{}", "--json"]).stdout,
    ));
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    support::wait_for(what, None, || done().then_some(()))
}

fn activations(dir: &str) -> Vec<Value> {
    serde_json::from_str(&run(dir, &["activations", "--json"], 0).0).unwrap()
}

#[test]
fn cancel_and_wake_reach_a_running_controller_in_another_process() {
    let project = project();
    let dir = project.dir.to_str().unwrap();
    let controller = Controller::start_with_env(
        &project.dir,
        &[],
        &[("SUZUMIO_RUNNER_BIN", support::runner_binary().to_str().unwrap())],
    );
    run(dir, &["send", "reviewer", "the slow job"], 0);
    wait_for("the slow shell call", || {
        let calls = run(dir, &["logs", "--agent", "reviewer", "--type", "tool_call.started"], 0).0;
        calls.contains("shell.exec")
    });
    let (none, _) = run(dir, &["cancel", "pm"], 0);
    assert_eq!(none, "pm: no running activation\n");

    let (out, _) = run(dir, &["cancel", "reviewer", "--json"], 0);
    let cancelled: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(cancelled["cancelled"], true);
    let id = cancelled["activationId"].as_str().unwrap().to_string();
    // The controller's loop stops the activation: its runner's `sleep 30` is killed and it
    // records nothing more for the activation.
    wait_for("the controller to stop the activation", || controller.stderr().contains("stopping it"));
    let a = activations(dir).into_iter().find(|a| a["id"] == id.as_str()).unwrap();
    assert_eq!((a["status"].as_str(), a["error"].as_str()), (Some("cancelled"), Some("cancelled by the user")));
    let timeline: Value = serde_json::from_str(&run(dir, &["show", &id, "--json"], 0).0).unwrap();
    let call = timeline["items"].as_array().unwrap().iter().find(|i| i["tool"] == "shell.exec").unwrap().clone();
    assert_eq!(
        (call["status"].as_str(), call["error"].as_str()),
        (Some("failed"), Some("its activation was cancelled: cancelled by the user")),
        "{timeline}"
    );
    wait_for("the sleep to be killed", || {
        let ps = std::process::Command::new("pgrep").args(["-f", "sleep 30; echo late"]).output().unwrap();
        ps.stdout.is_empty()
    });

    // Wake: a P1 message from the user starts the idle pm.
    let (out, _) = run(dir, &["wake", "pm", "--json"], 0);
    let sent: Value = serde_json::from_str(&out).unwrap();
    let signal = sent["signalIds"][0].as_str().unwrap().to_string();
    wait_for("the woken activation", || {
        activations(dir).iter().any(|a| a["agentId"] == "pm" && a["signalIds"][0] == signal.as_str())
    });
    let signals: Vec<Value> = serde_json::from_str(&run(dir, &["signals", "--agent", "pm", "--json"], 0).0).unwrap();
    let s = signals.iter().find(|s| s["id"] == signal.as_str()).unwrap();
    assert_eq!(
        (s["priority"].as_str(), s["payload"]["body"].as_str()),
        (Some("P1"), Some(suzumio::commands::WAKE_BODY))
    );
    assert_eq!(controller.stop(), Some(0));
}

#[test]
fn logs_follow_shows_events_another_process_writes() {
    let project = project();
    let dir = project.dir.to_str().unwrap();
    run(dir, &["send", "pm", "before"], 0);
    let mut follow = std::process::Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["logs", dir, "-f", "--type", "message.created", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let stdout = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let first: Value = serde_json::from_str(&lines.recv_timeout(Duration::from_secs(20)).unwrap()).unwrap();
    assert_eq!(first["type"], "message.created", "the newest events come first: {first}");
    let (sent, _) = run(dir, &["send", "pm", "after"], 0);
    let id = sent.split_whitespace().nth(1).unwrap().to_string();
    let next: Value = serde_json::from_str(&lines.recv_timeout(Duration::from_secs(10)).unwrap()).unwrap();
    assert_eq!(next["data"]["messageId"], id.as_str(), "{next}");
    let _ = std::process::Command::new("kill").args(["-INT", &follow.id().to_string()]).status();
    let status = follow.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_p1_sent_during_a_tool_call_shows_in_the_timeline_after_that_call() {
    let project = project();
    let dir = project.dir.to_str().unwrap();
    let controller = Controller::start_with_env(
        &project.dir,
        &[],
        &[("SUZUMIO_RUNNER_BIN", support::runner_binary().to_str().unwrap())],
    );
    let (job, _) = run(dir, &["send", "reviewer", "the boundary job", "--json"], 0);
    let job = serde_json::from_str::<Value>(&job).unwrap()["signalIds"][0].clone();
    wait_for("the shell call", || {
        run(dir, &["logs", "--agent", "reviewer", "--type", "tool_call.started"], 0).0.contains("shell.exec")
    });
    let (sent, _) = run(dir, &["send", "reviewer", "--priority", "P1", "news", "--json"], 0);
    let signal = serde_json::from_str::<Value>(&sent).unwrap()["signalIds"][0].as_str().unwrap().to_string();
    let of_job = || activations(dir).into_iter().find(|a| a["signalIds"][0] == job).unwrap();
    wait_for("the activation to end", || of_job()["status"] == "completed");
    let id = of_job()["id"].clone();
    let timeline: Value = serde_json::from_str(&run(dir, &["show", id.as_str().unwrap(), "--json"], 0).0).unwrap();
    let items = timeline["items"].as_array().unwrap();
    let order: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert_eq!(order, ["prompt", "model_turn", "tool_call", "signals", "model_turn", "ended"], "{timeline}");
    assert_eq!(items[3]["delivery"], "tool_boundary");
    assert_eq!(items[3]["signals"][0]["id"], signal.as_str());
    assert_eq!(items[3]["signals"][0]["body"], "news");
    let (shown, _) = run(dir, &["show", id.as_str().unwrap()], 0);
    assert!(shown.contains("(tool_boundary):\n") && shown.contains("P1 message.created from user: news"), "{shown}");
    assert_eq!(controller.stop(), Some(0));
}

#[test]
fn tick_json_says_what_a_tick_did() {
    let project = project();
    let dir = project.dir.to_str().unwrap();
    let (idle, _) = run(dir, &["tick", "--json"], 0);
    golden("review.tick.initialized.json").assert_eq(&idle);
    run(dir, &["start"], 0);
    run(dir, &["send", "pm", "hello"], 0);
    let (ticked, _) = run(dir, &["tick", "--json"], 0);
    let ticked: Value = serde_json::from_str(&ticked).unwrap();
    assert_eq!(ticked["ran"], true);
    assert_eq!(ticked["started"][0]["agentId"], "pm", "{ticked}");
}

/// Regression: a deferred tool called before `tool_search` loaded it has no record, and `show`
/// gave it the record of the later call that ran — a success under the refused call, and the
/// refusal's text under the call that succeeded. Each call now gets its own record, or none.
#[test]
fn show_pairs_each_call_with_its_own_record_when_a_deferred_tool_was_called_too_soon() {
    let script = r#"
activations:
  - agent: reviewer
    steps:
      - call: [{tool: file.write, input: {path: "/workspace/early.md", content: "too soon"}}]
      - call: [{tool: tool_search, input: {mode: activate, names: [file.write]}}]
      - call: [{tool: file.write, input: {path: "/workspace/notes.md", content: "LGTM"}}]
      - say: "Noted."
"#;
    let project = TempProject::scripted(
        "review",
        script,
        &[("  reviewer:\n    tools:", "  reviewer:\n    toolLoading: deferred\n    tools:")],
    );
    let dir = project.dir.to_str().unwrap();
    run(dir, &["send", "reviewer", "Write the notes."], 0);
    let (progress, _) = run_until_idle(dir);
    assert!(
        progress.lines().any(|l| l.starts_with("reviewer: file.write rejected: file.write is not loaded yet")),
        "{progress}"
    );
    let (json, _) = run(dir, &["activations", "--json", "--agent", "reviewer"], 0);
    // Newest first: the one the message started is the oldest.
    let list: Value = serde_json::from_str(&json).unwrap();
    let id = list.as_array().unwrap().last().unwrap()["id"].as_str().unwrap().to_string();
    let (timeline, _) = run(dir, &["show", &id, "--json"], 0);
    let timeline: Value = serde_json::from_str(&timeline).unwrap();
    let calls: Vec<&Value> =
        timeline["items"].as_array().unwrap().iter().filter(|i| i["kind"] == "tool_call").collect();
    let shape: Vec<(&str, &str, Option<&str>, bool)> = calls
        .iter()
        .map(|c| {
            (c["tool"].as_str().unwrap(), c["status"].as_str().unwrap(), c["errorKind"].as_str(), c["id"].is_string())
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("file_write", "failed", Some("rejected"), false),
            ("tool_search", "completed", None, true),
            ("file.write", "completed", None, true),
        ],
        "{timeline:#}"
    );
    assert!(calls[0]["error"].as_str().unwrap().contains("is not loaded yet"), "{timeline:#}");
    assert_eq!(calls[0]["output"], Value::Null);
    assert_eq!(calls[2]["input"]["path"], "/workspace/notes.md");
    assert!(calls[2]["output"]["output"].as_str().unwrap().contains("notes.md"), "{timeline:#}");
    assert_eq!(timeline["toolCalls"], serde_json::json!({"total": 3, "failed": 0, "rejected": 1}));
    let (shown, _) = run(dir, &["show", &id], 0);
    assert!(shown.contains("; 3 tool call(s), 1 rejected\n"), "{shown}");
}
