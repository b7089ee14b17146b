#!/usr/bin/env bash
# Issue 48, item 3: one CUDA graph per training step against the step launched
# kernel by kernel, in one run on one GPU: `char_lm train --cuda-graph off` and
# `--cuda-graph on` (the default) on
#   lab-cell  the lab's cell shape (width 64, 2 layers, 2 heads, T 64, batch 64) on char_lm's text
#   default   char_lm's default model (4 layers, 4 heads, width 128, T 64, batch 12)
# each at --precision fp32 and bf16. Each run is ITERS steps (default 120); the
# number is char_lm's median ms/iter of the steps after the first 10 (the graph is
# captured at step 2). The `cuda graph:` line of each log says whether the graph
# applied, or why not (a failed capture names its reason there and on stderr).
#
#   bash bench/gpu_graph.sh LOG_DIR [BUILD_DIR]        (BUILD_DIR: build-gpu)
#
# scripts/gpu_check.sh runs it as its GRAPH=1 stage. DEVICE=cpu ITERS=12 runs the same
# lines on the CPU (bf16 refused, both columns eager): a check of the script, not a measurement. Budget: 8 runs of 120 small
# steps, well under a minute on an H100 beside start-up.
set -uo pipefail
cd "$(dirname "$0")/.."
log_dir=$(realpath -m "${1:-gpu_logs}")
build=${2:-build-gpu}
iters=${ITERS:-120}
device=${DEVICE:-cuda}  # DEVICE=cpu: a check of the script itself (the graph applies on CUDA only)
mkdir -p "$log_dir"
data=${DATA:-$(bash scripts/get_data.sh)} || exit 1

# name | char_lm's options
configs=(
  "lab-cell|--n-layer 2 --n-head 2 --n-embd 64 --block-size 64 --batch-size 64 --dropout 0"
  "default|--n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --batch-size 12 --dropout 0"
)
[ -n "${CONFIGS:-}" ] && configs=("${CONFIGS}")

echo "== one CUDA graph per step: median ms/step of steps 10..$((iters - 1)), --cuda-graph off and on"
printf "%-10s %-5s %10s %10s %8s  %s\n" config prec "off ms" "on ms" "off/on" "on's cuda graph line"
for entry in "${configs[@]}"; do
  name=${entry%%|*}
  opts=${entry#*|}
  for precision in fp32 bf16; do
    declare -A ms=()
    for graph in off on; do
      log=$log_dir/graph-$name-$precision-$graph.log
      rm -rf "$log_dir/run-graph-$name-$precision-$graph"
      timeout 120 "./$build/char_lm" train --device "$device" --precision "$precision" --cuda-graph "$graph" --data "$data" \
        --out "$log_dir/run-graph-$name-$precision-$graph" --max-iters "$iters" --eval-interval 100000 --eval-iters 1 \
        --sample-tokens 0 --log-interval 50 $opts >"$log" 2>&1
      ms[$graph]=$(sed -n 's/.*median \([0-9.]*\) ms\/iter.*/\1/p' "$log")
    done
    line=$(sed -n 's/^cuda graph: //p' "$log_dir/graph-$name-$precision-on.log")
    awk -v n="$name" -v p="$precision" -v a="${ms[off]}" -v b="${ms[on]}" -v l="$line" 'BEGIN {
      if (a == "" || b == "") { printf "%-10s %-5s %10s %10s %8s  %s\n", n, p, a == "" ? "-" : a, b == "" ? "-" : b, "-", l; exit }
      printf "%-10s %-5s %10.3f %10.3f %8.2f  %s\n", n, p, a, b, a / b, l }'
    # The two runs compute the same bits: their logged losses and their last evaluation agree.
    losses() { sed -n 's/^iter *\([0-9]*\)\/[0-9]* | loss \([0-9.]*\).*/\1 \2/p; /^eval iter/p' "$1" | tr '\n' ' '; }
    off_losses=$(losses "$log_dir/graph-$name-$precision-off.log")
    on_losses=$(losses "$log_dir/graph-$name-$precision-on.log")
    [ "$off_losses" = "$on_losses" ] || echo "   the losses differ: off '$off_losses', on '$on_losses'"
  done
done
echo "(issue 48: the lab cell <= 0.3 ms/step with the graph)"
