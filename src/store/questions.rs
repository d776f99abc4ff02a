//! Durable questions an agent asks the user (`ask_user`): their rows, the activation's
//! `waiting_user` status while one waits, and the events (`question.asked`, `question.answered`)
//! written with each change.
//!
//! Answering is one transaction that only a pending question passes, so the CLI, the API, the
//! WebUI, an MCP client and the deadline can race and exactly one of them answers; the answer
//! is checked against the question's choices there ([`check_answer`]), whichever channel gave
//! it. `consumed_at` marks the question whose answer went back to the model: an activation
//! resumed after a restart adopts its unconsumed question (same activation, same input) instead
//! of asking again. A question no one can continue after a restart is `expired`.
//! This module records; waiting is `permissions::questions`'.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;
use serde_json::Value;

use chrono::{DateTime, Utc};

use crate::store::{Event, Store, StoreError, WriteTx, new_id, opt_time_column, time_column};

/// Where a question is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, strum::EnumString, strum::Display, strum::IntoStaticStr)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum QuestionStatus {
    Pending,
    /// A person answered it.
    Answered,
    /// Nobody answered (the deadline passed, or `onAsk: deny`): its default is the answer.
    Defaulted,
    /// Nobody answered and it has no default: the model is told so.
    Unanswered,
    /// Its activation ended first (a P0, a failure).
    Cancelled,
    /// Its caller ended with the controller and nothing can continue it.
    Expired,
}

/// One question, with its answer once there is one.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuestionRecord {
    pub id: String,
    pub agent_id: String,
    pub activation_id: String,
    pub tool_call_id: Option<String>,
    pub question: String,
    /// The answers offered (empty: any text).
    pub choices: Vec<String>,
    pub default: Option<String>,
    pub status: QuestionStatus,
    #[serde(with = "crate::clock::iso_serde")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "crate::clock::iso_serde")]
    pub expires_at: DateTime<Utc>,
    #[serde(with = "crate::clock::iso_serde::option")]
    pub answered_at: Option<DateTime<Utc>>,
    /// `cli (alice)`, `webui`, `api`, `mcp:<client>`, `timeout`, `permissions.onAsk: deny`.
    pub answered_by: Option<String>,
    pub answer: Option<String>,
    /// The number of the choice answered, counting from 1.
    pub choice: Option<u32>,
    /// Why nobody's answer came (deadline, `onAsk: deny`, activation ended).
    pub resolution_reason: Option<String>,
    #[serde(with = "crate::clock::iso_serde::option")]
    pub consumed_at: Option<DateTime<Utc>>,
}

/// A question to record.
pub struct NewQuestion<'a> {
    pub agent_id: &'a str,
    pub activation_id: &'a str,
    pub tool_call_id: Option<&'a str>,
    pub question: &'a str,
    pub choices: &'a [String],
    pub default: Option<&'a str>,
    /// The call's whole input: what a resumed call is matched by.
    pub input: &'a Value,
    pub expires_at: String,
}

/// A person's answer: free text, a choice's number (from 1), or both (they must agree).
pub struct Answer<'a> {
    pub text: Option<&'a str>,
    pub choice: Option<u32>,
    /// `cli (alice)`, `webui`, `api`, `mcp:<client>`.
    pub by: &'a str,
}

/// The longest answer kept (it goes back to the model whole).
pub const MAX_ANSWER_CHARS: usize = 10_000;

/// The answer a question takes from `answer`, as `(text, choice)`, or which field is wrong and
/// why (`/answer`, `/choice`): with choices, the answer must be one of them (by its number or
/// its exact text); without, any non-empty text up to [`MAX_ANSWER_CHARS`].
pub fn check_answer(
    question: &QuestionRecord,
    text: Option<&str>,
    choice: Option<u32>,
) -> Result<(String, Option<u32>), (&'static str, String)> {
    let text = text.map(str::trim).filter(|t| !t.is_empty());
    let listed =
        || question.choices.iter().enumerate().map(|(i, c)| format!("{} = {c}", i + 1)).collect::<Vec<_>>().join(", ");
    if question.choices.is_empty() {
        if choice.is_some() {
            return Err(("/choice", "this question has no choices; answer with text".into()));
        }
        let text = text.ok_or(("/answer", "an answer is required (non-empty text)".to_string()))?;
        if text.chars().count() > MAX_ANSWER_CHARS {
            return Err(("/answer", format!("an answer is at most {MAX_ANSWER_CHARS} characters")));
        }
        return Ok((text.to_string(), None));
    }
    let by_choice = match choice {
        None => None,
        Some(n) => match question.choices.get((n as usize).wrapping_sub(1)) {
            Some(c) if n >= 1 => Some((c.clone(), n)),
            _ => return Err(("/choice", format!("must be the number of one of the choices ({})", listed()))),
        },
    };
    let by_text = match text {
        None => None,
        Some(t) => match question.choices.iter().position(|c| c == t) {
            Some(i) => Some((t.to_string(), i as u32 + 1)),
            None => {
                return Err((
                    "/answer",
                    format!("must be one of the choices ({}), or give the choice's number", listed()),
                ));
            }
        },
    };
    match (by_choice, by_text) {
        (Some(a), Some(b)) if a != b => Err(("/answer", format!("names choice {} but choice {} was given", b.1, a.1))),
        (Some((t, n)), _) | (None, Some((t, n))) => Ok((t, Some(n))),
        (None, None) => Err(("/answer", format!("give one of the choices ({}) or its number", listed()))),
    }
}

const COLUMNS: &str = "id, agent_id, activation_id, tool_call_id, question, choices_json, default_answer, status, \
     created_at, expires_at, answered_at, answered_by, answer, choice, resolution_reason, consumed_at";

// The statements an `ask_user` call runs (`query_plans` holds each to an index): each finds
// its rows through the activation or the id.

/// The questions of one call that can be adopted (asked before a restart, not yet consumed),
/// among the (few) of its activation: the oldest is picked in Rust (see `adoptable_question`),
/// so that no temporary B-tree orders them.
pub(super) fn adoptable_questions() -> String {
    format!(
        "SELECT {COLUMNS} FROM questions
         WHERE activation_id = ?1 AND input_json = ?2 AND consumed_at IS NULL
           AND status NOT IN ('cancelled', 'expired')"
    )
}
pub(super) fn pending_questions_of_activation() -> String {
    format!("SELECT {COLUMNS} FROM questions WHERE activation_id = ?1 AND status = 'pending' ORDER BY created_at, id")
}
pub(super) fn question_by_id() -> String {
    format!("SELECT {COLUMNS} FROM questions WHERE id = ?1")
}
pub(super) const CONSUME_QUESTION: &str = "UPDATE questions SET consumed_at = ?2 WHERE id = ?1 AND consumed_at IS NULL";
pub(super) const ANSWER_QUESTION: &str = "UPDATE questions SET status = ?2, answered_at = ?3, answered_by = ?4,
     answer = ?5, choice = ?6, resolution_reason = ?7 WHERE id = ?1 AND status = 'pending'";

impl Store {
    /// Record a pending question (and its `question.asked` event).
    pub fn ask_question(&self, new: NewQuestion<'_>) -> Result<QuestionRecord, StoreError> {
        self.write(|w| {
            let id = new_id("q");
            let choices = (!new.choices.is_empty()).then(|| serde_json::to_string(new.choices).unwrap_or_default());
            w.tx.execute(
                "INSERT INTO questions (id, agent_id, activation_id, tool_call_id, question, choices_json,
                     default_answer, input_json, status, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'pending', ?9, ?10)",
                params![
                    id,
                    new.agent_id,
                    new.activation_id,
                    new.tool_call_id,
                    new.question,
                    choices,
                    new.default,
                    new.input.to_string(),
                    w.now,
                    new.expires_at.as_str()
                ],
            )?;
            w.event(Event::QuestionAsked {
                question_id: id.clone(),
                agent_id: new.agent_id.into(),
                activation_id: new.activation_id.into(),
                question: new.question.into(),
                choices: new.choices.to_vec(),
                default: new.default.map(str::to_string),
                expires_at: new.expires_at.clone(),
            })?;
            question_row(w.tx, &id)?.ok_or(StoreError::UnknownQuestion(id))
        })
    }

    pub fn question(&self, id: &str) -> Result<Option<QuestionRecord>, StoreError> {
        self.read(|conn| Ok(question_row(conn, id)?))
    }

    /// Questions, oldest first: only pending ones, or all (newest `limit`).
    pub fn questions(&self, pending_only: bool, limit: usize) -> Result<Vec<QuestionRecord>, StoreError> {
        let limit = limit.clamp(1, super::MAX_LIMIT) as i64;
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT * FROM (SELECT {COLUMNS} FROM questions
                   WHERE (?1 = 0 OR status = 'pending') ORDER BY created_at DESC, id DESC LIMIT ?2)
                 ORDER BY created_at, id"
            ))?;
            let rows = stmt.query_map(params![pending_only as i64, limit], question_from_row)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }

    /// The question whose id is `id_or_prefix`, or the only one whose id starts with it (with
    /// or without the `q_`).
    pub fn resolve_question_id(&self, id_or_prefix: &str) -> Result<String, StoreError> {
        let matches = self.read(|conn| Ok(super::ids_starting(conn, super::Shortened::Questions, id_or_prefix)?))?;
        match matches.as_slice() {
            [] => Err(StoreError::UnknownQuestion(id_or_prefix.to_string())),
            [one] => Ok(one.clone()),
            _ => Err(StoreError::AmbiguousQuestion { prefix: id_or_prefix.to_string(), matches }),
        }
    }

    /// The oldest question of `activation_id` for this exact call input whose answer has not
    /// gone back to the model yet (asked before a restart).
    pub fn adoptable_question(&self, activation_id: &str, input: &Value) -> Result<Option<QuestionRecord>, StoreError> {
        let found: Vec<QuestionRecord> = self.read(|conn| {
            let mut stmt = conn.prepare_cached(&adoptable_questions())?;
            let rows = stmt.query_map(params![activation_id, input.to_string()], question_from_row)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })?;
        Ok(found.into_iter().min_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id))))
    }

    /// A person's answer to a pending question, checked against its choices.
    pub fn answer_question(&self, id: &str, answer: &Answer<'_>) -> Result<QuestionRecord, StoreError> {
        self.write(|w| {
            let q = question_row(w.tx, id)?.ok_or_else(|| StoreError::UnknownQuestion(id.to_string()))?;
            if q.status != QuestionStatus::Pending {
                return Err(StoreError::QuestionClosed { id: id.to_string(), status: q.status.to_string() });
            }
            let (text, choice) = check_answer(&q, answer.text, answer.choice)
                .map_err(|(field, reason)| StoreError::BadAnswer { id: id.to_string(), field, reason })?;
            w.close_question(&q, QuestionStatus::Answered, answer.by, Some(&text), choice, None)
        })
    }

    /// Nobody answered (its deadline passed, or nobody may be asked): the default answers, or
    /// it stays unanswered, with `reason`. `None` when it was answered in the meantime.
    pub fn close_unanswered(&self, id: &str, by: &str, reason: &str) -> Result<Option<QuestionRecord>, StoreError> {
        self.write(|w| {
            let Some(q) = question_row(w.tx, id)? else { return Ok(None) };
            if q.status != QuestionStatus::Pending {
                return Ok(None);
            }
            let choice = q.default.as_ref().and_then(|d| q.choices.iter().position(|c| c == d)).map(|i| i as u32 + 1);
            let status = if q.default.is_some() { QuestionStatus::Defaulted } else { QuestionStatus::Unanswered };
            Ok(Some(w.close_question(&q, status, by, q.default.as_deref(), choice, Some(reason))?))
        })
    }

    /// The question's answer went back to the model.
    pub fn consume_question(&self, id: &str) -> Result<(), StoreError> {
        self.write(|w| {
            w.tx.execute(CONSUME_QUESTION, params![id, w.now])?;
            Ok(())
        })
    }

    /// Park a running activation on a question (`waiting_user`) or take it back to `running`.
    pub fn set_waiting_user(&self, activation_id: &str, waiting: bool) -> Result<(), StoreError> {
        let (from, to) = if waiting { ("running", "waiting_user") } else { ("waiting_user", "running") };
        self.write(|w| {
            let status: Option<String> =
                w.tx.query_row(super::approvals::ACTIVATION_STATUS, [activation_id], |r| r.get(0)).optional()?;
            match status.as_deref() {
                None => Err(StoreError::UnknownActivation(activation_id.to_string())),
                Some(s) if s == to => Ok(()),
                Some(s) if s == from => {
                    w.tx.execute(super::approvals::SET_ACTIVATION_STATUS, params![activation_id, to])?;
                    Ok(())
                }
                Some(s) => Err(StoreError::ActivationNotRunning { id: activation_id.to_string(), status: s.into() }),
            }
        })
    }
}

impl WriteTx<'_> {
    /// Pending questions of an activation that ended are cancelled: nobody waits for them.
    pub(crate) fn cancel_pending_questions(&mut self, activation_id: &str, reason: &str) -> Result<(), StoreError> {
        self.end_pending_questions(activation_id, QuestionStatus::Cancelled, "controller", reason)
    }

    /// Pending questions whose caller ended with a previous controller and that nothing can
    /// continue (no model loop to resume): `expired`.
    pub(crate) fn expire_pending_questions(&mut self, activation_id: &str) -> Result<(), StoreError> {
        let reason =
            super::approvals::restart_reason(&self.now).replace("the call it asked for", "the call that asked it");
        self.end_pending_questions(activation_id, QuestionStatus::Expired, "controller restart", &reason)
    }

    fn end_pending_questions(
        &mut self,
        activation_id: &str,
        status: QuestionStatus,
        by: &str,
        reason: &str,
    ) -> Result<(), StoreError> {
        let pending: Vec<QuestionRecord> = {
            let mut stmt = self.tx.prepare_cached(&pending_questions_of_activation())?;
            let rows = stmt.query_map([activation_id], question_from_row)?;
            rows.collect::<Result<_, _>>()?
        };
        for q in pending {
            self.close_question(&q, status, by, None, None, Some(reason))?;
        }
        Ok(())
    }

    fn close_question(
        &mut self,
        q: &QuestionRecord,
        status: QuestionStatus,
        by: &str,
        answer: Option<&str>,
        choice: Option<u32>,
        reason: Option<&str>,
    ) -> Result<QuestionRecord, StoreError> {
        self.tx.execute(ANSWER_QUESTION, params![q.id, <&str>::from(status), self.now, by, answer, choice, reason])?;
        self.event(Event::QuestionAnswered {
            question_id: q.id.clone(),
            agent_id: q.agent_id.clone(),
            activation_id: q.activation_id.clone(),
            status: status.to_string(),
            answered_by: by.to_string(),
            answer: answer.map(str::to_string),
            choice,
        })?;
        question_row(self.tx, &q.id)?.ok_or_else(|| StoreError::UnknownQuestion(q.id.clone()))
    }
}

fn question_row(conn: &Connection, id: &str) -> rusqlite::Result<Option<QuestionRecord>> {
    conn.prepare_cached(&question_by_id())?.query_row([id], question_from_row).optional()
}

fn question_from_row(r: &Row<'_>) -> rusqlite::Result<QuestionRecord> {
    let choices: Option<String> = r.get(5)?;
    let choices = match choices {
        None => Vec::new(),
        Some(text) => serde_json::from_str(&text)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(5, rusqlite::types::Type::Text, Box::new(e)))?,
    };
    let status: String = r.get(7)?;
    Ok(QuestionRecord {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        activation_id: r.get(2)?,
        tool_call_id: r.get(3)?,
        question: r.get(4)?,
        choices,
        default: r.get(6)?,
        status: status
            .parse()
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(7, rusqlite::types::Type::Text, Box::new(e)))?,
        created_at: time_column(r, 8)?,
        expires_at: time_column(r, 9)?,
        answered_at: opt_time_column(r, 10)?,
        answered_by: r.get(11)?,
        answer: r.get(12)?,
        choice: r.get(13)?,
        resolution_reason: r.get(14)?,
        consumed_at: opt_time_column(r, 15)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question(choices: &[&str]) -> QuestionRecord {
        QuestionRecord {
            id: "q_1".into(),
            agent_id: "writer".into(),
            activation_id: "act_1".into(),
            tool_call_id: None,
            question: "Which?".into(),
            choices: choices.iter().map(|c| c.to_string()).collect(),
            default: None,
            status: QuestionStatus::Pending,
            created_at: Utc::now(),
            expires_at: Utc::now(),
            answered_at: None,
            answered_by: None,
            answer: None,
            choice: None,
            resolution_reason: None,
            consumed_at: None,
        }
    }

    #[test]
    fn an_answer_must_be_one_of_the_choices_by_text_or_number() {
        let q = question(&["red", "blue"]);
        assert_eq!(check_answer(&q, Some("blue"), None), Ok(("blue".into(), Some(2))));
        assert_eq!(check_answer(&q, None, Some(1)), Ok(("red".into(), Some(1))));
        assert_eq!(check_answer(&q, Some(" red "), Some(1)), Ok(("red".into(), Some(1))));
        assert_eq!(check_answer(&q, Some("Blue"), None).unwrap_err().0, "/answer");
        assert_eq!(check_answer(&q, None, Some(0)).unwrap_err().0, "/choice");
        assert_eq!(check_answer(&q, None, Some(3)).unwrap_err().0, "/choice");
        let (field, why) = check_answer(&q, Some("red"), Some(2)).unwrap_err();
        assert_eq!((field, why.as_str()), ("/answer", "names choice 1 but choice 2 was given"));
        assert_eq!(check_answer(&q, None, None).unwrap_err().0, "/answer");
    }

    #[test]
    fn a_free_question_takes_any_text_but_no_choice() {
        let q = question(&[]);
        assert_eq!(check_answer(&q, Some(" On rain "), None), Ok(("On rain".into(), None)));
        assert_eq!(check_answer(&q, Some("  "), None).unwrap_err().0, "/answer");
        assert_eq!(check_answer(&q, Some("x"), Some(1)).unwrap_err().0, "/choice");
        let long = "x".repeat(MAX_ANSWER_CHARS + 1);
        assert_eq!(check_answer(&q, Some(&long), None).unwrap_err().0, "/answer");
    }
}
