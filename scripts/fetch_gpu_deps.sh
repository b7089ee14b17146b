#!/usr/bin/env bash
# Downloads (here, where apt works) the Debian packages the build needs that the
# GPU machine lacks, into .deps/ (ignored by git; the device tool carries it).
# scripts/gpu_check.sh unpacks them there with dpkg -x, never into /.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
cd .deps
apt-get download libopenblas0-openmp libopenblas-openmp-dev libopenblas-dev libgfortran5 doctest-dev nlohmann-json3-dev
ls -la
