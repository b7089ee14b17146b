#!/usr/bin/env bash
# attograd vs PyTorch on the CPU: 200 training iterations of the default char_lm
# model (4 layers, 4 heads, 128 wide, context 64, batch 12), at 1 and at 2
# threads. PyTorch runs at its best setting, not its default: with N threads it
# is timed both with 1 torch thread and with N (OpenBLAS always given N through
# OMP_NUM_THREADS and OPENBLAS_NUM_THREADS; which is faster depends on whether
# Debian's libblas points at OpenBLAS's pthread or OpenMP build), and the faster
# counts. The programs alternate, PAIRS times per thread count, because shared
# machines are noisy; the ratio reported is the median of the per-pair ratios.
#
#   bash bench/compare_cpu.sh [PAIRS] [ITERS]      (defaults 3, 200)
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-3}
iters=${2:-200}
data=${ATTOGRAD_DATA:-../shared/data/tinyshakespeare.txt}
[ -x build/char_lm ] || bash scripts/build.sh >/dev/null
out=$(mktemp -d)

attograd_ms() {  # threads
  OMP_NUM_THREADS=$1 ./build/char_lm train --data "$data" --out "$out" --max-iters "$iters" --eval-interval 100000 \
    --eval-iters 1 --sample-tokens 0 --log-interval 100000 --threads "$1" | sed -n 's/.*median \([0-9.]*\) ms\/iter.*/\1/p'
}
torch_ms() {  # threads: the faster of 1 torch thread and $1 torch threads
  for torch_threads in $(printf "%s\n" 1 "$1" | sort -u); do
    OMP_NUM_THREADS=$1 OPENBLAS_NUM_THREADS=$1 /usr/bin/python3 bench/torch_char_lm.py --data "$data" \
      --iters "$iters" --torch-threads "$torch_threads" | sed -n 's/^ms\/iter \([0-9.]*\).*/\1/p'
  done | sort -g | head -1
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

printf "%-8s %-5s %14s %14s %8s\n" threads pair "attograd ms" "pytorch ms" ratio
for threads in 1 2; do
  ratios=()
  for pair in $(seq "$pairs"); do
    a=$(attograd_ms "$threads")
    t=$(torch_ms "$threads")
    r=$(awk -v a="$a" -v t="$t" 'BEGIN {printf "%.3f", a / t}')
    ratios+=("$r")
    printf "%-8s %-5s %14s %14s %8s\n" "$threads" "$pair" "$a" "$t" "$r"
  done
  printf "threads %s: median attograd/pytorch ratio %s (< 1: attograd faster)\n" "$threads" \
    "$(printf "%s\n" "${ratios[@]}" | median)"
done
rm -rf "$out"
