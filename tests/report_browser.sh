#!/usr/bin/env bash
# char_lm report in a real browser (issue 16): a small model trained here on
# tiny Shakespeare, its report rendered by headless Chromium
# (scripts/render_report.sh); the page must load without a console message and
# show every section, an SVG for each layer's attention map.
#
#   bash tests/report_browser.sh CHAR_LM
#
# Without chromium (scripts/test.sh installs it) it prints [SKIP], which CTest
# reports as Skipped.
set -euo pipefail
char_lm=$(realpath "$1")
checkout=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v chromium >/dev/null; then
  echo "[SKIP] chromium is not installed (scripts/test.sh installs it with scripts/deps.sh chromium)"
  exit 0
fi
text=$(cd "$checkout" && bash scripts/get_data.sh 2>/dev/null) ||
  { echo "report test: no text to train on; set ATTOGRAD_DATA or run scripts/get_data.sh" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "report test: $*" >&2; exit 1; }

# The console check must be able to fail: a page that logs an error is caught.
echo '<!DOCTYPE html><html><body><script>console.error("deliberate")</script></body></html>' >"$tmp/bad.html"
bash "$checkout/scripts/render_report.sh" "$tmp/bad.html" "$tmp/bad"
grep -q 'CONSOLE.*deliberate' "$tmp/bad/browser.log" || fail "a console error did not reach the browser log"

"$char_lm" train --data "$text" --out "$tmp/run" --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 \
  --batch-size 8 --max-iters 60 --eval-interval 20 --eval-iters 2 --sample-tokens 0 --threads 1 >"$tmp/train.log"
"$char_lm" report --ckpt "$tmp/run" --prompt $'ROMEO:\nWhat light' --data "$text" --eval-iters 2 --batch-size 4 \
  --tokens 100 --prompts 4 --positions 2 --threads 1 --out "$tmp/report.html" >/dev/null
bash "$checkout/scripts/render_report.sh" "$tmp/report.html" "$tmp/rendered"

if grep -q CONSOLE "$tmp/rendered/browser.log"; then
  grep CONSOLE "$tmp/rendered/browser.log"
  fail "the page logged to the console"
fi
dom=$tmp/rendered/dom.html
for section in config loss sample attention rollout attributions faithfulness heads head-curve; do
  grep -q "<section id=\"$section\">" "$dom" || fail "section '$section' is missing from the rendered page"
  echo "section $section: rendered"
done
layers=$(sed -n '/<section id="attention">/,/<\/section>/p' "$dom" | grep -c '<svg')
[ "$layers" = 2 ] || fail "the attention section has $layers SVGs for 2 layers"
grep -q 'completeness: attributions sum' "$dom" || fail "no completeness line"
# Faithfulness: a table row per method (seven, the uniform-flow and random controls, erasure) and two charts; the head curve: one chart of three orders.
rows=$(sed -n '/<section id="faithfulness">/,/<\/section>/p' "$dom" | grep -c '<tr><td>')
[ "$rows" = 10 ] || fail "the faithfulness table has $rows method rows, not 10"
charts=$(sed -n '/<section id="faithfulness">/,/<\/section>/p' "$dom" | grep -c '<svg')
[ "$charts" = 2 ] || fail "the faithfulness section has $charts SVGs, not 2"
sed -n '/<section id="head-curve">/,/<\/section>/p' "$dom" | grep -q 'most important first' ||
  fail "the head curve section does not name its orders"
[ "$(head -c 8 "$tmp/rendered/report.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
  fail "report.png is not a PNG"
png_bytes=$(stat -c %s "$tmp/rendered/report.png")
[ "$png_bytes" -gt 20000 ] || fail "report.png has $png_bytes bytes: a blank page?"  # the page's top is ~130 KB
echo "rendered: $png_bytes bytes of PNG, every section present, no console messages"
