#!/usr/bin/env bash
# char_lm on a busy machine: with one other CPU-bound job running (`yes`), the
# default thread count (--threads 0) against --threads 1 and --threads 2, in
# training (ms/iter, the default model) and in sampling (tokens/s, KV cache).
#
#   bash bench/busy_machine.sh [--char-lm PATH] [--rounds N] [--data PATH]
#
# The three settings alternate within each round; the medians over the rounds
# come last, with the default's ratio to the better of 1 and 2 threads (the
# target: within 1.2x). --char-lm runs another build (an older commit's, say).
set -euo pipefail
cd "$(dirname "$0")/.."

char_lm=./build/char_lm rounds=5 data=""
while [ $# -gt 0 ]; do
  case "$1" in
    --char-lm) char_lm=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "busy_machine.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
[ -n "$data" ] || data=$(bash scripts/get_data.sh)
if [ ! -x "$char_lm" ]; then bash scripts/build.sh char_lm >/dev/null; fi

out=$(mktemp -d)
yes >/dev/null &
busy=$!
trap 'kill $busy; rm -rf "$out"' EXIT
# A checkpoint to sample from, trained while the busy job runs.
"$char_lm" train --data "$data" --out "$out/ckpt" --max-iters 50 --eval-interval 50 --eval-iters 1 --sample-tokens 0 \
  --threads 1 >/dev/null

train_ms() {  # threads -> "ms/iter threads-it-ran" (a build without the header prints "?")
  "$char_lm" train --data "$data" --out "$out/run" --overwrite --max-iters 40 --eval-interval 100000 --eval-iters 1 \
    --sample-tokens 0 --log-interval 100000 --threads "$1" >"$out/train.txt"
  echo "$(sed -n 's/.*median \([0-9.]*\) ms\/iter.*/\1/p' "$out/train.txt")" \
    "$(sed -n 's/^runs on: cpu, \([0-9]*\) thread.*/\1/p' "$out/train.txt" | grep . || echo "?")"
}
sample_tokens_per_s() {  # threads
  "$char_lm" sample --ckpt "$out/ckpt" --tokens 500 --threads "$1" 2>&1 >/dev/null |
    sed -n 's/.*: \([0-9.]*\) tokens\/s.*/\1/p'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "$char_lm, $rounds rounds, one CPU-bound job beside it; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A train sample
for round in $(seq "$rounds"); do
  for threads in 0 1 2; do
    read -r t ran <<<"$(train_ms "$threads")"
    s=$(sample_tokens_per_s "$threads")
    train[$threads]+="$t " sample[$threads]+="$s "
    echo "round $round, --threads $threads (ran $ran): train $t ms/iter, sample $s tokens/s"
  done
done
for threads in 0 1 2; do
  train_median[$threads]=$(printf "%s\n" ${train[$threads]} | median)
  sample_median[$threads]=$(printf "%s\n" ${sample[$threads]} | median)
  echo "--threads $threads: median train ${train_median[$threads]} ms/iter, sample ${sample_median[$threads]} tokens/s"
done
awk -v d="${train_median[0]}" -v a="${train_median[1]}" -v b="${train_median[2]}" \
  -v sd="${sample_median[0]}" -v sa="${sample_median[1]}" -v sb="${sample_median[2]}" 'BEGIN {
  best = a < b ? a : b; sbest = sa > sb ? sa : sb
  printf "default / best: train %.2fx the best time, sample %.2fx the best time (target <= 1.2)\n", d / best, sbest / sd }'
