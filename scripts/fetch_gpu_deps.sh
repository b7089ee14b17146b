#!/usr/bin/env bash
# Downloads (here, where apt works) the Debian packages the build needs that the
# GPU machine lacks, into .deps/ (ignored by git; the device tool carries it).
# scripts/gpu_check.sh unpacks them there with dpkg -x, never into /.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
cd .deps
apt-get download libopenblas0-openmp libopenblas-openmp-dev libopenblas-dev libgfortran5 doctest-dev nlohmann-json3-dev libcli11-dev
# KissFFT's header-only template (S4D's FFT on the CPU; core/cpu/s4.cpp): its headers are all the build reads.
apt-get download libkissfft-dev
# Boost's headers (9.5 MB): attention flow's max-flow (Boost.Graph, header-only).
apt-get download libboost1.74-dev
# Open MPI and the libraries it loads, for the one-process NCCL check; gpu_check.sh
# unpacks them into .deps/openmpi/root and relocates them there (OPAL_PREFIX).
mkdir -p openmpi
(cd openmpi && apt-get download libopenmpi3 openmpi-bin openmpi-common libopenmpi-dev libpmix2 libhwloc15 libfabric1 \
  libucx0 libibverbs1 librdmacm1 libpsm2-2 libpsm-infinipath1 libevent-core-2.1-7 libevent-pthreads-2.1-7 libnl-3-200 \
  libnl-route-3-200 libmunge2 libnuma1)
ls -la
