#!/usr/bin/env bash
# Runs every fuzz target for SECS seconds each (default 60) and prints how long each ran and
# what it found. Not part of CI. Needs cargo-fuzz (`cargo install cargo-fuzz`); the machine's
# stable toolchain builds libFuzzer's flags with RUSTC_BOOTSTRAP=1. A crash is saved under
# host/fuzz/artifacts/TARGET/ and should become a regression test beside the code it found.
set -uo pipefail
cd "$(dirname "$0")"
secs=${1:-60}
targets=${TARGETS:-"request_body machine logic manifest frames uri_template"}
export RUSTC_BOOTSTRAP=1
cargo fuzz build -O >/dev/null || exit 1
for target in $targets; do
  mkdir -p "corpus/$target"
  start=$(date +%s)
  if cargo fuzz run -O "$target" "corpus/$target" "seeds/$target" -- -max_total_time="$secs" -timeout=10 \
      -rss_limit_mb=2048 >"/tmp/fuzz-$target.log" 2>&1; then
    verdict="no crash"
  else
    verdict="FOUND: see /tmp/fuzz-$target.log and artifacts/$target/"
  fi
  runs=$(grep -o 'Done [0-9]* runs' "/tmp/fuzz-$target.log" | tail -1)
  echo "$target: $(( $(date +%s) - start )) s, ${runs:-?}, $verdict"
done
