#!/usr/bin/env bash
# Builds attograd and runs the default training (arguments are passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec ./build/autograd_tour "$@"
