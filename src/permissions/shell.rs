//! A `shell.exec` command line as permission rules see it: every simple command in it, with
//! the wrappers around them unwrapped — `a && b`, `a; b`, `a || b`, pipes, `( … )`, `{ …; }`,
//! `$( … )`, backticks, `<( … )`, `sh -c '…'`, `eval`, `trap '…'`, `alias x='…'`, `env X=1 cmd`,
//! `exec`, `command`, `nice`, `nohup`, `timeout`, `sudo`, `xargs`, `watch`, `flock`,
//! `script -c`, `busybox`, every `find -exec`. A line this does not understand (heredocs,
//! `case`, function keywords, unbalanced quotes, arithmetic) is [`Unparsable`], and the engine
//! asks for it: it is never allowed. A command whose effect the line does not show (`… | sh`,
//! `python3 -c`, `tar --to-command=…`) carries why it is *opaque* (`shell/opaque.rs`), and a
//! program this knows nothing about is marked, so the engine can check its words.
//!
//! Written by hand: the one maintained full shell parser (`brush-parser`) brings `insta`,
//! `cached` and `bon` as normal dependencies; `conch-parser` is unmaintained since 2019;
//! `shell-words` splits words but knows no operators or substitutions. What matching needs is
//! only words, operators and substitutions, and this scanner refuses everything else.

/// One simple command of a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The words after quote removal, leading assignments and redirections left out.
    pub argv: Vec<String>,
    /// False when a word has an expansion (`$X`, `$(…)`, a glob is fine): its real value is
    /// unknown, so the command can match `deny` and `ask` rules by its visible text but never an
    /// `allow` rule.
    pub exact: bool,
    /// A wrapper (`timeout 5 …`, `env …`, `sh -c …`) whose inner command is listed too: `deny`
    /// and `ask` rules see it, `allow` only needs the inner command to be allowed. `sudo` is
    /// not transparent: it must be allowed itself.
    pub wrapper: bool,
    /// Why what this command does cannot be seen from the line (`… | sh`, `python3 -c`,
    /// `tar --to-command=…`), as `opaque.rs`'s table says; `None` when it can.
    pub opaque: Option<String>,
    /// A program the matcher knows nothing about (neither a wrapper, nor in the table of
    /// programs that run code, nor one whose arguments are only data): it may run its
    /// arguments, so the engine checks them for programs a rule names.
    pub unknown: bool,
    /// The targets of the command's redirections (`> f`, `< f`), which path rules see.
    pub redirects: Vec<String>,
}

impl Command {
    /// The command as rules match it: the program's base name (`/bin/rm` is `rm`), then the
    /// arguments, separated by single spaces.
    pub fn text(&self) -> String {
        let mut words = self.argv.iter();
        // A bare `PATH=/x` is listed as it is written.
        let mut text = words
            .next()
            .map(|w| if is_assignment(w) { w.as_str() } else { w.rsplit('/').next().unwrap_or(w) }.to_string())
            .unwrap_or_default();
        for w in words {
            text.push(' ');
            text.push_str(w);
        }
        text
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unparsable(pub String);

mod opaque;
pub use opaque::{CODE_RUNNERS, CODE_VARIABLES, CodeRunner, Runs, runs_code_by_name};

/// Deepest nesting of `sh -c`, `$(…)`, `eval` followed; deeper lines are unparsable.
const MAX_DEPTH: usize = 8;

/// A line that cannot be matched with confidence, and the commands that were seen in it
/// anyway (a substitution's commands run whatever the rest of the line turns out to be), so a
/// `deny` or `ask` rule still matches `$(rm x)` in a line that is otherwise unparsable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct Unparsed {
    pub why: Unparsable,
    pub seen: Vec<Command>,
}

/// The variables a call sets for its command (`shell.exec`'s `env`) that make it opaque
/// (`PATH`, `BASH_ENV`, `LD_PRELOAD`, …), as commands of the line: wrappers (an `allow` rule
/// needs only the line's own commands) that carry why.
pub fn call_environment<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<Command> {
    names
        .into_iter()
        .filter_map(|name| {
            let why = opaque::assignment(&format!("{name}=…"))?;
            Some(Command {
                argv: vec![format!("{name}=…")],
                exact: true,
                wrapper: true,
                opaque: Some(format!("{why} (set by the call's `env`)")),
                unknown: false,
                redirects: Vec::new(),
            })
        })
        .collect()
}

/// Every simple command of `line`, wrappers unwrapped.
pub fn commands(line: &str) -> Result<Vec<Command>, Unparsed> {
    let mut out = Vec::new();
    match parse_line(line, 0, &mut out) {
        Ok(()) => Ok(out),
        Err(why) => Err(Unparsed { why, seen: out }),
    }
}

fn parse_line(line: &str, depth: usize, out: &mut Vec<Command>) -> Result<(), Unparsable> {
    if depth > MAX_DEPTH {
        return Err(Unparsable(format!("commands are nested more than {MAX_DEPTH} levels deep")));
    }
    let mut lexer = Lexer { chars: line.chars().collect(), pos: 0, nested: Vec::new() };
    let outer = parse_tokens(&mut lexer, depth, out);
    // The substitutions found so far are parsed even when the line is not: what they run is
    // seen by deny and ask rules.
    let mut nested = Ok(());
    for inner in std::mem::take(&mut lexer.nested) {
        if let Err(e) = parse_line(&inner, depth + 1, out) {
            nested = nested.and(Err(e));
        }
    }
    outer.and(nested)
}

fn parse_tokens(lexer: &mut Lexer, depth: usize, out: &mut Vec<Command>) -> Result<(), Unparsable> {
    let mut current: Vec<Word> = Vec::new();
    let mut redirects: Vec<String> = Vec::new();
    let mut stdin = Stdin::Inherited;
    // The redirection targets go with the command they belong to (the first one `finish`
    // lists for it); a line of only redirections (`> f`) is listed as `:` (which is what it
    // runs), a wrapper, so path rules see what it truncates and `allow` rules need nothing more.
    let finish_with = |words: Vec<Word>, redirects: Vec<String>, stdin, out: &mut Vec<Command>| {
        let before = out.len();
        finish(words, depth, stdin, out)?;
        if redirects.is_empty() {
            return Ok(());
        }
        match out.get_mut(before) {
            Some(first) => first.redirects = redirects,
            None => out.push(Command {
                argv: vec![":".to_string()],
                exact: true,
                wrapper: true,
                opaque: None,
                unknown: false,
                redirects,
            }),
        }
        Ok::<(), Unparsable>(())
    };
    loop {
        match lexer.next_token()? {
            Token::End => {
                finish_with(std::mem::take(&mut current), std::mem::take(&mut redirects), stdin, out)?;
                break;
            }
            Token::Separator { pipe } => {
                finish_with(std::mem::take(&mut current), std::mem::take(&mut redirects), stdin, out)?;
                stdin = if pipe { Stdin::Pipe } else { Stdin::Inherited };
            }
            Token::Word(w) => current.push(w),
            Token::Redirect { input } => {
                if input {
                    stdin = Stdin::File;
                }
                // The redirection's target is a word; its substitutions were collected.
                match lexer.next_token()? {
                    Token::Word(target) => redirects.push(target.text),
                    _ => return Err(Unparsable("a redirection without a target".into())),
                }
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone)]
struct Word {
    text: String,
    exact: bool,
    /// An unquoted glob (`*`, `?`, `[…]`) or brace expansion (`{a,b}`, `{1..3}`): the words
    /// the shell makes of it are only known when it runs.
    pattern: bool,
}

enum Token {
    Word(Word),
    /// `;`, `&&`, `||`, `&`, a newline, `(`, `)`; `pipe` for `|` and `|&`, whose next command
    /// reads what this one writes.
    Separator {
        pipe: bool,
    },
    /// `input`: the target is read as the command's stdin (`< f`), not written.
    Redirect {
        input: bool,
    },
    End,
}

/// Where a command's stdin comes from, so an opaque program reading it says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdin {
    Inherited,
    Pipe,
    File,
}

struct Lexer {
    chars: Vec<char>,
    pos: usize,
    /// Command substitutions found (`$(…)`, backticks, `<(…)`), parsed after the line.
    nested: Vec<String>,
}

impl Lexer {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    fn next_token(&mut self) -> Result<Token, Unparsable> {
        while let Some(c) = self.peek(0) {
            if c == ' ' || c == '\t' {
                self.pos += 1;
            } else if c == '\\' && self.peek(1) == Some('\n') {
                self.pos += 2;
            } else {
                break;
            }
        }
        let Some(c) = self.peek(0) else { return Ok(Token::End) };
        match c {
            '#' => {
                while self.peek(0).is_some_and(|c| c != '\n') {
                    self.pos += 1;
                }
                Ok(Token::Separator { pipe: false })
            }
            '\n' | ';' | '&' | '|' | '(' | ')' => {
                if c == ';' && self.peek(1) == Some(';') {
                    return Err(Unparsable("`;;` belongs to a case statement, which is not matched".into()));
                }
                if c == '&' && self.peek(1) == Some('>') {
                    self.pos += if self.peek(2) == Some('>') { 3 } else { 2 };
                    return Ok(Token::Redirect { input: false });
                }
                if c == '(' && self.peek(1) == Some('(') {
                    return Err(Unparsable("arithmetic `((…))` is not matched".into()));
                }
                self.pos += 1;
                // `&&`, `||` and `|&` are one operator each.
                let pipe = c == '|' && self.peek(0) != Some('|');
                if (matches!(c, '&' | '|') && self.peek(0) == Some(c)) || (c == '|' && self.peek(0) == Some('&')) {
                    self.pos += 1;
                }
                Ok(Token::Separator { pipe })
            }
            '<' | '>' => self.redirect(),
            '0'..='9' if self.fd_redirect() => self.redirect(),
            _ => self.word().map(Token::Word),
        }
    }

    /// `2>`, `10<` : digits right before a redirection operator.
    fn fd_redirect(&self) -> bool {
        let mut i = 0;
        while self.peek(i).is_some_and(|c| c.is_ascii_digit()) {
            i += 1;
        }
        matches!(self.peek(i), Some('<' | '>'))
    }

    fn redirect(&mut self) -> Result<Token, Unparsable> {
        let fd_start = self.pos;
        while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        let fd: String = self.chars[fd_start..self.pos].iter().collect();
        let op = self.peek(0);
        if self.peek(1) == Some('(') {
            // `<(cmd)` / `>(cmd)`: a process substitution is a command of its own.
            self.pos += 2;
            let inner = self.until_close_paren()?;
            self.nested.push(inner);
            return Ok(Token::Word(Word { text: format!("{}(…)", op.unwrap_or('<')), exact: false, pattern: false }));
        }
        self.pos += 1;
        let mut input = op == Some('<') && (fd.is_empty() || fd == "0");
        match (op, self.peek(0)) {
            (Some('<'), Some('<')) => return Err(Unparsable("heredocs (`<<`) are not matched".into())),
            (Some('>'), Some('>' | '|')) | (Some('<' | '>'), Some('&')) | (Some('<'), Some('>')) => {
                // `<&3` still feeds stdin; `<>` opens it for writing too.
                input &= self.peek(0) == Some('&');
                self.pos += 1;
            }
            _ => {}
        }
        // `2>&1`: the target of a duplication is a descriptor, read as the target word.
        Ok(Token::Redirect { input })
    }

    fn word(&mut self) -> Result<Word, Unparsable> {
        let mut text = String::new();
        let mut exact = true;
        // The characters the shell may expand: unquoted and unescaped (a quoted or escaped one
        // is a `\0` placeholder, so `'{'a,b}` is not a brace expansion).
        let mut unquoted = String::new();
        while let Some(c) = self.peek(0) {
            if !matches!(c, '\\' | '\'' | '"') {
                unquoted.push(c);
            } else {
                unquoted.push('\0');
            }
            match c {
                ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>' => break,
                '\\' => {
                    self.pos += 1;
                    match self.peek(0) {
                        Some('\n') => self.pos += 1,
                        Some(c) => {
                            text.push(c);
                            self.pos += 1;
                        }
                        None => return Err(Unparsable("the line ends with a lone backslash".into())),
                    }
                }
                '\'' => {
                    self.pos += 1;
                    loop {
                        match self.peek(0) {
                            None => return Err(Unparsable("a single quote is not closed".into())),
                            Some('\'') => {
                                self.pos += 1;
                                break;
                            }
                            Some(c) => {
                                text.push(c);
                                self.pos += 1;
                            }
                        }
                    }
                }
                '"' => {
                    self.pos += 1;
                    loop {
                        match self.peek(0) {
                            None => return Err(Unparsable("a double quote is not closed".into())),
                            Some('"') => {
                                self.pos += 1;
                                break;
                            }
                            Some('\\') => {
                                let next = self.peek(1);
                                match next {
                                    Some(n @ ('"' | '\\' | '$' | '`')) => {
                                        text.push(n);
                                        self.pos += 2;
                                    }
                                    Some('\n') => self.pos += 2,
                                    _ => {
                                        text.push('\\');
                                        self.pos += 1;
                                    }
                                }
                            }
                            Some('$') => exact &= self.dollar(&mut text)?,
                            Some('`') => {
                                self.backtick()?;
                                text.push_str("`…`");
                                exact = false;
                            }
                            Some(c) => {
                                text.push(c);
                                self.pos += 1;
                            }
                        }
                    }
                }
                '$' => exact &= self.dollar(&mut text)?,
                '`' => {
                    self.backtick()?;
                    text.push_str("`…`");
                    exact = false;
                }
                c => {
                    text.push(c);
                    self.pos += 1;
                }
            }
        }
        let pattern = opaque::is_pattern(&unquoted);
        Ok(Word { text, exact, pattern })
    }

    /// At a `$`: a command substitution is collected, a parameter expansion makes the word
    /// inexact; `$'…'` (ANSI-C quoting) is refused. Returns whether the word stays exact.
    fn dollar(&mut self, text: &mut String) -> Result<bool, Unparsable> {
        match self.peek(1) {
            Some('(') if self.peek(2) == Some('(') => Err(Unparsable("arithmetic `$((…))` is not matched".into())),
            Some('(') => {
                self.pos += 2;
                let inner = self.until_close_paren()?;
                self.nested.push(inner);
                text.push_str("$(…)");
                Ok(false)
            }
            Some('{') => {
                self.pos += 2;
                let mut depth = 1;
                while depth > 0 {
                    match self.peek(0) {
                        None => return Err(Unparsable("a `${` is not closed".into())),
                        Some('{') => depth += 1,
                        Some('}') => depth -= 1,
                        Some('$' | '`') => {
                            return Err(Unparsable("a substitution inside `${…}` is not matched".into()));
                        }
                        _ => {}
                    }
                    self.pos += 1;
                }
                text.push_str("${…}");
                Ok(false)
            }
            Some('\'' | '"') => Err(Unparsable("`$'…'` and `$\"…\"` quoting are not matched".into())),
            Some(c) if c.is_ascii_alphanumeric() || "_@*#?$!-".contains(c) => {
                self.pos += 1;
                if c.is_ascii_alphabetic() || c == '_' {
                    while self.peek(0).is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                        self.pos += 1;
                    }
                } else {
                    self.pos += 1;
                }
                text.push_str("$…");
                Ok(false)
            }
            _ => {
                text.push('$');
                self.pos += 1;
                Ok(true)
            }
        }
    }

    fn backtick(&mut self) -> Result<(), Unparsable> {
        self.pos += 1;
        let mut inner = String::new();
        loop {
            match self.peek(0) {
                None => return Err(Unparsable("a backtick is not closed".into())),
                Some('`') => {
                    self.pos += 1;
                    break;
                }
                Some('\\') if matches!(self.peek(1), Some('`' | '\\' | '$')) => {
                    inner.push(self.peek(1).unwrap_or('\\'));
                    self.pos += 2;
                }
                Some(c) => {
                    inner.push(c);
                    self.pos += 1;
                }
            }
        }
        self.nested.push(inner);
        Ok(())
    }

    /// The text up to the `)` that closes the `(` just passed, respecting quotes and nesting.
    fn until_close_paren(&mut self) -> Result<String, Unparsable> {
        let start = self.pos;
        let mut depth = 1;
        while let Some(c) = self.peek(0) {
            match c {
                '\\' => self.pos += 1,
                '\'' => {
                    self.pos += 1;
                    while self.peek(0).is_some_and(|c| c != '\'') {
                        self.pos += 1;
                    }
                }
                '"' => {
                    self.pos += 1;
                    while let Some(c) = self.peek(0) {
                        if c == '\\' {
                            self.pos += 1;
                        } else if c == '"' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        let inner: String = self.chars[start..self.pos].iter().collect();
                        self.pos += 1;
                        return Ok(inner);
                    }
                }
                _ => {}
            }
            self.pos += 1;
        }
        Err(Unparsable("a `(` is not closed".into()))
    }
}

/// Keywords that open or close a compound command; what follows them is a command.
const LEADING_KEYWORDS: &[&str] = &["if", "then", "else", "elif", "do", "while", "until", "!", "{", "}", "time"];
const CLOSING_KEYWORDS: &[&str] = &["fi", "done", "}"];

/// The programs `inner_command` unwraps: what they run is listed as a command of its own.
pub const WRAPPERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ash", "ksh", "mksh", "yash", "fish", "tcsh", "csh", "rbash", "su", "script", "eval",
    "trap", "alias", "env", "exec", "command", "builtin", "nohup", "setsid", "nice", "stdbuf", "ionice", "sudo",
    "doas", "xargs", "time", "unbuffer", "watch", "timeout", "flock", "chroot", "busybox", "toybox", "find",
];

fn finish(mut words: Vec<Word>, depth: usize, stdin: Stdin, out: &mut Vec<Command>) -> Result<(), Unparsable> {
    while words.first().is_some_and(|w| w.exact && LEADING_KEYWORDS.contains(&w.text.as_str())) {
        // `time -p cmd`: the keyword's one option.
        if words.remove(0).text == "time" && words.first().is_some_and(|w| w.text == "-p") {
            words.remove(0);
        }
    }
    if words.len() == 1 && words[0].exact && CLOSING_KEYWORDS.contains(&words[0].text.as_str()) {
        return Ok(());
    }
    if let Some(first) = words.first().filter(|w| w.exact) {
        match first.text.as_str() {
            "case" | "esac" | "function" | "select" | "coproc" => {
                return Err(Unparsable(format!("`{}` statements are not matched", first.text)));
            }
            // `for x in a b; do …`: the loop header runs nothing.
            "for" => return Ok(()),
            _ => {}
        }
    }
    // Leading assignments (`X=1 cmd`) set variables; the command is what follows. A variable
    // that makes programs run code (`BASH_ENV=f`, `PATH=…`) makes that command opaque.
    let mut env_opacity = None;
    while words.first().is_some_and(|w| is_assignment(&w.text)) {
        let assignment = words.remove(0);
        env_opacity = env_opacity.or_else(|| opaque::assignment(&assignment.text));
        if words.is_empty()
            && let Some(why) = env_opacity.take()
        {
            // A bare `PATH=…` changes what the later commands run: it is listed, as a wrapper
            // (an `allow` rule needs only the commands after it), to carry its opacity.
            out.push(Command {
                argv: vec![assignment.text],
                exact: assignment.exact,
                wrapper: true,
                opaque: Some(why),
                unknown: false,
                redirects: Vec::new(),
            });
        }
    }
    if words.is_empty() {
        return Ok(());
    }
    unwrap(words, depth, stdin, env_opacity, out)
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            // `PATH+=:/x` appends.
            let name = name.strip_suffix('+').unwrap_or(name);
            name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// Records the command and, for a wrapper, the command it runs.
fn unwrap(
    words: Vec<Word>,
    depth: usize,
    stdin: Stdin,
    env_opacity: Option<String>,
    out: &mut Vec<Command>,
) -> Result<(), Unparsable> {
    if !words[0].exact {
        // `$(echo rm) -rf x`, `${RM:-rm} x`: what runs is only known when it runs.
        return Err(Unparsable(format!("the program `{}` is only known when the line runs", words[0].text)));
    }
    let exact = words.iter().all(|w| w.exact);
    let argv: Vec<String> = words.iter().map(|w| w.text.clone()).collect();
    let name = argv[0].rsplit('/').next().unwrap_or(&argv[0]).to_string();
    let inner = inner_command(&name, &words)?;
    let wrapper = !matches!(inner, Inner::None) && !matches!(name.as_str(), "sudo" | "doas");
    let inner_program = match &inner {
        Inner::Words(groups) => groups
            .first()
            .and_then(|g| g.iter().find(|w| !is_assignment(&w.text)))
            .map(|w| w.text.rsplit('/').next().unwrap_or(&w.text).to_string()),
        _ => None,
    };
    let script_seen = matches!(&inner, Inner::Scripts(s) if !s.is_empty() && s.iter().all(|w| w.exact));
    let exactness: Vec<bool> = words.iter().map(|w| w.exact).collect();
    let seen = opaque::Seen { program_pattern: words[0].pattern, exactness: &exactness, stdin, script_seen };
    let mut opacity = env_opacity.or_else(|| opaque::of_command(&name, &argv, &seen, inner_program.as_deref()));
    let unknown = !WRAPPERS.contains(&name.as_str()) && !opaque::is_known(&name);
    if let Inner::Scripts(_) = &inner
        && !script_seen
        && !LEGACY_SCRIPT_RUNNERS.contains(&name.as_str())
    {
        opacity = opacity.or_else(|| Some(format!("`{name}` runs code whose text is only known when the line runs")));
    }
    out.push(Command { argv, exact, wrapper, opaque: opacity, unknown, redirects: Vec::new() });
    match inner {
        Inner::None => Ok(()),
        Inner::Words(groups) => {
            if depth + 1 > MAX_DEPTH {
                return Err(Unparsable(format!("commands are nested more than {MAX_DEPTH} levels deep")));
            }
            for group in groups {
                finish(group, depth + 1, stdin, out)?;
            }
            Ok(())
        }
        Inner::Scripts(scripts) => {
            let mut result = Ok(());
            for script in scripts {
                if script.exact {
                    result = result.and(parse_line(&script.text, depth + 1, out));
                } else if LEGACY_SCRIPT_RUNNERS.contains(&name.as_str()) {
                    result = result.and(Err(Unparsable(format!("`{name}` runs a script whose text has expansions"))));
                }
            }
            result
        }
    }
}

/// The script runners whose script with expansions makes the line unparsable (as it always
/// did); the others (`trap`, `alias`, `watch`, …) are opaque instead, which only matters when
/// a rule could be walked around by them.
const LEGACY_SCRIPT_RUNNERS: &[&str] =
    &["sh", "bash", "dash", "zsh", "ash", "ksh", "mksh", "yash", "fish", "tcsh", "csh", "rbash", "su", "eval"];

enum Inner {
    None,
    /// The wrapped commands' words (`find` may run several: one per `-exec`).
    Words(Vec<Vec<Word>>),
    /// Scripts given as words (`sh -c '…'`, `eval '…'`, `trap '…' EXIT`, `alias x='…'`).
    Scripts(Vec<Word>),
}

/// Options of wrappers that take a value (`sudo -u root`, `timeout -s KILL`).
fn takes_value(wrapper: &str, option: &str) -> bool {
    let with_value: &[&str] = match wrapper {
        "sudo" => &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"],
        "doas" => &["-u", "-C"],
        "env" => &["-u", "-C", "--unset", "--chdir"],
        "nice" => &["-n", "--adjustment"],
        "timeout" => &["-s", "-k", "--signal", "--kill-after"],
        "xargs" => &["-I", "-L", "-n", "-P", "-s", "-d", "-E", "-a", "--arg-file", "--delimiter", "--max-args"],
        "stdbuf" => &["-i", "-o", "-e"],
        "ionice" => &["-c", "-n", "-p"],
        "flock" => &["-w", "-E", "--timeout", "--conflict-exit-code"],
        "exec" => &["-a"],
        "watch" => &["-n", "-d", "--interval", "-q", "--equexit"],
        "script" => {
            &["-E", "--echo", "-I", "--log-in", "-O", "--log-out", "-T", "--log-timing", "-m", "--logging-format"]
        }
        _ => &[],
    };
    with_value.contains(&option)
}

fn inner_command(name: &str, words: &[Word]) -> Result<Inner, Unparsable> {
    let skip_options = |start: usize| -> usize {
        let mut i = start;
        while let Some(w) = words.get(i) {
            if w.text == "--" {
                return i + 1;
            }
            if !w.text.starts_with('-') || w.text == "-" {
                break;
            }
            i += if takes_value(name, &w.text) { 2 } else { 1 };
        }
        i
    };
    let rest = |i: usize| if i < words.len() { Inner::Words(vec![words[i..].to_vec()]) } else { Inner::None };
    // The word after `-c` (`flock f -c '…'`, `script -qc '…'`), or after `--command`.
    let option_script = |long: &str| {
        let is_c = |t: &str| {
            t == long
                || (t.len() > 1
                    && t.starts_with('-')
                    && !t.starts_with("--")
                    && t[1..].chars().all(|c| c.is_ascii_alphabetic())
                    && t.ends_with('c'))
        };
        words.iter().position(|w| is_c(&w.text)).and_then(|i| words.get(i + 1)).cloned()
    };
    Ok(match name {
        "sh" | "bash" | "dash" | "zsh" | "ash" | "ksh" | "mksh" | "yash" | "fish" | "tcsh" | "csh" | "rbash" | "su" => {
            // `-c script` anywhere among the options (`bash -lc '…'`, `sh -o pipefail -c '…'`,
            // `su -c '…' user`); a word after a script file may be mistaken for one, which
            // only makes matching more cautious.
            let at = words[1..].iter().position(|w| {
                let t = w.text.as_str();
                t.len() > 1
                    && t.starts_with('-')
                    && !t.starts_with("--")
                    && t[1..].chars().all(|c| c.is_ascii_alphabetic())
                    && t.contains('c')
            });
            // The script is the first word after the options (`bash -c -e 'rm x'`,
            // `bash -c -- 'rm x'` run `rm x`); `su -c` takes it as the option's value.
            let script_at = |c_at: usize| {
                if name == "su" {
                    return Some(c_at + 1);
                }
                let mut j = c_at + 1;
                while let Some(w) = words.get(j) {
                    let t = w.text.as_str();
                    if t == "--" {
                        return Some(j + 1);
                    }
                    if !(t.starts_with('-') || t.starts_with('+')) || t == "-" {
                        return Some(j);
                    }
                    j += if matches!(t, "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file") { 2 } else { 1 };
                }
                None
            };
            match at.map(|i| i + 1) {
                Some(i) => match script_at(i).and_then(|j| words.get(j)) {
                    Some(script) => Inner::Scripts(vec![script.clone()]),
                    None => return Err(Unparsable(format!("`{name} -c` without a script"))),
                },
                None => Inner::None,
            }
        }
        "script" => option_script("--command").map_or(Inner::None, |w| Inner::Scripts(vec![w])),
        "eval" => {
            let text: Vec<&str> = words[1..].iter().map(|w| w.text.as_str()).collect();
            let exact = words[1..].iter().all(|w| w.exact);
            Inner::Scripts(vec![Word { text: text.join(" "), exact, pattern: false }])
        }
        // `trap 'code' SIGNAL…`: the code runs later, in this shell; `trap -p`, `trap - INT`
        // and `trap INT` (a reset) run nothing.
        "trap" => {
            let operands: Vec<&Word> =
                words[1..].iter().filter(|w| !w.text.starts_with('-') || w.text == "-").collect();
            match operands.as_slice() {
                [code, _, ..] if code.text != "-" && !code.text.is_empty() => Inner::Scripts(vec![(*code).clone()]),
                _ => Inner::None,
            }
        }
        // `alias x='rm -rf'`: dash expands aliases in scripts, so the value is a command.
        "alias" => Inner::Scripts(
            words[1..]
                .iter()
                .filter_map(|w| {
                    let (_, value) = w.text.split_once('=')?;
                    Some(Word { text: value.to_string(), exact: w.exact, pattern: false })
                })
                .collect(),
        ),
        "env" => {
            let mut i = 1;
            loop {
                i = skip_options(i);
                match words.get(i) {
                    Some(w) if is_assignment(&w.text) => i += 1,
                    _ => break,
                }
            }
            rest(i)
        }
        // `watch` runs its arguments through `sh -c`, joined by spaces.
        "watch" => {
            let i = skip_options(1);
            if i < words.len() {
                let text: Vec<&str> = words[i..].iter().map(|w| w.text.as_str()).collect();
                let exact = words[i..].iter().all(|w| w.exact);
                Inner::Scripts(vec![Word { text: text.join(" "), exact, pattern: false }])
            } else {
                Inner::None
            }
        }
        "exec" | "command" | "builtin" | "nohup" | "setsid" | "nice" | "stdbuf" | "ionice" | "sudo" | "doas"
        | "xargs" | "time" | "unbuffer" => {
            if name == "command" && words.get(1).is_some_and(|w| w.text == "-v" || w.text == "-V") {
                return Ok(Inner::None);
            }
            rest(skip_options(1))
        }
        "timeout" => rest(skip_options(1) + 1),
        "flock" => match option_script("--command") {
            Some(script) => Inner::Scripts(vec![script]),
            None => rest(skip_options(1) + 1),
        },
        "chroot" => rest(skip_options(1) + 1),
        "busybox" | "toybox" => rest(1),
        "find" => {
            // Every `-exec cmd {} ;` (and `-execdir`, `-ok`, `-okdir`) runs cmd.
            let mut groups = Vec::new();
            let mut i = 0;
            while let Some(at) = words[i..]
                .iter()
                .position(|w| matches!(w.text.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir"))
                .map(|p| i + p)
            {
                let end = words[at + 1..]
                    .iter()
                    .position(|w| w.text == ";" || w.text == "+")
                    .map_or(words.len(), |e| at + 1 + e);
                if end > at + 1 {
                    groups.push(words[at + 1..end].to_vec());
                }
                i = end;
            }
            if groups.is_empty() { Inner::None } else { Inner::Words(groups) }
        }
        _ => Inner::None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(line: &str) -> Vec<String> {
        commands(line).unwrap_or_else(|e| panic!("{line}: {e}")).iter().map(Command::text).collect()
    }

    #[test]
    fn every_command_of_a_line_is_seen() {
        let cases: &[(&str, &[&str])] = &[
            ("ls -la", &["ls -la"]),
            ("true && rm -rf x", &["true", "rm -rf x"]),
            ("a; b || c | d |& e & f", &["a", "b", "c", "d", "e", "f"]),
            ("echo $(rm x)", &["echo $(…)", "rm x"]),
            ("echo `rm x`", &["echo `…`", "rm x"]),
            ("sh -c 'rm x'", &["sh -c rm x", "rm x"]),
            ("bash -lc \"git push && rm y\"", &["bash -lc git push && rm y", "git push", "rm y"]),
            ("env FOO=1 rm x", &["env FOO=1 rm x", "rm x"]),
            ("FOO=1 /bin/rm x", &["rm x"]),
            ("timeout -s KILL 5 nice -n 3 rm x", &["timeout -s KILL 5 nice -n 3 rm x", "nice -n 3 rm x", "rm x"]),
            ("sudo -u root rm x", &["sudo -u root rm x", "rm x"]),
            ("ls | xargs -n 1 rm", &["ls", "xargs -n 1 rm", "rm"]),
            ("find . -name '*.o' -exec rm {} \\;", &["find . -name *.o -exec rm {} ;", "rm {}"]),
            ("(cd a && rm x)", &["cd a", "rm x"]),
            ("if test -f x; then rm x; fi", &["test -f x", "rm x"]),
            ("cat <(rm x) > out 2>&1", &["cat <(…)", "rm x"]),
            ("f() { rm x; }; f", &["f", "rm x", "f"]),
            ("exec rm x", &["exec rm x", "rm x"]),
            ("eval 'rm x'", &["eval rm x", "rm x"]),
            ("busybox rm x", &["busybox rm x", "rm x"]),
            ("sh -o pipefail -c 'rm x'", &["sh -o pipefail -c rm x", "rm x"]),
            ("su -c 'rm x' root", &["su -c rm x root", "rm x"]),
            ("exec -a name rm x", &["exec -a name rm x", "rm x"]),
            ("watch -n 1 rm x", &["watch -n 1 rm x", "rm x"]),
            ("echo \"a $(echo `rm z`)\"", &["echo a $(…)", "echo `…`", "rm z"]),
            ("r\\m x # a comment", &["rm x"]),
        ];
        for (line, expected) in cases {
            assert_eq!(texts(line), *expected, "{line}");
        }
    }

    #[test]
    fn expansions_make_a_command_inexact() {
        let cmds = commands("ls \"$HOME\"; ls '$HOME'; rm $(cat list)").unwrap();
        let exact: Vec<bool> = cmds.iter().map(|c| c.exact).collect();
        assert_eq!(exact, [false, true, false, true]);
    }

    #[test]
    fn what_is_not_understood_is_unparsable() {
        for line in [
            "cat <<EOF\nrm x\nEOF",
            "echo 'unclosed",
            "echo \"unclosed",
            "case $x in a) rm x;; esac",
            "echo $((1+2))",
            "sh -c \"$SCRIPT\"",
            "echo $'\\x72m'",
            "echo `unclosed",
            "echo $(unclosed",
            "$CMD x",
            "$(echo rm) -rf x",
            "\"${RM:-rm}\" x",
            "env $X rm x",
        ] {
            assert!(commands(line).is_err(), "{line:?} should be unparsable, got {:?}", commands(line));
        }
    }

    /// The first opaque part of a line, if any.
    fn opacity(line: &str) -> Option<String> {
        commands(line).unwrap_or_else(|e| panic!("{line}: {e}")).into_iter().find_map(|c| c.opaque)
    }

    /// Every entry of the table, with every program it lists (and a versioned name for
    /// interpreters), is opaque with its example arguments and visible with its counterexample.
    #[test]
    fn every_code_runner_of_the_table_is_opaque_with_its_example() {
        let mut checked = 0;
        for runner in CODE_RUNNERS {
            for program in runner.programs {
                let line = format!("{program} {}", runner.opaque_example);
                let why = opacity(&line).unwrap_or_else(|| panic!("{line:?} should be opaque ({})", runner.why));
                assert!(why.contains(&format!("`{program}`")), "{line:?}: the reason names the program: {why}");
                if let Some(args) = runner.visible_example {
                    let line = format!("{program} {args}");
                    assert_eq!(opacity(&line), None, "{line:?} should be visible");
                }
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked}");
        for (line, program) in
            [("python3.12 -c x", "python3.12"), ("pip3 install x", "pip3"), ("lua5.4 f.lua", "lua5.4")]
        {
            let why = opacity(line).unwrap_or_else(|| panic!("{line:?} should be opaque"));
            assert!(why.contains(program), "{why}");
        }
    }

    #[test]
    fn every_code_variable_makes_its_command_opaque() {
        for (names, _) in CODE_VARIABLES {
            for name in *names {
                let name = if name.ends_with('_') { format!("{name}X") } else { name.to_string() };
                for line in [format!("{name}=./x ls"), format!("export {name}=./x"), format!("{name}=./x; ls")] {
                    let why = opacity(&line).unwrap_or_else(|| panic!("{line:?} should be opaque"));
                    assert!(why.contains(&format!("`{name}=…`")), "{line:?}: {why}");
                }
            }
        }
        assert_eq!(opacity("FOO=1 ls"), None);
        assert_eq!(opacity("PATHX=1 ls"), None);
        // The bare assignment is listed as a wrapper: an allow rule needs only `ls`.
        let cmds = commands("PATH=/tmp; ls").unwrap();
        assert_eq!(
            cmds.iter().map(|c| (c.text(), c.wrapper)).collect::<Vec<_>>(),
            [("PATH=/tmp".to_string(), true), ("ls".to_string(), false)]
        );
    }

    #[test]
    fn opaque_parts_say_what_hides_the_effect() {
        let cases: &[(&str, &str)] = &[
            ("echo cm0gLXJmIHgK | base64 -d | sh", "`sh` reads a program from its stdin (`… | sh`)"),
            ("sh < script", "`sh` reads a program from its stdin (`sh < …`)"),
            ("curl -s x |& bash -s", "`bash` reads a program from its stdin (`… | bash -s`)"),
            ("sh ./f", "`sh` runs the program in the file `./f`"),
            ("bash script.sh", "`bash` runs the program in the file `script.sh`"),
            (". ./f", "`.` runs the commands of a file in this shell"),
            ("source f", "`source` runs the commands of a file in this shell"),
            ("python3 -c 'import shutil'", "`python3` runs inline code (`-c`)"),
            ("perl -pe 's/a/b/' f", "`perl` runs inline code (`-pe`)"),
            ("python3 script.py", "`python3` runs the program in the file `script.py`"),
            ("cat x.py | python3", "`python3` reads a program from its stdin (`… | python3`)"),
            ("awk 'BEGIN{system(\"rm x\")}'", "`awk` runs a program that can start commands or write files (`system`)"),
            ("awk -f prog.awk f", "`awk` runs the program in a file (`-f`)"),
            ("awk \"$P\" f", "`awk` runs a program only known when the line runs (`$…`)"),
            ("sed -e 1e f", "`sed` runs a script with the `e` command or flag, which runs commands (`1e`)"),
            ("sed -f s.sed f", "`sed` runs a script from a file (`-f`)"),
            (
                "git -c core.sshCommand='rm x' fetch",
                "`git` runs a command named by a configuration value (`-c core.sshCommand=rm x`)",
            ),
            ("git -c 'alias.x=!rm y' x", "`git` runs a command named by a configuration value (`-c alias.x=!rm y`)"),
            ("git rebase -x 'rm y' HEAD~3", "`git` runs a command given by an option (`rebase -x`)"),
            ("tar -cf a.tar -I 'sh -c x' .", "`tar` runs a command given by an option (`-I`)"),
            (
                "tar --checkpoint=1 --checkpoint-action=exec='rm x' -cf a.tar .",
                "`tar` runs a command given by an option (`--checkpoint-action=exec=rm x`)",
            ),
            ("find . -exec {} \\;", "the program `{}` is each file `find` finds"),
            (
                "find . | xargs -I{} mywrap {}",
                "`xargs` adds words it reads from its stdin to the arguments of `mywrap`, which can make it run code",
            ),
            (
                "{rm,-rf,x}",
                "the program `{rm,-rf,x}` is a pattern the shell expands, so which program runs is only known when the line runs",
            ),
            (
                "/bin/r? x",
                "the program `/bin/r?` is a pattern the shell expands, so which program runs is only known when the line runs",
            ),
            ("./del -rf x", "`./del` runs the program in that file, which the matcher cannot see into"),
            (
                "/usr/bin/../../tmp/rm x",
                "`/usr/bin/../../tmp/rm` runs the program in that file, which the matcher cannot see into",
            ),
            ("rｍ -rf x", "the program name `rｍ` has characters outside ASCII, which can imitate another name"),
            ("BASH_ENV=./f bash -c true", "`BASH_ENV=…` makes the shell run the file it names first"),
            ("env LD_PRELOAD=./x.so ls", "`LD_PRELOAD=…` makes every program load the code it names"),
            ("make clean", "`make` runs the commands of a build file (Makefile, justfile, …)"),
            ("trap \"$CODE\" EXIT", "`trap` runs code whose text is only known when the line runs"),
            (
                "ssh -o 'ProxyCommand=sh -c x' h",
                "`ssh` runs a local command named by an option (`-o ProxyCommand=sh -c x`)",
            ),
        ];
        for (line, expected) in cases {
            assert_eq!(opacity(line).as_deref(), Some(*expected), "{line}");
        }
        for line in [
            "ls -la && git status",
            "cat notes.txt | grep -n TODO | sort",
            "cargo fmt --check",
            "awk -F: '{print $1}' /etc/passwd",
            "sed -i 's/old/new/g' src/a.rs",
            "git -c user.name=bot commit -m 'fix: x'",
            "tar -czf out.tgz src",
            "find . -name '*.rs' -exec grep -n TODO {} +",
            "/usr/bin/env ls",
            "echo '{rm,x}' \"*\"",
            "ls {a,b}.txt",
            "[ -f x ] && echo y",
            "python3 --version",
            "sh -c 'ls | wc -l'",
        ] {
            assert_eq!(opacity(line), None, "{line}");
        }
    }

    #[test]
    fn code_in_trap_alias_watch_and_every_find_exec_is_seen() {
        let cases: &[(&str, &str)] = &[
            ("trap 'rm -rf x' EXIT", "rm -rf x"),
            ("alias d='rm -rf'; d x", "rm -rf"),
            ("watch -n 1 'true; rm x'", "rm x"),
            ("script -qc 'rm x' /dev/null", "rm x"),
            ("flock /tmp/l -c 'rm x'", "rm x"),
            ("find . -exec true {} \\; -exec rm {} \\;", "rm {}"),
            ("toybox rm x", "rm x"),
            // The script is the first word after the options, wherever `-c` stands.
            ("bash -c -e 'rm x'", "rm x"),
            ("bash -c -- 'rm x'", "rm x"),
            ("sh -c -o errexit 'rm x' arg0", "rm x"),
            ("trap -- 'rm x' EXIT", "rm x"),
        ];
        for (line, command) in cases {
            assert!(texts(line).iter().any(|t| t == command), "{line}: {:?}", texts(line));
        }
    }

    #[test]
    fn programs_the_matcher_does_not_know_are_marked() {
        let unknown = |line: &str| commands(line).unwrap().iter().map(|c| c.unknown).collect::<Vec<_>>();
        assert_eq!(unknown("mywrap rm -rf x"), [true]);
        assert_eq!(unknown("echo rm; grep rm x; git log"), [false, false, false]);
        assert_eq!(unknown("timeout 5 stdbuf -o0 chronic rm x"), [false, false, true]);
        assert_eq!(unknown("cp /bin/rm ./del"), [true]);
    }

    proptest::proptest! {
        /// The classifier reads untrusted lines: whatever the line, it returns, and every
        /// command it lists has a program.
        #[test]
        fn any_line_is_classified_without_panicking(line in "[a-z0-9 ./=+{},*?\\[\\]\\-'\"`$()|&;<>!\\\\\n\u{ff4d}]{0,40}") {
            if let Ok(cmds) = commands(&line) {
                proptest::prop_assert!(cmds.iter().all(|c| !c.argv.is_empty()));
            }
            for program in ["sed", "awk", "git", "tar", "sh", "xargs", "python3", "ssh", "find"] {
                let _ = commands(&format!("{program} {line}"));
            }
        }
    }
}
