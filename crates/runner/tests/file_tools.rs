//! The search and edit tools (`file.list` filters, `file.glob`, `file.grep`, `file.edit`,
//! `file.delete`, `file.move`) against a real tree made here: a `.gitignore`, binary files, a
//! 10 MB file, names that are not UTF-8, and links and `..` paths that try to leave the roots.
//! Tools see `/workspace`, `/artifacts` and `/mnt`; here those map to temporary directories.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use suzumio_core::rpc::ToolOutput;
use suzumio_core::toolpack::ToolError;
use suzumio_runner::{BuiltinTools, Roots};

struct Sandbox {
    base: PathBuf,
    roots: Roots,
    tools: BuiltinTools,
    _tmp: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let tmp = tempfile::Builder::new().prefix("suzumio-file-tools-").tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let roots = Roots { workspace: base.join("ws"), artifacts: base.join("artifacts"), mnt: base.join("mnt") };
        for dir in [&roots.workspace, &roots.artifacts.join("pm"), &roots.mnt, &base.join("outside")] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let tools = BuiltinTools::new(roots.clone(), "pm");
        Sandbox { base, roots, tools, _tmp: tmp }
    }

    fn ws(&self, relative: &str) -> PathBuf {
        self.roots.workspace.join(relative)
    }

    fn write(&self, relative: &str, content: impl AsRef<[u8]>) {
        let path = self.ws(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    fn outside(&self) -> PathBuf {
        self.base.join("outside")
    }

    async fn run(&self, tool: &str, input: Value) -> Result<ToolOutput, ToolError> {
        self.tools.invoke(tool, input).await
    }

    async fn ok(&self, tool: &str, input: Value) -> String {
        match self.run(tool, input.clone()).await {
            Ok(out) => out.output,
            Err(e) => panic!("{tool} {input}: {e}"),
        }
    }

    async fn err(&self, tool: &str, input: Value) -> String {
        match self.run(tool, input.clone()).await {
            Ok(out) => panic!("{tool} {input} should fail: {}", out.output),
            Err(e) => e.message().to_string(),
        }
    }

    /// The fixture tree most tests search.
    fn tree(&self) {
        self.write(".gitignore", "target/\n*.log\n!keep.log\n");
        self.write("src/main.rs", "fn main() {\n    println!(\"hello\");\n}\n");
        self.write("src/lib.rs", "pub fn hello() -> &'static str {\n    \"Hello\"\n}\n// TODO: more\n");
        self.write("src/nested/.gitignore", "generated.rs\n");
        self.write("src/nested/generated.rs", "fn hello_generated() {}\n");
        self.write("src/nested/kept.rs", "fn hello_kept() {}\n");
        self.write("target/debug/out.rs", "fn hello_built() {}\n");
        self.write("debug.log", "hello from a log\n");
        self.write("keep.log", "hello kept log\n");
        self.write("image.bin", b"hello\0\x01\x02binary");
        self.write("README.md", "# Hello\n");
        // A Latin-1 name: not UTF-8.
        std::fs::write(self.roots.workspace.join(OsStr::from_bytes(b"caf\xe9.txt")), "hello latin-1 name\n").unwrap();
    }
}

// ---- file.list ----

#[tokio::test]
async fn list_leaves_out_what_gitignore_ignores_unless_asked() {
    let s = Sandbox::new();
    s.tree();
    let out = s.ok("file.list", json!({"depth": 3})).await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            ".gitignore",
            "README.md",
            "caf\u{fffd}.txt",
            "image.bin",
            "keep.log",
            "src/",
            "src/lib.rs",
            "src/main.rs",
            "src/nested/",
            "src/nested/.gitignore",
            "src/nested/kept.rs",
        ]
    );
    let all = s.ok("file.list", json!({"depth": 3, "respectGitignore": false})).await;
    for ignored in ["debug.log", "target/", "target/debug/", "src/nested/generated.rs"] {
        assert!(all.lines().any(|l| l == ignored), "{ignored} listed without gitignore: {all}");
    }
}

#[tokio::test]
async fn list_applies_the_gitignore_above_the_listed_directory() {
    let s = Sandbox::new();
    s.tree();
    s.write("src/debug.log", "x");
    assert_eq!(s.ok("file.list", json!({"path": "src"})).await, "lib.rs\nmain.rs\nnested/");
}

#[tokio::test]
async fn list_filters_with_include_and_exclude_globs() {
    let s = Sandbox::new();
    s.tree();
    assert_eq!(
        s.ok("file.list", json!({"depth": 5, "include": "*.rs"})).await,
        "src/lib.rs\nsrc/main.rs\nsrc/nested/kept.rs"
    );
    assert_eq!(
        s.ok("file.list", json!({"depth": 5, "include": "*.rs", "exclude": "nested"})).await,
        "src/lib.rs\nsrc/main.rs"
    );
    assert_eq!(s.ok("file.list", json!({"include": "{*.md,*.bin}"})).await, "README.md\nimage.bin");
    let bad = s.err("file.list", json!({"include": "src/[a"})).await;
    assert!(bad.starts_with("Invalid include glob \"src/[a\""), "{bad}");
}

// ---- file.glob ----

#[tokio::test]
async fn glob_lists_matches_newest_first() {
    let s = Sandbox::new();
    s.tree();
    let now = SystemTime::now();
    for (name, age) in [("src/main.rs", 30), ("src/lib.rs", 10), ("src/nested/kept.rs", 20)] {
        let file = std::fs::File::options().write(true).open(s.ws(name)).unwrap();
        file.set_modified(now - Duration::from_secs(age)).unwrap();
    }
    assert_eq!(
        s.ok("file.glob", json!({"pattern": "**/*.rs"})).await,
        "/workspace/src/lib.rs\n/workspace/src/nested/kept.rs\n/workspace/src/main.rs"
    );
    let out = s.run("file.glob", json!({"pattern": "**/*.rs", "limit": 1})).await.unwrap();
    assert_eq!(out.output, "/workspace/src/lib.rs\n[2 more matches not shown; raise limit or narrow the pattern]");
    assert_eq!(out.metadata.unwrap()["truncated"], true);
    // `*` stays within one component.
    assert_eq!(s.ok("file.glob", json!({"pattern": "src/*.rs", "path": "/workspace"})).await.lines().count(), 2);
}

#[tokio::test]
async fn glob_respects_gitignore_and_takes_a_base_path() {
    let s = Sandbox::new();
    s.tree();
    let rs = s.ok("file.glob", json!({"pattern": "**/*.rs", "respectGitignore": false})).await;
    assert!(rs.contains("/workspace/target/debug/out.rs") && rs.contains("generated.rs"), "{rs}");
    assert_eq!(
        s.ok("file.glob", json!({"pattern": "*.rs", "path": "src/nested"})).await,
        "/workspace/src/nested/kept.rs"
    );
    assert_eq!(s.ok("file.glob", json!({"pattern": "*.log"})).await, "/workspace/keep.log");
    assert_eq!(s.ok("file.glob", json!({"pattern": "caf*"})).await, "/workspace/caf\u{fffd}.txt");
    assert_eq!(s.ok("file.glob", json!({"pattern": "*.none"})).await, "(no files match *.none under /workspace)");
}

// ---- file.grep ----

#[tokio::test]
async fn grep_shows_matching_lines_with_numbers() {
    let s = Sandbox::new();
    s.tree();
    let out = s.ok("file.grep", json!({"pattern": "hello", "include": "*.rs"})).await;
    assert_eq!(
        out,
        "/workspace/src/lib.rs:1:pub fn hello() -> &'static str {\n/workspace/src/main.rs:2:    println!(\"hello\");\n/workspace/src/nested/kept.rs:1:fn hello_kept() {}"
    );
    let out = s.ok("file.grep", json!({"pattern": "hello", "caseInsensitive": true, "outputMode": "files"})).await;
    assert_eq!(
        out,
        "/workspace/README.md\n/workspace/caf\u{fffd}.txt\n/workspace/keep.log\n/workspace/src/lib.rs\n/workspace/src/main.rs\n/workspace/src/nested/kept.rs\n[1 binary file skipped]"
    );
}

#[tokio::test]
async fn grep_shows_context_and_counts() {
    let s = Sandbox::new();
    s.write("a.txt", "one\ntwo\nthree match\nfour\nfive\nsix\nseven match\neight\n");
    assert_eq!(
        s.ok("file.grep", json!({"pattern": "match", "path": "a.txt", "contextBefore": 1, "contextAfter": 1})).await,
        "/workspace/a.txt-2-two\n/workspace/a.txt:3:three match\n/workspace/a.txt-4-four\n--\n/workspace/a.txt-6-six\n/workspace/a.txt:7:seven match\n/workspace/a.txt-8-eight"
    );
    s.write("b.txt", "match\n");
    assert_eq!(
        s.ok("file.grep", json!({"pattern": "match", "outputMode": "counts"})).await,
        "/workspace/a.txt:2\n/workspace/b.txt:1"
    );
}

#[tokio::test]
async fn grep_stops_at_max_matches_and_says_so() {
    let s = Sandbox::new();
    s.write("a.txt", "x\n".repeat(50));
    let out = s.run("file.grep", json!({"pattern": "x", "maxMatches": 3})).await.unwrap();
    assert_eq!(
        out.output,
        "/workspace/a.txt:1:x\n/workspace/a.txt:2:x\n/workspace/a.txt:3:x\n[stopped at 3 results; raise maxMatches or narrow the search]"
    );
    assert_eq!(out.metadata.unwrap()["truncated"], true);
}

#[tokio::test]
async fn grep_searches_a_10_mb_file_and_skips_binary_ones() {
    let s = Sandbox::new();
    let mut big = "filler line without the word\n".repeat(10 * 1024 * 1024 / 29);
    big.push_str("needle at the end\n");
    s.write("big.txt", &big);
    let mut binary = vec![b'a'; 1024];
    binary.push(0);
    binary.extend_from_slice(b"needle in a binary\n");
    s.write("blob.bin", &binary);
    let out = s.run("file.grep", json!({"pattern": "needle"})).await.unwrap();
    let lines = big.lines().count();
    assert_eq!(out.output, format!("/workspace/big.txt:{lines}:needle at the end\n[1 binary file skipped]"));
    assert_eq!(out.metadata.unwrap()["binarySkipped"], 1);
}

#[tokio::test]
async fn grep_respects_gitignore_unless_asked() {
    let s = Sandbox::new();
    s.tree();
    let ignored = ["debug.log", "target/debug/out.rs", "generated.rs"];
    let out = s.ok("file.grep", json!({"pattern": "hello", "outputMode": "files"})).await;
    assert!(ignored.iter().all(|f| !out.contains(f)), "{out}");
    let out = s.ok("file.grep", json!({"pattern": "hello", "outputMode": "files", "respectGitignore": false})).await;
    assert!(ignored.iter().all(|f| out.contains(f)), "{out}");
}

#[tokio::test]
async fn grep_refuses_bad_patterns_and_paths() {
    let s = Sandbox::new();
    let bad = s.err("file.grep", json!({"pattern": "a(b"})).await;
    assert!(bad.starts_with("Invalid regex \"a(b\": "), "{bad}");
    assert_eq!(
        s.err("file.grep", json!({"pattern": "x", "path": "../../etc"})).await,
        "Read path must be under /workspace, /artifacts, or /mnt: /etc"
    );
    assert_eq!(s.ok("file.grep", json!({"pattern": "x"})).await, "(no matches for \"x\" in /workspace)");
}

// ---- confinement of the walks ----

#[tokio::test]
async fn no_walk_follows_a_link_out_of_the_roots() {
    let s = Sandbox::new();
    s.write("inside.txt", "secret? no\n");
    std::fs::write(s.outside().join("secret.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(s.outside(), s.ws("escape")).unwrap();
    std::os::unix::fs::symlink(s.outside().join("secret.txt"), s.ws("escape.txt")).unwrap();
    let grep = s.ok("file.grep", json!({"pattern": "secret", "outputMode": "files"})).await;
    assert_eq!(grep, "/workspace/inside.txt");
    let glob = s.ok("file.glob", json!({"pattern": "**/*"})).await;
    assert!(!glob.contains("secret.txt"), "{glob}");
    let list = s.ok("file.list", json!({"depth": 5})).await;
    assert!(!list.lines().any(|l| l.starts_with("escape/")), "{list}");
    // Naming the link itself is refused, as file.read refuses it.
    let err = s.err("file.grep", json!({"pattern": "secret", "path": "escape"})).await;
    assert!(err.contains("/workspace/escape"), "{err}");
}

// ---- file.edit ----

#[tokio::test]
async fn edit_replaces_a_unique_text_and_shows_a_diff() {
    let s = Sandbox::new();
    s.write("a.rs", "fn a() {}\nfn b() {}\nfn c() {}\n");
    let out = s.ok("file.edit", json!({"path": "a.rs", "oldText": "fn b() {}", "newText": "fn b() { run() }"})).await;
    assert_eq!(
        out,
        "Edited /workspace/a.rs (1 replacement)\n--- /workspace/a.rs\n+++ /workspace/a.rs\n@@ -1,3 +1,3 @@\n fn a() {}\n-fn b() {}\n+fn b() { run() }\n fn c() {}"
    );
    assert_eq!(std::fs::read_to_string(s.ws("a.rs")).unwrap(), "fn a() {}\nfn b() { run() }\nfn c() {}\n");
}

#[tokio::test]
async fn edit_fails_when_the_text_is_missing_or_not_unique() {
    let s = Sandbox::new();
    s.write("a.txt", "x = 1\nx = 1\n");
    assert_eq!(
        s.err("file.edit", json!({"path": "a.txt", "oldText": "y", "newText": "z"})).await,
        "oldText not found in /workspace/a.txt; read the file and copy the text exactly"
    );
    assert_eq!(
        s.err("file.edit", json!({"path": "a.txt", "oldText": "x = 1", "newText": "x = 2"})).await,
        "oldText matches 2 times in /workspace/a.txt; add surrounding lines to make it unique, or set replaceAll: true"
    );
    assert_eq!(std::fs::read_to_string(s.ws("a.txt")).unwrap(), "x = 1\nx = 1\n");
    let out =
        s.ok("file.edit", json!({"path": "a.txt", "oldText": "x = 1", "newText": "x = 2", "replaceAll": true})).await;
    assert!(out.starts_with("Edited /workspace/a.txt (2 replacements)\n"), "{out}");
    assert_eq!(std::fs::read_to_string(s.ws("a.txt")).unwrap(), "x = 2\nx = 2\n");
    assert_eq!(
        s.err("file.edit", json!({"path": "missing.txt", "oldText": "a", "newText": "b"})).await,
        "No such file or directory: /workspace/missing.txt"
    );
}

#[tokio::test]
async fn edit_never_reaches_outside_the_write_roots() {
    let s = Sandbox::new();
    std::fs::write(s.outside().join("victim.txt"), "keep\n").unwrap();
    std::os::unix::fs::symlink(s.outside().join("victim.txt"), s.ws("victim.txt")).unwrap();
    let err = s.err("file.edit", json!({"path": "victim.txt", "oldText": "keep", "newText": "gone"})).await;
    assert_eq!(err, "Write path must be under /workspace or /artifacts/pm: /workspace/victim.txt");
    let err = s.err("file.edit", json!({"path": "/workspace/../mnt/x", "oldText": "a", "newText": "b"})).await;
    assert_eq!(err, "Write path must be under /workspace or /artifacts/pm: /mnt/x");
    assert_eq!(std::fs::read_to_string(s.outside().join("victim.txt")).unwrap(), "keep\n");
}

// ---- file.delete and file.move ----

#[tokio::test]
async fn delete_removes_files_and_directories_only_when_recursive() {
    let s = Sandbox::new();
    s.tree();
    assert_eq!(s.ok("file.delete", json!({"path": "README.md"})).await, "Deleted /workspace/README.md");
    assert!(!s.ws("README.md").exists());
    assert_eq!(
        s.err("file.delete", json!({"path": "src"})).await,
        "Cannot delete /workspace/src: it is a directory (set recursive: true to delete it and everything in it)"
    );
    assert_eq!(
        s.ok("file.delete", json!({"path": "src", "recursive": true})).await,
        "Deleted /workspace/src and the 6 entries in it"
    );
    assert!(!s.ws("src").exists());
    assert_eq!(s.err("file.delete", json!({"path": "src"})).await, "No such file or directory: /workspace/src");
    assert_eq!(
        s.err("file.delete", json!({"path": "/workspace", "recursive": true})).await,
        "Cannot delete /workspace: it is a root directory"
    );
    assert_eq!(
        s.err("file.delete", json!({"path": "../etc/passwd"})).await,
        "Write path must be under /workspace or /artifacts/pm: /etc/passwd"
    );
}

#[tokio::test]
async fn delete_removes_a_link_and_never_what_it_points_to() {
    let s = Sandbox::new();
    std::fs::write(s.outside().join("kept.txt"), "kept").unwrap();
    std::os::unix::fs::symlink(s.outside(), s.ws("out-dir")).unwrap();
    std::os::unix::fs::symlink(s.outside().join("kept.txt"), s.ws("out-file")).unwrap();
    s.ok("file.delete", json!({"path": "out-file"})).await;
    s.ok("file.delete", json!({"path": "out-dir", "recursive": true})).await;
    assert!(s.ws("out-dir").symlink_metadata().is_err() && s.ws("out-file").symlink_metadata().is_err());
    assert_eq!(std::fs::read_to_string(s.outside().join("kept.txt")).unwrap(), "kept");
}

#[tokio::test]
async fn move_renames_and_refuses_to_overwrite_unless_asked() {
    let s = Sandbox::new();
    s.write("a.txt", "a");
    s.write("b.txt", "b");
    s.write("dir/c.txt", "c");
    assert_eq!(
        s.err("file.move", json!({"from": "a.txt", "to": "b.txt"})).await,
        "Cannot move to /workspace/b.txt: it already exists (set overwrite: true to replace it)"
    );
    assert_eq!(
        s.ok("file.move", json!({"from": "a.txt", "to": "b.txt", "overwrite": true})).await,
        "Moved /workspace/a.txt to /workspace/b.txt"
    );
    assert_eq!(std::fs::read_to_string(s.ws("b.txt")).unwrap(), "a");
    s.ok("file.move", json!({"from": "dir", "to": "/artifacts/pm/dir"})).await;
    assert_eq!(std::fs::read_to_string(s.roots.artifacts.join("pm/dir/c.txt")).unwrap(), "c");
    assert_eq!(
        s.err("file.move", json!({"from": "missing", "to": "x"})).await,
        "No such file or directory: /workspace/missing"
    );
    assert_eq!(
        s.err("file.move", json!({"from": "b.txt", "to": "/mnt/b.txt"})).await,
        "Write path must be under /workspace or /artifacts/pm: /mnt/b.txt"
    );
    assert_eq!(
        s.err("file.move", json!({"from": "b.txt", "to": "nodir/b.txt"})).await,
        "No such file or directory: /workspace/nodir/b.txt"
    );
}
