//! The risk categories of a call: what it was seen to do that a person deciding on it (or the
//! reviewer model) may care about — writes, writes outside the workspace, deletes, network,
//! secrets in its arguments, an interpreter given inline code, privilege. Derived here, once,
//! from what the rules match on (the call's [`Subject`]) and the tool's declared definition
//! (`effects`, annotations), so no code switches on a tool's name for it.
//!
//! The categories describe; they decide nothing. A category that cannot be known for sure (a
//! path that does not normalize, a command with an expansion) is listed when it may apply:
//! the person reading them is better warned than reassured.

use serde::Serialize;
use serde_json::Value;

use super::rules::{Subject, normalize_path, path_words};
use super::shell::Command;
use crate::toolpack::ToolDefinition;
use crate::toolpack::effects::DiskEffect;
use crate::toolpack::redact::{is_secret_name, redact_secrets};

/// One thing a call was seen to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RiskCategory {
    /// Writes files (in the workspace, as far as can be seen).
    Writes,
    /// Writes, moves or deletes a path outside `/workspace` (or one that cannot be known).
    WritesOutsideWorkspace,
    /// Removes files (a delete, a move away, `rm`, `git clean`, …).
    Deletes,
    /// Reaches the network (a URL, `curl`, `git push`, a tool that says it reaches the world).
    Network,
    /// Its arguments hold what looks like a secret (a token's shape, a `password=` value, a
    /// field named like a secret).
    SecretsInArguments,
    /// Runs code the line does not show as commands: an interpreter's inline code
    /// (`python3 -c`), a program fed to a shell (`… | sh`), a build file's or a package's
    /// scripts (`make`, `npm install`) — what the matcher calls opaque.
    InlineCode,
    /// Runs with more privilege (`sudo`, `su`, `doas`).
    Privilege,
    /// The tool marks itself destructive.
    Destructive,
}

impl RiskCategory {
    pub fn as_str(self) -> &'static str {
        match self {
            RiskCategory::Writes => "writes",
            RiskCategory::WritesOutsideWorkspace => "writes_outside_workspace",
            RiskCategory::Deletes => "deletes",
            RiskCategory::Network => "network",
            RiskCategory::SecretsInArguments => "secrets_in_arguments",
            RiskCategory::InlineCode => "inline_code",
            RiskCategory::Privilege => "privilege",
            RiskCategory::Destructive => "destructive",
        }
    }
}

/// Programs that remove what they are given.
const DELETERS: &[&str] = &["rm", "rmdir", "unlink", "shred", "truncate"];
/// Programs that write (or move, link, change) the paths they are given.
const WRITERS: &[&str] =
    &["cp", "mv", "tee", "install", "dd", "ln", "touch", "mkdir", "chmod", "chown", "rsync", "tar", "unzip", "sed"];
/// Programs that reach the network.
const NETWORK: &[&str] = &[
    "curl", "wget", "ssh", "scp", "sftp", "rsync", "nc", "ncat", "netcat", "telnet", "ftp", "ping", "dig", "nslookup",
    "host",
];
/// Subcommands of package managers and VCS that reach the network.
const NETWORK_SUBCOMMANDS: &[(&str, &[&str])] = &[
    ("git", &["push", "pull", "fetch", "clone", "ls-remote", "submodule"]),
    ("npm", &["install", "i", "ci", "publish", "update"]),
    ("pip", &["install", "download"]),
    ("pip3", &["install", "download"]),
    ("cargo", &["install", "publish", "fetch", "update"]),
    ("apt", &["install", "update"]),
    ("apt-get", &["install", "update"]),
    ("docker", &["pull", "push", "login"]),
];
const PRIVILEGE: &[&str] = &["sudo", "su", "doas", "pkexec"];
/// Where the rules' paths live; everything else is outside the workspace. `/dev/null` and the
/// standard streams are not places a write lands.
const WORKSPACE: &str = "/workspace";
const NOWHERE: &[&str] = &["/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"];

/// The categories of a call whose arguments are `input` (valid against the tool's schema) and
/// whose subject is `subject`, in a stable order without repeats.
pub fn of(def: &ToolDefinition, subject: &Subject, input: &Value) -> Vec<RiskCategory> {
    let mut out = Vec::new();
    let a = &def.annotations;
    match subject {
        Subject::Paths(paths) => {
            let writes = a.read_only_hint != Some(true) && !matches!(def.effects.disk, DiskEffect::None);
            if writes {
                if matches!(def.effects.disk, DiskEffect::Frees) {
                    out.push(RiskCategory::Deletes);
                } else {
                    out.push(RiskCategory::Writes);
                }
                if paths.iter().any(|p| p.as_deref().is_none_or(outside_workspace)) {
                    out.push(RiskCategory::WritesOutsideWorkspace);
                }
            }
        }
        Subject::Shell(parsed) => {
            let commands = match parsed {
                Ok(commands) => commands,
                Err(unparsed) => &unparsed.seen,
            };
            for command in commands {
                command_categories(command, &mut out);
            }
        }
        Subject::Host(_) => out.push(RiskCategory::Network),
        Subject::None => {
            // A tool that does not say it only reads may write (the coordination tools only
            // reach agents and the user).
            if a.read_only_hint != Some(true)
                && !def.effects.coordination
                && !matches!(def.effects.disk, DiskEffect::None)
            {
                out.push(RiskCategory::Writes);
            }
        }
    }
    // A command line's own commands say more than the shell tool's markings, which hold for
    // any line (every line "may" reach the world and destroy).
    let line = matches!(subject, Subject::Shell(_));
    if a.open_world_hint == Some(true) && !line {
        out.push(RiskCategory::Network);
    }
    if a.destructive_hint == Some(true) && !line {
        out.push(RiskCategory::Destructive);
    }
    if holds_secret(input) {
        out.push(RiskCategory::SecretsInArguments);
    }
    out.sort();
    out.dedup();
    out
}

fn outside_workspace(path: &str) -> bool {
    !(path == WORKSPACE || path.starts_with("/workspace/") || NOWHERE.contains(&path))
}

fn command_categories(command: &Command, out: &mut Vec<RiskCategory>) {
    let Some(program) = command.argv.first().map(|p| p.rsplit('/').next().unwrap_or(p)) else { return };
    let args: Vec<&str> = command.argv[1..].iter().map(String::as_str).collect();
    if command.opaque.is_some() {
        out.push(RiskCategory::InlineCode);
    }
    if PRIVILEGE.contains(&program) {
        out.push(RiskCategory::Privilege);
    }
    let deletes = DELETERS.contains(&program)
        || (program == "find" && args.contains(&"-delete"))
        || (program == "git" && args.first().is_some_and(|s| ["rm", "clean"].contains(s)));
    if deletes {
        out.push(RiskCategory::Deletes);
    }
    // `sed` writes only in place (`-i`).
    let in_place = program != "sed" || args.iter().any(|a| a.starts_with("-i"));
    let writes = deletes || (WRITERS.contains(&program) && in_place);
    // A redirection `> f` writes f (`< f` only reads it, but the parser keeps both: warn).
    let redirected: Vec<String> =
        command.redirects.iter().filter_map(|r| normalize_path(&Value::String(r.clone()))).collect();
    if !redirected.iter().all(|p| NOWHERE.contains(&p.as_str())) {
        out.push(RiskCategory::Writes);
    }
    if redirected.iter().any(|p| outside_workspace(p)) {
        out.push(RiskCategory::WritesOutsideWorkspace);
    }
    if writes {
        out.push(if deletes { RiskCategory::Deletes } else { RiskCategory::Writes });
        // The program's own word is not a path it writes.
        let targets = path_words(command).skip(1);
        let mut outside = false;
        for p in targets {
            outside |= outside_workspace(&p);
        }
        // A word whose value is only known when the line runs (`$HOME/x`, `~/x`) may be anywhere.
        let unknown = command.argv[1..].iter().any(|w| w.starts_with('~') || w.contains('$'));
        if outside || unknown || !command.exact {
            out.push(RiskCategory::WritesOutsideWorkspace);
        }
    }
    let network = NETWORK.contains(&program)
        || NETWORK_SUBCOMMANDS.iter().any(|(p, subs)| {
            *p == program && args.iter().find(|a| !a.starts_with('-')).is_some_and(|s| subs.contains(s))
        });
    if network {
        out.push(RiskCategory::Network);
    }
}

/// Whether any string of `input` holds what the audit would mask, or a field named like a
/// secret holds a value. Strings are looked at up to a bound, as the audit does.
fn holds_secret(input: &Value) -> bool {
    const LOOKED_AT: usize = 8_000;
    match input {
        Value::String(s) => {
            let cut = s.char_indices().nth(LOOKED_AT).map_or(s.as_str(), |(i, _)| &s[..i]);
            redact_secrets(cut) != cut
        }
        Value::Array(items) => items.iter().any(holds_secret),
        Value::Object(map) => map.iter().any(|(k, v)| {
            let named = is_secret_name(k) && matches!(v, Value::String(s) if !s.is_empty())
                || is_secret_name(k) && matches!(v, Value::Number(_));
            named || holds_secret(v)
        }),
        _ => false,
    }
}
