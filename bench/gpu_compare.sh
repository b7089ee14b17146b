#!/usr/bin/env bash
# Issue 48's comparison, in one run on one GPU: attograd's training step at
# --precision fp32 / tf32 / bf16 against PyTorch's (bench/torch_char_lm.py, the
# same model and loop) eager fp32 / tf32 / bf16-autocast, and torch.compile at
# bf16 where this machine's PyTorch has it, on
#   default      char_lm's default model (4 layers, 4 heads, width 128, T 64, batch 12)
#   nanogpt-gpu  nanoGPT's shakespeare_char GPU config (6 layers, 6 heads, 384, T 256, batch 64)
# attograd runs with --cuda-graph CUDA_GRAPH (default on: one CUDA graph per step,
# optim/train_step.h). Each run is ITERS steps (default 80); the number is the median of the steps
# after the first 10 (warm-up: both programs time them the same way), so a
# median of ITERS - 10 >= 50 steps. TFLOP/s by nanoGPT's count: 6N + 12·L·H·Q·T
# FLOPs per token (N the parameters without the position embedding; Q = C/H),
# times B·T tokens per step, computed here from the options and the text's
# vocabulary (bench/torch_char_lm.py prints the same count from its model).
#
#   bash bench/gpu_compare.sh LOG_DIR [BUILD_DIR]        (BUILD_DIR: build-gpu)
#
# scripts/gpu_check.sh runs it as its COMPARE=1 stage. Without a GPU (DEVICE=cpu
# and small ITERS) the same lines run on the CPU, where attograd refuses tf32 and
# bf16 (its rows say so) and PyTorch may be missing (its rows are empty): a check
# of the script itself, not a measurement. Budget: on an H100 the nanoGPT config
# is ~40 ms/step in fp32, so its 7 runs of 80 steps take ~30 s plus start-up and
# torch.compile's compilation (~1 min): within gpu_check.sh's 10 minutes beside a
# TESTS=cuda run.
set -uo pipefail
cd "$(dirname "$0")/.."
log_dir=$(realpath -m "${1:-gpu_logs}")
build=${2:-build-gpu}
device=${DEVICE:-cuda}
iters=${ITERS:-80}
cuda_graph=${CUDA_GRAPH:-on}  # attograd's --cuda-graph (bench/gpu_graph.sh compares off and on)
python=${PYTHON:-python3}
mkdir -p "$log_dir"
data=${DATA:-$(bash scripts/get_data.sh)} || exit 1
torch_compile=$($python -c "import torch; print(int(hasattr(torch, 'compile')))" 2>/dev/null || echo 0)

# name | options both programs take
configs=(
  "default|--n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --batch-size 12 --dropout 0"
  "nanogpt-gpu|--n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 64 --dropout 0.2"
)
[ -n "${CONFIGS:-}" ] && configs=("${CONFIGS}")  # one "name|options" entry instead (a check on the CPU)

# nanoGPT's FLOPs per step for the options "$1" (char_lm's model: biases on, the head tied): per block
# W_Q, W_K, W_V, W_O 4(C² + C), two LayerNorms 4C, the MLP 8C² + 5C; the token embedding V·C; ln_f 2C.
nanogpt_flops() {
  $python - "$data" "$1" <<'PY'
import sys
V = len(set(open(sys.argv[1], encoding="utf-8").read()))
o = sys.argv[2].split()
get = lambda flag: int(o[o.index(flag) + 1])
L, H, C, T, B = (get(f) for f in ("--n-layer", "--n-head", "--n-embd", "--block-size", "--batch-size"))
N = V * C + L * (12 * C * C + 13 * C) + 2 * C
print((6 * N + 12 * L * H * (C // H) * T) * T * B)
PY
}

# A row: config, program, precision, median ms/step, TFLOP/s (from flops/step), and a note.
row() { awk -v c="$1" -v p="$2" -v q="$3" -v ms="$4" -v f="$5" -v note="$6" 'BEGIN {
  if (ms == "") { printf "%-12s %-22s %-5s %10s %9s  %s\n", c, p, q, "-", "-", note; exit }
  printf "%-12s %-22s %-5s %10.2f %9.2f  %s\n", c, p, q, ms, (f == "" ? 0 : f / ms / 1e9), note }'
}

echo "== attograd against PyTorch on $device: median ms/step of steps 10..$((iters - 1)), TFLOP/s by nanoGPT's count"
printf "%-12s %-22s %-5s %10s %9s  %s\n" config program prec "ms/step" "TFLOP/s" note
# attograd's rows and PyTorch eager's first, torch.compile's (the slowest to start) last, so that a
# timeout cuts the least.
for entry in "${configs[@]}"; do
  name=${entry%%|*}
  opts=${entry#*|}
  flops=$(nanogpt_flops "$opts")
  echo "$name: $opts; $(awk -v f="$flops" 'BEGIN {printf "%.3f", f / 1e12}') TFLOP per step by nanoGPT's count"
  for precision in fp32 tf32 bf16; do
    log=$log_dir/attograd-$name-$precision.log
    rm -rf "$log_dir/run-$name-$precision"
    timeout 150 "./$build/char_lm" train --device "$device" --precision "$precision" --cuda-graph "$cuda_graph" --data "$data" \
      --out "$log_dir/run-$name-$precision" --max-iters "$iters" --eval-interval 100000 --eval-iters 1 \
      --sample-tokens 0 --log-interval 50 $opts >"$log" 2>&1
    ms=$(sed -n 's/.*median \([0-9.]*\) ms\/iter.*/\1/p' "$log")
    row "$name" "attograd" "$precision" "$ms" "$flops" "$( [ -z "$ms" ] && tail -1 "$log")"
  done
  for precision in fp32 tf32 bf16; do
    log=$log_dir/torch-$name-$precision.log
    timeout 150 $python bench/torch_char_lm.py --device "$device" --data "$data" --iters "$iters" --warmup 10 \
      --precision "$precision" $opts >"$log" 2>&1
    ms=$(sed -n 's/^ms\/iter \([0-9.]*\).*/\1/p' "$log")
    f=$(sed -n 's/^flops\/step \([0-9]*\).*/\1/p' "$log")
    note=$( [ -z "$ms" ] && tail -1 "$log")
    [ -n "$f" ] && [ "$f" != "$flops" ] && note="its own count differs: $f"
    row "$name" "pytorch eager" "$precision" "$ms" "$flops" "$note"
  done
done
# COMPILE=0 leaves torch.compile out (its compilation takes about a minute per model).
for entry in "${configs[@]}"; do
  name=${entry%%|*}
  opts=${entry#*|}
  if [ "${COMPILE:-1}" = 0 ]; then
    row "$name" "pytorch compile" bf16 "" "" "left out (COMPILE=0)"
  elif [ "$torch_compile" = 1 ]; then
    log=$log_dir/torch-$name-bf16-compile.log
    timeout 240 $python bench/torch_char_lm.py --device "$device" --data "$data" --iters "$iters" --warmup 10 \
      --precision bf16 --compile $opts >"$log" 2>&1
    ms=$(sed -n 's/^ms\/iter \([0-9.]*\).*/\1/p' "$log")
    row "$name" "pytorch compile" bf16 "$ms" "$(nanogpt_flops "$opts")" "$( [ -z "$ms" ] && tail -1 "$log")"
  else
    row "$name" "pytorch compile" bf16 "" "" "this PyTorch has no torch.compile (or no PyTorch)"
  fi
done
echo "(the chip's dense peaks, H100 SXM / H200: ~67 TFLOP/s FP32, ~495 TF32, ~989 bf16)"
