#!/usr/bin/env bash
# The three attention functions on tiny Shakespeare (issue 25): char_lm's
# default model (4 layers, 4 heads, width 128, batch 12, 2000 iterations) at
# block size 256, trained with softmax (flash), linear (elu1) and ssd (its
# default convolution of 4 and gate), one after another on THREADS threads;
# then 500 characters sampled from each, from the cache (the keys and values;
# linear's and ssd's recurrent state) and with --no-kv-cache.
#
#   bash bench/attention_functions.sh OUT_DIR [CHAR_LM] [THREADS]
#
# Trains OUT_DIR/run_{softmax,linear,ssd} unless they are there (12 to 20
# minutes each on 2 cores of a Zen 3), then prints a markdown table: the final
# val loss, the median ms/iter of training, and sampling tokens/s both ways.
set -euo pipefail
out=$(realpath -m "${1:?usage: bench/attention_functions.sh OUT_DIR [CHAR_LM] [THREADS]}")
char_lm=$(realpath "${2:-build/char_lm}")
threads=${3:-2}
cd "$(dirname "$0")/.."
data=$(bash scripts/get_data.sh)
mkdir -p "$out"
declare -A options=(
  [softmax]="--attention softmax --attn-impl flash"
  [linear]="--attention linear --feature-map elu1"
  [ssd]="--attention ssd"
)
echo "| attention | val loss (iter 2000) | ms/iter | sampling tokens/s (cache) | tokens/s (--no-kv-cache) |"
echo "|---|---:|---:|---:|---:|"
for f in softmax linear ssd; do
  # shellcheck disable=SC2086 # the options are words
  [ -e "$out/run_$f/best" ] ||
    "$char_lm" train ${options[$f]} --block-size 256 --data "$data" --out "$out/run_$f" --threads "$threads" \
      --sample-tokens 0 >"$out/train_$f.log"
  done_line=$(grep '^done:' "$out/train_$f.log")
  ms=$(sed -n 's/.*median \([0-9.]*\) ms\/iter.*/\1/p' <<<"$done_line")
  loss=$(sed -n 's/.*final val loss \([0-9.]*\).*/\1/p' <<<"$done_line")
  # the rate is on stderr, the text on stdout
  rate() { "$char_lm" sample --ckpt "$out/run_$f" --tokens 500 --threads "$threads" "$@" 2>&1 >/dev/null |
    sed -n 's/.*: \([0-9.]*\) tokens\/s.*/\1/p'; }
  echo "| $f | $loss | $ms | $(rate) | $(rate --no-kv-cache) |"
done
