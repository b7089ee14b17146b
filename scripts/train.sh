#!/usr/bin/env bash
# Trains the default char-level GPT (arguments go to `char_lm train`). First
# makes sure there is text to train on (scripts/get_data.sh; skipped when
# --data is given), then builds char_lm alone, not the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ " $* " != *" --data "* ]]; then
  bash scripts/get_data.sh >/dev/null
fi
bash scripts/build.sh char_lm
exec ./build/char_lm train "$@"
