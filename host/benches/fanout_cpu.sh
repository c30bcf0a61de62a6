#!/bin/bash
# CPU per `list_changed` of a fan-out to 10,000 watching sessions (BENCHMARKS.md, "Fan-out"):
# the server's and the load tester's, read from /proc over 10 s in the middle of a
# `turnstile load --fanout` run, divided by the notices the server counted in /metrics.
#
# Usage: host/benches/fanout_cpu.sh [TURNSTILE] [PLUGINS_DIR] [SESSIONS]
#   TURNSTILE    the binary (default target/release/turnstile)
#   PLUGINS_DIR  a directory holding the invoice plugin alone (default: made from target/release)
# Needs `ulimit -n` above SESSIONS + 500.
set -euo pipefail
bin=${1:-target/release/turnstile}
plugins=${2:-}
sessions=${3:-10000}
port=18390
if [ -z "$plugins" ]; then
  plugins=$(mktemp -d)
  cp target/release/libturnstile_plugin_invoice.so "$plugins/"
fi
"$bin" serve --http 127.0.0.1:$port --plugins "$plugins" --store memory: --state-handle-key \
  --session-idle-timeout 3600 > /dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 100); do curl -sf http://127.0.0.1:$port/readyz > /dev/null && break; sleep 0.1; done
report=$(mktemp)
"$bin" load http://127.0.0.1:$port/mcp --handle-key handle --fanout --sessions "$sessions" \
  --iterations 60 --warmup 0 --no-progress > "$report" 2>&1 &
load=$!
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
sent() {
  curl -s http://127.0.0.1:$port/metrics |
    awk '/^turnstile_list_changed_sent_total.*transition/ {s += $2} END {print s + 0}'
}
sleep 12 # the sessions are open and the first rounds done
s0=$(cpu $server); l0=$(cpu $load); n0=$(sent)
sleep 10
s1=$(cpu $server); l1=$(cpu $load); n1=$(sent)
wait $load || true
ticks=$(getconf CLK_TCK)
awk -v n=$((n1 - n0)) -v s=$((s1 - s0)) -v l=$((l1 - l0)) -v t="$ticks" 'BEGIN {
  printf "%d notices: server %.1f us of CPU per notice, load tester %.1f\n", n, s / t * 1e6 / n, l / t * 1e6 / n }'
grep -A70 'round tool' "$report" | awk '$1 ~ /^[0-9]+$/ {print $7}' | sort -n |
  awk '{a[NR] = $1} END {print "last list_changed, ms: min " a[1] ", median " a[int(NR / 2) + 1] ", max " a[NR] " (" NR " rounds)"}'
