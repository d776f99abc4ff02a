//! Secrets out of a tool call's `target`: the command, URL or path that tool-call lists, the
//! activation view and the WebUI's activity panels show. [`redact_secrets`] runs before a target
//! is stored (and again when an older one is shown), so what a model typed into a command line
//! (`curl -H 'Authorization: Bearer …'`, `PGPASSWORD=… psql`, `https://user:pw@host`) is not
//! on display.
//!
//! Written by hand: no maintained crate redacts secrets in shell commands, and a regex engine
//! would be a new dependency of the core (and so of the runner binary) for four small scanners.
//! It errs on the side of masking: a value next to a name that looks secret is masked even when
//! it was harmless. It is a display filter, not a guarantee: a secret with no telling name or
//! shape (a bare random word) stays visible.

/// What a masked value is replaced with.
pub const MASK: &str = "***";

/// `text` with obvious secrets masked: URL userinfo, values of secret-looking names
/// (`TOKEN=…`, `?api_key=…`, `"password": "…"`, `Authorization: Bearer …`, `--password=…`),
/// values after secret-looking flags (`--token …`, `curl -u user:…`, `mysql -p…`), bearer
/// tokens, and tokens of well-known shapes (`ghp_…`, `sk-…`, `AKIA…`, JWTs).
pub fn redact_secrets(text: &str) -> String {
    let text = url_userinfo(text);
    let text = assignments(&text);
    let text = flag_values(&text);
    token_shapes(&text)
}

/// `scheme://user:password@host` → `scheme://***@host`: a user name alone is often the token
/// (`https://ghp_…@github.com`), so the whole userinfo goes.
fn url_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let end = after
            .find(|c: char| c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '\'' | '`' | '<' | '>'))
            .unwrap_or(after.len());
        let authority = &after[..end];
        match authority.rfind('@') {
            Some(a) if a > 0 => {
                out.push_str(MASK);
                out.push_str(&authority[a..]);
            }
            _ => out.push_str(authority),
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

fn is_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// The name right before the `=` or `:` at `at`: `KEY` in `KEY=v`, `password` in
/// `"password": "v"`, `--token` in `--token=v`, `X-Api-Key` in `X-Api-Key: v`.
fn name_before(text: &str, at: usize) -> &str {
    let bytes = text.as_bytes();
    let mut end = at;
    if end > 0 && matches!(bytes[end - 1], b'"' | b'\'') {
        end -= 1;
    }
    let mut start = end;
    while start > 0 && is_name_char(bytes[start - 1]) {
        start -= 1;
    }
    &text[start..end]
}

/// Whether a name (of a variable, field, header, query key or flag) says its value is secret.
pub fn is_secret_name(name: &str) -> bool {
    let name = name.trim_start_matches('-').to_ascii_lowercase();
    let parts: Vec<&str> = name.split(['_', '-', '.']).filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        return false;
    }
    // A reference to a secret, not the secret: `--password-file /run/pw`, `TOKEN_URL=…`.
    const REFERENCES: &[&str] =
        &["file", "path", "dir", "env", "stdin", "fd", "url", "uri", "host", "type", "method", "mode", "name"];
    if parts.iter().any(|p| REFERENCES.contains(p)) {
        return false;
    }
    const INSIDE: &[&str] = &[
        "token",
        "secret",
        "passw",
        "passphrase",
        "credential",
        "apikey",
        "privatekey",
        "signature",
        "cookie",
        "session",
    ];
    const WHOLE: &[&str] = &["key", "pass", "pw", "pwd", "sig", "auth", "jwt", "otp", "bearer", "authorization"];
    // `PWD` alone is the working directory.
    if name == "pwd" || name == "oldpwd" {
        return false;
    }
    parts.iter().any(|p| {
        INSIDE.iter().any(|s| p.contains(s))
            || WHOLE.contains(p)
            || p.ends_with("key")
            || (p.starts_with("auth") && !p.starts_with("author"))
            || p.ends_with("auth")
    })
}

/// Auth schemes kept in front of a masked header value (`Authorization: Bearer ***`).
fn auth_scheme_len(value: &str) -> usize {
    for scheme in ["bearer", "basic", "token", "digest", "negotiate"] {
        let Some(head) = value.get(..scheme.len()) else { continue };
        let after = &value[scheme.len()..];
        if head.eq_ignore_ascii_case(scheme) && after.starts_with([' ', '\t']) {
            return scheme.len() + (after.len() - after.trim_start_matches([' ', '\t']).len());
        }
    }
    0
}

/// Where a bare value starting at `from` ends: at whitespace, `&` (query strings), `;` or a
/// quote. `#` is not an end: passwords have them more often than URLs have fragments here.
fn bare_end(text: &str, from: usize) -> usize {
    text[from..]
        .find(|c: char| c.is_whitespace() || matches!(c, '&' | ';' | '"' | '\'' | '`'))
        .map_or(text.len(), |e| from + e)
}

/// The value starting at `from`: inside its quotes when quoted, else up to [`bare_end`]; an auth
/// scheme in front of it (`Bearer `) is kept.
fn value_span(text: &str, from: usize) -> (usize, usize) {
    let Some(&first) = text.as_bytes().get(from) else { return (from, from) };
    if matches!(first, b'"' | b'\'') {
        let start = from + 1;
        let end = text[start..].find(first as char).map_or(text.len(), |e| start + e);
        return (start + auth_scheme_len(&text[start..end]), end);
    }
    let start = from + auth_scheme_len(&text[from..]);
    (start, bare_end(text, start))
}

/// `NAME=value` and `name: value` where the name looks secret: env assignments, query
/// parameters, `--flag=value`, JSON fields and HTTP headers.
fn assignments(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if (b != b'=' && b != b':') || !is_secret_name(name_before(text, i)) {
            i += 1;
            continue;
        }
        let mut from = i + 1;
        if b == b':' {
            // `://` is a URL, not a field.
            if text[from..].starts_with("//") {
                i += 1;
                continue;
            }
            while from < bytes.len() && matches!(bytes[from], b' ' | b'\t') {
                from += 1;
            }
        }
        let (start, end) = value_span(text, from);
        if start >= end {
            i += 1;
            continue;
        }
        out.push_str(&text[copied..start]);
        out.push_str(MASK);
        copied = end;
        i = end;
    }
    out.push_str(&text[copied..]);
    out
}

/// What the word after a flag is.
#[derive(Clone, Copy, PartialEq)]
enum Next {
    Plain,
    /// The whole word is secret (`--token abc`, `Bearer abc`).
    Secret,
    /// `user:password`: the part after the first colon (`curl -u`).
    UserPassword,
}

/// Programs whose `-p<password>` (attached) is a password rather than a port.
const ATTACHED_PASSWORD: &[&str] = &["mysql", "mysqldump", "mysqladmin", "mysqlimport", "mariadb", "mariadb-dump"];
/// Programs with a password flag of their own: the above, `sshpass -p pw`, `redis-cli -a pw`.
const PROGRAMS: &[&str] =
    &["mysql", "mysqldump", "mysqladmin", "mysqlimport", "mariadb", "mariadb-dump", "sshpass", "redis-cli"];

/// Values in the word after a secret-looking flag (`--password hunter2`, `-u user:pw`,
/// `sshpass -p pw`, `redis-cli -a pw`), after `Bearer`, and `mysql -ppw`.
fn flag_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut next = Next::Plain;
    // The program of the current command, when its flags are special (`mysql -p…`).
    let mut program = "";
    for (start, word) in words(text) {
        // Quotes and brackets around a word are kept; the value is what is inside.
        let inner = word.trim_matches(WRAPPERS);
        let offset = start + (word.len() - word.trim_start_matches(WRAPPERS).len());
        let is_flag = inner.starts_with('-') && inner.len() > 1;
        let expected = std::mem::replace(&mut next, Next::Plain);
        let mask = match expected {
            Next::Secret if !is_flag => Some(0),
            Next::UserPassword if !is_flag => inner.find(':').map(|colon| colon + 1),
            // Not a value after all: another flag (or nothing was expected).
            _ => {
                if is_flag && !inner.contains('=') && is_secret_name(inner) {
                    next = Next::Secret;
                } else if matches!(inner, "-u" | "--user" | "--proxy-user") {
                    next = Next::UserPassword;
                } else if inner.eq_ignore_ascii_case("bearer")
                    || (inner == "-p" && program == "sshpass")
                    || (inner == "-a" && program == "redis-cli")
                {
                    next = Next::Secret;
                } else if !is_flag {
                    let base = inner.rsplit('/').next().unwrap_or(inner);
                    if PROGRAMS.contains(&base) {
                        program = base;
                    }
                }
                (ATTACHED_PASSWORD.contains(&program) && inner.starts_with("-p") && inner.len() > 2).then_some(2)
            }
        };
        if let Some(from) = mask
            && from < inner.len()
        {
            out.push_str(&text[copied..offset + from]);
            out.push_str(MASK);
            copied = offset + inner.len();
        }
        if word.ends_with(';') || matches!(word, "&&" | "||" | "|") {
            program = "";
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// What may wrap a word on a command line: quotes, backticks, a subshell's parentheses.
const WRAPPERS: [char; 5] = ['"', '\'', '`', '(', ')'];

/// The whitespace-separated words of `text` with their byte offsets.
fn words(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split(char::is_whitespace).scan(0usize, |at, word| {
        let start = *at;
        // Every separator is one whitespace character; its UTF-8 length moves the offset on.
        let sep = text[start + word.len()..].chars().next().map_or(0, char::len_utf8);
        *at = start + word.len() + sep;
        Some((start, word))
    })
}

/// Tokens of well-known shapes, wherever they are: the prefix stays, the rest is masked.
fn token_shapes(text: &str) -> String {
    // (prefix, shortest whole token): shorter runs are ordinary words (`sk-learn`).
    const PREFIXES: &[(&str, usize)] = &[
        ("github_pat_", 30),
        ("ghp_", 20),
        ("gho_", 20),
        ("ghu_", 20),
        ("ghs_", 20),
        ("ghr_", 20),
        ("glpat-", 20),
        ("xoxb-", 15),
        ("xoxp-", 15),
        ("xoxa-", 15),
        ("xoxs-", 15),
        ("xapp-", 15),
        ("sk-", 20),
        ("AKIA", 20),
        ("ASIA", 20),
        ("AIza", 30),
        ("npm_", 30),
        ("hf_", 30),
        ("pypi-", 30),
    ];
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if !is_name_char(bytes[i]) || (i > 0 && is_name_char(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let end = text[i..].find(|c: char| !c.is_ascii() || !is_name_char(c as u8)).map_or(text.len(), |e| i + e);
        let run = &text[i..end];
        let keep = PREFIXES
            .iter()
            .find(|(prefix, min)| run.starts_with(prefix) && run.len() >= *min)
            .map(|(prefix, _)| prefix.len())
            .or_else(|| (run.starts_with("eyJ") && run.matches('.').count() == 2 && run.len() >= 30).then_some(3));
        if let Some(keep) = keep {
            out.push_str(&text[copied..i + keep]);
            out.push_str(MASK);
            copied = end;
        }
        i = end;
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_in_commands_and_urls_are_masked() {
        let cases = [
            // URL userinfo
            ("curl https://alice:hunter2@example.com/x", "curl https://***@example.com/x"),
            ("git clone https://ghp_abcdefghijklmnopqrstuvwx@github.com/o/r", "git clone https://***@github.com/o/r"),
            ("psql postgres://app:pw@db:5432/app", "psql postgres://***@db:5432/app"),
            ("https://example.com/a@b", "https://example.com/a@b"),
            // query values
            ("https://api.example/v1?token=abc123&page=2", "https://api.example/v1?token=***&page=2"),
            ("https://x.example/?api_key=K&q=rust", "https://x.example/?api_key=***&q=rust"),
            ("https://x.example/?X-Amz-Signature=deadbeef#top", "https://x.example/?X-Amz-Signature=***"),
            ("https://x.example/?access_token=a.b.c", "https://x.example/?access_token=***"),
            ("https://x.example/?page=2&sort=name", "https://x.example/?page=2&sort=name"),
            // headers
            (
                r#"curl -H "Authorization: Bearer abc.def" https://x"#,
                r#"curl -H "Authorization: Bearer ***" https://x"#,
            ),
            ("curl -H 'authorization: Basic dXNlcjpwdw==' x", "curl -H 'authorization: Basic ***' x"),
            ("curl -H 'X-Api-Key: k-123' x", "curl -H 'X-Api-Key: ***' x"),
            ("curl -H 'Cookie: session=xyz' x", "curl -H 'Cookie: ***' x"),
            ("curl -H 'Accept: application/json' x", "curl -H 'Accept: application/json' x"),
            ("echo Bearer abcdef", "echo Bearer ***"),
            // env assignments
            ("PGPASSWORD=s3cret psql -h db", "PGPASSWORD=*** psql -h db"),
            ("export GITHUB_TOKEN=\"a b c\"; gh pr list", "export GITHUB_TOKEN=\"***\"; gh pr list"),
            ("AWS_SECRET_ACCESS_KEY='x/y+z' aws s3 ls", "AWS_SECRET_ACCESS_KEY='***' aws s3 ls"),
            ("API_KEY=k1 DEBUG=1 ./run", "API_KEY=*** DEBUG=1 ./run"),
            ("OPENAI_API_KEY=sk-x python app.py", "OPENAI_API_KEY=*** python app.py"),
            ("PWD=/workspace ls", "PWD=/workspace ls"),
            ("TOKEN_FILE=/run/token cat", "TOKEN_FILE=/run/token cat"),
            ("RUST_LOG=debug cargo test", "RUST_LOG=debug cargo test"),
            // flags
            ("app --password=hunter2 --user bob", "app --password=*** --user bob"),
            ("app --password hunter2 --verbose", "app --password *** --verbose"),
            ("gh auth login --with-token tok123", "gh auth login --with-token ***"),
            ("app --api-key K --x", "app --api-key *** --x"),
            ("docker login --password-stdin -u bob", "docker login --password-stdin -u bob"),
            ("app --password-file /run/pw", "app --password-file /run/pw"),
            ("curl -u bob:hunter2 https://x", "curl -u bob:*** https://x"),
            ("curl --user bob:pw https://x", "curl --user bob:*** https://x"),
            ("sort -u names.txt", "sort -u names.txt"),
            ("mysql -u root -phunter2 app", "mysql -u root -p*** app"),
            ("/usr/bin/mysqldump -pS3cr3t db", "/usr/bin/mysqldump -p*** db"),
            ("ssh -p2222 host", "ssh -p2222 host"),
            ("docker run -p8080:80 nginx", "docker run -p8080:80 nginx"),
            ("sshpass -p hunter2 ssh host", "sshpass -p *** ssh host"),
            ("redis-cli -a hunter2 ping", "redis-cli -a *** ping"),
            // JSON
            (r#"{"username": "bob", "password": "hunter2"}"#, r#"{"username": "bob", "password": "***"}"#),
            (r#"{"apiKey":"k","n":1}"#, r#"{"apiKey":"***","n":1}"#),
            (r#"{"clientSecret": "s"}"#, r#"{"clientSecret": "***"}"#),
            // token shapes
            ("echo ghp_abcdefghijklmnopqrstuvwxyz0123", "echo ghp_***"),
            ("key sk-proj-abcdefghijklmnopqrstuv used", "key sk-*** used"),
            ("AKIAIOSFODNN7EXAMPLE", "AKIA***"),
            ("xoxb-1234-5678-abcdefgh", "xoxb-***"),
            ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig-nature_x", "eyJ***"),
            ("pip install scikit-learn sk-learn", "pip install scikit-learn sk-learn"),
            // nothing secret
            ("ls -la /workspace/src", "ls -la /workspace/src"),
            ("cargo test --lib config:: -- --nocapture", "cargo test --lib config:: -- --nocapture"),
            ("git commit --author 'Bob <b@x>' -m 'fix: auth'", "git commit --author 'Bob <b@x>' -m 'fix: auth'"),
            // masking errs on the safe side: a secret-looking name masks what follows it
            ("git commit -m 'auth: fix login'", "git commit -m 'auth: *** login'"),
            ("mysql -h db; ssh -p2222 host", "mysql -h db; ssh -p2222 host"),
            ("/workspace/notes.md", "/workspace/notes.md"),
            ("café — 日本語 TOKEN=ü x", "café — 日本語 TOKEN=*** x"),
            ("", ""),
        ];
        let mut wrong = Vec::new();
        for (input, expected) in cases {
            let got = redact_secrets(input);
            if got != expected {
                wrong.push(format!("{input:?}\n   got {got:?}\n  want {expected:?}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn redacting_twice_changes_nothing() {
        for input in [
            "curl -u bob:pw -H 'Authorization: Bearer t' https://a:b@x/?token=1",
            "PASSWORD=*** mysql -p***",
            "ghp_***",
        ] {
            let once = redact_secrets(input);
            assert_eq!(redact_secrets(&once), once, "{input}");
        }
    }

    #[test]
    fn secret_looking_names() {
        for name in ["TOKEN", "github_token", "--api-key", "apiKey", "X-Auth-Token", "DB_PASS", "passwd", "sig"] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["user", "PATH", "HOME", "author", "--password-file", "PWD", "page", "keyboard", "monkeys"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }
}
