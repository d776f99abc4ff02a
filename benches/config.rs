//! How reading a config grows with its size: `suzumio.yaml` with N and 10·N channels (the
//! list `tests/config_limits.rs` reads to its last item within a memory bound), loaded and
//! validated in process, medians and p99 of each and the ratio of the medians — about 10 for
//! linear time. The test asks what is read; this asks how fast.
//!
//! Run with `cargo bench --bench config` (`SUZUMIO_BENCH_QUICK=1`: smaller sizes, few runs).

mod common;

use std::time::{Duration, Instant};

use suzumio::config::load::ProcessEnv;

fn project(channels: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut yaml = String::from("name: bench\ntask: t\nchannels:\n");
    for i in 0..channels {
        yaml.push_str(&format!("  - \"#c{i}\"\n"));
    }
    yaml.push_str(
        "agents:\n  pm:\n    role: project-manager\nbackend:\n  runner:\n    model: main\n    models:\n      providers:\n        local:\n          type: scripted\n      presets:\n        main:\n          provider: local\n",
    );
    std::fs::write(dir.path().join("suzumio.yaml"), yaml).expect("write config");
    dir
}

fn measure(channels: usize, runs: usize) -> Vec<Duration> {
    let dir = project(channels);
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let loaded = suzumio::config::load_config(dir.path(), &ProcessEnv).expect("the config loads");
        samples.push(started.elapsed());
        assert!(loaded.config.is_some(), "the bench config is valid: {:?}", loaded.diagnostics.errors);
    }
    samples
}

fn main() {
    if common::listing() {
        return;
    }
    let small = if common::quick() { 1_000 } else { 10_000 };
    let runs = common::iterations(20, 3);
    let a = measure(small, runs);
    let b = measure(small * 10, runs);
    let (ma, mb) = (common::percentile(&a, 0.5), common::percentile(&b, 0.5));
    println!("config with {small} channels: median {ma:?}, p99 {:?}", common::percentile(&a, 0.99));
    println!("config with {} channels: median {mb:?}, p99 {:?}", small * 10, common::percentile(&b, 0.99));
    println!("ratio of the medians for 10× the size: {:.1} (10 is linear)", mb.as_secs_f64() / ma.as_secs_f64());
}
