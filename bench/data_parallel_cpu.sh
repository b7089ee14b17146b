#!/usr/bin/env bash
# Data-parallel training on this machine's CPU: ms/iter of `char_lm train` on the
# default model (4 layers, 4 heads, 128 wide, context 64, batch 12), ITERS
# iterations, as one process with 2 threads against 2 MPI processes with 1 thread
# each (each computes 6 of the batch's 12 sequences), with one process on 1
# thread for scale; how much of the 2 processes' step is spent in collectives
# (the step's count of targets and the gradients' all-reduce, as char_lm's done
# line reports it: transfer, and waiting for the slower process); and the
# all-reduce of a buffer of the model's size alone (bench/allreduce.cpp). The
# ms/iter are char_lm's own medians over the iterations. The runs alternate,
# ROUNDS times, because shared machines are noisy; the rounds' medians are reported.
#
#   bash bench/data_parallel_cpu.sh [ROUNDS] [ITERS]      (defaults 3, 200)
#   chrt -f 10 bash bench/data_parallel_cpu.sh           (on a shared machine: ahead of the others' processes)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
iters=${2:-200}
data=$(bash scripts/get_data.sh)
[ -x build/char_lm ] || bash scripts/build.sh >/dev/null
mpiexec=$(sed -n 's/^MPIEXEC_EXECUTABLE:FILEPATH=//p' build/CMakeCache.txt)
[ -n "$mpiexec" ] || { echo "build/ has no MPI (apt-get install libopenmpi-dev openmpi-bin, then rebuild)"; exit 1; }
out=$(mktemp -d)
train=(./build/char_lm train --data "$data" --out "$out" --overwrite --max-iters "$iters" --eval-interval 100000
       --eval-iters 1 --sample-tokens 0 --log-interval 100000)

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

ms_per_iter() { sed -n 's/.*median \([0-9.]*\) ms\/iter.*/\1/p'; }
mpirun=("$mpiexec" --allow-run-as-root --oversubscribe -np 2)  # its processes inherit this environment

uptime
printf "%-6s %16s %16s %16s %20s\n" round "1 x 1 thread ms" "1 x 2 threads ms" "2 x 1 thread ms" "collectives ms/step"
one=() two_threads=() two_processes=() collectives=()
for round in $(seq "$rounds"); do
  alone=$("${train[@]}" --threads 1)
  o=$(ms_per_iter <<<"$alone")
  parameters=$(sed -n 's/^char_lm: \([0-9]*\) parameters.*/\1/p' <<<"$alone")
  t=$("${train[@]}" --threads 2 | ms_per_iter)
  line=$("${mpirun[@]}" "${train[@]}" --threads 1 | grep "^done")
  p=$(ms_per_iter <<<"$line")
  c=$(sed -n 's/.*(\([0-9.]*\) ms of it in collectives).*/\1/p' <<<"$line")
  one+=("$o") two_threads+=("$t") two_processes+=("$p") collectives+=("$c")
  printf "%-6s %16s %16s %16s %20s\n" "$round" "$o" "$t" "$p" "$c"
done
printf "median %16s %16s %16s %20s\n" "$(printf "%s\n" "${one[@]}" | median)" "$(printf "%s\n" "${two_threads[@]}" | median)" \
  "$(printf "%s\n" "${two_processes[@]}" | median)" "$(printf "%s\n" "${collectives[@]}" | median)"
"${mpirun[@]}" ./build/bench_allreduce "$parameters" 50
uptime
rm -rf "$out"
