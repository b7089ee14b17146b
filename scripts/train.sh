#!/usr/bin/env bash
# Builds attograd and trains the default char-level GPT (arguments go to
# `char_lm train`). Finds the text the way char_lm does (--data, then
# $ATTOGRAD_DATA, then data/tinyshakespeare.txt); when none is there it copies
# the project's shared copy beside the checkout into data/ (ignored by git), or
# downloads it, so later char_lm commands find it too.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
if [[ " $* " != *" --data "* && -z "${ATTOGRAD_DATA:-}" && ! -s data/tinyshakespeare.txt ]]; then
  if [ -s ../shared/data/tinyshakespeare.txt ]; then
    mkdir -p data
    cp ../shared/data/tinyshakespeare.txt data/tinyshakespeare.txt
  else
    bash scripts/get_data.sh
  fi
fi
source scripts/blas_env.sh  # OpenBLAS's AVX-512 kernels on a CPU that has them
exec ./build/char_lm train "$@"
