#!/usr/bin/env bash
# Issue 53's runs that span several short GPU leases: the zoology preset (Zoology's figure 2,
# docs/lab.md) on the device for MINUTES minutes, then its finished cells brought back.
#
#   bash scripts/lab_gpu.sh MINUTES [LOG_DIR]      (LOG_DIR: $OUT on the device machine)
#
# It is scripts/gpu_check.sh's ZOOLOGY stage alone (no tests, no checks): build the lab with
# CUDA, copy the cells committed under docs/lab/zoology/cells/ into the lab's directory so that
# the preset resumes where the last lease stopped (finished cells skipped; a cell cut short
# resumes at its next learning rate), train with ZOOLOGY_JOBS processes sharing the GPU (default
# 8) until MINUTES after the start, and leave in LOG_DIR/zoology/ every finished cell's row and
# run (small text files), results.csv (its cell_seconds: the device seconds each cell took), the
# plots and lab_report.html. Then, on the machine that commits:
#
#   cp -r FETCHED/zoology/. docs/lab/zoology/ && git add docs/lab/zoology && git commit
#
# MINUTES counts the build too (a fresh machine builds for a few minutes), and a command on the
# device runs 10 minutes at most: `bash scripts/lab_gpu.sh 9` under a timeout of 600 s leaves a
# minute to copy the cells back.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: bash scripts/lab_gpu.sh MINUTES [LOG_DIR]"; exit 2; }
cd "$(dirname "$0")/.."
ZOOLOGY=$1 TESTS=none CHECKS=0 exec bash scripts/gpu_check.sh "${2:-${OUT:-gpu_logs}}"
