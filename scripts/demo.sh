#!/usr/bin/env bash
# The main job: build Suzumio and run the demo project (three agents in hardened containers,
# driven by the scripted model, no API key) in a scratch copy, until it is idle; then show the
# outcome. DEMO_DIR chooses where the copy goes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --quiet --bin suzumio
RUSTFLAGS='-C target-feature=+crt-static' cargo build --quiet --target x86_64-unknown-linux-gnu -p suzumio-runner
demo="${DEMO_DIR:-$(mktemp -d /tmp/suzumio-demo.XXXXXX)}"
rm -rf "$demo" && mkdir -p "$demo" && cp -r projects/demo/. "$demo/"
suzumio=target/debug/suzumio
$suzumio check "$demo"
# `kickoff: true` in its suzumio.yaml: the first run sends the task to the manager, then runs.
$suzumio run "$demo" --port 0 --until-idle
$suzumio status "$demo"
echo "--- final report ($demo/final-report.md)"
cat "$demo/final-report.md"
