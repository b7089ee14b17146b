#!/usr/bin/env bash
# What -march=native (ATTOGRAD_NATIVE=ON) buys on the default `char_lm train`:
# builds char_lm twice (build-portable/, build-native/), then alternates runs of
# the two, ROUNDS rounds (default 5), one thread, and prints per variant the
# median of the CPU time per iteration (user + system time of a 200-iteration
# run minus that of a 0-iteration run, over 200) and of char_lm's own median
# wall ms/iter. On a machine shared with other jobs the wall times swing with
# the load; the CPU time of a one-thread run much less. OpenBLAS's GEMMs pick
# their kernels at run time either way; the flag changes only attograd's own
# loops (elementwise maps and their libmvec calls, softmax, layer norm, AdamW).
#
#   bash bench/march_native.sh [--data PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
data=${2:-$(bash scripts/get_data.sh)}
rounds=${ROUNDS:-5}
iters=200
for variant in portable native; do
  flag=OFF
  [ "$variant" = native ] && flag=ON
  cmake -S . -B "build-$variant" -DCMAKE_BUILD_TYPE=Release -DATTOGRAD_NATIVE=$flag -DATTOGRAD_TESTS=OFF >/dev/null
  cmake --build "build-$variant" -j "$(nproc)" --target char_lm >/dev/null
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# Prints "CPU-seconds wall-ms/iter" of one run of `iters` iterations.
run() {
  /usr/bin/time -f "%U %S" -o "$out/time" "./build-$1/char_lm" train --data "$data" --out "$out/$1" \
    --max-iters "$2" --eval-interval 100000 --eval-iters 1 --sample-tokens 0 --log-interval 100000 --threads 1 \
    >"$out/log"
  echo "$(awk '{print $1 + $2}' "$out/time") $(sed -n 's/.*median \([0-9.]*\) ms\/iter.*/\1/p' "$out/log")"
}
for round in $(seq "$rounds"); do
  order="portable native"
  ((round % 2)) || order="native portable"
  for variant in $order; do
    read -r base _ < <(run "$variant" 0)
    read -r cpu wall < <(run "$variant" "$iters")
    awk -v c="$cpu" -v b="$base" -v n="$iters" 'BEGIN {printf "%.2f\n", 1000 * (c - b) / n}' >>"$out/$variant.cpu"
    echo "$wall" >>"$out/$variant.wall"
  done
done
for variant in portable native; do
  echo "$variant: CPU ms/iter $(paste -sd' ' "$out/$variant.cpu") -> median $(median <"$out/$variant.cpu");" \
    "wall ms/iter $(paste -sd' ' "$out/$variant.wall") -> median $(median <"$out/$variant.wall")"
done
awk -v p="$(median <"$out/portable.cpu")" -v n="$(median <"$out/native.cpu")" \
  'BEGIN {printf "portable / native CPU time per iteration: %.3f\n", p / n}'
