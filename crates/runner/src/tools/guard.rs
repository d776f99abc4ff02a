//! The agent's path rules as the runner applies them: to the path a tool actually opens, not
//! the one it was given. The controller decides on the given path (lexically) and sends the
//! `deny`/`ask` path rules that apply to the tool with the call ([`PathRule`]); here each one is
//! matched against the place an opened fd really is (`/proc/self/fd/N`, mapped back to a tool
//! path), and the tool then uses that same fd, so deciding and opening are one step and a link
//! swapped in afterwards changes nothing.
//!
//! - A resolved path a `deny` rule covers fails the call as `denied`.
//! - A resolved path an `ask` rule covers, when the call's own path did not meet that rule
//!   (the controller asked nothing), fails as `denied` too, saying that the resolved path needs
//!   approval: the runner cannot ask mid-call, and a call of the resolved path itself is asked
//!   for by the controller as usual.
//! - A walk withholds the entries either kind of rule covers ([`Withheld`]) and says how many.
//!
//! This module decides; it opens nothing itself.

use std::os::fd::{AsFd, AsRawFd};

use crate::paths::Roots;
use crate::rpc::{PathRule, PathRuleDecision};
use crate::toolpack::ToolError;

/// The path rules of one call.
#[derive(Clone, Debug, Default)]
pub struct PathGuard {
    rules: Vec<PathRule>,
}

/// Why a resolved path may not be used.
pub(super) enum Refusal<'a> {
    Denied(&'a PathRule),
    NeedsApproval(&'a PathRule),
}

/// Where a directory whose entries are checked really is.
pub(super) enum Place {
    /// No rules: nothing is checked.
    Unchecked,
    /// It cannot be told: every entry is withheld.
    Unknown,
    /// Its tool path.
    At(String),
}

/// What a walk left out because of the rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Withheld {
    pub denied: u64,
    pub needs_approval: u64,
}

impl Withheld {
    pub(super) fn count(&mut self, refusal: &Refusal<'_>) {
        match refusal {
            Refusal::Denied(_) => self.denied += 1,
            Refusal::NeedsApproval(_) => self.needs_approval += 1,
        }
    }

    /// The line a walk's output ends with, when it withheld anything.
    pub(super) fn note(&self) -> Option<String> {
        let entries = |n: u64| if n == 1 { "1 entry".to_string() } else { format!("{n} entries") };
        let mut notes = Vec::new();
        if self.denied > 0 {
            notes.push(format!("[{} withheld by permission rules]", entries(self.denied)));
        }
        if self.needs_approval > 0 {
            notes.push(format!(
                "[{} withheld: a permission rule asks a person to approve them; name one in its own call to ask]",
                entries(self.needs_approval)
            ));
        }
        (!notes.is_empty()).then(|| notes.join("\n"))
    }
}

impl PathGuard {
    pub fn new(rules: Vec<PathRule>) -> PathGuard {
        PathGuard { rules }
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// A rule to name when where a path leads cannot be told at all.
    pub(super) fn any_rule(&self) -> Option<&PathRule> {
        self.rules.first()
    }

    /// The rule that refuses the resolved tool path `resolved`, `deny` before `ask`; an `ask`
    /// rule the call was approved under refuses nothing.
    pub(super) fn refusal(&self, resolved: &str) -> Option<Refusal<'_>> {
        let covering = |d: PathRuleDecision| self.rules.iter().find(|r| r.decision == d && r.covers(resolved));
        if let Some(rule) = covering(PathRuleDecision::Deny) {
            return Some(Refusal::Denied(rule));
        }
        self.rules
            .iter()
            .find(|r| r.decision == PathRuleDecision::Ask && !r.asked && r.covers(resolved))
            .map(Refusal::NeedsApproval)
    }

    /// Fails with `denied` when a rule refuses `resolved`, the place `given` (as the call
    /// named it) really is.
    pub(super) fn check(&self, given: &str, resolved: &str) -> Result<(), ToolError> {
        let Some(refusal) = self.refusal(resolved) else { return Ok(()) };
        let normalized = Roots::normalize(given);
        let what = if normalized == resolved {
            resolved.to_string()
        } else {
            format!("`{given}` resolves to {resolved}, which")
        };
        Err(ToolError::Denied(match refusal {
            Refusal::Denied(rule) if normalized == resolved => format!(
                "Permission denied: {what} is denied by {}. Do not retry the same call; choose another way, or ask the user to change the permissions.",
                rule.source
            ),
            Refusal::Denied(rule) => format!(
                "Permission denied: {what} {} denies. Do not retry the same call; choose another way, or ask the user to change the permissions.",
                rule.source
            ),
            Refusal::NeedsApproval(rule) => format!(
                "Permission needed: {what} needs a person's approval ({} asks for it), and this call was not approved for it. Call the tool again with the path {resolved} itself to ask for approval.",
                rule.source
            ),
        }))
    }

    /// Where the open `fd` really is, as a tool path: what the kernel resolved when it was
    /// opened, whatever has been renamed or relinked since. `None` if it is not under a root.
    pub(super) fn real_path(roots: &Roots, fd: impl AsFd) -> Option<String> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())).ok()?;
        roots.tool_path_of(&link)
    }

    /// [`PathGuard::check`] of the place `fd` (opened for `given`) is. Without rules nothing
    /// is read; a place that cannot be told is refused, since a rule might cover it.
    pub(super) fn check_fd(&self, roots: &Roots, given: &str, fd: impl AsFd) -> Result<(), ToolError> {
        self.check_fd_child(roots, given, fd, None)
    }

    /// [`PathGuard::check`] of `child` in the directory `dir` (or of `dir` itself).
    pub(super) fn check_fd_child(
        &self,
        roots: &Roots,
        given: &str,
        dir: impl AsFd,
        child: Option<&str>,
    ) -> Result<(), ToolError> {
        if self.is_empty() {
            return Ok(());
        }
        let Some(real) = PathGuard::real_path(roots, dir) else {
            return Err(ToolError::Denied(format!(
                "Permission denied: cannot tell where `{given}` resolves to, so the permission rules cannot be checked"
            )));
        };
        let resolved = match child {
            Some(rest) if !rest.is_empty() => Roots::normalize(&format!("{real}/{rest}")),
            _ => real,
        };
        self.check(given, &resolved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(decision: PathRuleDecision, glob: &str, asked: bool) -> PathRule {
        PathRule { decision, paths: vec![glob.into()], source: "project rule 1 (suzumio.yaml:3)".into(), asked }
    }

    #[test]
    fn a_resolved_path_is_refused_by_deny_then_by_an_ask_not_approved() {
        let guard = PathGuard::new(vec![
            rule(PathRuleDecision::Ask, "notes/**", false),
            rule(PathRuleDecision::Deny, "secrets/**", false),
            rule(PathRuleDecision::Ask, "approved/**", true),
        ]);
        assert!(matches!(guard.refusal("/workspace/secrets/k"), Some(Refusal::Denied(_))));
        assert!(matches!(guard.refusal("/workspace/notes/a"), Some(Refusal::NeedsApproval(_))));
        assert!(guard.refusal("/workspace/approved/a").is_none());
        assert!(guard.refusal("/workspace/src/a").is_none());
    }

    #[test]
    fn the_denial_names_the_link_the_resolved_path_and_the_rule() {
        let guard = PathGuard::new(vec![rule(PathRuleDecision::Deny, "/workspace/secrets/**", false)]);
        let err = guard.check("slink/k", "/workspace/secrets/k").unwrap_err();
        assert_eq!(err.kind(), "denied");
        assert!(
            err.message().starts_with(
                "Permission denied: `slink/k` resolves to /workspace/secrets/k, which project rule 1 (suzumio.yaml:3) denies."
            ),
            "{err}"
        );
        let err = guard.check("secrets/k", "/workspace/secrets/k").unwrap_err();
        assert!(
            err.message().starts_with("Permission denied: /workspace/secrets/k is denied by project rule 1"),
            "{err}"
        );
    }

    #[test]
    fn withheld_notes_count_entries() {
        let mut withheld = Withheld::default();
        assert_eq!(withheld.note(), None);
        withheld.denied = 2;
        assert_eq!(withheld.note().as_deref(), Some("[2 entries withheld by permission rules]"));
        withheld.needs_approval = 1;
        assert!(withheld.note().unwrap_or_default().ends_with(
            "[1 entry withheld: a permission rule asks a person to approve them; name one in its own call to ask]"
        ));
    }
}
