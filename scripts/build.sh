#!/usr/bin/env bash
# Configures and builds attograd (Release) into build/, installing what is
# missing first. Arguments name the targets to build (default: all of them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# Ninja (a build/ configured before keeps its generator) and unity batches
# (ATTOGRAD_UNITY): docs/performance.md, "Build and test times".
generator=(-G Ninja)
[ -f build/CMakeCache.txt ] && generator=()
cmake "${generator[@]}" -S . -B build -DCMAKE_BUILD_TYPE=Release -DATTOGRAD_UNITY=ON >/dev/null
cmake --build build -j "$(nproc)" ${1:+--target "$@"}
