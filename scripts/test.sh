#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up the machine, check formatting and lints, run every
# test, run every benchmark briefly, and check that nothing tracked was rewritten.
set -euo pipefail
cd "$(dirname "$0")/.."

# expect-test rewrites golden files when UPDATE_EXPECT is set to anything (even 0): here they
# are only ever compared.
unset UPDATE_EXPECT

# One build, not an edited one: incremental compilation only pays on rebuilds, and its caches
# would double the target directory's size on a machine whose disk is shared.
export CARGO_INCREMENTAL=0

# What the tracked files hold before the tests (a developer's uncommitted edits included), to
# tell afterwards whether the tests changed any. Untracked files (build outputs) do not count.
tracked_state() { git diff HEAD --binary | sha256sum; }
before=$(tracked_state)

scripts/setup.sh
if ! cargo nextest --version >/dev/null 2>&1; then
  # Never `cargo test`: its tests share a process, and some change process-wide state.
  echo "test: cargo-nextest is missing (scripts/setup.sh installs it: cargo install cargo-nextest --locked)" >&2
  exit 1
fi
cargo fmt --all -- --check
cargo clippy --all-targets --quiet -- -D warnings
# The runner binary that is mounted into containers must be static (it runs in any image). `-p`,
# not `--bin`: with `--bin` its dependencies take the controller's features too (reqwest and hyper
# come in through rmcp). tests/runner_boundary.rs checks what this very command builds.
RUSTFLAGS='-C target-feature=+crt-static' cargo build --quiet --target x86_64-unknown-linux-gnu -p suzumio-runner
cargo nextest run --lib --bins --tests --no-fail-fast

# Every benchmark, with a few iterations each (SUZUMIO_BENCH_QUICK=1), in the test profile: the
# figures mean nothing here, but a benchmark that no longer runs fails the suite.
for bench in benches/*.rs; do
  name=$(basename "$bench" .rs)
  echo "test: benchmark $name (quick)" >&2
  SUZUMIO_BENCH_QUICK=1 cargo test --quiet --bench "$name"
done
# The first tool call after `run`, prewarm off and on, through the real CLI and Docker.
echo "test: benchmark first_tool_call (quick)" >&2
SUZUMIO_BENCH_QUICK=1 benches/first_tool_call/run.sh

if [ "$(tracked_state)" != "$before" ]; then
  echo "test: the tests changed tracked files (a golden file rewritten?):" >&2
  git diff --stat >&2
  exit 1
fi
