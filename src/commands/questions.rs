//! `suzumio questions` (the questions agents asked, pending or all) and `suzumio answer` (answer
//! one, with text or `--choice N`). It writes to the project's store like the API does; the
//! waiting `ask_user` call sees the answer within a second (`permissions::questions`).

use std::fmt::Write as _;
use std::path::Path;

use super::{CliError, Output};
use crate::clock::iso;
use crate::permissions::approvals::cli_user;
use crate::store::{Answer, QuestionRecord, StoreError};

/// `questions`: pending questions (or all, newest 200, with `all`).
pub fn list(dir: &Path, all: bool, json: bool) -> Result<Output, CliError> {
    let tools = crate::controller::open_read_only(dir)?;
    let questions = tools.store.questions(!all, 200)?;
    if json {
        return Ok(format!("{}\n", serde_json::to_string_pretty(&questions).unwrap_or_default()).into());
    }
    if questions.is_empty() {
        return Ok(if all { "no questions\n" } else { "no open questions\n" }.to_string().into());
    }
    let mut out = String::new();
    for q in &questions {
        let _ = writeln!(out, "{}  {}  {}  {}", q.id, q.status, q.agent_id, q.question);
        for (i, choice) in q.choices.iter().enumerate() {
            let default = if q.default.as_deref() == Some(choice) { "  (default)" } else { "" };
            let _ = writeln!(out, "    {}. {choice}{default}", i + 1);
        }
        if let (Some(default), true) = (&q.default, q.choices.is_empty()) {
            let _ = writeln!(out, "    default: {default}");
        }
        let _ = writeln!(
            out,
            "    activation {}, asked {}, expires {}",
            q.activation_id,
            iso(q.created_at),
            iso(q.expires_at)
        );
        if let Some(by) = &q.answered_by {
            let answer = q.answer.as_deref().map(|a| format!(": {a}")).unwrap_or_default();
            let _ = writeln!(out, "    {} by {by}{answer}", q.status);
        }
    }
    Ok(out.into())
}

/// `answer <id> [text] [--choice N]`: `id` may be any unique prefix of the question's id (with
/// or without `q_`).
pub fn answer(dir: &Path, id: &str, text: Option<&str>, choice: Option<u32>) -> Result<Output, CliError> {
    let tools = crate::controller::open(dir)?;
    let by = cli_user();
    let id = tools.store.resolve_question_id(id).map_err(refused)?;
    let q = tools.store.answer_question(&id, &Answer { text, choice, by: &by }).map_err(refused)?;
    let choice = q.choice.map(|n| format!(" (choice {n})")).unwrap_or_default();
    Ok(format!("answered {} of {}: {}{choice}\n", q.id, q.agent_id, q.answer.unwrap_or_default()).into())
}

/// How `status` shows a waiting question.
pub fn waiting_line(q: &QuestionRecord) -> String {
    format!("waiting for an answer to \"{}\" (#{})", q.question, q.id)
}

fn refused(e: StoreError) -> CliError {
    match e {
        StoreError::UnknownQuestion(_) => {
            CliError::Input(format!("{e} (suzumio questions shows the open ones, with their ids)"))
        }
        StoreError::BadAnswer { .. } => CliError::Input(format!("{e} (suzumio questions lists the choices)")),
        StoreError::AmbiguousQuestion { .. } | StoreError::QuestionClosed { .. } => CliError::Input(e.to_string()),
        other => other.into(),
    }
}
