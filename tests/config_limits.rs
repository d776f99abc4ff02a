//! Hostile configs get a located error (exit 2), never a hang, an abort or gigabytes of
//! memory: an alias bomb one level deeper than the fixture, 100 000 channels, 40 000 stray keys,
//! an imported FIFO, an import over the size limit. Each `suzumio check` runs as a child; its
//! peak memory is read from the kernel afterwards (`getrusage(RUSAGE_CHILDREN)`).

mod support;

use std::path::Path;
use std::process::Command;

use support::text;

/// Peak resident memory any `suzumio check` child may reach.
const MEMORY_BOUND_KB: i64 = 200 * 1024;

const TAIL: &str = "agents:\n  pm:\n    role: project-manager\nbackend:\n  runner:\n    model: main\n    models:\n      providers:\n        local:\n          type: scripted\n      presets:\n        main:\n          provider: local\n";

fn project(yaml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::write(dir.path().join("suzumio.yaml"), yaml).expect("config written");
    dir
}

/// `suzumio check` in `dir`: exit code, stderr, and the peak memory (KB) of the children so far.
fn check(dir: &Path) -> (Option<i32>, String, i64) {
    let out = Command::new(env!("CARGO_BIN_EXE_suzumio")).args(["check", "."]).current_dir(dir).output().expect("runs");
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).expect("getrusage");
    (out.status.code(), text(&out.stderr), usage.max_rss())
}

fn refused(yaml: &str, expected: &str) {
    let dir = project(yaml);
    let (code, stderr, peak_kb) = check(dir.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(expected), "expected {expected:?} in:\n{stderr}");
    assert!(peak_kb < MEMORY_BOUND_KB, "suzumio check peaked at {peak_kb} KB");
}

#[test]
fn an_alias_bomb_one_level_deeper_is_refused_at_its_alias() {
    let mut yaml = String::from("name: fixture\ntask: t\nbomb:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for level in 1..12u8 {
        let (prev, name) = ((b'a' + level - 1) as char, (b'a' + level) as char);
        let refs = vec![format!("*{prev}"); 10].join(", ");
        yaml.push_str(&format!("  {name}: &{name} [{refs}]\n"));
    }
    yaml.push_str(TAIL);
    refused(&yaml, "suzumio.yaml:8:");
    refused(&yaml, "aliases in this document copy more than 100000 values");
}

/// All of them are read (the duplicate is the last one, located by its index) within the
/// memory bound. Whether the time grows linearly with the count is the bench's question
/// (the ratio of two sizes), not a test's.
#[test]
fn a_hundred_thousand_channels_are_read_to_the_last_within_the_memory_bound() {
    let mut yaml = String::from("name: fixture\ntask: t\nchannels:\n");
    for i in 0..100_000 {
        yaml.push_str(&format!("  - \"#c{i}\"\n"));
    }
    yaml.push_str("  - \"#c7\"\n");
    yaml.push_str(TAIL);
    refused(&yaml, "channels[100000]: channel #c7 is declared twice");
}

#[test]
fn forty_thousand_stray_keys_are_summarized() {
    let mut yaml = String::from("name: fixture\ntask: t\n");
    for i in 0..40_000 {
        yaml.push_str(&format!("k{i}: {i}\n"));
    }
    yaml.push_str(TAIL);
    refused(&yaml, "39950 more unknown keys in this mapping are not listed");
}

#[test]
fn an_imported_fifo_is_refused_instead_of_blocking() {
    let dir = project(&format!("name: fixture\ntask: \"@import(./task.md)\"\n{TAIL}"));
    let fifo = dir.path().join("task.md");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
    assert!(made.success());
    let (code, stderr, _) = check(dir.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("cannot read @import(./task.md): it is not a regular file"), "{stderr}");
}

#[test]
fn an_import_over_the_size_limit_is_refused() {
    let dir = project(&format!("name: fixture\ntask: \"@import(./task.md)\"\n{TAIL}"));
    std::fs::write(dir.path().join("task.md"), vec![b'x'; 5 << 20]).expect("big file written");
    let (code, stderr, peak_kb) = check(dir.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("config files are read up to 4194304 bytes"), "{stderr}");
    assert!(peak_kb < MEMORY_BOUND_KB, "suzumio check peaked at {peak_kb} KB");
}

#[test]
fn a_symlink_out_of_the_project_is_refused() {
    let dir = project(&format!("name: fixture\ntask: \"@import(./task.md)\"\n{TAIL}"));
    std::os::unix::fs::symlink("/etc/hostname", dir.path().join("task.md")).expect("symlink");
    let (code, stderr, _) = check(dir.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("@import(./task.md) is outside the project directory"), "{stderr}");
}
