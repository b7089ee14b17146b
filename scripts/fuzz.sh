#!/usr/bin/env bash
# Fuzzes ag::load_safetensors with libFuzzer, under ASan and UBSan. Without an
# argument, CI's budget: ATTOGRAD_FUZZ_RUNS inputs (default 368,000: more than
# the 60 s that CI spent before ran on either machine it was measured on,
# 343,761 and 366,817), split between one fuzzer process per core. A nightly-
# length run gives seconds instead (each process fuzzes that long):
#
#   bash scripts/fuzz.sh 1800
#
# The corpus grows in build-sanitize/fuzz-corpus/ (kept between runs, shared by
# the processes, which read each other's new inputs; the committed seeds in
# fuzz/seeds/ are read, never written). A finding stops the run with a non-zero
# status, and the input that caused it is written to
# build-sanitize/fuzz-findings/; rerun it with
#   build-sanitize/fuzz/fuzz_load_safetensors build-sanitize/fuzz-findings/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build_sanitize.sh

# The committed seeds must be what fuzz/make_seeds.py writes today.
fresh_seeds="$(mktemp -d)"
trap 'rm -rf "$fresh_seeds"' EXIT
python3 fuzz/make_seeds.py "$fresh_seeds"
if ! diff -r "$fresh_seeds" fuzz/seeds >/dev/null; then
  echo "fuzz.sh: fuzz/seeds/ is not what fuzz/make_seeds.py writes: run python3 fuzz/make_seeds.py and commit" >&2
  exit 1
fi

mkdir -p build-sanitize/fuzz-corpus build-sanitize/fuzz-findings
workers=$(nproc)
if [ -n "${1:-}" ]; then
  budget=(-max_total_time="$1")
else
  runs=${ATTOGRAD_FUZZ_RUNS:-368000}
  budget=(-runs=$(((runs + workers - 1) / workers)))
fi
# -max_len: a few checkpoint headers' worth; -rss_limit_mb: a file of that size
# that makes the loader allocate 2 GB is a finding; -timeout: so is one taking 5 s.
pids=()
for ((w = 0; w < workers; ++w)); do
  build-sanitize/fuzz/fuzz_load_safetensors "${budget[@]}" -seed=$((w + 1)) -dict=fuzz/safetensors.dict \
    -max_len=16384 -rss_limit_mb=2048 -timeout=5 -print_final_stats=1 \
    -artifact_prefix=build-sanitize/fuzz-findings/ build-sanitize/fuzz-corpus fuzz/seeds \
    >"build-sanitize/fuzz-$w.log" 2>&1 &
  pids+=($!)
done
status=0
for ((w = 0; w < workers; ++w)); do
  log=build-sanitize/fuzz-$w.log
  if ! wait "${pids[$w]}"; then
    grep -vE '^#[0-9]+' "$log" | tail -80
    echo "fuzz.sh: FINDING in fuzzer $w: the report is above (all of it in $log), the input in build-sanitize/fuzz-findings/" >&2
    status=1
  fi
done
((status == 0)) || exit 1
for ((w = 0; w < workers; ++w)); do
  grep -E '^(Done|stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb))' \
    "build-sanitize/fuzz-$w.log" | sed "s/^/fuzzer $w: /"
done
cat build-sanitize/fuzz-*.log | awk '/^stat::number_of_executed_units:/ {n += $2} END {print "fuzz.sh: " n " inputs run in all, no finding"}'
