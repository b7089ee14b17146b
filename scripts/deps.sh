#!/usr/bin/env bash
# Installs, with apt-get, whatever attograd's build needs and this machine lacks
# (Debian 12, as root). Sourced by scripts/train.sh and scripts/test.sh.
# Arguments name further packages a script needs (scripts/test.sh: chromium; scripts/build_sanitize.sh: clang).
set -euo pipefail
# python3: tests parse the SVGs and HTML they write with Python's XML parser.
packages=(build-essential cmake ninja-build libopenblas-openmp-dev doctest-dev nlohmann-json3-dev libcli11-dev python3 "$@")
# S4D's FFT on the CPU: KissFFT's header-only template (core/cpu/s4.cpp).
packages+=(libkissfft-dev)
# Data-parallel training under mpirun (dist/mpi.cpp); without it programs run as one process.
packages+=(libopenmpi-dev openmpi-bin)
# Attention flow's max-flow (examples/interp/analysis.cpp): Boost.Graph, header-only.
packages+=(libboost-graph-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "attograd: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
