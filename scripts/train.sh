#!/usr/bin/env bash
# Builds attograd and trains the default char-level GPT (arguments go to
# `char_lm train`). Finds the text the way char_lm does (--data, then
# $ATTOGRAD_DATA, then data/tinyshakespeare.txt); when none is there it uses the
# project's shared copy beside the checkout, or downloads it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
if [[ " $* " != *" --data "* && -z "${ATTOGRAD_DATA:-}" && ! -s data/tinyshakespeare.txt ]]; then
  if [ -s ../shared/data/tinyshakespeare.txt ]; then
    export ATTOGRAD_DATA=../shared/data/tinyshakespeare.txt
  else
    bash scripts/get_data.sh
  fi
fi
exec ./build/char_lm train "$@"
