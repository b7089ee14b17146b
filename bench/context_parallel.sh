#!/usr/bin/env bash
# Ring attention against one process (issue 26): a one-layer GPT (4 heads,
# width 128, batch 1, causal flash, or $CASE) at each T, trained alone with the machine's
# threads, then split over P processes of one thread each (mpirun), each
# process's ms/iter, peak RSS (its own VmHWM and /usr/bin/time's maximum),
# memory above its setup, and the ms per step its ring waited for transfers.
#
#   bash bench/context_parallel.sh [P] [T list] [iters]    (defaults: 2 "4096 16384 65536" 2)
#   ALONE=0 bash bench/context_parallel.sh 2 131072         (the split run only: one process would take hours)
#   CASE=ssd bash bench/context_parallel.sh 2 "65536 131072" (another attention: bench_attention_model's --case names)
set -euo pipefail
cd "$(dirname "$0")/.."
P=${1:-2}
LENGTHS=${2:-"4096 16384 65536"}
ITERS=${3:-2}
CASE=${CASE:-flash}
THREADS=$(nproc)
BENCH=./build/bench_attention_model
MPIRUN="mpirun --oversubscribe --allow-run-as-root -np $P"
echo "# $(git rev-parse --short HEAD), $CASE, $(nproc) cores; alone: $THREADS threads; split: $P processes x 1 thread; $ITERS steps, median of 2..N"
echo "| T | run | ms/iter | peak RSS MB (VmHWM) | max RSS MB (/usr/bin/time) | above setup MB | ring wait ms/iter |"
echo "|---:|---|---:|---:|---:|---:|---:|"
for T in $LENGTHS; do
  if [ "${ALONE:-1}" = 1 ]; then
    line=$(/usr/bin/time -f "time %M" $BENCH --threads "$THREADS" --iters "$ITERS" --case "$CASE" "$T" 2>&1)
    read -r ms cpu peak extra <<<"$(grep -v '^time' <<<"$line")"
    rss=$(awk '/^time/ {printf "%.0f", $2 / 1024}' <<<"$line")
    echo "| $T | 1 process | $ms | $peak | $rss | $extra | |"
  fi
  out=$($MPIRUN /usr/bin/time -f "time %M" $BENCH --threads 1 --iters "$ITERS" --context-parallel "$P" --case "$CASE" "$T" 2>&1)
  # one "ms cpu peak extra wait rank r of P" line per process, and /usr/bin/time's lines in any order
  grep ' rank ' <<<"$out" | sort -k7n | while read -r ms cpu peak extra wait _ r _ _; do
    echo "| $T | rank $r of $P | $ms | $peak | | $extra | $wait |"
  done
  echo "| $T | max RSS per rank (/usr/bin/time) | | | $(awk '/^time/ {printf "%.0f ", $2 / 1024}' <<<"$out") | | |"
done
