//! A full disk, for real: the project lives on a small tmpfs that the test fills up. Writes
//! fail with a clear message (HTTP 507, CLI exit 1, "the disk is full (<dir>)"), reads keep
//! working (`status`, `signals`, GET routes), nothing accepted is lost, and everything works
//! again once space is freed. Needs root for `mount` (CI runs as root).

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::{Controller, copy_dir, fixture, text};

const P: &str = "/api/projects/review-demo";

/// A small tmpfs, unmounted on drop.
struct SmallDisk {
    mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    fn new(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).expect("mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mount)
            .output()
            .expect("mount runs");
        assert!(out.status.success(), "cannot mount a tmpfs (this test needs root, as CI has): {}", text(&out.stderr));
        SmallDisk { mount, _dir: dir }
    }

    /// Write until the file system refuses; returns the filler file.
    fn fill(&self) -> PathBuf {
        let path = self.mount.join("filler.bin");
        let mut file = std::fs::File::create(&path).expect("filler created");
        let chunk = vec![0u8; 64 << 10];
        while file.write_all(&chunk).is_ok() {}
        let small = [0u8; 512];
        while file.write_all(&small).is_ok() {}
        let _ = file.sync_all();
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

fn suzumio(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_suzumio")).args(args).arg(dir).output().expect("suzumio runs")
}

fn send(dir: &Path, body: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_suzumio"))
        .args(["send"])
        .arg(dir)
        .args(["pm", body])
        .output()
        .expect("suzumio runs")
}

fn post_message(c: &Controller, body: &str) -> support::Response {
    support::http(
        "POST",
        &c.url(&format!("{P}/messages")),
        &[("Content-Type", "application/json")],
        Some(&format!(r#"{{"recipient":"pm","body":"{body}"}}"#)),
    )
}

#[test]
fn a_full_disk_refuses_writes_clearly_keeps_reads_and_loses_nothing() {
    let disk = SmallDisk::new("6m");
    let dir = disk.mount.join("project");
    copy_dir(&fixture("projects", "review"), &dir);
    let first = send(&dir, "before the disk filled");
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let c = Controller::start(&dir, &[]);
    let filler = disk.fill();

    // Writes: refused with 507 and the reason; never a 500. (SQLite may still have room in its
    // log for a write or two, so keep writing until the disk says no.)
    let mut accepted = 1;
    let mut refusal = None;
    for i in 0..200 {
        let r = post_message(&c, &format!("while full {i}"));
        match r.status {
            200 | 201 => accepted += 1,
            507 => {
                refusal = Some(r.json());
                break;
            }
            other => panic!("POST messages on a full disk answered {other}: {}", r.body),
        }
    }
    let refusal = refusal.expect("a write was refused once the disk was full");
    let error = refusal["error"].as_str().unwrap_or_default().to_string();
    assert!(error.starts_with("the disk is full (") && error.ends_with("): free space and retry"), "{error}");
    assert!(error.contains(&disk.mount.display().to_string()), "the message names the file system: {error}");

    // Reads keep working, in the API and the read-only commands.
    assert_eq!(support::http("GET", &c.url(&format!("{P}/agents")), &[], None).status, 200);
    let status = suzumio(&dir, &["status"]);
    assert_eq!(status.status.code(), Some(0), "status on a full disk: {}", text(&status.stderr));
    assert!(text(&status.stdout).contains("project review-demo"), "{}", text(&status.stdout));
    let signals = suzumio(&dir, &["signals", "--json"]);
    assert_eq!(signals.status.code(), Some(0), "signals on a full disk: {}", text(&signals.stderr));
    let send_full = send(&dir, "refused");
    assert_eq!(send_full.status.code(), Some(1), "{}", text(&send_full.stderr));
    assert!(text(&send_full.stderr).contains("the disk is full"), "{}", text(&send_full.stderr));

    // Space back: writes work again and every accepted message is there.
    std::fs::remove_file(&filler).expect("filler removed");
    let r = post_message(&c, "after");
    assert!(matches!(r.status, 200 | 201), "{}: {}", r.status, r.body);
    accepted += 1;
    let messages = support::http("GET", &c.url(&format!("{P}/messages?limit=500")), &[], None).json();
    let stored = messages["items"].as_array().map_or(0, Vec::len);
    assert_eq!(stored, accepted, "every accepted message is stored, and no refused one: {messages}");
    assert_eq!(c.stop(), Some(0));
}
