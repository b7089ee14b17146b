#!/usr/bin/env bash
# Configures and builds attograd (Release) into build/, installing what is
# missing first. Arguments name the targets to build (default: all of them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" ${1:+--target "$@"}
