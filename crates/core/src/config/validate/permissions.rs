//! `permissions` (project level) and `agents.<id>.permissions` / `agents.<id>.permissionMode`:
//! allow/ask/deny rules with their argument matchers (path globs, command patterns, host
//! patterns), `onAsk`, `approvalTimeout`, and the tools whose calls go through packs' hooks.
//! Every pattern is compiled here, so a bad one is reported with its file:line by `check`; the
//! matching itself is the controller's (`src/permissions/`).

use crate::config::diag::Diagnostics;
use crate::config::model::*;
use crate::config::node::{Node, Value};
use crate::config::read::{Obj, Retired, index};

const PROJECT_KEYS: &[&str] = &["rules", "onAsk", "approvalTimeout", "hooks"];
const AGENT_KEYS: &[&str] = &["rules", "onAsk", "approvalTimeout"];
const AGENT_RETIRED: Retired =
    &[("hooks", "hooks are set for the whole project, under the top-level permissions.hooks")];
const RULE_KEYS: &[&str] = &["tool", "decision", "reason", "paths", "commands", "hosts"];
const HOOK_KEYS: &[&str] = &["tools", "pack"];

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
    config
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
    let mut ok = true;
    let mut matchers = Vec::new();
    let mut lists = [Vec::new(), Vec::new(), Vec::new()];
    for (slot, (key, applies_to)) in lists.iter_mut().zip(MATCHER_TOOLS) {
        let Some(items) = r.string_list(key, d) else { continue };
        matchers.push(*key);
        if items.is_empty() {
            d.error(Some(&r.key_loc(key)), r.path_of(key), "is empty; leave the key out to match every call");
            ok = false;
        }
        let also: &[&str] = if *key == "paths" { PATH_WORD_TOOLS } else { &[] };
        if let Some(t) = &tool
            && !applies_to.iter().chain(also).any(|a| pattern_can_match(t, a))
        {
            let names: Vec<String> = applies_to.iter().chain(also).map(|a| matcher_tools(a)).collect();
            d.error(
                Some(&r.key_loc(key)),
                r.path_of(key),
                format!("{key} apply to {} calls only, and this rule is for `{t}`", names.join(" and ")),
            );
            ok = false;
        }
        for (i, (text, loc)) in items.into_iter().enumerate() {
            let checked = match *key {
                "paths" => check_path_glob(&text),
                "commands" => check_command_pattern(&text),
                _ => check_host_pattern(&text),
            };
            match checked {
                Ok(()) => slot.push(text),
                Err(e) => {
                    d.error(Some(&loc), index(&r.path_of(key), i), e);
                    ok = false;
                }
            }
        }
    }
    if matchers.len() > 1 {
        d.error(
            Some(&r.node.loc),
            path,
            format!("a rule takes one of paths, commands or hosts (no call has all of {})", matchers.join(" and ")),
        );
        ok = false;
    }
    let [paths, commands, hosts] = lists;
    match (tool, decision) {
        (Some(tool), Some(decision)) if ok => {
            let file = node.loc.file.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            let source = format!("{file}:{}", node.loc.line);
            Some(PermissionRule { tool, decision, reason, paths, commands, hosts, source })
        }
        _ => None,
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
