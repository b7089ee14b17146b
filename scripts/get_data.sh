#!/usr/bin/env bash
# Makes sure the training text, tiny Shakespeare (Karpathy's char-rnn data,
# ~1.1 MB), is where char_lm and the tests look for it, in their order:
# $ATTOGRAD_DATA if set, else data/tinyshakespeare.txt, else
# ../shared/data/tinyshakespeare.txt (both relative to the checkout); when none
# is there, downloads it to data/tinyshakespeare.txt. Prints the absolute path
# of the text on stdout (what it did, on stderr). Exits 1, saying what to do,
# when the text cannot be had. scripts/train.sh and scripts/test.sh run it first.
set -euo pipefail
cd "$(dirname "$0")/.."
url=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
how_to_fix="Copy tiny Shakespeare (or any UTF-8 text) to data/tinyshakespeare.txt, or point attograd at a copy:
  ATTOGRAD_DATA=/path/to/tinyshakespeare.txt bash scripts/test.sh
  bash scripts/train.sh --data /path/to/text.txt"

if [ -n "${ATTOGRAD_DATA:-}" ]; then
  if [ -f "$ATTOGRAD_DATA" ] && [ -s "$ATTOGRAD_DATA" ]; then
    echo "attograd: text from \$ATTOGRAD_DATA = $ATTOGRAD_DATA" >&2
    realpath "$ATTOGRAD_DATA"
    exit 0
  fi
  echo "attograd: ATTOGRAD_DATA=$ATTOGRAD_DATA is not a non-empty file." >&2
  echo "$how_to_fix" >&2
  exit 1
fi
for path in data/tinyshakespeare.txt ../shared/data/tinyshakespeare.txt; do
  if [ -s "$path" ]; then
    echo "attograd: text from $path" >&2
    realpath "$path"
    exit 0
  fi
done
echo "attograd: no text found (\$ATTOGRAD_DATA, data/tinyshakespeare.txt, ../shared/data/tinyshakespeare.txt); downloading it" >&2
mkdir -p data
if command -v curl >/dev/null && curl -fsSL --max-time 60 "$url" -o data/tinyshakespeare.txt.tmp; then
  mv data/tinyshakespeare.txt.tmp data/tinyshakespeare.txt
  echo "attograd: wrote data/tinyshakespeare.txt ($(wc -c <data/tinyshakespeare.txt) bytes)" >&2
  realpath data/tinyshakespeare.txt
else
  rm -f data/tinyshakespeare.txt.tmp
  echo "attograd: could not download $url (no network, or no curl)." >&2
  echo "$how_to_fix" >&2
  exit 1
fi
