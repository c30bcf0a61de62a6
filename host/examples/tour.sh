#!/bin/sh
# A two-minute tour of a running Turnstile, with nothing but curl: one session lists its tools,
# submits an invoice, and lists again. Serve the demo first (README.md), then:
#   sh host/examples/tour.sh [http://127.0.0.1:8080/mcp]
set -eu
URL=${1:-http://127.0.0.1:8080/mcp}
ACCEPT='Accept: application/json, text/event-stream'
JSON='Content-Type: application/json'

# `initialize` opens a session; its id comes back in a header.
SESSION=$(curl -sS -D - -o /dev/null "$URL" -H "$ACCEPT" -H "$JSON" -d '{"jsonrpc":"2.0","id":1,
  "method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},
  "clientInfo":{"name":"tour","version":"1"}}}' | tr -d '\r' | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p')
[ -n "$SESSION" ] || { echo "no session from $URL: is Turnstile serving there?" >&2; exit 1; }

send() {
  curl -sS "$URL" -H "$ACCEPT" -H "$JSON" -H "Mcp-Session-Id: $SESSION" \
    -H 'MCP-Protocol-Version: 2025-11-25' -d "$1"
}
menu() {
  send '{"jsonrpc":"2.0","id":'"$1"',"method":"tools/list"}' |
    grep -o '"name":"[a-z_]*\.[a-z_]*"' | sed 's/"name":"//; s/"$//' | tr '\n' ' '
}

send '{"jsonrpc":"2.0","method":"notifications/initialized"}' >/dev/null
echo "menu:       $(menu 2)"
echo "call:       invoice.submit {\"amount\": 120}"
send '{"jsonrpc":"2.0","id":3,"method":"tools/call",
  "params":{"name":"invoice.submit","arguments":{"amount":120}}}' |
  grep -o 'notifications/tools/list_changed' | sed 's/^/told:       /' | head -n 1
echo "menu now:   $(menu 4)"
echo "call:       invoice.discharge {}   (out of order)"
send '{"jsonrpc":"2.0","id":5,"method":"tools/call",
  "params":{"name":"invoice.discharge","arguments":{}}}' |
  grep -o '"code":"[A-Z_]*"' | head -n 1 | sed 's/^/refused:    /'
curl -sS -o /dev/null -X DELETE "$URL" -H "Mcp-Session-Id: $SESSION"
