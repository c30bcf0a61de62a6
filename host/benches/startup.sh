#!/usr/bin/env bash
# Start-up time over a full store (issue 51, item 5): how long `turnstile serve` takes from exec
# to `/readyz` answering 200, after a clean stop and after kill -9, with N instances stored.
#
#   bash host/benches/startup.sh BIN_DIR N                      # embedded store, a new data dir
#   STORE=redis://127.0.0.1:6379 bash host/benches/startup.sh BIN_DIR N
#
# BIN_DIR holds `turnstile` and `libturnstile_plugin_invoice.so` (a release build's
# target/release). The store is filled by `turnstile load --mint N` on that binary, then the
# server is started three times after a clean stop (SIGTERM) and three times after kill -9, each
# start printed in seconds. To compare two builds, run it once per build: each fills its own
# store, so each starts on what its own build wrote. Env: PORT [18940], WORK [a new temp dir,
# removed at the end unless KEEP=1].
set -uo pipefail
BIN_DIR=$(cd "$1" && pwd); N=$2
PORT=${PORT:-18940}; STORE=${STORE:-}
WORK=${WORK:-$(mktemp -d /tmp/startup.XXXX)}
mkdir -p "$WORK/plugins"; cp "$BIN_DIR/libturnstile_plugin_invoice.so" "$WORK/plugins/"
NS="startup_$$"
PID=""
store_args=(--data-dir "$WORK/data")
[ -n "$STORE" ] && store_args=(--store "$STORE" --store-namespace "$NS")
cleanup() {
  [ -n "$PID" ] && kill -9 "$PID" 2>/dev/null
  if [ -n "$STORE" ] && [ -z "${KEEP:-}" ]; then
    redis-cli -u "$STORE" --scan --pattern "$NS:*" | xargs -r -n 1000 redis-cli -u "$STORE" del >/dev/null
  fi
  [ -z "${KEEP:-}" ] && rm -rf "$WORK"
}
trap cleanup EXIT
serve() {
  "$BIN_DIR/turnstile" serve --plugins "$WORK/plugins" "${store_args[@]}" \
    --http "127.0.0.1:$PORT" --state-handle-key >"$WORK/serve.log" 2>&1 &
  PID=$!
}
ready() { until curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null; do sleep 0.01; done; }
timed_start() { local s; s=$(date +%s.%N); serve; ready; echo "$(date +%s.%N) - $s" | bc; }
end() { kill "-$1" "$PID"; while kill -0 "$PID" 2>/dev/null; do sleep 0.05; done; PID=""; }

serve; ready
"$BIN_DIR/turnstile" load "http://127.0.0.1:$PORT/mcp" --handle-key handle --mint "$N" \
  --sessions 32 2>&1 | grep "minted .* in"
sleep 3; end TERM
[ -z "$STORE" ] && echo "store file: $(du -sh "$WORK/data" | cut -f1)"
for i in 1 2 3; do t=$(timed_start); sleep 2; end TERM; echo "start after a clean stop: $t s"; done
t=$(timed_start); sleep 2; end KILL; echo "start after a clean stop: $t s"
for i in 1 2 3; do t=$(timed_start); sleep 2; end KILL; echo "start after kill -9: $t s"; done
