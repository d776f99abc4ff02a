//! What the benchmarks share: percentiles, copying a fixture project, a client end that
//! answers `load` like a runner with no packs, and the quick mode.
//!
//! Quick mode (`SUZUMIO_BENCH_QUICK=1`, what `scripts/test.sh` sets): every measurement runs a
//! few iterations only, so the test command runs each bench end to end in seconds and a bench
//! that breaks fails the suite. Its figures mean nothing.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

/// The `p` quantile (0..=1) of the samples.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut s = samples.to_vec();
    s.sort();
    s[((s.len() as f64 - 1.0) * p).round() as usize]
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Answers `load` with no tools: enough to hold a session open on an agent's socket.
pub struct AnswerLoad;

impl suzumio::rpc::RequestHandler for AnswerLoad {
    fn handle(&self, method: String, _params: Value) -> suzumio::rpc::HandlerFuture {
        Box::pin(async move {
            match method.as_str() {
                "load" => Ok(json!({"tools": []})),
                other => Err(suzumio::rpc::RpcError::method_not_found(other)),
            }
        })
    }
}

/// True when a test runner asks a benchmark to list its tests (it has none).
pub fn listing() -> bool {
    std::env::args().any(|a| a == "--list")
}

/// True in quick mode (`SUZUMIO_BENCH_QUICK=1`).
pub fn quick() -> bool {
    std::env::var("SUZUMIO_BENCH_QUICK").is_ok_and(|v| v == "1")
}

/// `full` iterations, or `few` in quick mode.
pub fn iterations(full: usize, few: usize) -> usize {
    if quick() { few } else { full }
}
