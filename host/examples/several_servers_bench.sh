#!/usr/bin/env bash
# Round trips to the store per call, and calls/s, old build vs new, one server per (build, store),
# driven by `turnstile load` with host/examples/invoice_cycle.json (every call a transition).
set -u
old=$1; new=$2; plugins=$3; rounds=${4:-2}
dir=$(mktemp -d); port=18300
declare -A url pid
for build in old new; do
  bin=${!build}
  for store in redis://127.0.0.1:6379 postgres://postgres@127.0.0.1:5432/test; do
    port=$((port+1)); s=${store%%:*}
    "$bin" serve --http 127.0.0.1:$port --plugins "$plugins/$build" --data-dir "$dir/d$port" \
      --state-handle-key --idle-after 0 --store "$store" --store-namespace "bench_${build}_$s" \
      2>>"$dir/servers.log" &
    pid[$build-$s]=$!; url[$build-$s]=http://127.0.0.1:$port/mcp
  done
done
sleep 3
count() { # store -> operations counter
  case $1 in
    # Requests the servers sent (commands run inside scripts are not round trips).
    redis) redis-cli info commandstats | awk -F'[:=,]' '/^cmdstat_(evalsha|hmget|publish|lrange|zrangebylex|ping|subscribe|unsubscribe|script\|load|config\|get)[:]/ {n += $3} END {print n}';;
    # Statements (each its own transaction); backends report them within 10 s of going idle.
    postgres) sleep 11; psql -qtA -h 127.0.0.1 -U postgres test -c "select xact_commit from pg_stat_database where datname='test'";;
  esac
}
for round in $(seq 1 "$rounds"); do
  for s in redis postgres; do
    for build in old new; do
      before=$(count $s)
      "$new" load "${url[$build-$s]}" --scenario host/examples/invoice_cycle.json --handle-key handle \
        --sessions 16 --iterations 40 --warmup 0 --json --no-progress > "$dir/$build-$s-$round.json" 2>/dev/null
      after=$(count $s)
      calls=$(jq '.runs[0].calls' "$dir/$build-$s-$round.json")
      cps=$(jq '.runs[0].calls_per_second|floor' "$dir/$build-$s-$round.json")
      code=$(jq '.exit_code' "$dir/$build-$s-$round.json")
      echo -e "round $round\t$s\t$build\tcalls $calls\tcalls/s $cps\tstore ops/call $(echo "scale=2; ($after-$before)/$calls" | bc)\texit $code"
    done
  done
done
kill "${pid[@]}" 2>/dev/null
wait 2>/dev/null
redis-cli --scan --pattern 'bench_*' | xargs -r redis-cli del >/dev/null
for b in old new; do psql -qtA -h 127.0.0.1 -U postgres test -c "drop table if exists bench_${b}_postgres_audit, bench_${b}_postgres_instances, bench_${b}_postgres_machines" >/dev/null; done
