#!/usr/bin/env bash
# The README's flow on a plain clone (issue 9): this checkout's HEAD cloned into
# a fresh temporary directory with no ../shared beside it, the text given only
# through $ATTOGRAD_DATA, then the README's commands in its order: train (a few
# iterations), sample, resume, --help, grads on the checkpoint.
#
#   bash tests/readme_flow.sh CHAR_LM
#
# CHAR_LM is the suite's own char_lm: the clone uses it rather than building
# its own (minutes on two cores; CI's own build is the build test). When this
# checkout is clean, as CI's is, it is a build of the clone's very sources.
# The README's first command, scripts/train.sh, is scripts/get_data.sh, the
# build, then `char_lm train`: run here step by step, after checking that
# train.sh looks for the text before it builds.
set -euo pipefail
char_lm=$(realpath "$1")
checkout=$(cd "$(dirname "$0")/.." && pwd)
text=$(cd "$checkout" && bash scripts/get_data.sh 2>/dev/null) ||
  { echo "readme flow: no text to train on; set ATTOGRAD_DATA or run scripts/get_data.sh" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone --quiet "$checkout" "$tmp/attograd"
cd "$tmp/attograd"
[ ! -e ../shared ]
export ATTOGRAD_DATA=$text
run() {
  echo "\$ $*"
  "$@" >"$tmp/last.log" 2>&1 || { cat "$tmp/last.log"; echo "readme flow: '$*' failed" >&2; exit 1; }
}
expect() {  # a line of the last command's output
  grep -q -- "$1" "$tmp/last.log" || { cat "$tmp/last.log"; echo "readme flow: expected '$1'" >&2; exit 1; }
}

# scripts/train.sh looks for the text before it builds anything.
echo "\$ ATTOGRAD_DATA=$tmp/missing.txt bash scripts/train.sh"
if ATTOGRAD_DATA=$tmp/missing.txt bash scripts/train.sh >"$tmp/last.log" 2>&1; then
  echo "readme flow: train.sh ran without its text" >&2
  exit 1
fi
expect "ATTOGRAD_DATA=$tmp/missing.txt is not a non-empty file"
[ ! -e build ] || { echo "readme flow: train.sh started a build before finding its text" >&2; exit 1; }

run bash scripts/get_data.sh
expect "$text"
[ -z "$(git -C "$checkout" status --porcelain)" ] ||
  echo "readme flow: note: $checkout has uncommitted changes; the clone has its HEAD, char_lm its working tree"
mkdir -p build
cp "$char_lm" build/char_lm
run ./build/char_lm train --max-iters 10 --eval-interval 5 --eval-iters 2 --sample-tokens 40 --threads 1
expect "done: 10 iterations"
[ -s out/best/model.safetensors ] && [ -s out/log.csv ]

run ./build/char_lm sample --ckpt out --prompt "ROMEO:" --tokens 50 --temperature 0.8 --top-k 200 --seed 7
expect "^ROMEO:"
run ./build/char_lm train --resume --out out --max-iters 15 --threads 1
expect "done: 5 iterations"
run ./build/char_lm train --help
expect "--max-iters"

# grads: a batch file of idx and targets, int64 [1, 4], written byte by byte.
int64s() {
  for v in "$@"; do printf "$(printf '\\x%02x\\x%02x\\x00\\x00\\x00\\x00\\x00\\x00' $((v & 255)) $((v >> 8)))"; done
}
header='{"idx":{"dtype":"I64","shape":[1,4],"data_offsets":[0,32]},"targets":{"dtype":"I64","shape":[1,4],"data_offsets":[32,64]}}'
{ int64s ${#header}; printf '%s' "$header"; int64s 1 2 3 4 2 3 4 5; } >batch.safetensors
run ./build/char_lm grads --weights out/best/model.safetensors --batch batch.safetensors --out grads.safetensors
expect "gradients written to grads.safetensors"
echo "readme flow: passed"
