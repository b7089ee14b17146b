#!/usr/bin/env bash
# attograd's safetensors files against the reference implementation (PyPI
# safetensors), both ways: scripts/safetensors_roundtrip.py says what is checked.
#
#   bash scripts/safetensors_roundtrip.sh                    # check both ways
#   bash scripts/safetensors_roundtrip.sh --write-fixtures   # ...and rewrite tests/golden/safetensors/
#
# The library and NumPy go into a virtual environment of their own,
# build/venv-safetensors (made once; the system Python is left alone), at the
# versions pinned below, so that the fixtures come out the same each time.
# char_lm and safetensors_json are brought up to date in BUILD (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${BUILD:-build}"
venv="$build/venv-safetensors"
requirements=(safetensors==0.8.0 numpy==2.4.6)

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" 2>/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    rm -rf "$venv"
    python3 -m venv "$venv"
  }
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}"

[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target char_lm safetensors_json >/dev/null
exec "$venv/bin/python" scripts/safetensors_roundtrip.py --build "$build" "$@"
