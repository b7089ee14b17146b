#!/usr/bin/env bash
# Renders a char_lm report (char_lm report --out REPORT.html) in headless
# Chromium, Debian's `chromium` (scripts/deps.sh chromium installs it):
#
#   bash scripts/render_report.sh REPORT.html OUT_DIR [WIDTH,HEIGHT]
#
# writes OUT_DIR/report.png (the page's top WIDTH×HEIGHT pixels, default
# 1100,1500), OUT_DIR/dom.html (the DOM once loaded) and OUT_DIR/browser.log
# (the browser's log: console messages appear there as CONSOLE lines). The
# README's screenshot and tests/report_browser.sh both come from this command.
set -euo pipefail
report=$(realpath "$1")
out=$2
size=${3:-1100,1500}
mkdir -p "$out"
profile=$(mktemp -d)  # a new, empty profile each time: nothing from an earlier run
trap 'rm -rf "$profile"' EXIT
# Root needs --no-sandbox; the rest keeps a headless browser from reaching out
# to the network (no QUIC, updates, sync or background requests).
flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
       --disable-component-update --disable-sync --user-data-dir="$profile" --hide-scrollbars
       --enable-logging=stderr --v=0 --window-size="$size")
timeout 120 chromium "${flags[@]}" --screenshot="$out/report.png" "file://$report" >/dev/null 2>"$out/browser.log"
timeout 120 chromium "${flags[@]}" --dump-dom "file://$report" >"$out/dom.html" 2>>"$out/browser.log"
