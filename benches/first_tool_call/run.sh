#!/usr/bin/env bash
# First tool call after `suzumio run` (Docker, warm engine: image present), with a model that
# thinks DELAY s: the tool call's own time (started → finished, from the store), prewarm on/off.
#
# Run: benches/first_tool_call/run.sh (after `cargo build --release`; B= names another build).
# SUZUMIO_BENCH_QUICK=1: one pair, the debug build, DELAY 0.3 s (what scripts/test.sh runs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
if [ -n "${SUZUMIO_BENCH_QUICK:-}" ]; then
  B=${B:-$repo/target/debug/suzumio}; DELAY=${DELAY:-0.3}; modes="off pending"
else
  B=${B:-$repo/target/release/suzumio}; DELAY=${DELAY:-1.0}; modes="off pending off pending off pending"
fi
runner=$repo/target/x86_64-unknown-linux-gnu/debug/suzumio-runner
[ -x "$runner" ] || { echo "the static runner is missing at $runner (see scripts/test.sh)" >&2; exit 1; }
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 "$here/fakemodel.py" $PORT $DELAY & FM=$!
trap 'kill $FM' EXIT
# Listening is the event to wait for.
until python3 -c "import socket; socket.create_connection(('127.0.0.1',$PORT))" 2>/dev/null; do sleep 0.05; done
for mode in $modes; do
  d=$(mktemp -d /tmp/first-XXXX)
  cat > $d/suzumio.yaml <<Y
name: first-$(basename $d | tr -d '-' | tr 'A-Z' 'a-z')
task: Write a file.
agents:
  w: {tools: [file.write, file.read, coordination.wait_for_signal]}
backend:
  docker: {prewarm: $mode}
  runner:
    model: main
    models:
      providers: {fake: {type: openai-compatible, baseURL: "http://127.0.0.1:$PORT/v1"}}
      presets: {main: {provider: fake, model: m, stream: false}}
Y
  $B send $d w "go" >/dev/null
  # A run that never becomes idle fails the bench (a guard against hanging, not a measure).
  SUZUMIO_RUNNER_BIN=$runner timeout 120 $B run $d --port 0 --until-idle >/dev/null 2>&1 || { echo "suzumio run did not end idle (prewarm=$mode)" >&2; exit 1; }
  python3 - "$d" "$mode" <<'P'
import sqlite3, sys, glob, datetime
db = glob.glob(sys.argv[1] + '/.suzumio/*.db')[0]
c = sqlite3.connect(db)
t = lambda s: datetime.datetime.fromisoformat(s.replace('Z', '+00:00'))
(s, f, st) = c.execute("select started_at, finished_at, status from tool_calls order by rowid limit 1").fetchone()
(a,) = c.execute("select started_at from activations order by rowid limit 1").fetchone()
assert st == "completed", st
print(f"prewarm={sys.argv[2]:8} first tool call {st}: {(t(f)-t(s)).total_seconds()*1e3:7.1f} ms; activation start -> call finished {(t(f)-t(a)).total_seconds()*1e3:7.1f} ms")
P
  rm -rf $d
done
