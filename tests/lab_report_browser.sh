#!/usr/bin/env bash
# The lab's report in a real browser, as tests/report_browser.sh checks char_lm's:
# a small lab (softmax and ssd on mqar at two lengths and with one and two heads,
# a few steps each) and a refused cell, its lab_report.html rendered by headless
# Chromium (scripts/render_report.sh);
# the page must load without a console message and show every section, with
# the accuracy-against-length plot drawn.
#
#   bash tests/lab_report_browser.sh LAB
#
# Without chromium it prints [SKIP], which CTest reports as Skipped.
set -euo pipefail
lab=$(realpath "$1")
checkout=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v chromium >/dev/null; then
  echo "[SKIP] chromium is not installed (scripts/test.sh installs it with scripts/deps.sh chromium)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "lab report test: $*" >&2; exit 1; }

"$lab" --task mqar --block-size 16,32 --pairs 2 --vocab 64 --n-layer 1 --n-embd 16 --n-head 1,2 --batch-size 8 \
  --mixers softmax,ssd,linear:alibi --lr 0.003 --max-iters 20 --eval-interval 10 --eval-examples 32 --threads 1 \
  --out "$tmp/lab" >"$tmp/lab.log"
grep -q ',refused,' "$tmp/lab/results.csv" || fail "the alibi cell of linear attention is not recorded as refused"
bash "$checkout/scripts/render_report.sh" "$tmp/lab/lab_report.html" "$tmp/rendered"

if grep -q CONSOLE "$tmp/rendered/browser.log"; then
  grep CONSOLE "$tmp/rendered/browser.log"
  fail "the page logged to the console"
fi
dom=$tmp/rendered/dom.html
for section in config accuracy-length heads accuracy-state loss-time cost results; do
  grep -q "<section id=\"$section\">" "$dom" || fail "section '$section' is missing from the rendered page"
  svgs=$(sed -n "/<section id=\"$section\">/,/<\/section>/p" "$dom" | grep -c '<svg' || true)
  [ "$section" = config ] || [ "$section" = results ] || [ "$svgs" -ge 1 ] || fail "section '$section' has no plot"
  echo "section $section: rendered"
done
series=$(sed -n '/<section id="accuracy-length">/,/<\/section>/p' "$dom" | grep -c 'class="series"')
[ "$series" = 4 ] || fail "the accuracy-against-length plot has $series lines for 2 mixers with 1 and 2 heads"
png_bytes=$(stat -c %s "$tmp/rendered/report.png")
[ "$png_bytes" -gt 20000 ] || fail "report.png has $png_bytes bytes: a blank page?"
echo "rendered: $png_bytes bytes of PNG, every section present, no console messages"
