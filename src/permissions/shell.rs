//! A `shell.exec` command line as permission rules see it: every simple command in it, with
//! the wrappers around them unwrapped — `a && b`, `a; b`, `a || b`, pipes, `( … )`, `{ …; }`,
//! `$( … )`, backticks, `<( … )`, `sh -c '…'`, `eval`, `env X=1 cmd`, `exec`, `command`,
//! `nice`, `nohup`, `timeout`, `sudo`, `xargs`, `busybox`, `find -exec`. A line this does not
//! understand (heredocs, `case`, function definitions, unbalanced quotes, arithmetic) is
//! [`Unparsable`], and the engine asks for it: it is never allowed.
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
}

impl Command {
    /// The command as rules match it: the program's base name (`/bin/rm` is `rm`), then the
    /// arguments, separated by single spaces.
    pub fn text(&self) -> String {
        let mut words = self.argv.iter();
        let mut text = words.next().map(|w| w.rsplit('/').next().unwrap_or(w).to_string()).unwrap_or_default();
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
    loop {
        match lexer.next_token()? {
            Token::End => {
                finish(std::mem::take(&mut current), depth, out)?;
                break;
            }
            Token::Separator => finish(std::mem::take(&mut current), depth, out)?,
            Token::Word(w) => current.push(w),
            Token::Redirect => {
                // The redirection's target is a word; its substitutions were collected.
                match lexer.next_token()? {
                    Token::Word(_) => {}
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
}

enum Token {
    Word(Word),
    Separator,
    Redirect,
    End,
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
                Ok(Token::Separator)
            }
            '\n' | ';' | '&' | '|' | '(' | ')' => {
                if c == ';' && self.peek(1) == Some(';') {
                    return Err(Unparsable("`;;` belongs to a case statement, which is not matched".into()));
                }
                if c == '&' && self.peek(1) == Some('>') {
                    self.pos += if self.peek(2) == Some('>') { 3 } else { 2 };
                    return Ok(Token::Redirect);
                }
                if c == '(' && self.peek(1) == Some('(') {
                    return Err(Unparsable("arithmetic `((…))` is not matched".into()));
                }
                self.pos += 1;
                // `&&`, `||` and `|&` are one operator each.
                if (matches!(c, '&' | '|') && self.peek(0) == Some(c)) || (c == '|' && self.peek(0) == Some('&')) {
                    self.pos += 1;
                }
                Ok(Token::Separator)
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
        while self.peek(0).is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        let op = self.peek(0);
        if self.peek(1) == Some('(') {
            // `<(cmd)` / `>(cmd)`: a process substitution is a command of its own.
            self.pos += 2;
            let inner = self.until_close_paren()?;
            self.nested.push(inner);
            return Ok(Token::Word(Word { text: format!("{}(…)", op.unwrap_or('<')), exact: false }));
        }
        self.pos += 1;
        match (op, self.peek(0)) {
            (Some('<'), Some('<')) => return Err(Unparsable("heredocs (`<<`) are not matched".into())),
            (Some('>'), Some('>' | '|')) | (Some('<' | '>'), Some('&')) | (Some('<'), Some('>')) => self.pos += 1,
            _ => {}
        }
        // `2>&1`: the target of a duplication is a descriptor, read as the target word.
        Ok(Token::Redirect)
    }

    fn word(&mut self) -> Result<Word, Unparsable> {
        let mut text = String::new();
        let mut exact = true;
        while let Some(c) = self.peek(0) {
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
        Ok(Word { text, exact })
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

fn finish(mut words: Vec<Word>, depth: usize, out: &mut Vec<Command>) -> Result<(), Unparsable> {
    while words.first().is_some_and(|w| w.exact && LEADING_KEYWORDS.contains(&w.text.as_str())) {
        words.remove(0);
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
    // Leading assignments (`X=1 cmd`) set variables; the command is what follows.
    while words.first().is_some_and(|w| is_assignment(&w.text)) {
        words.remove(0);
    }
    if words.is_empty() {
        return Ok(());
    }
    unwrap(words, depth, out)
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// Records the command and, for a wrapper, the command it runs.
fn unwrap(words: Vec<Word>, depth: usize, out: &mut Vec<Command>) -> Result<(), Unparsable> {
    if !words[0].exact {
        // `$(echo rm) -rf x`, `${RM:-rm} x`: what runs is only known when it runs.
        return Err(Unparsable(format!("the program `{}` is only known when the line runs", words[0].text)));
    }
    let exact = words.iter().all(|w| w.exact);
    let argv: Vec<String> = words.iter().map(|w| w.text.clone()).collect();
    let name = argv[0].rsplit('/').next().unwrap_or(&argv[0]).to_string();
    let inner = inner_command(&name, &words)?;
    let wrapper = !matches!(inner, Inner::None) && !matches!(name.as_str(), "sudo" | "doas");
    out.push(Command { argv, exact, wrapper });
    match inner {
        Inner::None => Ok(()),
        Inner::Words(rest) => {
            if depth + 1 > MAX_DEPTH {
                return Err(Unparsable(format!("commands are nested more than {MAX_DEPTH} levels deep")));
            }
            finish(rest, depth + 1, out)
        }
        Inner::Script(word) if word.exact => parse_line(&word.text, depth + 1, out),
        Inner::Script(_) => Err(Unparsable(format!("`{name}` runs a script whose text has expansions"))),
    }
}

enum Inner {
    None,
    /// The wrapped command's words.
    Words(Vec<Word>),
    /// A script given as one word (`sh -c '…'`, `eval '…'`).
    Script(Word),
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
        "flock" => &["-w", "-E", "-c"],
        "exec" => &["-a"],
        "watch" => &["-n", "-d", "--interval"],
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
    let rest = |i: usize| if i < words.len() { Inner::Words(words[i..].to_vec()) } else { Inner::None };
    Ok(match name {
        "sh" | "bash" | "dash" | "zsh" | "ash" | "ksh" | "mksh" | "su" => {
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
            match at.map(|i| i + 1) {
                Some(i) => match words.get(i + 1) {
                    Some(script) => Inner::Script(script.clone()),
                    None => return Err(Unparsable(format!("`{name} -c` without a script"))),
                },
                None => Inner::None,
            }
        }
        "eval" => {
            let text: Vec<&str> = words[1..].iter().map(|w| w.text.as_str()).collect();
            let exact = words[1..].iter().all(|w| w.exact);
            Inner::Script(Word { text: text.join(" "), exact })
        }
        "env" => {
            let mut i = 1;
            loop {
                i = skip_options(i);
                match words.get(i) {
                    Some(w) if is_assignment(&w.text) => i += 1,
                    _ => break,
                }
            }
            if words[1..].iter().any(|w| w.text.starts_with("-S") || w.text == "--split-string") {
                return Err(Unparsable("`env -S` splits a string into a command, which is not matched".into()));
            }
            rest(i)
        }
        "exec" | "command" | "builtin" | "nohup" | "setsid" | "nice" | "stdbuf" | "ionice" | "sudo" | "doas"
        | "xargs" | "time" | "unbuffer" | "watch" => {
            if name == "command" && words.get(1).is_some_and(|w| w.text == "-v" || w.text == "-V") {
                return Ok(Inner::None);
            }
            rest(skip_options(1))
        }
        "timeout" => rest(skip_options(1) + 1),
        "flock" | "chroot" => rest(skip_options(1) + 1),
        "busybox" => rest(1),
        "find" => {
            // `find … -exec cmd {} ;` runs cmd.
            let at = words.iter().position(|w| matches!(w.text.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir"));
            match at {
                Some(i) => {
                    let end = words[i + 1..]
                        .iter()
                        .position(|w| w.text == ";" || w.text == "+")
                        .map_or(words.len(), |e| i + 1 + e);
                    if end > i + 1 { Inner::Words(words[i + 1..end].to_vec()) } else { Inner::None }
                }
                None => Inner::None,
            }
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
            "env -S 'rm x'",
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
}
