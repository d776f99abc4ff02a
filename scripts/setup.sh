#!/usr/bin/env bash
# Prepare this machine for Suzumio's tests and demo (Debian 12, run as root or with sudo).
#
# - Docker Engine: if no engine answers, install Debian's docker.io (and busybox-static, which the
#   offline minimal runner image is built from) and start dockerd in the background, waiting
#   until it answers. Nothing is ever pulled: the runner image is built offline.
# - Chromium and ChromeDriver for the browser tests (tests/browser.rs): Debian's chromium and
#   chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver). The tests run them headless.
# - npm and pip, which fetch the MCP servers of the MCP test image from the npm registry and PyPI
#   (the image itself is built from the local debian image; nothing is pulled).
# - The Python MCP SDK, pinned (tests/fixtures/mcp/python-requirements.txt), in its own venv;
#   fastmcp, a second MCP client library, pinned (tests/fixtures/mcp/fastmcp-requirements.txt), in another.
# - cargo-nextest, the test runner of scripts/test.sh (installed from crates.io when missing).
# Safe to run again: it only does what is missing.
set -euo pipefail

log() { printf 'setup: %s\n' "$*" >&2; }
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
dpkg -s busybox-static >/dev/null 2>&1 || need_pkgs+=(busybox-static)
command -v chromium >/dev/null 2>&1 || need_pkgs+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_pkgs+=(chromium-driver)
# tests/socket_flood.rs holds half of its 20 000 connections in a Python client.
command -v python3 >/dev/null 2>&1 || need_pkgs+=(python3)
# tests/mcp_serve.rs drives `suzumio mcp` with the official Python MCP SDK, in its own venv.
MCP_VENV=/opt/suzumio-mcp-venv
[ -x "$MCP_VENV/bin/python" ] || python3 -c 'import ensurepip' >/dev/null 2>&1 || need_pkgs+=(python3-venv)
# The MCP test image (tests/support/mcp_image.rs) is the debian image plus MCP servers installed
# on the host at test set-up: server-everything with npm, the Python SDK with pip.
command -v npm >/dev/null 2>&1 || need_pkgs+=(npm)
# benches/controller.rs runs the original's callSupport path re-created in Node beside ours.
command -v node >/dev/null 2>&1 || need_pkgs+=(nodejs)
python3 -m pip --version >/dev/null 2>&1 || need_pkgs+=(python3-pip)
# `suzumio image build --base debian` (tests/debian_image.rs) builds its rootfs with mmdebstrap.
command -v mmdebstrap >/dev/null 2>&1 || need_pkgs+=(mmdebstrap)
# Tool icons in the WebUI are emoji; without this font screenshots show empty boxes.
dpkg -s fonts-noto-color-emoji >/dev/null 2>&1 || need_pkgs+=(fonts-noto-color-emoji)

if [ ${#need_pkgs[@]} -gt 0 ]; then
  log "installing ${need_pkgs[*]} with apt-get"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# The SDK and its whole tree at the versions the tests were written against: the same pinned
# list the MCP test image installs, so the host's client and the image's servers agree.
MCP_REQUIREMENTS="$(cd "$(dirname "$0")/.." && pwd)/tests/fixtures/mcp/python-requirements.txt"
MCP_PIN=$(sed -n 's/^mcp==//p' "$MCP_REQUIREMENTS")
if [ "$("$MCP_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null)" != "$MCP_PIN" ]; then
  log "installing the Python MCP SDK $MCP_PIN (pinned in $MCP_REQUIREMENTS) into $MCP_VENV"
  $SUDO python3 -m venv "$MCP_VENV"
  $SUDO "$MCP_VENV/bin/pip" install -q -r "$MCP_REQUIREMENTS"
fi

# A second MCP client library, fastmcp, pinned likewise, in a venv of its own (its tree is larger
# than the SDK's and must not move the SDK's pins): tests/mcp_conformance.rs.
FASTMCP_VENV=/opt/suzumio-fastmcp-venv
FASTMCP_REQUIREMENTS="$(cd "$(dirname "$0")/.." && pwd)/tests/fixtures/mcp/fastmcp-requirements.txt"
FASTMCP_PIN=$(sed -n 's/^fastmcp==//p' "$FASTMCP_REQUIREMENTS")
if [ "$("$FASTMCP_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("fastmcp"))' 2>/dev/null)" != "$FASTMCP_PIN" ]; then
  log "installing fastmcp $FASTMCP_PIN (pinned in $FASTMCP_REQUIREMENTS) into $FASTMCP_VENV"
  $SUDO python3 -m venv "$FASTMCP_VENV"
  $SUDO "$FASTMCP_VENV/bin/pip" install -q -r "$FASTMCP_REQUIREMENTS"
fi

# The suite runs under cargo-nextest, one process per test: some tests change process-wide
# state (socket_flood.rs lowers RLIMIT_NOFILE, config_limits.rs reads getrusage(RUSAGE_CHILDREN)),
# which under `cargo test` would leak into the other tests of the same binary.
if ! cargo nextest --version >/dev/null 2>&1; then
  log "installing cargo-nextest with cargo install (crates.io)"
  cargo install cargo-nextest --locked
fi

docker_up() { docker info >/dev/null 2>&1; }

start_dockerd() {
  local driver=$1 logfile=/var/log/suzumio-dockerd.log
  log "starting dockerd (storage driver $driver), log in $logfile"
  $SUDO sh -c "nohup dockerd --storage-driver $driver >$logfile 2>&1 &"
  for _ in $(seq 1 120); do
    docker_up && return 0
    sleep 0.5
  done
  return 1
}

wait_docker() {
  for _ in $(seq 1 120); do
    docker_up && return 0
    sleep 0.5
  done
  return 1
}

if docker_up; then
  log "Docker engine already answering"
elif pgrep -x dockerd >/dev/null 2>&1 && wait_docker; then
  # A dockerd that is starting (or slow under load) is waited for, never killed: killing it
  # would stop the containers of everyone using it.
  log "Docker engine answered after a wait"
else
  if ! start_dockerd overlay2; then
    log "dockerd did not answer with overlay2; retrying with vfs"
    $SUDO pkill dockerd || true
    sleep 1
    start_dockerd vfs || { log "Docker engine failed to start; see /var/log/suzumio-dockerd.log"; exit 1; }
  fi
  log "Docker engine is up ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
fi

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  log "browser tests: $(chromium --version 2>/dev/null | head -n1), $(chromedriver --version 2>/dev/null | head -n1)"
fi
