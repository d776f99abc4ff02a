#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up the machine, check formatting and lints, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --all-targets --quiet -- -D warnings
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --lib --bins --tests --no-fail-fast
else
  cargo test --lib --bins --tests --no-fail-fast
fi
