#!/usr/bin/env bash
# Fetches tiny Shakespeare (Karpathy's char-rnn data, ~1.1 MB) to data/tinyshakespeare.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
url=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
mkdir -p data
if [ -s data/tinyshakespeare.txt ]; then
  echo "data/tinyshakespeare.txt is already there"
  exit 0
fi
if curl -fsSL --max-time 60 "$url" -o data/tinyshakespeare.txt.tmp; then
  mv data/tinyshakespeare.txt.tmp data/tinyshakespeare.txt
  echo "wrote data/tinyshakespeare.txt ($(wc -c <data/tinyshakespeare.txt) bytes)"
else
  rm -f data/tinyshakespeare.txt.tmp
  cat >&2 <<MSG
Could not download $url (no network?).
Copy the file by hand to data/tinyshakespeare.txt, or point attograd at a copy:
  ./build/char_lm train --data /path/to/tinyshakespeare.txt
  ATTOGRAD_DATA=/path/to/tinyshakespeare.txt ./build/char_lm train
MSG
  exit 1
fi
