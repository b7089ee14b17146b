#!/usr/bin/env bash
# Configures and builds build-sanitize/: every target with ASan and UBSan, plus
# the libFuzzer targets of fuzz/, with clang (libFuzzer is clang's) and without
# CUDA. Installs clang and its runtimes (and python3, for the seeds and the
# mutation campaign) first if they are missing.
# Used by scripts/sanitize.sh, scripts/fuzz.sh and scripts/mutate_checkpoints.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh clang libclang-rt-14-dev libomp-14-dev python3
# RelWithDebInfo: optimised enough that the suite stays fast, with line tables for the reports.
CC=clang CXX=clang++ cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DATTOGRAD_SANITIZE=address,undefined -DATTOGRAD_FUZZ=ON >/dev/null
cmake --build build-sanitize -j "$(nproc)"
