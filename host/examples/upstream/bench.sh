#!/usr/bin/env bash
# The cost of the gate in front of an MCP server: the ticket desk written with the official
# TypeScript SDK (tests/upstream/ts/server.mjs) loaded alone, and the same server behind
# Turnstile as an upstream (plugins/tickets' bindings, reached over Streamable HTTP), taking
# turns in one run. The same steps on both (through_turnstile.json, alone.json): the gated run
# also checks every refusal and list_changed. BENCHMARKS.md, "An upstream behind the gate".
#   bash host/examples/upstream/bench.sh [SESSIONS] [SECONDS] [ROUNDS]   (after cargo build --release)
# STORE=embedded:DIR/state.redb (default memory:) puts Turnstile on another store; LOAD_FLAGS
# adds flags to turnstile load (LOAD_FLAGS="--rate 1000": open loop, for the latency added).
set -euo pipefail
cd "$(dirname "$0")/../../.."
SESSIONS=${1:-64}
SECONDS_TOTAL=${2:-16}
ROUNDS=${3:-4}
BIN=${TURNSTILE_BIN:-target/release/turnstile}
[ -x "$BIN" ] || { echo "build first: cargo build --release" >&2; exit 2; }
[ -d tests/upstream/ts/node_modules ] || npm ci --prefix tests/upstream/ts --no-audit --no-fund >&2

work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

node tests/upstream/ts/server.mjs --port 0 > "$work/desk.url" &
pids+=($!); desk_pid=$!
for _ in $(seq 100); do [ -s "$work/desk.url" ] && break; sleep 0.1; done
desk=$(head -n1 "$work/desk.url")

mkdir "$work/plugins"
sed -e "s|^command = .*|url = \"$desk\"|" \
    -e "s|^machine = \"tickets.machine.json\"|machine = \"$PWD/plugins/tickets/tickets.machine.json\"|" \
    plugins/tickets/tickets.upstream.toml > "$work/plugins/tickets.upstream.toml"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$BIN" serve --http "127.0.0.1:$port" --plugins "$work/plugins" --data-dir "$work/data" \
    --store "${STORE:-memory:}" 2> "$work/turnstile.log" &
pids+=($!); turnstile_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done

"$BIN" load "http://127.0.0.1:$port/mcp" --scenario host/examples/upstream/through_turnstile.json \
    --compare "$desk" --compare-scenario host/examples/upstream/alone.json \
    --sessions "$SESSIONS" --duration "$SECONDS_TOTAL" --warmup 1 --rounds "$ROUNDS" \
    --server-pid "$turnstile_pid" --compare-pid "$desk_pid" --no-progress ${LOAD_FLAGS:-}
