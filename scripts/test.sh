#!/usr/bin/env bash
# The whole test suite: make sure the text is there (scripts/get_data.sh, as
# scripts/train.sh does), install what is missing, build, run every test case
# through CTest, then the sanitizer stages (scripts/sanitize.sh). CUDA test
# cases report "Skipped" on machines without a GPU. Each stage prints its time
# (scripts/stages.sh); .ci/run also holds the whole run to a time limit.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stages.sh

stage "data" bash scripts/get_data.sh >/dev/null
stage "packages for the build" bash scripts/deps.sh
# Chromium (tests/report_browser.sh renders char_lm's report in it) and clang
# install while the g++ build compiles; then, as soon as clang is in, the
# sanitizer build (scripts/build_sanitize.sh) compiles beside the g++ build and
# its suite, in the cores they leave idle (the g++ build's last links, the
# suite's waits for the processes its cases start): on CI's 2 cores the two
# builds and the suite take about the CPU time they need, not its sum in turns.
background_log=$(mktemp)
packages_in=$(mktemp -u)
# Its own process group (setsid), so that a failed stage ends it with this script.
setsid --wait bash -c 'bash scripts/deps.sh chromium clang libclang-rt-14-dev libomp-14-dev && touch "$1" &&
  bash scripts/build_sanitize.sh' background "$packages_in" >"$background_log" 2>&1 &
background=$!
trap 'kill -- -"$background" 2>/dev/null || true; rm -f "$background_log" "$packages_in"' EXIT
stage "g++ build" bash scripts/build.sh
# The background job's output, when a part of it failed.
background_failed() {
  cat "$background_log" >&2
  echo "test.sh: $1 failed (above)" >&2
  exit 1
}
# Until the background job has installed the packages (made $packages_in), or has ended without.
wait_for_packages() {
  while [ ! -e "$packages_in" ] && kill -0 "$background" 2>/dev/null; do sleep 1; done
  [ -e "$packages_in" ] || background_failed "installing Chromium and clang"
}
stage "packages for the tests and the sanitizer build" wait_for_packages
stage "suite (the sanitizer build compiling beside it)" bash -c 'cd build && ctest --output-on-failure -j "$(nproc)" --timeout 600'
doctest_totals build
wait_for_sanitizer_build() {
  wait "$background" || background_failed "the sanitizer build"
  cat "$background_log"
}
stage "sanitizer build (what was left after the suite)" wait_for_sanitizer_build

# The unit tests under ASan and UBSan, the loader's fuzzer, and the checkpoint
# mutation campaign's quick subset (issue 10).
bash scripts/sanitize.sh
