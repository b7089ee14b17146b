#!/usr/bin/env bash
# What -march=native (ATTOGRAD_NATIVE=ON) buys on the default `char_lm train`:
# builds char_lm twice (build-portable/, build-native/), then alternates runs of
# the two, ROUNDS rounds (default 5) at each thread count in THREADS (default
# "1 2"), and prints the median ms/iter of each and their ratio. OpenBLAS's GEMMs
# dispatch on the CPU at run time either way; the flag changes only attograd's
# own loops (elementwise maps, softmax, layer norm, AdamW, ...).
#
#   bash bench/march_native.sh [--data PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
data=${2:-$(bash scripts/get_data.sh)}
rounds=${ROUNDS:-5}
# Debian's OpenBLAS 0.3.21 takes Zen 4/5 for Haswell; name the AVX-512 kernels.
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SKYLAKEX}
for variant in portable native; do
  flag=OFF
  [ "$variant" = native ] && flag=ON
  cmake -S . -B "build-$variant" -DCMAKE_BUILD_TYPE=Release -DATTOGRAD_NATIVE=$flag -DATTOGRAD_TESTS=OFF >/dev/null
  cmake --build "build-$variant" -j "$(nproc)" --target char_lm >/dev/null
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for threads in ${THREADS:-1 2}; do
  for round in $(seq "$rounds"); do
    order="portable native"
    ((round % 2)) || order="native portable"
    for variant in $order; do
      "./build-$variant/char_lm" train --data "$data" --out "$out/$variant" --max-iters 200 --eval-interval 100000 \
        --eval-iters 1 --sample-tokens 0 --log-interval 1000 --threads "$threads" |
        sed -n 's/.*median \([0-9.]*\) ms\/iter.*/\1/p' >>"$out/$variant-$threads"
    done
  done
  p=$(median <"$out/portable-$threads")
  n=$(median <"$out/native-$threads")
  echo "threads $threads: portable $(paste -sd' ' "$out/portable-$threads") -> median $p ms/iter;" \
    "native $(paste -sd' ' "$out/native-$threads") -> median $n ms/iter; portable/native $(awk -v p="$p" -v n="$n" 'BEGIN {printf "%.3f", p / n}')"
done
