#!/usr/bin/env bash
# Writes tests/golden/before46/: what the code computed before issue 46's refactor of the
# attention contract, for tests/test_before46.cpp to compare with bit for bit afterwards.
# Made once, from commit 023d073 (the commit before the refactor); run it again only to
# remake them from that commit (README.md there says what each file is).
#
#   scripts/save_before46_outputs.sh [BUILD_DIR]     (default: build, from scripts/build.sh)
#
# The test cases themselves write the files (ATTOGRAD_WRITE_FIXTURES=DIR: each case
# writes what it would compare): the op, module and model outputs and the char_lm
# checkpoints in this process, the context-parallel ones also on 2 and 4 MPI processes.
# Bitwise results need the same arithmetic as the test: one thread, and OpenBLAS's
# Haswell kernels, which CMakeLists.txt sets for the test too.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
dir=tests/golden/before46
export OPENBLAS_CORETYPE=HASWELL OMP_NUM_THREADS=1
export ATTOGRAD_WRITE_FIXTURES="$PWD/$dir.new"
rm -rf "$ATTOGRAD_WRITE_FIXTURES"
mkdir -p "$ATTOGRAD_WRITE_FIXTURES"
trap 'rm -rf "$ATTOGRAD_WRITE_FIXTURES" "$ATTOGRAD_WRITE_FIXTURES.log"' EXIT
"$build/attograd_tests" --no-colors=true '--test-case=before 46*'
"$build/attograd_tests" --no-colors=true '--test-case=context parallel: the before-46*' | tee "$ATTOGRAD_WRITE_FIXTURES.log"
if grep -q '\[SKIP\]' "$ATTOGRAD_WRITE_FIXTURES.log"; then
  echo "save_before46_outputs.sh: the context-parallel outputs need MPI (apt-get install libopenmpi-dev openmpi-bin)" >&2
  exit 1
fi
# Everything but the README is replaced.
find "$dir" -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
cp -r "$ATTOGRAD_WRITE_FIXTURES"/. "$dir"/
du -sh "$dir"
