#!/bin/sh
# The ticket desk (server.py, written with the Python MCP SDK) gated by Turnstile, with nothing
# but curl: a session lists its tools, opens a ticket, lists again, then calls a tool out of
# order and one the gate hides. Serve it first (README.md, "Gate a Python MCP server"), then:
#   sh plugins/tickets/tour.sh [http://127.0.0.1:8080/mcp]
set -eu
URL=${1:-http://127.0.0.1:8080/mcp}
ACCEPT='Accept: application/json, text/event-stream'
JSON='Content-Type: application/json'

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
    grep -o '"name":"tickets\.[a-z_]*"' | sed 's/"name":"//; s/"$//' | tr '\n' ' '
}

send '{"jsonrpc":"2.0","method":"notifications/initialized"}' >/dev/null
echo "menu:       $(menu 2)"
echo "call:       tickets.open {\"title\": \"printer on fire\"}"
send '{"jsonrpc":"2.0","id":3,"method":"tools/call",
  "params":{"name":"tickets.open","arguments":{"title":"printer on fire"}}}' |
  grep -o 'notifications/tools/list_changed\|"state":"[a-z]*"' | uniq | sed 's/^/told:       /'
echo "menu now:   $(menu 4)"
echo "call:       tickets.reopen {}   (out of order)"
send '{"jsonrpc":"2.0","id":5,"method":"tools/call",
  "params":{"name":"tickets.reopen","arguments":{}}}' |
  grep -o '"code":"[A-Z_]*"' | head -n 1 | sed 's/^/refused:    /'
echo "call:       tickets.purge {}    (hidden by the gate)"
send '{"jsonrpc":"2.0","id":6,"method":"tools/call",
  "params":{"name":"tickets.purge","arguments":{}}}' |
  grep -o '"message":"[^"]*"' | head -n 1 | sed 's/^/refused:    /'
curl -sS -o /dev/null -X DELETE "$URL" -H "Mcp-Session-Id: $SESSION"
