//! Permission rules and how one matches a call: the tool pattern, then the rule's argument
//! matcher over what the call touches — the normalized paths of a file tool, every command of
//! a `shell.exec` line, the host of a `web.fetch` URL.
//!
//! [`opaque_parts`] says which parts of a parsed line no command rule can see through.
//!
//! Matching errs towards caution in both directions: what cannot be known (a path that does not
//! normalize confidently, a URL without a host, a command with an expansion) matches `deny` and
//! `ask` rules and never `allow` rules.

use serde_json::Value;

use super::shell::{self, Command};
use crate::config::RuleDecision;
use crate::hosts::{Host, HostPattern};
use crate::toolpack::ToolDefinition;
use crate::toolpack::effects::{Touches, values_at};

/// One rule as the engine applies it: from `suzumio.yaml` (project or agent), remembered by an
/// approval (the approvals store), or a hook's verdict. The config's rule type, under the name
/// the engine uses.
pub use crate::config::PermissionRule as Rule;

/// How a rule meets a call (the matchers need the shell parser and the URL reader, which are the
/// controller's).
pub trait Matches {
    /// Whether the rule matches a call of `tool` whose arguments are `subject`.
    fn matches(&self, tool: &str, subject: &Subject) -> bool;
}

impl Matches for Rule {
    fn matches(&self, tool: &str, subject: &Subject) -> bool {
        if !self.tool.matches(tool) {
            return false;
        }
        let cautious = self.decision != RuleDecision::Allow;
        if !self.paths.is_empty() {
            return match subject {
                Subject::Paths(paths) => {
                    matches_all_or_any(paths, cautious, |p| self.paths.iter().any(|g| path_matches(g, p)))
                }
                // A line's words can name paths but never prove that it touches only those
                // (globs, `cd`, variables): path rules see a line for `deny` and `ask` only.
                Subject::Shell(parsed) if cautious => {
                    let commands = match parsed {
                        Ok(commands) => commands,
                        Err(unparsed) => &unparsed.seen,
                    };
                    commands.iter().flat_map(path_words).any(|p| self.paths.iter().any(|g| names_covered(g, &p)))
                }
                _ => false,
            };
        }
        if !self.commands.is_empty() {
            let commands = match subject {
                Subject::Shell(Ok(commands)) => commands,
                // What was seen of a line that cannot be matched still meets deny and ask rules.
                Subject::Shell(Err(unparsed)) if cautious => &unparsed.seen,
                _ => return false,
            };
            return if cautious {
                commands.iter().any(|c| self.commands.iter().any(|p| command_matches(p, c)))
            } else {
                let inner: Vec<&Command> = commands.iter().filter(|c| !c.wrapper).collect();
                !inner.is_empty()
                    && inner.iter().all(|c| c.exact && self.commands.iter().any(|p| command_matches(p, c)))
            };
        }
        if !self.hosts.is_empty() {
            let Subject::Host(host) = subject else { return false };
            return match host {
                Some(h) => self.hosts.iter().any(|p| HostPattern::parse(p).is_ok_and(|p| p.matches(h))),
                None => cautious,
            };
        }
        true
    }
}

/// The parts of a parsed line that no command rule can see through, each with why: what the
/// shell matcher found opaque, and unknown programs whose words name a program one of
/// `cautious` (the `deny`/`ask` command rules that apply) names (`mywrap rm -rf x`).
pub fn opaque_parts(commands: &[Command], cautious: &[&Rule]) -> Vec<String> {
    let named: Vec<&str> = cautious
        .iter()
        .flat_map(|r| r.commands.iter())
        .filter_map(|p| p.split_whitespace().next())
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .collect();
    let mut parts: Vec<String> = Vec::new();
    for command in commands {
        let part = command.opaque.clone().or_else(|| {
            if !command.unknown {
                return None;
            }
            let program = command.argv.first().map(|p| p.rsplit('/').next().unwrap_or(p)).unwrap_or_default();
            if !command.exact {
                return Some(format!(
                    "`{program}` is a program the matcher does not know, and its arguments are only known when the line runs: it may run them"
                ));
            }
            let tokens = command.argv[1..].iter().flat_map(|w| w.split(|c: char| c.is_whitespace() || ";&|()`$=".contains(c)));
            tokens.map(|t| t.rsplit('/').next().unwrap_or(t)).filter(|t| !t.is_empty()).find_map(|base| {
                if let Some(n) = named.iter().find(|n| wildcard(n, base)) {
                    Some(format!(
                        "`{program}` is a program the matcher does not know, and its arguments name `{base}`, which a rule names (`{n}`): it may run it, or copy it under another name"
                    ))
                } else if shell::runs_code_by_name(base) {
                    Some(format!(
                        "`{program}` is a program the matcher does not know, and its arguments name `{base}`, which runs code the line does not show: it may run it"
                    ))
                } else {
                    None
                }
            })
        });
        if let Some(part) = part
            && !parts.contains(&part)
        {
            parts.push(part);
        }
    }
    parts
}

/// The words of a command that may name a path, normalized as a file tool's path is: every
/// word (the program too: `./secrets/run`), an option's or assignment's value after `=`
/// (`--file=secrets/k`), and the redirection targets. Words whose value is only known when
/// the line runs (`$X/k`, `~/k`) are left out: the container's mounts are the boundary there.
pub fn path_words(command: &Command) -> impl Iterator<Item = String> + '_ {
    command
        .argv
        .iter()
        .chain(&command.redirects)
        .flat_map(|w| std::iter::once(w.as_str()).chain(w.split_once('=').map(|(_, v)| v)))
        .filter(|w| !w.is_empty() && !w.starts_with('-'))
        .filter_map(|w| normalize_path(&Value::String(w.to_string())))
}

/// Whether a glob covers what the word `path` names: the path itself, or — since a command
/// given a directory reads what is in it (`tar c secrets`, `rm -r secrets`) — the directory a
/// glob's literal part names (`secrets` for `secrets/**`). Parents above it (`.`) do not count.
fn names_covered(glob: &str, path: &str) -> bool {
    if path_matches(glob, path) {
        return true;
    }
    let absolute = if glob.starts_with('/') { glob.to_string() } else { format!("/workspace/{glob}") };
    let literal: Vec<&str> = absolute.split('/').take_while(|c| !c.contains(['*', '?', '['])).collect();
    literal.len() < absolute.split('/').count() && literal.join("/") == path
}

/// `allow` needs every item known and matching; `deny`/`ask` any item matching or unknown.
fn matches_all_or_any(items: &[Option<String>], cautious: bool, f: impl Fn(&str) -> bool) -> bool {
    if cautious {
        items.iter().any(|i| i.as_deref().is_none_or(&f))
    } else {
        !items.is_empty() && items.iter().all(|i| i.as_deref().is_some_and(&f))
    }
}

/// What a call touches, as rules match it.
#[derive(Debug, Clone, PartialEq)]
pub enum Subject {
    /// A file tool's paths, normalized; `None` where a path does not normalize confidently.
    Paths(Vec<Option<String>>),
    /// `shell.exec`: every command of the line, or why it cannot be parsed.
    Shell(Result<Vec<Command>, shell::Unparsed>),
    /// `web.fetch`: the URL's host, canonical (`None`: no host could be read).
    Host(Option<Host>),
    None,
}

impl Subject {
    /// The subject of a call (its input already valid against the tool's schema), as the
    /// tool's declared `effects.touches` say: paths at some pointers, a command line, a URL.
    pub fn of(def: &ToolDefinition, input: &Value) -> Subject {
        match &def.effects.touches {
            Touches::Command(pointer) => {
                let line = input.pointer(pointer).and_then(Value::as_str).unwrap_or("");
                // The variables the call sets next to its command (`env`, beside `command`)
                // are part of what the line runs with.
                let env_pointer = match pointer.rsplit_once('/') {
                    Some((parent, _)) => format!("{parent}/env"),
                    None => "/env".to_string(),
                };
                let env = input.pointer(&env_pointer).and_then(Value::as_object);
                let names = env.into_iter().flat_map(|e| e.keys().map(String::as_str));
                Subject::Shell(shell::commands(line).map(|mut commands| {
                    let mut set = shell::call_environment(names);
                    set.append(&mut commands);
                    set
                }))
            }
            Touches::Url(pointer) => {
                let url = input.pointer(pointer).and_then(Value::as_str).unwrap_or("");
                Subject::Host(url::Url::parse(url).ok().and_then(|u| canonical_host(&u)))
            }
            Touches::Paths(pointers) => {
                let mut paths: Vec<Option<String>> =
                    pointers.iter().flat_map(|p| values_at(input, p)).map(normalize_path).collect();
                // A diff's files are touched as if each were named at a pointer; an unreadable
                // diff is a path the rules cannot see.
                for diff in def.effects.diffs.iter().flat_map(|p| values_at(input, p)) {
                    let named = diff.as_str().map(crate::unified_diff::paths).unwrap_or_else(|| vec![None]);
                    paths.extend(named.into_iter().map(|p| p.and_then(|p| normalize_path(&Value::String(p)))));
                }
                Subject::Paths(paths)
            }
            Touches::Nothing => Subject::None,
        }
    }
}

/// A tool path as the runner resolves it: relative to `/workspace`, `.` and `..` resolved
/// lexically. `None` (not confident) for a non-string, an empty path, a NUL, a `~` or `$` the
/// runner would take literally but a reader would not, or a `..` that climbs past `/`.
pub fn normalize_path(value: &Value) -> Option<String> {
    let text = value.as_str()?;
    if text.is_empty() || text.contains('\0') || text.starts_with('~') || text.contains('$') {
        return None;
    }
    let joined = if text.starts_with('/') { text.to_string() } else { format!("/workspace/{text}") };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// A rule's path glob against a normalized path: relative globs are relative to `/workspace`;
/// `*` stays within one component, `**` crosses them.
pub fn path_matches(glob: &str, path: &str) -> bool {
    crate::rpc::path_glob_matches(glob, path)
}

/// A command pattern against one command: `*` matches anything (spaces too), a trailing ` *`
/// also matches no arguments (`rm *` matches `rm`), and the pattern's program matches the
/// command's base name (`rm` matches `/bin/rm`).
pub fn command_matches(pattern: &str, command: &Command) -> bool {
    let pattern = pattern.split_whitespace().collect::<Vec<_>>().join(" ");
    let text = command.text();
    if wildcard(&pattern, &text) {
        return true;
    }
    pattern.strip_suffix(" *").is_some_and(|head| wildcard(head, &text))
}

/// `*`-only wildcard matching (brackets and `?` in commands are literal).
fn wildcard(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// A URL's host as rules see it: the parser has read an IPv4 address in any notation and
/// lower-cased a name; `hosts` removes trailing dots and unwraps IPv4-mapped IPv6.
pub fn canonical_host(url: &url::Url) -> Option<Host> {
    match url.host()? {
        url::Host::Domain(name) => Some(Host::name(name)),
        url::Host::Ipv4(ip) => Some(Host::ip(ip.into())),
        url::Host::Ipv6(ip) => Some(Host::ip(ip.into())),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn paths_normalize_as_the_runner_resolves_them() {
        let cases = [
            (json!("src/a.rs"), Some("/workspace/src/a.rs")),
            (json!("./src/../secrets/k"), Some("/workspace/secrets/k")),
            (json!("/workspace//x/./y"), Some("/workspace/x/y")),
            (json!("/mnt/data/../data/f"), Some("/mnt/data/f")),
            (json!("../../.."), None),
            (json!("~/x"), None),
            (json!("$HOME/x"), None),
            (json!(""), None),
            (json!(3), None),
        ];
        for (input, expected) in cases {
            assert_eq!(normalize_path(&input).as_deref(), expected, "{input}");
        }
    }

    #[test]
    fn globs_commands_and_hosts() {
        assert!(path_matches("secrets/**", "/workspace/secrets/a/b"));
        assert!(path_matches("**/*.env", "/workspace/a.env"));
        assert!(path_matches("**/*.env", "/workspace/x/y/.env"));
        assert!(!path_matches("src/*", "/workspace/src/a/b"));
        assert!(path_matches("/mnt/data/*", "/mnt/data/f"));
        let cmd = |line: &str| shell::commands(line).unwrap().remove(0);
        assert!(command_matches("rm *", &cmd("rm -rf x")));
        assert!(command_matches("rm *", &cmd("rm")));
        assert!(command_matches("rm *", &cmd("/bin/rm x")));
        assert!(!command_matches("rm *", &cmd("rmdir x")));
        assert!(command_matches("git push*", &cmd("git push origin main")));
        assert!(!command_matches("git push*", &cmd("git pull")));
        assert!(command_matches("ls [a]", &cmd("ls '[a]'")));
        let host_matches = |p: &str, h: &str| HostPattern::parse(p).unwrap().matches(&Host::name(h));
        assert!(host_matches("*.example.com", "api.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(!host_matches("*.example.com", "badexample.com"));
        assert!(host_matches("example.com", "example.com"));
        assert!(host_matches("*", "anything.test"));
    }
}
