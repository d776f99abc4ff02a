#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up the machine, check formatting and lints, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --all-targets --quiet -- -D warnings
# The runner binary that is mounted into containers must be static (it runs in any image). `-p`,
# not `--bin`: with `--bin` its dependencies take the controller's features too (reqwest and hyper
# come in through rmcp). tests/runner_boundary.rs checks what this very command builds.
RUSTFLAGS='-C target-feature=+crt-static' cargo build --quiet --target x86_64-unknown-linux-gnu -p suzumio-runner
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --lib --bins --tests --no-fail-fast
else
  cargo test --lib --bins --tests --no-fail-fast
fi
