#!/usr/bin/env bash
# /docs as a person sees it, without internet: serve, then a headless Chromium screenshot.
# Needs Debian's chromium (`apt-get install chromium`). Usage: infra/docs_screenshot.sh [out.png]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs.png}"
data="$(mktemp -d)"
port=8799
ENGRAM_DATA_DIR="$data" ENGRAM_EMBEDDER=none uv run --locked engram serve --port "$port" >"$data/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.2; done
# the flags keep Chromium off the network (this machine has none): the page must load from the server alone
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$data/profile" --window-size=1280,900 \
  --virtual-time-budget=5000 --screenshot="$out" "http://127.0.0.1:$port/docs" 2>/dev/null
echo "wrote $out"
