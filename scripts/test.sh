#!/usr/bin/env bash
# The whole test suite: make sure the text is there (scripts/get_data.sh, as
# scripts/train.sh does), install what is missing, build, run every test case
# through CTest. CUDA test cases report "Skipped" on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/get_data.sh >/dev/null
bash scripts/deps.sh chromium  # tests/report_browser.sh renders char_lm's report in it
bash scripts/build.sh
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 600)

# The unit tests under ASan and UBSan, the loader's fuzzer for 60 s, and the
# checkpoint mutation campaign's quick subset (issue 10).
bash scripts/sanitize.sh
