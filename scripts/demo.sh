#!/usr/bin/env bash
# The main job: build Suzumio and run it on the demo project.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo run --quiet --bin suzumio -- check projects/demo
