#!/usr/bin/env bash
# What one 2025-11-25 `tools/list` costs the server (BENCHMARKS.md, "What a feature costs a
# call"): one session, `wrk` posting `tools/list` on 2 keep-alive connections for DURATION
# seconds after 2 of warm-up; prints requests/s and the server's CPU per request (from /proc).
#
#   bash host/benches/tools_list.sh BIN PLUGIN_DIR [DURATION]
#
# BIN is a `turnstile` (a release build's), PLUGIN_DIR the plugins it serves (the listing is
# theirs). To compare two builds, run it for each, alternating, on the same PLUGIN_DIR. Needs
# `wrk` (Debian's package) and curl. Env: PORT [18350].
set -euo pipefail
BIN=$1; PLUGINS=$(cd "$2" && pwd); DURATION=${3:-5}; PORT=${PORT:-18350}
URL="http://127.0.0.1:$PORT/mcp"
WORK=$(mktemp -d /tmp/tools_list.XXXX)
"$BIN" serve --http "127.0.0.1:$PORT" --plugins "$PLUGINS" --store memory: \
  --data-dir "$WORK" > "$WORK/server.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz" && break; sleep 0.1; done

HEADERS=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')
SESSION=$(curl -s -D - -o /dev/null "${HEADERS[@]}" -X POST "$URL" -d '{"jsonrpc":"2.0","id":0,
  "method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},
  "clientInfo":{"name":"tools_list.sh","version":"0"}}}' \
  | awk 'tolower($1) == "mcp-session-id:" { print $2 }' | tr -d '\r')
curl -s -o /dev/null "${HEADERS[@]}" -H "Mcp-Session-Id: $SESSION" \
  -H 'MCP-Protocol-Version: 2025-11-25' -X POST "$URL" \
  -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
cat > "$WORK/list.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["Mcp-Session-Id"] = "$SESSION"
wrk.headers["MCP-Protocol-Version"] = "2025-11-25"
LUA

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$PID/stat"; }
wrk -t1 -c2 -d2s -s "$WORK/list.lua" "$URL" > /dev/null
before=$(cpu_ticks)
report=$(wrk -t1 -c2 -d"${DURATION}s" -s "$WORK/list.lua" "$URL")
after=$(cpu_ticks)
requests=$(echo "$report" | awk '/requests in/ { print $1 }')
echo "$report" | grep -q 'Non-2xx' && { echo "non-2xx answers:" >&2; echo "$report" >&2; exit 1; }
awk -v r="$requests" -v t="$((after - before))" -v d="$DURATION" -v hz="$(getconf CLK_TCK)" \
  'BEGIN { printf "requests/s %.0f, server CPU per request %.4f ms\n", r / d, t * 1000 / hz / r }'
