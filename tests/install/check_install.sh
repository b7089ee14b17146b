#!/usr/bin/env bash
# Installs the build in BUILD_DIR into WORK_DIR/prefix, then configures, builds
# and runs tests/install (a separate project using find_package(attograd))
# against that prefix alone, with the C++ compiler that built it (CXX; default:
# CMake's choice): a sanitizer build's library needs that compiler's runtime.
#
#   bash tests/install/check_install.sh BUILD_DIR WORK_DIR [CXX]
set -euo pipefail
build_dir=$1
work_dir=$2
compiler=${3:+-DCMAKE_CXX_COMPILER=$3}
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work_dir"
cmake --install "$build_dir" --prefix "$work_dir/prefix" >"$work_dir.install.log" 2>&1 ||
  { cat "$work_dir.install.log"; exit 1; }
# The licence is installed beside the headers and the library.
cmp "$here/../../LICENSE" "$work_dir/prefix/share/doc/attograd/LICENSE"
cmake -S "$here" -B "$work_dir/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work_dir/prefix" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF ${compiler} >/dev/null
cmake --build "$work_dir/build"
"$work_dir/build/consumer"
