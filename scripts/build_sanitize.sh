#!/usr/bin/env bash
# Configures and builds build-sanitize/ with ASan and UBSan: the tests with the
# programs they start (attograd_tests depends on them) and the libFuzzer targets
# of fuzz/, with clang (libFuzzer is clang's) and without CUDA. The benchmarks
# and the other examples, which nothing runs under a sanitizer, are left to the
# normal build. Installs clang and its runtimes (and python3, for the seeds and
# the mutation campaign) first if they are missing.
# Used by scripts/sanitize.sh, scripts/fuzz.sh and scripts/mutate_checkpoints.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh clang libclang-rt-14-dev libomp-14-dev python3
# RelWithDebInfo: optimised enough that the suite stays fast, with line tables for the reports.
# Ninja and unity batches, as scripts/build.sh.
generator=(-G Ninja)
[ -f build-sanitize/CMakeCache.txt ] && generator=()
CC=clang CXX=clang++ cmake "${generator[@]}" -S . -B build-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTOGRAD_UNITY=ON \
  -DATTOGRAD_SANITIZE=address,undefined -DATTOGRAD_FUZZ=ON >/dev/null
cmake --build build-sanitize -j "$(nproc)" --target attograd_tests fuzz_load_safetensors check_safetensors
