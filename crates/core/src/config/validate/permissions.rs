//! `permissions` (project level) and `agents.<id>.permissions` / `agents.<id>.permissionMode`:
//! allow/ask/deny rules with their argument matchers (path globs, command patterns, host
//! patterns), `onAsk`, `approvalTimeout`, and the tools whose calls go through packs' hooks.
//! Every pattern is compiled here, so a bad one is reported with its file:line by `check`; the
//! matching itself is the controller's (`src/permissions/`).

use crate::config::diag::Diagnostics;
use crate::config::model::*;
use crate::config::node::{Node, Value};
use crate::config::read::{Obj, Retired, index};

const PROJECT_KEYS: &[&str] = &["rules", "onAsk", "approvalTimeout", "hooks", "reviewer"];
const AGENT_KEYS: &[&str] = &["rules", "onAsk", "approvalTimeout"];
const AGENT_RETIRED: Retired = &[
    ("hooks", "hooks are set for the whole project, under the top-level permissions.hooks"),
    ("reviewer", "the reviewer is set for the whole project, under the top-level permissions.reviewer"),
];
const RULE_KEYS: &[&str] = &["tool", "decision", "reason", "paths", "commands", "hosts"];
const HOOK_KEYS: &[&str] = &["tools", "pack"];
const REVIEWER_KEYS: &[&str] = &["model", "timeout", "cacheTtl", "cacheSize", "turns"];
/// Bounds of the reviewer's cache and of the history it sees: past these, a verdict cache or a
/// prompt would grow without use.
const MAX_CACHE_SIZE: i64 = 100_000;
const MAX_TURNS: i64 = 100;

/// The tools each argument matcher applies to (`ns.` is a namespace): the built-in tools whose
/// manifest entries declare `effects.touches` paths, a command line or a URL. The config is read
/// before any registry exists (so that `check` reports every error at once), hence this copy;
/// `tests/tool_table.rs` fails when it and the manifests' declarations disagree.
pub const MATCHER_TOOLS: &[(&str, &[&str])] =
    &[("paths", &["file.", "git."]), ("commands", &["shell.exec", "shell.start"]), ("hosts", &["web.fetch"])];

/// Tools whose path rules see the words of a command line that name a path (not a declared
/// `touches`: a line can reach paths it never names, see the README's Permissions section).
pub const PATH_WORD_TOOLS: &[&str] = &["shell.exec", "shell.start"];

/// The project's `permissions` (`agent` false) or an agent's (`agent` true; no `hooks`).
pub(super) fn read(node: Option<&Node>, path: &str, agent: bool, d: &mut Diagnostics) -> PermissionsConfig {
    let mut config = PermissionsConfig::default();
    let Some(node) = node else { return config };
    let (keys, retired) = if agent { (AGENT_KEYS, AGENT_RETIRED) } else { (PROJECT_KEYS, &[][..]) };
    let Some(p) = Obj::open(node, path, keys, retired, d) else { return config };
    if let Some(list) = p.get("rules") {
        config.rules = list_items(list, &p.path_of("rules"), d).filter_map(|(i, item)| rule(item, &i, d)).collect();
    }
    config.on_ask = p.one_of("onAsk", OnAskSetting::NAMES, d).and_then(|v| v.parse().ok());
    config.approval_timeout = duration(&p, "approvalTimeout", d);
    if let Some(list) = p.get("hooks").filter(|_| !agent) {
        config.hooks = list_items(list, &p.path_of("hooks"), d).filter_map(|(i, item)| hook(item, &i, d)).collect();
    }
    if let Some(node) = p.get("reviewer").filter(|_| !agent) {
        config.reviewer = reviewer(node, &p.path_of("reviewer"), d);
    }
    config
}

/// `permissions.reviewer`: `{model, timeout?, cacheTtl?, cacheSize?, turns?}`. Whether the
/// preset exists is checked with the models (`validate.rs`).
fn reviewer(node: &Node, path: &str, d: &mut Diagnostics) -> Option<ReviewerConfig> {
    let r = Obj::open(node, path, REVIEWER_KEYS, &[], d)?;
    let model = r.req_string("model", d);
    if model.as_deref().is_some_and(|m| m.trim().is_empty()) {
        d.error(Some(&r.key_loc("model")), r.path_of("model"), "must name a model preset");
        return None;
    }
    let timeout = duration(&r, "timeout", d);
    let cache_ttl = duration(&r, "cacheTtl", d);
    let bounded = |key: &str, max: i64, d: &mut Diagnostics| {
        let v = r.int_at_least(key, 1, d)?;
        if v > max {
            let at = r.get(key).map_or_else(|| r.key_loc(key), |n| n.loc.clone());
            d.error(Some(&at), r.path_of(key), format!("must be at most {max}, got {v}"));
            return None;
        }
        usize::try_from(v).ok()
    };
    let cache_size = bounded("cacheSize", MAX_CACHE_SIZE, d);
    let turns = bounded("turns", MAX_TURNS, d);
    Some(ReviewerConfig { model: model?, model_loc: r.key_loc("model"), timeout, cache_ttl, cache_size, turns })
}

/// An agent's `permissionMode`.
pub(super) fn mode(agent: &Obj, d: &mut Diagnostics) -> PermissionMode {
    agent.one_of("permissionMode", PermissionMode::NAMES, d).and_then(|v| v.parse().ok()).unwrap_or_default()
}

fn list_items<'a>(
    list: &'a Node,
    path: &str,
    d: &mut Diagnostics,
) -> impl Iterator<Item = (String, &'a Node)> + use<'a> {
    let items: &[Node] = match &list.value {
        Value::Seq(items) => items,
        _ => {
            d.error(Some(&list.loc), path, format!("expected a list, got {}", list.kind_name()));
            &[]
        }
    };
    let path = path.to_string();
    items.iter().enumerate().map(move |(i, item)| (index(&path, i), item))
}

fn rule(node: &Node, path: &str, d: &mut Diagnostics) -> Option<PermissionRule> {
    let r = Obj::open(node, path, RULE_KEYS, &[], d)?;
    let tool_text = r.req_string("tool", d);
    let tool = tool_text.as_deref().and_then(|t| match rule_pattern(t) {
        Ok(p) => Some(p),
        Err(e) => {
            d.error(Some(&r.key_loc("tool")), r.path_of("tool"), e);
            None
        }
    });
    if r.get("decision").is_none() {
        r.missing("decision", d);
    }
    let decision = r.one_of("decision", RuleDecision::NAMES, d).and_then(|v| v.parse().ok());
    let reason = r.string("reason", d);
    let mut given: [Option<Vec<(String, crate::config::node::Loc)>>; 3] = [None, None, None];
    for (slot, (key, _)) in given.iter_mut().zip(MATCHER_TOOLS) {
        *slot = r.string_list(key, d);
    }
    let texts: [Option<Vec<String>>; 3] =
        std::array::from_fn(|i| given[i].as_ref().map(|items| items.iter().map(|(t, _)| t.clone()).collect()));
    let problems = matcher_problems(tool.as_ref(), [texts[0].as_deref(), texts[1].as_deref(), texts[2].as_deref()]);
    let ok = problems.is_empty();
    for (spot, message) in problems {
        match spot {
            Spot::Rule => d.error(Some(&r.node.loc), path, message),
            Spot::Key(key) => d.error(Some(&r.key_loc(key)), r.path_of(key), message),
            Spot::Item(key, i) => {
                let slot = MATCHER_TOOLS.iter().position(|(k, _)| *k == key).unwrap_or_default();
                let loc = given[slot].as_ref().and_then(|items| items.get(i)).map(|(_, loc)| loc.clone());
                d.error(loc.as_ref(), index(&r.path_of(key), i), message)
            }
        }
    }
    let [paths, commands, hosts] = texts.map(Option::unwrap_or_default);
    match (tool, decision) {
        (Some(tool), Some(decision)) if ok => {
            let file = node.loc.file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            let source = format!("{file}:{}", node.loc.line);
            Some(PermissionRule { tool, decision, reason, paths, commands, hosts, source })
        }
        _ => None,
    }
}

/// Where a problem of a rule's matchers is: the rule as a whole, one of its keys (`paths`,
/// `commands`, `hosts`), or one item of a key's list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spot {
    Rule,
    Key(&'static str),
    Item(&'static str, usize),
}

/// The checks a rule's argument matchers get wherever the rule is written (a `permissions.rules`
/// entry, a live rule from the CLI or the API): `lists` are its `paths`, `commands` and `hosts`,
/// `None` where it leaves the key out. Each problem says where it is.
pub fn matcher_problems(tool: Option<&AllowPattern>, lists: [Option<&[String]>; 3]) -> Vec<(Spot, String)> {
    let mut problems = Vec::new();
    let mut matchers = Vec::new();
    for (items, (key, applies_to)) in lists.iter().zip(MATCHER_TOOLS) {
        let Some(items) = items else { continue };
        matchers.push(*key);
        if items.is_empty() {
            problems.push((Spot::Key(key), "is empty; leave the key out to match every call".to_string()));
        }
        let also: &[&str] = if *key == "paths" { PATH_WORD_TOOLS } else { &[] };
        if let Some(t) = tool
            && !applies_to.iter().chain(also).any(|a| pattern_can_match(t, a))
        {
            let names: Vec<String> = applies_to.iter().chain(also).map(|a| matcher_tools(a)).collect();
            problems.push((
                Spot::Key(key),
                format!("{key} apply to {} calls only, and this rule is for `{t}`", names.join(" and ")),
            ));
        }
        for (i, text) in items.iter().enumerate() {
            let checked = match *key {
                "paths" => check_path_glob(text),
                "commands" => check_command_pattern(text),
                _ => check_host_pattern(text),
            };
            if let Err(e) = checked {
                problems.push((Spot::Item(key, i), e));
            }
        }
    }
    if matchers.len() > 1 {
        problems.push((
            Spot::Rule,
            format!("a rule takes one of paths, commands or hosts (no call has all of {})", matchers.join(" and ")),
        ));
    }
    problems
}

/// What a rule given outside `suzumio.yaml` (a live rule: `suzumio permissions add`, `POST
/// …/permissions/rules`) says, checked as a `permissions.rules` entry is. `source` is where it
/// comes from, as decisions name it. Each problem names its field as a JSON pointer into the
/// rule (`/tool`, `/decision`, `/paths`, `/paths/1`), so a CLI can name its argument and the
/// API the body's field.
pub fn rule_from_parts(
    tool: &str,
    decision: &str,
    reason: Option<String>,
    [paths, commands, hosts]: [Option<Vec<String>>; 3],
    source: String,
) -> Result<PermissionRule, Vec<(String, String)>> {
    let mut problems = Vec::new();
    let pattern = AllowPattern::parse(tool.trim()).map_err(|e| problems.push(("/tool".to_string(), e))).ok();
    let decision = decision.trim().parse::<RuleDecision>().map_err(|_| {
        problems.push((
            "/decision".to_string(),
            format!("`{decision}` is not a decision: use one of {}", RuleDecision::NAMES.join(", ")),
        ))
    });
    for (spot, message) in matcher_problems(pattern.as_ref(), [paths.as_deref(), commands.as_deref(), hosts.as_deref()])
    {
        let at = match spot {
            Spot::Rule => String::new(),
            Spot::Key(key) => format!("/{key}"),
            Spot::Item(key, i) => format!("/{key}/{i}"),
        };
        problems.push((at, message));
    }
    let reason = reason.map(|r| r.trim().to_string()).filter(|r| !r.is_empty());
    match (pattern, decision) {
        (Some(tool), Ok(decision)) if problems.is_empty() => Ok(PermissionRule {
            tool,
            decision,
            reason,
            paths: paths.unwrap_or_default(),
            commands: commands.unwrap_or_default(),
            hosts: hosts.unwrap_or_default(),
            source,
        }),
        _ => Err(problems),
    }
}

fn matcher_tools(prefix: &str) -> String {
    if prefix.ends_with('.') { format!("{prefix}*") } else { prefix.to_string() }
}

/// Whether a rule's tool pattern can match a tool the matcher applies to (`file.` is the file
/// tools' namespace, anything else one tool).
fn pattern_can_match(pattern: &AllowPattern, applies_to: &str) -> bool {
    match pattern {
        AllowPattern::All => true,
        AllowPattern::Exact(name) => {
            if applies_to.ends_with('.') {
                name.starts_with(applies_to)
            } else {
                name == applies_to
            }
        }
        AllowPattern::Namespace(prefix) => applies_to.starts_with(prefix.as_str()),
        AllowPattern::Group(_) => false,
    }
}

/// A rule's or hook's tool pattern: groups are for allowlists only (a rule decides on tools
/// it can name, and a group's members are only known once the packs are loaded).
fn rule_pattern(text: &str) -> Result<AllowPattern, String> {
    match AllowPattern::parse(text)? {
        AllowPattern::Group(group) => Err(format!(
            "`{text}`: a permission rule or hook names tools, not a group; write the tools or a namespace (e.g. `{group}.*`)"
        )),
        pattern => Ok(pattern),
    }
}

fn hook(node: &Node, path: &str, d: &mut Diagnostics) -> Option<HookTarget> {
    let (text, pack, loc) = match &node.value {
        Value::Str(s) => (s.clone(), None, node.loc.clone()),
        _ => {
            let h = Obj::open(node, path, HOOK_KEYS, &[], d)?;
            let pack = h.string("pack", d);
            (h.req_string("tools", d)?, pack, h.key_loc("tools"))
        }
    };
    match rule_pattern(&text) {
        Ok(tools) => Some(HookTarget { tools, pack, loc: node.loc.clone() }),
        Err(e) => {
            d.error(Some(&loc), path, e);
            None
        }
    }
}

/// A duration written as `24h`, `90s`, `1h 30m` (humantime's syntax).
fn duration(obj: &Obj, key: &str, d: &mut Diagnostics) -> Option<std::time::Duration> {
    let node = obj.get(key)?;
    let parsed = match &node.value {
        Value::Str(s) => humantime::parse_duration(s).map_err(|e| format!("`{s}` is not a duration ({e})")),
        _ => Err(format!("expected a duration such as 24h or 30m, got {}", node.kind_name())),
    };
    match parsed {
        Ok(v) if v.is_zero() => {
            d.error(Some(&node.loc), obj.path_of(key), "must be longer than 0");
            None
        }
        Ok(v) => Some(v),
        Err(e) => {
            d.error(Some(&node.loc), obj.path_of(key), e);
            None
        }
    }
}

/// A path glob (`src/**`, `/workspace/**/*.env`, `/mnt/data/*`): `*` within one component,
/// `**` across components, `?`, `[...]`.
// String: a config diagnostic's message; the caller adds where it was written.
pub fn check_path_glob(text: &str) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err("a path glob must not be empty".into());
    }
    glob::Pattern::new(text).map(|_| ()).map_err(|e| format!("`{text}` is not a valid glob: {}", e.msg))
}

/// A command pattern: words, `*` matching anything (spaces included); a trailing ` *` also
/// matches no arguments. No shell operators: the line is split into its commands before rules
/// see it, so an operator in a pattern could never match.
// String: a config diagnostic's message; the caller adds where it was written.
pub fn check_command_pattern(text: &str) -> Result<(), String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("a command pattern must not be empty".into());
    }
    if let Some(op) = ["&&", "||", ";", "|", "`", "$(", "\n", ">", "<"].iter().find(|op| trimmed.contains(**op)) {
        return Err(format!(
            "`{text}` contains `{}`: a pattern matches one command (every command of a line is matched on its own), so write one pattern per command",
            op.escape_default()
        ));
    }
    Ok(())
}

/// A host pattern: `example.com`, `*.example.com` (its subdomains) or `*`.
// String: a config diagnostic's message; the caller adds where it was written.
pub fn check_host_pattern(text: &str) -> Result<(), String> {
    crate::hosts::HostPattern::parse(text).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(tool: &str, decision: &str, lists: [Option<Vec<String>>; 3]) -> Vec<(String, String)> {
        rule_from_parts(tool, decision, None, lists, "live rule 1".into()).expect_err("refused")
    }

    fn list(items: &[&str]) -> Option<Vec<String>> {
        Some(items.iter().map(|s| s.to_string()).collect())
    }

    /// A rule given outside suzumio.yaml gets the config's checks, each problem at its field.
    #[test]
    fn a_rule_from_parts_is_checked_as_a_config_rule_and_names_each_field() {
        let ok = rule_from_parts(
            "file.*",
            "deny",
            Some(" keep out ".into()),
            [list(&["secrets/**"]), None, None],
            "s".into(),
        )
        .expect("a valid rule");
        assert_eq!(
            (ok.describe(), ok.reason.as_deref()),
            ("file.* deny paths [secrets/**]".to_string(), Some("keep out"))
        );
        let at = |p: Vec<(String, String)>| p.into_iter().map(|(at, _)| at).collect::<Vec<_>>();
        assert_eq!(at(problems("file read", "deny", [None, None, None])), ["/tool"]);
        assert_eq!(at(problems("file.read", "never", [None, None, None])), ["/decision"]);
        assert_eq!(at(problems("file.read", "deny", [list(&["ok", "[x"]), None, None])), ["/paths/1"]);
        assert_eq!(at(problems("file.read", "deny", [list(&[]), None, None])), ["/paths"]);
        assert_eq!(at(problems("file.read", "deny", [None, list(&["rm *"]), None])), ["/commands"]);
        assert_eq!(at(problems("shell.exec", "deny", [list(&["a"]), list(&["rm *"]), None])), [""]);
        assert_eq!(at(problems("web.fetch", "allow", [None, None, list(&["bad host!"])])), ["/hosts/0"]);
    }
}
