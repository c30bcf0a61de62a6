#!/usr/bin/env bash
# A local Redis Cluster of three masters (no replicas) for the tests, on 127.0.0.1 ports
# 7001-7003 (TURNSTILE_REDIS_CLUSTER_PORTS overrides), made of the machine's redis-server.
#
# Idempotent and safe to run from several test processes at once (a lock): when a healthy cluster
# already answers on those ports it does nothing; otherwise it starts the missing nodes and
# forms the cluster anew. Nothing is kept on disk; the nodes keep running after the tests (like
# the machine's own Redis), in daemon mode, with their files under $TMPDIR.
#
# Prints the store URL: redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003
set -euo pipefail

read -r -a ports <<<"${TURNSTILE_REDIS_CLUSTER_PORTS:-7001 7002 7003}"
dir="${TMPDIR:-/tmp}/turnstile-redis-cluster"
mkdir -p "$dir"

url() {
  local nodes=()
  for port in "${ports[@]}"; do nodes+=("127.0.0.1:$port"); done
  local IFS=,
  echo "redis+cluster://${nodes[*]}"
}

answers() { redis-cli -p "$1" ping 2>/dev/null | grep -q PONG; }

healthy() {
  for port in "${ports[@]}"; do
    redis-cli -p "$port" cluster info 2>/dev/null | grep -q 'cluster_state:ok' || return 1
    [ "$(redis-cli -p "$port" cluster info | sed -n 's/^cluster_known_nodes:\([0-9]*\).*/\1/p')" \
      = "${#ports[@]}" ] || return 1
  done
}

exec 9>"$dir/lock"
flock 9

if healthy; then
  url
  exit 0
fi

for port in "${ports[@]}"; do
  if ! answers "$port"; then
    rm -f "$dir/nodes-$port.conf"
    redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
      --cluster-config-file "nodes-$port.conf" --cluster-node-timeout 2000 \
      --save "" --appendonly no --dir "$dir" --daemonize yes --logfile "$dir/$port.log" 9>&-
  fi
done
for port in "${ports[@]}"; do
  for _ in $(seq 1 100); do answers "$port" && break; sleep 0.1; done
  answers "$port" || { echo "redis-server on port $port did not come up (see $dir/$port.log)" >&2; exit 1; }
done

# A cluster that is not whole (a node restarted and forgot it) is formed anew: test data only.
for port in "${ports[@]}"; do
  redis-cli -p "$port" flushall >/dev/null
  redis-cli -p "$port" cluster reset hard >/dev/null
done
nodes=()
for port in "${ports[@]}"; do nodes+=("127.0.0.1:$port"); done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log" 2>&1 || {
  cat "$dir/create.log" >&2
  exit 1
}
for _ in $(seq 1 200); do
  healthy && { url; exit 0; }
  sleep 0.1
done
echo "the Redis Cluster on ports ${ports[*]} did not become healthy" >&2
exit 1
