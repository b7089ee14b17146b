#!/usr/bin/env bash
# What CI runs after the normal suite to keep "nothing lost, nothing silently
# wrong" true: the unit tests under ASan and UBSan, the loader's fuzzer for a
# fixed budget, and the checkpoint mutation campaign's quick subset. Any
# sanitizer finding fails the run (no recovery; see cmake/sanitize.cmake).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stages.sh
export UBSAN_OPTIONS="print_stacktrace=1:${UBSAN_OPTIONS:-}"
stage "sanitizer build" bash scripts/build_sanitize.sh
mpirun_tests='^((data|context) parallel|lab processes):'  # the cases that start processes with mpirun
stage "sanitizer suite" bash -c "cd build-sanitize && ctest --output-on-failure -j $(nproc) --timeout 900 -E '$mpirun_tests'"
doctest_totals build-sanitize
# The tests that start processes with mpirun: Open MPI leaves blocks of MPI_Init
# and of its plugins unfreed at exit, and unloads the plugins first, so
# LeakSanitizer's fast unwinder stops in an unknown module. The slow unwinder
# (4x slower on malloc-heavy tests, so only here) reaches Open MPI's libraries,
# and cmake/lsan_openmpi.supp names those, and only those.
mpirun_cases() {
  (cd build-sanitize && ASAN_OPTIONS="fast_unwind_on_malloc=0:${ASAN_OPTIONS:-}" \
    LSAN_OPTIONS="suppressions=$PWD/../cmake/lsan_openmpi.supp:${LSAN_OPTIONS:-}" \
    ctest --output-on-failure -j "$(nproc)" --timeout 900 -R "$mpirun_tests")
}
stage "sanitizer suite: the mpirun cases" mpirun_cases
doctest_totals build-sanitize
stage "fuzzing" bash scripts/fuzz.sh ${ATTOGRAD_FUZZ_SECONDS:+"$ATTOGRAD_FUZZ_SECONDS"}
stage "mutation campaign" python3 scripts/mutate_checkpoints.py --quick
