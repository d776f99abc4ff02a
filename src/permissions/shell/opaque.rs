//! Which parts of a command line are *opaque*: they run code the line does not show, so no
//! command rule can see what they do — a program piped into a shell, an interpreter given
//! inline code or a script, a tool that runs a command given by an option, a variable that
//! makes programs load code, a program name the shell only knows when it runs.
//!
//! [`CODE_RUNNERS`] is the one table of programs that run code and how; [`CODE_VARIABLES`]
//! the variables that do. This module classifies one simple command; it never decides (the
//! engine asks for an opaque line only when a `deny` or `ask` command rule could be walked
//! around by it, `permissions/mod.rs`).
//!
//! Deletes by programs other than `rm` (`unlink`, `shred`, `truncate`, `find -delete`,
//! `git clean`, `rsync --delete`, `mv x /dev/null`) are *not* opaque: the program and its
//! arguments are all on the line, a rule sees them exactly, and a rule that names `rm` names
//! the program `rm`, not "deleting" — the README lists the rule that names them.

use super::Stdin;

/// A program that runs code, and when.
pub struct CodeRunner {
    /// The programs, by base name; a trailing version is ignored (`python3.12` is `python`).
    pub programs: &'static [&'static str],
    pub runs: Runs,
    /// What it runs, for the reason a person reads.
    pub why: &'static str,
    /// Arguments with which it is opaque (the table's test runs every program with them).
    pub opaque_example: &'static str,
    /// Arguments with which it is not, where there are such (the test checks them too).
    pub visible_example: Option<&'static str>,
}

/// When a [`CodeRunner`] runs code the line does not show.
pub enum Runs {
    /// A shell without a visible `-c` script: a program from its stdin (`-s`, no operand) or a
    /// script file (the first operand).
    Shell,
    /// Inline code (one of these options), a script file or module (the first operand), or
    /// a program from its stdin (no operand).
    Interpreter(&'static [&'static str]),
    /// awk: a program that can start commands or write files (`system`, `|`, `>`, `@load`),
    /// one given by a file (`-f`), or one only known when the line runs.
    Awk,
    /// sed: a script with the `e` command or the `e` flag of `s`, from a file (`-f`), or
    /// only known when the line runs.
    Sed,
    /// Any of these: an option (`--opt`, `--opt=…`, `-X`, `-Xvalue`), a subcommand (a word
    /// without a dash: the first operand), `sub option`, or `+` (a word starting with `+`).
    /// `clusters`: one-letter options may be grouped (`-avze ssh`).
    Options { options: &'static [&'static str], clusters: bool },
    /// An option (`-o`) whose value passes the check (`ProxyCommand=…`).
    OptionValue { option: &'static str, runs_code: fn(&str) -> bool },
    /// git's `-c key=value` (and `--config-env`) before the subcommand, with a key not known
    /// to be inert.
    GitConfig,
    /// xargs: the command gets words read from stdin as arguments, so it must be one whose
    /// arguments are only data.
    Xargs,
    /// Whatever the arguments (except `--version`/`--help` alone, and a `-c` script that is
    /// seen).
    Always,
}

/// The programs that run code, and how. One entry per way; a program may have several.
pub const CODE_RUNNERS: &[CodeRunner] = &[
    CodeRunner {
        programs: &["sh", "bash", "dash", "zsh", "ash", "ksh", "mksh", "yash", "fish", "tcsh", "csh", "rbash"],
        runs: Runs::Shell,
        why: "runs a program from its stdin or a file",
        opaque_example: "-s",
        visible_example: Some("-c 'ls'"),
    },
    CodeRunner {
        programs: &["su"],
        runs: Runs::Always,
        why: "starts a shell for another user, which reads commands from its stdin",
        opaque_example: "root",
        visible_example: Some("-c 'ls' root"),
    },
    CodeRunner {
        programs: &["script"],
        runs: Runs::Always,
        why: "starts a shell that reads commands from its stdin",
        opaque_example: "-q /dev/null",
        visible_example: Some("-q -c 'ls' /dev/null"),
    },
    CodeRunner {
        programs: &[".", "source"],
        runs: Runs::Always,
        why: "runs the commands of a file in this shell",
        opaque_example: "./env.sh",
        visible_example: None,
    },
    CodeRunner {
        programs: &["python", "pypy"],
        runs: Runs::Interpreter(&["-c", "-m"]),
        why: "runs Python code",
        opaque_example: "-c 'import os'",
        visible_example: Some("--version"),
    },
    CodeRunner {
        programs: &["perl"],
        runs: Runs::Interpreter(&["-e", "-E"]),
        why: "runs Perl code",
        opaque_example: "-e 'unlink q(x)'",
        visible_example: Some("--version"),
    },
    CodeRunner {
        programs: &["ruby", "irb", "jruby"],
        runs: Runs::Interpreter(&["-e"]),
        why: "runs Ruby code",
        opaque_example: "-e 'File.delete(%q(x))'",
        visible_example: Some("--version"),
    },
    CodeRunner {
        programs: &["node", "nodejs"],
        runs: Runs::Interpreter(&["-e", "--eval", "-p", "--print", "-r", "--require", "--import", "--loader"]),
        why: "runs JavaScript code",
        opaque_example: "-e 'require(`fs`).rmSync(`x`)'",
        visible_example: Some("--version"),
    },
    CodeRunner {
        programs: &["php"],
        runs: Runs::Interpreter(&["-r", "-B", "-R", "-E", "-F"]),
        why: "runs PHP code",
        opaque_example: "-r 'unlink(\"x\");'",
        visible_example: Some("--version"),
    },
    CodeRunner {
        programs: &["lua", "luajit"],
        runs: Runs::Interpreter(&["-e", "-l"]),
        why: "runs Lua code",
        opaque_example: "-e 'os.remove(\"x\")'",
        visible_example: Some("--version"),
    },
    CodeRunner {
        programs: &["tclsh", "wish", "expect"],
        runs: Runs::Interpreter(&["-c"]),
        why: "runs Tcl code",
        opaque_example: "-c 'file delete x'",
        visible_example: Some("--version"),
    },
    CodeRunner {
        programs: &["Rscript", "R", "julia", "elixir", "iex", "erl", "escript", "groovy", "scala", "jshell", "java"],
        runs: Runs::Interpreter(&["-e", "-E", "--eval", "-eval", "-r", "-s", "-run", "--print", "-jar", "--source"]),
        why: "runs code of its language",
        opaque_example: "-e 'x'",
        visible_example: Some("--version"),
    },
    CodeRunner {
        programs: &["pwsh", "powershell"],
        runs: Runs::Interpreter(&["-c", "-Command", "-EncodedCommand", "-ec", "-File", "-f"]),
        why: "runs PowerShell code",
        opaque_example: "-c 'Remove-Item x'",
        visible_example: Some("--version"),
    },
    CodeRunner {
        programs: &["awk", "gawk", "mawk", "nawk"],
        runs: Runs::Awk,
        why: "runs an awk program that can start commands or write files",
        opaque_example: "'BEGIN{system(\"rm x\")}'",
        visible_example: Some("'{print $1}' notes.txt"),
    },
    CodeRunner {
        programs: &["sed", "gsed"],
        runs: Runs::Sed,
        why: "runs a sed script that starts commands",
        opaque_example: "'s/.*/rm x/e' notes.txt",
        visible_example: Some("-n 's/a/b/gp;/x/d' notes.txt"),
    },
    CodeRunner {
        programs: &["git"],
        runs: Runs::GitConfig,
        why: "runs a command named by a configuration value",
        opaque_example: "-c core.pager='rm x' log",
        visible_example: Some("-c user.name=bot -c user.email=b@x commit -m wip"),
    },
    CodeRunner {
        programs: &["git"],
        runs: Runs::Options {
            options: &[
                "--exec-path",
                "rebase -x",
                "rebase --exec",
                "submodule foreach",
                "bisect run",
                "difftool -x",
                "difftool --extcmd",
                "mergetool",
                "filter-branch",
                "clone --upload-pack",
                "clone -u",
                "fetch --upload-pack",
                "pull --upload-pack",
                "ls-remote --upload-pack",
                "archive --exec",
                "push --receive-pack",
                "push --exec",
                "grep -O",
                "grep --open-files-in-pager",
                "clone --template",
                "init --template",
                "clone -c",
                "clone --config",
                "send-email",
                "instaweb",
                "web--browse",
            ],
            clusters: false,
        },
        why: "runs a command given by an option",
        opaque_example: "submodule foreach 'rm x'",
        visible_example: Some("log --oneline -5"),
    },
    CodeRunner {
        programs: &["tar", "bsdtar", "gtar"],
        runs: Runs::Options {
            options: &[
                "--to-command",
                "--use-compress-program",
                "-I",
                "--checkpoint-action",
                "--info-script",
                "--new-volume-script",
                "-F",
                "--rsh-command",
                "--rmt-command",
            ],
            clusters: true,
        },
        why: "runs a command given by an option",
        opaque_example: "-xf a.tar --to-command='rm x'",
        visible_example: Some("-xzf a.tar.gz -C out"),
    },
    CodeRunner {
        programs: &["env"],
        runs: Runs::Options { options: &["-S", "--split-string"], clusters: true },
        why: "splits a string into a command",
        opaque_example: "-S 'rm x'",
        visible_example: Some("-i PATHX=1 ls"),
    },
    CodeRunner {
        programs: &["rsync"],
        runs: Runs::Options { options: &["-e", "--rsh", "--rsync-path"], clusters: true },
        why: "runs a remote shell command given by an option",
        opaque_example: "-e 'sh -c \"rm x\"' a b:",
        visible_example: Some("-avz src/ out/"),
    },
    CodeRunner {
        programs: &["ssh", "scp", "sftp"],
        runs: Runs::OptionValue { option: "-o", runs_code: ssh_option_runs_code },
        why: "runs a local command named by an option",
        opaque_example: "-o ProxyCommand='rm x' host",
        visible_example: Some("-o BatchMode=yes host"),
    },
    CodeRunner {
        programs: &["ssh", "scp", "sftp"],
        runs: Runs::Options { options: &["-F", "-S"], clusters: false },
        why: "reads a configuration file or program that can run local commands",
        opaque_example: "-F ./config host",
        visible_example: Some("-p 2222 host"),
    },
    CodeRunner {
        programs: &["less", "more", "most"],
        runs: Runs::Options { options: &["+"], clusters: false },
        why: "runs pager commands given on its command line, which can run shell commands",
        opaque_example: "'+!rm x' notes.txt",
        visible_example: Some("-R notes.txt"),
    },
    CodeRunner {
        programs: &["man"],
        runs: Runs::Options { options: &["-P", "--pager", "-H", "--html"], clusters: false },
        why: "runs the pager or browser an option names",
        opaque_example: "-P 'rm x' ls",
        visible_example: Some("ls"),
    },
    CodeRunner {
        programs: &["vim", "vi", "nvim", "view", "gvim", "rvim", "vimdiff"],
        runs: Runs::Options { options: &["-c", "--cmd", "-S", "-u", "-s", "-e", "-E", "+"], clusters: true },
        why: "runs editor commands, which can run shell commands",
        opaque_example: "-c '!rm x' notes.txt",
        visible_example: Some("-R notes.txt"),
    },
    CodeRunner {
        programs: &["ex", "gdb", "lldb"],
        runs: Runs::Always,
        why: "reads commands (from its stdin or its options) that can run shell commands",
        opaque_example: "notes.txt",
        visible_example: None,
    },
    CodeRunner {
        programs: &["emacs", "dc", "ed", "sqlite3", "psql", "mysql", "mariadb", "gnuplot", "m4"],
        runs: Runs::Always,
        why: "runs commands from its options, its stdin or its own files, which can run shell commands",
        opaque_example: "-batch -eval '(delete-file \"x\")'",
        visible_example: None,
    },
    CodeRunner {
        programs: &[
            "guile",
            "racket",
            "sbcl",
            "clisp",
            "ocaml",
            "runghc",
            "ghci",
            "swift",
            "dart",
            "crystal",
            "tcc",
            "octave",
            "osascript",
        ],
        runs: Runs::Interpreter(&["-e", "--eval", "-c", "-run", "--script", "-x"]),
        why: "runs code of its language",
        opaque_example: "-e x",
        visible_example: Some("--version"),
    },
    CodeRunner {
        programs: &["tcpdump"],
        runs: Runs::Options { options: &["-z"], clusters: true },
        why: "runs a command on each file it writes",
        opaque_example: "-w f -C 1 -z ./x",
        visible_example: Some("-i lo -c 1"),
    },
    CodeRunner {
        programs: &["apt", "apt-get", "aptitude"],
        runs: Runs::Options {
            options: &[
                "install",
                "reinstall",
                "remove",
                "purge",
                "upgrade",
                "dist-upgrade",
                "full-upgrade",
                "autoremove",
                "build-dep",
            ],
            clusters: false,
        },
        why: "runs packages' maintainer scripts",
        opaque_example: "install -y x",
        visible_example: Some("list --installed"),
    },
    CodeRunner {
        programs: &["dpkg"],
        runs: Runs::Options {
            options: &["-i", "--install", "-r", "--remove", "-P", "--purge", "--configure", "--unpack"],
            clusters: true,
        },
        why: "runs packages' maintainer scripts",
        opaque_example: "-i x.deb",
        visible_example: Some("-l"),
    },
    CodeRunner {
        programs: &["make", "gmake", "bmake", "just", "ninja", "rake", "gradle", "gradlew", "mvn", "ant"],
        runs: Runs::Always,
        why: "runs the commands of a build file (Makefile, justfile, …)",
        opaque_example: "test",
        visible_example: None,
    },
    CodeRunner {
        programs: &["cmake"],
        runs: Runs::Options { options: &["-P", "-E", "--build"], clusters: false },
        why: "runs a script or a command given by an option",
        opaque_example: "-E rm x",
        visible_example: Some("-S . -B build"),
    },
    CodeRunner {
        programs: &["npm"],
        runs: Runs::Options {
            options: &[
                "run",
                "run-script",
                "exec",
                "x",
                "test",
                "t",
                "start",
                "restart",
                "stop",
                "install",
                "i",
                "ci",
                "rebuild",
                "explore",
                "create",
                "init",
                "pack",
                "publish",
            ],
            clusters: false,
        },
        why: "runs package scripts (package.json) or a package's program",
        opaque_example: "run build",
        visible_example: Some("ls"),
    },
    CodeRunner {
        programs: &[
            "npx", "pnpx", "bunx", "uvx", "pipx", "yarn", "pnpm", "bun", "deno", "pytest", "tox", "nox", "parallel",
        ],
        runs: Runs::Always,
        why: "runs package scripts, a package's program, or test or task code from files",
        opaque_example: "run x",
        visible_example: None,
    },
    CodeRunner {
        programs: &["cargo", "go", "uv", "poetry", "pipenv", "pdm", "hatch"],
        runs: Runs::Options {
            options: &["run", "r", "test", "t", "bench", "generate", "tool", "shell", "exec", "pip", "sync"],
            clusters: false,
        },
        why: "runs the project's code or commands written in its files",
        opaque_example: "run",
        visible_example: Some("fmt"),
    },
    CodeRunner {
        programs: &["pip"],
        runs: Runs::Options { options: &["install", "download", "wheel"], clusters: false },
        why: "runs packages' build scripts",
        opaque_example: "install .",
        visible_example: Some("list"),
    },
    CodeRunner {
        programs: &["zip"],
        runs: Runs::Options { options: &["-TT", "--unzip-command"], clusters: false },
        why: "runs the test command an option names",
        opaque_example: "-T -TT 'rm x' a.zip f",
        visible_example: Some("-r a.zip src"),
    },
    CodeRunner {
        programs: &["sudo", "doas"],
        runs: Runs::Options { options: &["-s", "-i", "--shell", "--login", "-e", "--edit"], clusters: true },
        why: "starts a shell or an editor",
        opaque_example: "-s",
        visible_example: Some("-u root ls"),
    },
    CodeRunner {
        programs: &["nc", "ncat", "netcat"],
        runs: Runs::Options { options: &["-e", "-c", "--exec", "--sh-exec", "--lua-exec"], clusters: true },
        why: "runs a command for each connection",
        opaque_example: "-l -p 9 -e /bin/sh",
        visible_example: Some("-z host 80"),
    },
    CodeRunner {
        programs: &["socat", "at", "batch", "crontab", "parallel"],
        runs: Runs::Always,
        why: "runs or schedules commands it reads from its arguments, its stdin or a file",
        opaque_example: "now",
        visible_example: None,
    },
    CodeRunner {
        programs: &["enable"],
        runs: Runs::Options { options: &["-f"], clusters: false },
        why: "loads shell builtins from a shared library",
        opaque_example: "-f ./x.so x",
        visible_example: Some("-n echo"),
    },
    CodeRunner {
        programs: &["hash"],
        runs: Runs::Options { options: &["-p"], clusters: false },
        why: "makes a command name run another file",
        opaque_example: "-p ./x ls",
        visible_example: Some("-r"),
    },
    CodeRunner {
        programs: &["rg"],
        runs: Runs::Options { options: &["--pre"], clusters: false },
        why: "runs a preprocessor command on each file",
        opaque_example: "--pre ./x TODO",
        visible_example: Some("-n TODO src"),
    },
    CodeRunner {
        programs: &["sort"],
        runs: Runs::Options { options: &["--compress-program"], clusters: false },
        why: "runs the compressor an option names",
        opaque_example: "--compress-program=./x -S 1 f",
        visible_example: Some("-u -k 2 f"),
    },
    CodeRunner {
        programs: &["wget"],
        runs: Runs::Options { options: &["--use-askpass", "-e", "--execute"], clusters: false },
        why: "runs a command or startup commands an option names",
        opaque_example: "--use-askpass=./x https://example.com",
        visible_example: Some("-qO- https://example.com"),
    },
    CodeRunner {
        programs: &["fc"],
        runs: Runs::Always,
        why: "runs commands again from the shell's history",
        opaque_example: "-s rm",
        visible_example: None,
    },
    CodeRunner {
        programs: &["xargs"],
        runs: Runs::Xargs,
        why: "adds words it reads from its stdin to the arguments of a command that can run code",
        opaque_example: "find",
        visible_example: Some("grep -l TODO"),
    },
];

/// Variables that make programs run code or a different program, with why. A name ending in
/// `_` is a prefix (`BASH_FUNC_`, `GIT_CONFIG_`).
pub const CODE_VARIABLES: &[(&[&str], &str)] = &[
    (&["ENV", "BASH_ENV"], "makes the shell run the file it names first"),
    (
        &["PROMPT_COMMAND", "PS0", "PS1", "PS4", "SHELLOPTS", "BASHOPTS", "BASH_FUNC_"],
        "holds shell code that runs later",
    ),
    (&["PATH"], "decides which program a command name runs"),
    (&["LD_"], "makes every program load the code it names"),
    (
        &["PAGER", "MANPAGER", "GIT_PAGER", "EDITOR", "VISUAL", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "BROWSER"],
        "names a program that programs start",
    ),
    (&["LESSOPEN", "LESSCLOSE", "LESS"], "makes less run a command"),
    (
        &[
            "GIT_SSH",
            "GIT_SSH_COMMAND",
            "GIT_EXTERNAL_DIFF",
            "GIT_ASKPASS",
            "SSH_ASKPASS",
            "GIT_CONFIG_",
            "GIT_CONFIG",
            "GIT_EXEC_PATH",
            "GIT_TEMPLATE_DIR",
            "GIT_PROXY_COMMAND",
        ],
        "makes git run a command or read configuration that does",
    ),
    (
        &["PERL5OPT", "PERL5LIB", "PERLLIB", "PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "NODE_OPTIONS", "NODE_PATH"],
        "makes an interpreter load code",
    ),
    (&["RUBYOPT", "RUBYLIB", "TAR_OPTIONS", "ZIPOPT", "MAKEFLAGS", "SHELL"], "changes what a program runs"),
];

/// Programs whose arguments are only data: they never run a program named in them, so a
/// rule's program among their words (`echo rm`, `grep rm x`) means nothing. A program in
/// neither this list, [`CODE_RUNNERS`] nor the wrappers is unknown, and its words are checked.
const DATA_PROGRAMS: &[&str] = &[
    "echo",
    "printf",
    "cat",
    "tac",
    "ls",
    "dir",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "ag",
    "head",
    "tail",
    "wc",
    "sort",
    "uniq",
    "cut",
    "paste",
    "join",
    "tr",
    "fold",
    "fmt",
    "nl",
    "od",
    "hexdump",
    "xxd",
    "base64",
    "base32",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "cksum",
    "diff",
    "cmp",
    "comm",
    "file",
    "stat",
    "du",
    "df",
    "pwd",
    "cd",
    "pushd",
    "popd",
    "mkdir",
    "rmdir",
    "touch",
    "chmod",
    "chown",
    "chgrp",
    "test",
    "[",
    "[[",
    "true",
    "false",
    ":",
    "date",
    "cal",
    "whoami",
    "id",
    "groups",
    "uname",
    "hostname",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "which",
    "type",
    "whereis",
    "printenv",
    "sleep",
    "seq",
    "yes",
    "tee",
    "jq",
    "yq",
    "column",
    "expand",
    "unexpand",
    "strings",
    "tree",
    "rustc",
    "rustfmt",
    "gofmt",
    "gcc",
    "cc",
    "g++",
    "clang",
    "ld",
    "ar",
    "curl",
    "wget",
    "gzip",
    "gunzip",
    "zcat",
    "bzip2",
    "xz",
    "unzip",
    "ps",
    "kill",
    "top",
    "free",
    "uptime",
    "export",
    "declare",
    "typeset",
    "readonly",
    "local",
    "set",
    "unset",
    "shift",
    "read",
    "wait",
    "exit",
    "return",
    "break",
    "continue",
    "unlink",
    "shred",
    "truncate",
    "rm",
    "dd",
    "patch",
    "nproc",
    "lsof",
    "getent",
    "locale",
];

/// Whether a word has an unquoted glob or brace expansion (`unquoted` holds the word's
/// characters with every quoted or escaped one as `\0`).
pub(super) fn is_pattern(unquoted: &str) -> bool {
    let glob = unquoted.contains(['*', '?']) || unquoted.find('[').is_some_and(|i| unquoted[i + 1..].contains(']'));
    let brace = unquoted.find('{').is_some_and(|open| {
        let after = &unquoted[open + 1..];
        after.find('}').is_some_and(|close| after[..close].contains(',') || after[..close].contains(".."))
    });
    glob || brace
}

/// Why an assignment (`BASH_ENV=f`, before a command, after `export` or `env`) makes what
/// runs invisible.
pub(super) fn assignment(word: &str) -> Option<String> {
    let (name, _) = word.split_once('=')?;
    let name = name.strip_suffix('+').unwrap_or(name);
    CODE_VARIABLES.iter().find_map(|(names, why)| {
        names
            .iter()
            .any(|n| if n.ends_with('_') { name.starts_with(n) } else { name == *n })
            .then(|| format!("`{name}=…` {why}"))
    })
}

/// What `of_command` needs to know about the command beyond its words.
pub(super) struct Seen<'a> {
    /// The program word is a glob or brace expansion.
    pub program_pattern: bool,
    /// Per word: no expansion in it.
    pub exactness: &'a [bool],
    pub stdin: Stdin,
    /// The command's `-c` script (or trap code, alias value) is parsed and its commands seen.
    pub script_seen: bool,
}

/// Directories whose programs are the system's (a program named by another path is a file
/// the agent may have written).
const SYSTEM_DIRS: &[&str] = &["/bin/", "/usr/bin/", "/sbin/", "/usr/sbin/", "/usr/local/bin/", "/usr/local/sbin/"];

/// Why one simple command is opaque, or `None`. `name` is the program's base name, `argv`
/// the words after quote removal, `inner` the program a wrapper runs (for `xargs`).
pub(super) fn of_command(name: &str, argv: &[String], seen: &Seen<'_>, inner: Option<&str>) -> Option<String> {
    let program = argv[0].as_str();
    if seen.program_pattern {
        return Some(format!(
            "the program `{program}` is a pattern the shell expands, so which program runs is only known when the line runs"
        ));
    }
    if !program.is_ascii() {
        return Some(format!(
            "the program name `{program}` has characters outside ASCII, which can imitate another name"
        ));
    }
    if program.contains("{}") {
        return Some(format!("the program `{program}` is each file `find` finds"));
    }
    if program.contains('/')
        && (program.contains("/../")
            || !SYSTEM_DIRS.iter().any(|d| program.strip_prefix(d).is_some_and(|rest| !rest.contains('/'))))
    {
        return Some(format!("`{program}` runs the program in that file, which the matcher cannot see into"));
    }
    if matches!(name, "export" | "declare" | "typeset" | "readonly" | "local" | "env")
        && let Some(why) = argv[1..].iter().find_map(|w| assignment(w))
    {
        return Some(why);
    }
    let args = &argv[1..];
    if matches!(args, [only] if only == "--version" || only == "--help") {
        return None;
    }
    let base = unversioned(name);
    CODE_RUNNERS
        .iter()
        .filter(|r| r.programs.contains(&base) || r.programs.contains(&name))
        .find_map(|r| runner_opacity(r, name, args, seen, inner))
}

/// `python3.12` → `python`, `lua5.4` → `lua`, `pip3` → `pip` (a name that is only digits
/// stays).
fn unversioned(name: &str) -> &str {
    let trimmed = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '-');
    if trimmed.is_empty() { name } else { trimmed }
}

fn runner_opacity(r: &CodeRunner, name: &str, args: &[String], seen: &Seen<'_>, inner: Option<&str>) -> Option<String> {
    let exact = |i: usize| seen.exactness.get(i + 1).copied().unwrap_or(true);
    let stdin_part = |extra: &str| match seen.stdin {
        Stdin::Pipe => format!("… | {name}{extra}"),
        Stdin::File => format!("{name}{extra} < …"),
        Stdin::Inherited => format!("{name}{extra}"),
    };
    match &r.runs {
        Runs::Shell | Runs::Always if seen.script_seen => None,
        Runs::Shell => {
            let operand = args.iter().find(|a| !a.starts_with('-') && !a.starts_with('+'));
            match operand {
                Some(file) if !args.iter().any(|a| a == "-s") => {
                    Some(format!("`{name}` runs the program in the file `{file}`"))
                }
                _ => {
                    let s = if args.iter().any(|a| a == "-s") { " -s" } else { "" };
                    Some(format!("`{name}` reads a program from its stdin (`{}`)", stdin_part(s)))
                }
            }
        }
        Runs::Interpreter(inline) => {
            if let Some(opt) = args.iter().find(|a| inline.iter().any(|o| option_matches(o, a, true))) {
                return Some(format!("`{name}` runs inline code (`{opt}`)"));
            }
            match args.iter().find(|a| !a.starts_with('-')) {
                Some(file) => Some(format!("`{name}` runs the program in the file `{file}`")),
                None => Some(format!("`{name}` reads a program from its stdin (`{}`)", stdin_part(""))),
            }
        }
        Runs::Awk => awk_opacity(name, args, &exact),
        Runs::Sed => sed_opacity(name, args, &exact),
        Runs::Options { options, clusters } => {
            // Old-style tar (`tar xIf cmd a.tar`): the first word is a group of letters.
            let tar_style;
            let args = match args.first() {
                Some(a)
                    if name.contains("tar") && !a.starts_with('-') && a.chars().all(|c| c.is_ascii_alphabetic()) =>
                {
                    tar_style = [vec![format!("-{a}")], args[1..].to_vec()].concat();
                    &tar_style[..]
                }
                _ => args,
            };
            let first = first_operand(args);
            options.iter().find_map(|spec| {
                let hit = match spec.split_once(' ') {
                    Some((sub, opt)) => first.filter(|&i| args[i] == sub).and_then(|i| {
                        args[i + 1..].iter().find(|a| option_matches(opt, a, *clusters)).map(|a| format!("{sub} {a}"))
                    }),
                    None if *spec == "+" => args.iter().find(|a| a.starts_with('+')).cloned(),
                    // A subcommand anywhere among the operands: global options with values
                    // (`npm -w pkg run x`) cannot push it out of sight.
                    None if !spec.starts_with('-') => args.iter().find(|a| *a == spec).cloned(),
                    None => args.iter().find(|a| option_matches(spec, a, *clusters)).cloned(),
                };
                hit.map(|part| format!("`{name}` {} (`{part}`)", r.why))
            })
        }
        Runs::OptionValue { option, runs_code } => args.iter().enumerate().find_map(|(i, a)| {
            let value = if a == option { args.get(i + 1).map(String::as_str) } else { a.strip_prefix(option) }?;
            runs_code(value).then(|| format!("`{name}` {} (`{option} {value}`)", r.why))
        }),
        Runs::GitConfig => {
            let end = first_operand(args).unwrap_or(args.len());
            // `git config core.pager 'rm x'` (or `git config set …`): a later git runs it.
            if args.get(end).is_some_and(|a| a == "config")
                && !args.iter().any(|a| {
                    matches!(
                        a.as_str(),
                        "--get" | "--get-all" | "--get-regexp" | "--list" | "-l" | "--unset" | "get" | "list"
                    )
                })
            {
                let operands: Vec<&String> =
                    args[end + 1..].iter().filter(|a| !a.starts_with('-') && *a != "set").collect();
                if let [key, _value, ..] = operands.as_slice()
                    && !git_key_is_inert(key)
                {
                    return Some(format!(
                        "`{name}` sets a configuration value that can name a command (`config {key}`)"
                    ));
                }
            }
            let mut i = 0;
            while i < end {
                let a = &args[i];
                let env = a.starts_with("--config-env");
                let value = if a == "-c" || a == "--config-env" {
                    i += 1;
                    args.get(i).map(String::as_str)
                } else {
                    a.strip_prefix("-c").or_else(|| a.strip_prefix("--config-env="))
                };
                if let Some(v) = value
                    && (env || !git_key_is_inert(v))
                {
                    let option = if env { "--config-env" } else { "-c" };
                    return Some(format!("`{name}` {} (`{option} {v}`)", r.why));
                }
                i += 1;
            }
            None
        }
        Runs::Xargs => {
            let program = inner.unwrap_or("echo");
            (!DATA_PROGRAMS.contains(&program)).then(|| {
                format!(
                    "`{name}` adds words it reads from its stdin to the arguments of `{program}`, which can make it run code"
                )
            })
        }
        Runs::Always => Some(format!("`{name}` {}", r.why)),
    }
}

/// An option spec against one word: `--opt` is the word or `--opt=…`; a one-letter `-X` is
/// the word, `-Xvalue`, or (with `clusters`) a group of letters containing X; a longer
/// single-dash option (`-exec`, `-TT`) is the word itself.
fn option_matches(spec: &str, word: &str, clusters: bool) -> bool {
    if word == spec {
        return true;
    }
    if spec.starts_with("--") {
        return word.strip_prefix(spec).is_some_and(|rest| rest.starts_with('='));
    }
    let letter = spec.strip_prefix('-').filter(|l| l.chars().count() == 1);
    match letter {
        Some(l) if !word.starts_with("--") && word.len() > 2 => {
            word.strip_prefix(spec).is_some()
                || (clusters
                    && word.starts_with('-')
                    && word[1..].chars().all(|c| c.is_ascii_alphanumeric())
                    && word[1..].contains(l))
        }
        _ => false,
    }
}

/// The index of the first operand (the subcommand): the first word without a dash that is not
/// the value of a global option.
fn first_operand(args: &[String]) -> Option<usize> {
    const WITH_VALUE: &[&str] = &["-C", "-c", "--git-dir", "--work-tree", "--namespace", "--prefix", "--cwd", "--dir"];
    let mut i = 0;
    while i < args.len() {
        if WITH_VALUE.contains(&args[i].as_str()) {
            i += 2;
        } else if args[i].starts_with('-') || args[i].starts_with('+') {
            i += 1;
        } else {
            return Some(i);
        }
    }
    None
}

/// git `-c` keys that never name a command (others — `core.pager`, `core.sshCommand`,
/// `alias.*`, `core.fsmonitor`, `include.path`, … — may).
fn git_key_is_inert(key_value: &str) -> bool {
    const INERT: &[&str] = &[
        "user.name",
        "user.email",
        "color.",
        "advice.",
        "init.defaultbranch",
        "core.quotepath",
        "core.autocrlf",
        "commit.gpgsign",
        "tag.gpgsign",
        "pull.rebase",
        "push.default",
        "safe.directory",
        "log.",
        "diff.renames",
        "merge.conflictstyle",
    ];
    let key = key_value.split('=').next().unwrap_or("").to_ascii_lowercase();
    INERT.iter().any(|k| if k.ends_with('.') { key.starts_with(k) } else { key == *k })
}

/// ssh options that run a local command or read a file that may (`ProxyCommand`,
/// `LocalCommand`, `KnownHostsCommand`, `Match exec`, `Include`).
fn ssh_option_runs_code(value: &str) -> bool {
    let v = value.to_ascii_lowercase();
    ["command", "exec", "include", "match", "pkcs11provider", "securitykeyprovider"].iter().any(|k| v.contains(k))
}

fn awk_opacity(name: &str, args: &[String], exact: &dyn Fn(usize) -> bool) -> Option<String> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if ["-f", "--file", "-E", "--exec", "-i", "--include", "-l", "--load"].contains(&a)
            || (a.starts_with("-f") && a.len() > 2)
        {
            return Some(format!("`{name}` runs the program in a file (`{a}`)"));
        }
        if ["-v", "-F", "--assign", "--field-separator"].contains(&a) {
            i += 2;
            continue;
        }
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') {
            break;
        }
        i += 1;
    }
    let program = args.get(i).or_else(|| args.iter().find(|a| a.starts_with("--source") || *a == "-e"))?;
    if !exact(i) {
        return Some(format!("`{name}` runs a program only known when the line runs (`{program}`)"));
    }
    // Every word, not only the program: gawk also takes program text in `-e`/`--source`.
    let starts =
        ["system", "|", ">", "@", "ENVIRON", "PROCINFO"].into_iter().find(|k| args.iter().any(|a| a.contains(k)));
    starts.map(|k| format!("`{name}` runs a program that can start commands or write files (`{k}`)"))
}

fn sed_opacity(name: &str, args: &[String], exact: &dyn Fn(usize) -> bool) -> Option<String> {
    let mut scripts = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "-f" || a == "--file" || a.starts_with("--file=") || (a.starts_with("-f") && a.len() > 2) {
            return Some(format!("`{name}` runs a script from a file (`{a}`)"));
        }
        if a == "-e" || a == "--expression" {
            scripts.push(i + 1);
            i += 2;
            continue;
        }
        if let Some(_inline) = a.strip_prefix("--expression=") {
            scripts.push(i);
        }
        i += 1;
    }
    if scripts.is_empty() {
        // The first operand is the script.
        let mut j = 0;
        while j < args.len() && args[j].starts_with('-') {
            j += if ["-l", "--line-length"].contains(&args[j].as_str()) { 2 } else { 1 };
        }
        if j < args.len() {
            scripts.push(j);
        }
    }
    for at in scripts {
        let Some(script) = args.get(at) else { continue };
        let script = script.strip_prefix("--expression=").unwrap_or(script);
        if !exact(at) {
            return Some(format!("`{name}` runs a script only known when the line runs (`{script}`)"));
        }
        if sed_runs_commands(script) {
            return Some(format!(
                "`{name}` runs a script with the `e` command or flag, which runs commands (`{script}`)"
            ));
        }
    }
    None
}

/// Whether a sed script has an `e` command or an `s///e` flag; what the scanner does not
/// understand counts as running commands.
fn sed_runs_commands(script: &str) -> bool {
    let c: Vec<char> = script.chars().collect();
    let mut i = 0;
    let skip_delimited = |i: &mut usize, parts: usize| -> bool {
        let Some(&delim) = c.get(*i) else { return false };
        *i += 1;
        let mut seen = 0;
        while seen < parts {
            match c.get(*i) {
                None => return false,
                Some('\\') => *i += 2,
                Some(&x) if x == delim => {
                    seen += 1;
                    *i += 1;
                }
                Some(_) => *i += 1,
            }
        }
        true
    };
    let to_line_end = |i: &mut usize| {
        while c.get(*i).is_some_and(|&x| x != '\n') {
            *i += 1;
        }
    };
    while i < c.len() {
        match c[i] {
            ' ' | '\t' | '\n' | ';' | '{' | '}' | '!' => i += 1,
            '0'..='9' | '$' | ',' | '~' | '+' => i += 1,
            '/' => {
                if !skip_delimited(&mut i, 1) {
                    return true;
                }
                while c.get(i).is_some_and(|&x| x == 'I' || x == 'M') {
                    i += 1;
                }
            }
            '\\' => {
                i += 1;
                if !skip_delimited(&mut i, 1) {
                    return true;
                }
            }
            'e' => return true,
            's' => {
                i += 1;
                if !skip_delimited(&mut i, 2) {
                    return true;
                }
                while let Some(&f) = c.get(i) {
                    match f {
                        'e' => return true,
                        'w' | 'W' => {
                            to_line_end(&mut i);
                            break;
                        }
                        'g' | 'p' | 'i' | 'I' | 'm' | 'M' | '0'..='9' => i += 1,
                        _ => break,
                    }
                }
            }
            'y' => {
                i += 1;
                if !skip_delimited(&mut i, 2) {
                    return true;
                }
            }
            'a' | 'i' | 'c' | 'r' | 'R' | 'w' | 'W' | '#' | ':' | 'b' | 't' | 'T' => {
                to_line_end_or_semicolon(&c, &mut i)
            }
            'p' | 'P' | 'd' | 'D' | 'n' | 'N' | 'g' | 'G' | 'h' | 'H' | 'x' | 'l' | 'L' | 'q' | 'Q' | 'z' | '='
            | 'F' => i += 1,
            _ => return true,
        }
    }
    false
}

/// Labels and branches end at `;` (GNU); text and file names at the line's end.
fn to_line_end_or_semicolon(c: &[char], i: &mut usize) {
    let label = matches!(c[*i], ':' | 'b' | 't' | 'T');
    while c.get(*i).is_some_and(|&x| x != '\n' && !(label && x == ';')) {
        *i += 1;
    }
}

/// Whether the program's arguments are known to be only data, or it is in the table.
pub(super) fn is_known(name: &str) -> bool {
    let base = unversioned(name);
    DATA_PROGRAMS.contains(&name)
        || CODE_RUNNERS.iter().any(|r| r.programs.contains(&base) || r.programs.contains(&name))
}

/// Whether `name` is a shell, an interpreter or a program that always runs code: a program
/// that an unknown wrapper may be handing its code to (`nsenter -t 1 sh < f`).
pub fn runs_code_by_name(name: &str) -> bool {
    let base = unversioned(name);
    CODE_RUNNERS.iter().any(|r| {
        matches!(r.runs, Runs::Shell | Runs::Interpreter(_) | Runs::Always)
            && (r.programs.contains(&base) || r.programs.contains(&name))
    })
}
