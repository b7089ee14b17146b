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
# (the sanitizer build) install while the g++ build compiles.
later_packages_log=$(mktemp)
trap 'rm -f "$later_packages_log"' EXIT
bash scripts/deps.sh chromium clang libclang-rt-14-dev libomp-14-dev >"$later_packages_log" 2>&1 &
later_packages=$!
stage "g++ build" bash scripts/build.sh
wait_for_packages() {
  if ! wait "$later_packages"; then
    cat "$later_packages_log" >&2
    echo "test.sh: installing Chromium and clang failed (above)" >&2
    exit 1
  fi
  cat "$later_packages_log"
}
stage "packages for the tests and the sanitizer build" wait_for_packages
stage "suite" bash -c 'cd build && ctest --output-on-failure -j "$(nproc)" --timeout 600'
doctest_totals build

# The unit tests under ASan and UBSan, the loader's fuzzer, and the checkpoint
# mutation campaign's quick subset (issue 10).
bash scripts/sanitize.sh
