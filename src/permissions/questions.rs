//! Questions an agent asks the user (`ask_user`): the question is stored, the activation is
//! parked (`waiting_user`) until someone answers it (CLI, API, WebUI, an MCP client's
//! elicitation) or the agent's `approvalTimeout` passes, and the answer goes back to the model
//! as the tool's result. This module stores and waits, as `approvals` does for a call that
//! needs approval; it never runs a call (the handler of `ask_user` in `support::builtin_tools`
//! is its only caller).
//!
//! The same `permissions.onAsk` / `approvalTimeout` as for approvals apply: `wait` parks until
//! the deadline, `deny` answers at once; either way, when nobody answered, the question's
//! `default` is the answer (and the result says nobody gave it), or the model gets a clear
//! failure it can act on. The wait spends no model tokens and holds no lock; it looks at the
//! question's row on every store event of this process and at least every
//! [`approvals::POLL`](super::approvals::POLL), so an answer written by another process is seen
//! within a second, and the deadline (the stored one, also after a restart) on the same beat.
//! A resumed activation (after a crash or a stop) makes the call again and adopts the question
//! it asked before instead of asking twice. A P0 ends a parked activation; its question is
//! cancelled with it (`Store::finish_activation`).

use serde_json::{Value, json};

use super::OnAsk;
use super::approvals::{Approvals, POLL};
use super::audit::{AuditEntry, EntryKind};
use crate::store::{NewQuestion, QuestionRecord, QuestionStatus};
use crate::toolpack::ToolError;
use crate::toolpack::output::ToolOutput;

/// The built-in tool's name.
pub const TOOL: &str = "ask_user";

/// Who closes a question whose deadline passed.
const TIMEOUT: &str = "timeout";
/// Who closes a question nobody may be asked.
const NOBODY: &str = "permissions.onAsk: deny";

/// The question an `ask_user` call asks, checked beyond its schema: a question, distinct
/// non-empty choices, and a default that is one of them when there are choices.
struct Asked {
    question: String,
    choices: Vec<String>,
    default: Option<String>,
}

fn parse(input: &Value) -> Result<Asked, ToolError> {
    let bad = |why: String| ToolError::Rejected(format!("Invalid input for {TOOL}: {why}"));
    let question = input.get("question").and_then(Value::as_str).map(str::trim).unwrap_or_default();
    if question.is_empty() {
        return Err(bad("/question must be a non-empty question".into()));
    }
    let mut choices = Vec::new();
    for (i, c) in input.get("choices").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let c = c.as_str().map(str::trim).unwrap_or_default();
        if c.is_empty() {
            return Err(bad(format!("/choices/{i} must be a non-empty string")));
        }
        if choices.iter().any(|k| k == c) {
            return Err(bad(format!("/choices/{i} repeats the choice `{c}`")));
        }
        choices.push(c.to_string());
    }
    let default = input.get("default").and_then(Value::as_str).map(str::trim).map(str::to_string);
    if let Some(d) = &default {
        if d.is_empty() {
            return Err(bad("/default must be a non-empty string".into()));
        }
        if !choices.is_empty() && !choices.contains(d) {
            return Err(bad(format!("/default `{d}` must be one of the choices ({})", choices.join(", "))));
        }
    }
    Ok(Asked { question: question.to_string(), choices, default })
}

/// Asks the user `input`'s question for `agent_id`'s activation and waits for the answer: the
/// tool's result (`{answer, choice?, answeredBy}` as structured content), or a failure saying
/// nobody answered and what to do.
pub async fn ask(
    host: Approvals<'_>,
    agent_id: &str,
    activation_id: &str,
    input: &Value,
) -> Result<ToolOutput, ToolError> {
    let asked = parse(input)?;
    let store = host.store;
    let agent =
        host.project.config.agent(agent_id).ok_or_else(|| ToolError::Rejected(format!("Unknown agent: {agent_id}")))?;
    let policy = super::ask_policy(host.project, agent);
    let question = match store.adoptable_question(activation_id, input)? {
        Some(q) => q,
        None => {
            let timeout = chrono::Duration::from_std(policy.timeout).unwrap_or(chrono::Duration::MAX);
            let expires = store.now().checked_add_signed(timeout).unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
            store.ask_question(NewQuestion {
                agent_id,
                activation_id,
                tool_call_id: None,
                question: &asked.question,
                choices: &asked.choices,
                default: asked.default.as_deref(),
                input,
                expires_at: crate::clock::iso(expires),
            })?
        }
    };
    let closed = if question.status != QuestionStatus::Pending {
        question
    } else if policy.on_ask == OnAsk::Deny {
        let reason = "nobody is asked here (permissions.onAsk: deny)";
        match store.close_unanswered(&question.id, NOBODY, reason)? {
            Some(q) => q,
            None => reread(host, &question.id)?,
        }
    } else {
        wait(host, &question).await?
    };
    store.consume_question(&closed.id)?;
    audit(host, agent.permission_mode.as_str(), &closed, input);
    result(&closed)
}

fn reread(host: Approvals<'_>, id: &str) -> Result<QuestionRecord, ToolError> {
    host.store.question(id)?.ok_or_else(|| ToolError::Internal(format!("question {id} vanished")))
}

/// Waits until the question is answered or closed, closing it at its deadline. The activation
/// is `waiting_user` meanwhile, `running` again once it returns.
async fn wait(host: Approvals<'_>, question: &QuestionRecord) -> Result<QuestionRecord, ToolError> {
    let store = host.store;
    let mut events = store.subscribe();
    let mut parked = false;
    let closed = loop {
        let current = reread(host, &question.id)?;
        if current.status != QuestionStatus::Pending {
            break current;
        }
        if !parked {
            store.set_waiting_user(&question.activation_id, true)?;
            parked = true;
        }
        if current.expires_at <= store.now() {
            let waited = (current.expires_at - current.created_at).to_std().unwrap_or_default();
            let reason = format!("nobody answered within {} (permissions.approvalTimeout)", humane(waited));
            match store.close_unanswered(&current.id, TIMEOUT, &reason)? {
                Some(closed) => break closed,
                None => continue,
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = events.recv() => {}
        }
    };
    if parked && let Err(e) = store.set_waiting_user(&question.activation_id, false) {
        // The activation ended while it waited (a P0 cancelled it in the same transaction as
        // the question): its loop is being dropped, nothing more may be recorded for it.
        tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        return Err(ToolError::Failed(format!("the question was not answered: its activation ended ({e})")));
    }
    Ok(closed)
}

/// What the model reads: the answer (with who gave it), or why there is none.
fn result(q: &QuestionRecord) -> Result<ToolOutput, ToolError> {
    let by = q.answered_by.clone().unwrap_or_default();
    let why = q.resolution_reason.as_deref().unwrap_or("nobody answered");
    match (q.status, &q.answer) {
        (QuestionStatus::Answered | QuestionStatus::Defaulted, Some(answer)) => {
            let defaulted = q.status == QuestionStatus::Defaulted;
            let output = if defaulted {
                format!("The user did not answer ({why}), so the default answer applies: {answer}")
            } else {
                format!("The user ({by}) answered: {answer}")
            };
            let mut structured = json!({ "answer": answer, "answeredBy": by });
            if let Some(choice) = q.choice {
                structured["choice"] = json!(choice);
            }
            if defaulted {
                structured["defaulted"] = json!(true);
            }
            Ok(ToolOutput {
                title: None,
                output,
                metadata: json!({ "questionId": q.id }).as_object().cloned(),
                structured_content: Some(structured),
                ..ToolOutput::default()
            })
        }
        (QuestionStatus::Cancelled | QuestionStatus::Expired, _) => {
            Err(ToolError::Failed(format!("Question {} was not answered: {why}.", q.id)))
        }
        _ => Err(ToolError::Failed(format!(
            "Nobody answered your question ({why}) and it has no default. Decide yourself if you can and say \
             what you assumed, or send the user a message (messages.send to \"user\") and carry on with other work."
        ))),
    }
}

/// The audit line of the question's answer (a person's, the deadline's or `onAsk`'s).
fn audit(host: Approvals<'_>, mode: &str, q: &QuestionRecord, input: &Value) {
    let action = match q.status {
        QuestionStatus::Answered => "answer",
        QuestionStatus::Defaulted => "default",
        QuestionStatus::Unanswered => "unanswered",
        QuestionStatus::Cancelled => "cancelled",
        QuestionStatus::Expired => "expired",
        QuestionStatus::Pending => "pending",
    };
    let answered = matches!(q.status, QuestionStatus::Answered | QuestionStatus::Defaulted);
    host.audit.record(AuditEntry {
        time: host.store.now(),
        kind: EntryKind::Answer,
        agent: q.agent_id.clone(),
        activation: Some(q.activation_id.clone()),
        call_id: q.tool_call_id.clone(),
        tool: TOOL.to_string(),
        mode: mode.to_string(),
        decision: if answered { super::Behavior::Allow } else { super::Behavior::Deny },
        source: format!("question {} by {}", q.id, q.answered_by.as_deref().unwrap_or("unknown")),
        reason: q.resolution_reason.clone().unwrap_or_else(|| "answered".into()),
        risk: None,
        user_action: Some(action.to_string()),
        feedback: q.answer.clone(),
        arguments: input.clone(),
    });
}

/// `d` to the nearest second, in the largest whole unit: the stored deadline is a moment
/// after the question's own time (both are read from the clock), so it is a hair short of the
/// timeout it was made with.
fn humane(d: std::time::Duration) -> String {
    let s = (d.as_millis() as u64).saturating_add(500) / 1000;
    match s {
        s if s >= 3600 && s % 3600 == 0 => format!("{} h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}
