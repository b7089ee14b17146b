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
# One CTest run: the cases that start processes with mpirun (their entries cost
# the most, so they start first) wait on their processes while the others compute
# beside them. Open MPI leaves blocks of MPI_Init and of its plugins unfreed at
# exit; the processes mpirun starts get LeakSanitizer's suppressions of those
# (cmake/lsan_openmpi.supp), with Open MPI's plugins kept loaded so that the
# suppressions can name them (tests/helpers.h, mpirun_or_skip).
stage "sanitizer suite" bash -c "cd build-sanitize && ctest --output-on-failure -j $(nproc) --timeout 900"
doctest_totals build-sanitize
stage "fuzzing" bash scripts/fuzz.sh ${ATTOGRAD_FUZZ_SECONDS:+"$ATTOGRAD_FUZZ_SECONDS"}
stage "mutation campaign" python3 scripts/mutate_checkpoints.py --quick
