#!/usr/bin/env bash
# What CI runs after the normal suite to keep "nothing lost, nothing silently
# wrong" true: the unit tests under ASan and UBSan, the loader's fuzzer for a
# fixed budget, and the checkpoint mutation campaign's quick subset. Any
# sanitizer finding fails the run (no recovery; see cmake/sanitize.cmake).
set -euo pipefail
cd "$(dirname "$0")/.."
export UBSAN_OPTIONS="print_stacktrace=1:${UBSAN_OPTIONS:-}"
# Open MPI (the data-parallel tests' mpirun) leaves blocks of MPI_Init and of its
# plugins unfreed at exit, and unloads the plugins first, so LeakSanitizer's
# fast unwinder stops in an unknown module. The slow unwinder reaches Open MPI's
# libraries, and cmake/lsan_openmpi.supp names those, and only those.
export ASAN_OPTIONS="fast_unwind_on_malloc=0:${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$PWD/cmake/lsan_openmpi.supp:${LSAN_OPTIONS:-}"
bash scripts/build_sanitize.sh
(cd build-sanitize && ctest --output-on-failure -j "$(nproc)" --timeout 900)
bash scripts/fuzz.sh "${ATTOGRAD_FUZZ_SECONDS:-60}"
python3 scripts/mutate_checkpoints.py --quick
