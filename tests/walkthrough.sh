#!/usr/bin/env bash
# attention_walkthrough: its backward done by hand agrees with backward() in
# both modes, and --tiny prints the numbers worked out by hand in
# docs/backprop.md, section 20.
#
#   bash tests/walkthrough.sh ATTENTION_WALKTHROUGH
set -euo pipefail
walkthrough=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
check() {  # a line the output must hold, as a regular expression
  grep -Eq -- "$1" "$out" || { cat "$out"; echo "walkthrough: no line matching '$1'" >&2; exit 1; }
}

"$walkthrough" >"$out"
[ "$(grep -c 'by hand = backward(): yes' "$out")" = 9 ] || { cat "$out"; echo "walkthrough: by hand != backward()" >&2; exit 1; }
check "^max \|dW_Q - FD\| = [0-9.e+-]+, which is [0-9.]+e-(09|1[0-9]) of max \|dW_Q\|"

"$walkthrough" --tiny >"$out"
[ "$(grep -c 'by hand = backward(): yes' "$out")" = 9 ] || { cat "$out"; echo "walkthrough: by hand != backward()" >&2; exit 1; }
check "^ +0\.250000 +0\.750000$"                  # A, row 1
check "^ +1\.000000 +3\.000000$"                  # dA, row 0
check "^ +-0\.750000 +0\.750000$"                 # dS, row 1
check "^ +0\.823959$"                             # dQ_1 = dW_Q = (3/4) ln 3
check "^ +3\.176041$"                             # dX_0 = 4 − (3/4) ln 3
check "^ +6\.647918$"                             # dX_1 = 5 + (3/2) ln 3
check "^L = 8\.0000000000$"
# Flash on row 1, one key per tile (§20's flash paragraph): (m, l, a) from (0, 1, 1) to (ln 3, 4/3, 10/3),
# Z_1 = 5/2, lse_1 = ln 4, D_1 = rowsum(dZ ∘ Z) = rowsum(dA ∘ A) = 5.
check "after key tile 0: \(m, l, a\) = \(0\.000000, 1\.000000, 1\.000000\)$"
check "after key tile 1: \(m, l, a\) = \(1\.098612, 1\.333333, 3\.333333\)$"
check "Z_1 = a / l = 2\.500000 +lse_1 = m \+ ln l = 1\.386294$"
check "D_1 = rowsum\(dZ ∘ Z\) = 5\.000000 = rowsum\(dA ∘ A\) = 5\.000000"
echo "walkthrough: passed"
