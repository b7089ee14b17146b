#!/usr/bin/env bash
# Fuzzes ag::load_safetensors with libFuzzer, under ASan and UBSan, for SECONDS
# (default 60: what CI spends). A nightly-length run:
#
#   bash scripts/fuzz.sh 1800
#
# The corpus grows in build-sanitize/fuzz-corpus/ (kept between runs; the
# committed seeds in fuzz/seeds/ are read, never written). A finding stops the
# run with a non-zero status, and the input that caused it is written to
# build-sanitize/fuzz-findings/; rerun it with
#   build-sanitize/fuzz/fuzz_load_safetensors build-sanitize/fuzz-findings/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
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
# -max_len: a few checkpoint headers' worth; -rss_limit_mb: a file of that size
# that makes the loader allocate 2 GB is a finding; -timeout: so is one taking 5 s.
log=build-sanitize/fuzz.log
if ! build-sanitize/fuzz/fuzz_load_safetensors -max_total_time="$seconds" -dict=fuzz/safetensors.dict \
    -max_len=16384 -rss_limit_mb=2048 -timeout=5 -print_final_stats=1 \
    -artifact_prefix=build-sanitize/fuzz-findings/ build-sanitize/fuzz-corpus fuzz/seeds >"$log" 2>&1; then
  grep -vE '^#[0-9]+' "$log" | tail -80
  echo "fuzz.sh: FINDING: the report is above (all of it in $log), the input in build-sanitize/fuzz-findings/" >&2
  exit 1
fi
grep -E '^(Done|stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb))' "$log"
