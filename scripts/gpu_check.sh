#!/usr/bin/env bash
# The GPU check, in one call on a machine with an NVIDIA GPU:
#   1. configure and build (Release, CUDA architecture 90 unless CUDA_ARCH is set),
#   2. run the whole test suite (the cuda: cases run instead of skipping),
#   3. time 200 iterations of `char_lm train --device cuda` and of the PyTorch
#      reference (bench/torch_char_lm.py, same model and loop, fp32, TF32 off) at
#      the default config and at nanoGPT's GPU config for shakespeare_char, then
#      sample 200 tokens from the latter with and without the KV cache (tokens/s),
#   4. train 20 iterations on one MPI process with --device cuda (NCCL collectives)
#      and compare its losses with one process alone,
#   5. run the ring-attention cases on one MPI process (a ring of one, its hop over NCCL),
#   6. with PROFILE=1, 20 iterations at nanoGPT's config under attograd's kernel
#      profiler (AG_PROFILE=1) and under torch.profiler: where each one's step goes,
#   7. with FULL=1, train the GPU config to 5000 iterations (val loss target <= 1.50),
#   8. with LAB=1, the lab on the GPU: `lab --preset quick --device cuda` (softmax's
#      mqar accuracy >= 0.99, as on the CPU), the kernel profile of an ssd and a
#      linear-attention step at T = 512, 100 steps of every cell of
#      `--preset recall` for its ms/iter and memory with LAB_JOBS processes
#      sharing the GPU, then the recall preset itself until LAB_UNTIL seconds
#      after the script began (default 540): at its two learning rates if those
#      100 steps say it fits, else at 3e-3 alone. Its cells finished by then are
#      reported (lab_report.html) and packed into LOG_DIR/lab-recall.tar.gz.
#      The labs live in build-gpu/labs/, so the same command again on the same
#      machine resumes them, skipping finished cells.
#   9. with ZOOLOGY=MINUTES, issue 53's zoology preset until MINUTES after the script began,
#      resumed from docs/lab/zoology/cells/, its finished cells brought back in LOG_DIR/zoology/
#      (scripts/lab_gpu.sh runs this stage alone; it comes after COMPARE's),
#  10. with COMPARE=1, issue 48's precisions: bench/gpu_compare.sh (attograd
#      --precision fp32 / tf32 / bf16 against PyTorch eager fp32 / tf32 /
#      bf16-autocast and torch.compile bf16, the default and the nanoGPT config,
#      ms/step and TFLOP/s), then the default model 2000 iterations at fp32 and
#      at bf16, same seed: their final val losses (issue 48: within 0.01).
#      COMPILE=0 leaves torch.compile out, CONVERGE=0 the 2000-iteration runs.
#      With GRAPH=1 (alone or beside COMPARE=1), issue 48's one CUDA graph per step:
#      bench/gpu_graph.sh (char_lm at --cuda-graph off and on, the lab cell's shape and the
#      default model, fp32 and bf16: median ms/step, each pair's losses compared, the
#      `cuda graph:` line that says whether the graph applied). TESTS=cuda CHECKS=0 GRAPH=1:
#      the CUDA cases (tests/test_cuda_graph.cpp's graph ≡ eager among them) and this stage alone.
#  11. with ATTN=1, issue 49's O(T) attention on the GPU: bench_attention --device cuda
#      times ssd, linear attention (elu1) and flash softmax, causal, B = 1 × H = 8,
#      d = 64 and 128, at T = 512 and 16384 (ATTN_T), forward and forward + backward,
#      with the device memory; then each O(T) function's time over flash's at the same
#      d and T (issue 49: at most 1.5 at T = 512; ssd at most 0.1 at T = 16384).
#  12. with FLASH=1, issue 49's flash attention on tensor cores (cuda/flash_mma.cu; a minute):
#      bench_attention --device cuda --impls flash, causal, B = 1 × H = 8, T = 4096
#      (FLASH_T), d = 64 and 128, at --precision bf16 and tf32 (the tensor-core kernels) and
#      fp32 (the float32 kernel), then bench/flash_torch.py, PyTorch SDPA's flash backend in
#      bf16 on the same cases; then bf16's forward + backward TFLOP/s (FlashAttention's
#      count: 4·B·H·T²·d·0.5 forward, 2.5× that backward) and its time over SDPA's
#      (issue 49: >= 150 TFLOP/s and <= 1.5x at d = 64).
#      TESTS=cuda CHECKS=0 FLASH=1: the CUDA cases (tests/test_flash_mma.cpp's among them)
#      and this stage alone.
#  13. with LONG=1, issue 49's long context: char_lm train --device cuda, batch 1, 8 iterations,
#      ssd at T = 131072 (1 layer, then 6 × 384 with rope) and flash at T = 32768 (fp32 and bf16),
#      each one's median ms/iter and the device memory's peak (nvidia-smi, every 200 ms); LONG_S
#      seconds at most per run (150).
# Stage 2 ends with the margins of issue 48's cuBLASLt epilogues (tests/test_mlp.cpp's cuda:
# cases, error over derived bound at fp32, tf32 and bf16), which ctest shows only on failure.
# Everything printed also goes to LOG_DIR/gpu_check.log.
#
#   bash scripts/gpu_check.sh LOG_DIR
#
# TESTS=cuda builds only the test program, char_lm and the lab and runs only the
# cuda: cases (the CPU suite is CI's), to spend less of a short lease; TESTS=none
# runs no tests, and CHECKS=0 skips stages 3 to 5 (TESTS=cuda CHECKS=0 COMPARE=1:
# the CUDA cases and issue 48's comparison alone). A failed cuda:
# case is run again alone under compute-sanitizer (memcheck), each kernel checked
# at its launch (AG_CUDA_SYNC), so that the log names the kernel that failed.
#
# Where the machine lacks OpenBLAS, doctest, nlohmann-json, CLI11 or Boost, run
# scripts/fetch_gpu_deps.sh here first and carry .deps/; the packages are
# unpacked into .deps/root. The text is found by scripts/get_data.sh
# ($ATTOGRAD_DATA, data/ (carry it), or ../shared/data/).
set -uo pipefail
started=$(date +%s)
cd "$(dirname "$0")/.."
log_dir=$(realpath -m "${1:-gpu_logs}")
mkdir -p "$log_dir"
exec > >(tee "$log_dir/gpu_check.log") 2>&1

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || echo "nvidia-smi failed"
deps=$PWD/.deps/root
missing=0
for header in x86_64-linux-gnu/openblas-openmp/cblas.h boost/graph/boykov_kolmogorov_max_flow.hpp CLI/CLI.hpp \
              doctest/doctest.h nlohmann/json.hpp; do
  [ -e "/usr/include/$header" ] || missing=1
done
if [ "$missing" = 1 ]; then
  mkdir -p "$deps"
  for deb in .deps/*.deb; do dpkg -x "$deb" "$deps"; done
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu/openblas-openmp:$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi
data=$(bash scripts/get_data.sh) || exit 1
# Open MPI, for the NCCL check: the machine's, else the packages fetch_gpu_deps.sh left in .deps/openmpi.
mpi_args=()
if ! command -v mpiexec >/dev/null && compgen -G ".deps/openmpi/*.deb" >/dev/null; then
  ompi=$PWD/.deps/openmpi/root
  mkdir -p "$ompi"
  for deb in .deps/openmpi/*.deb; do dpkg -x "$deb" "$ompi"; done
  export OPAL_PREFIX=$ompi/usr
  export LD_LIBRARY_PATH="$ompi/usr/lib/x86_64-linux-gnu/openmpi/lib:$ompi/usr/lib/x86_64-linux-gnu/pmix2/lib:$ompi/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  mpi_args=(-DMPIEXEC_EXECUTABLE="$ompi/usr/bin/mpiexec.openmpi" -DMPI_CXX_COMPILER="$ompi/usr/bin/mpicxx.openmpi")
fi

echo "== build"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DATTOGRAD_UNITY=ON -DATTOGRAD_DEPS_ROOT="$deps" "${mpi_args[@]}" \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" >"$log_dir/configure.log" 2>&1 || { cat "$log_dir/configure.log"; exit 1; }
grep "attograd: MPI" "$log_dir/configure.log"
targets=()
[ "${TESTS:-all}" = cuda ] && targets=(--target attograd_tests char_lm lab)
[ "${TESTS:-all}" = none ] && targets=(--target char_lm lab)
SECONDS=0
cmake --build build-gpu -j "$(nproc)" "${targets[@]}" >"$log_dir/build.log" 2>&1 || { grep -B2 -A8 -m5 "error" "$log_dir/build.log"; tail -20 "$log_dir/build.log"; exit 1; }
echo "built in $SECONDS s"

if [ "${TESTS:-all}" != none ]; then
echo "== tests (AG_REQUIRE_CUDA: a cuda test that finds no device fails instead of skipping)"
export AG_REQUIRE_CUDA=1
ctest_filter=()
[ "${TESTS:-all}" = cuda ] && ctest_filter=(-R "^cuda: ")
SECONDS=0
if ! (cd build-gpu && ctest -j 8 --timeout 120 "${ctest_filter[@]}" --output-on-failure >"$log_dir/ctest.log" 2>&1); then
  grep -E "tests passed|tests failed" "$log_dir/ctest.log"
  sed -n '/The following tests FAILED/,$p' "$log_dir/ctest.log"
  grep -E "ERROR:|CHECK|error" "$log_dir/ctest.log" | head -60
  echo "== the failed cuda cases again, alone, under compute-sanitizer with AG_CUDA_SYNC=1 (three at most)"
  sed -n 's/^[[:space:]]*[0-9]* - \(cuda: .*\) (.*$/\1/p' "$log_dir/ctest.log" | head -3 | while read -r name; do
    echo "-- $name"
    # doctest splits a filter at commas; '?' matches the comma instead.
    AG_CUDA_SYNC=1 timeout 60 compute-sanitizer --tool memcheck --print-limit 5 ./build-gpu/attograd_tests -tc="${name//,/?}" 2>&1 |
      grep -v "^\[doctest\] \(doctest version\|run with\)" | tail -25
  done
else
  tail -3 "$log_dir/ctest.log"
fi
# ctest shows a passing case's messages to no one: the epilogues' margins, printed here.
echo "== the MLP's cuBLASLt epilogues (tests/test_mlp.cpp): each result's error over its derived bound"
timeout 60 ./build-gpu/attograd_tests -tc="cuda: mlp: *" 2>&1 | sed -n 's/^.*MESSAGE: //p'
echo "tests took $SECONDS s"
fi

if [ "${CHECKS:-1}" = 1 ]; then

echo "== timing: 200 iterations each (median ms/iter of iterations 10..199)"
# name | options shared by both programs
configs=(
  "default|--n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --batch-size 12 --dropout 0"
  "nanogpt-gpu|--n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 64 --dropout 0.2"
)
printf "%-12s %12s %12s %12s %12s %8s\n" config "attograd ms" "attograd tok/s" "pytorch ms" "pytorch tok/s" ratio
for entry in "${configs[@]}"; do
  name=${entry%%|*}
  opts=${entry#*|}
  tokens=$(awk -v o="$opts" 'BEGIN {n = split(o, w, " "); for (i = 1; i < n; i++) {if (w[i] == "--block-size") t = w[i+1]; if (w[i] == "--batch-size") b = w[i+1]}; print t * b}')
  a=$(timeout 100 ./build-gpu/char_lm train --device cuda --data "$data" --out "$log_dir/run-$name" --max-iters 200 \
      --eval-interval 100000 --eval-iters 1 --sample-tokens 0 --log-interval 50 $opts | tee "$log_dir/attograd-$name.log" |
      sed -n 's/.*median \([0-9.]*\) ms\/iter.*/\1/p')
  t=$(timeout 100 python3 bench/torch_char_lm.py --device cuda --data "$data" --iters 200 $opts | tee "$log_dir/torch-$name.log" |
      sed -n 's/^ms\/iter \([0-9.]*\).*/\1/p')
  awk -v n="$name" -v a="$a" -v t="$t" -v k="$tokens" 'BEGIN {
    if (a == "" || t == "") { printf "%-12s %12s %12s %12s %12s %8s\n", n, a, "-", t, "-", "-"; exit }
    printf "%-12s %12.2f %12.0f %12.2f %12.0f %8.3f\n", n, a, 1000 * k / a, t, 1000 * k / t, a / t }'
done

echo "== sampling 200 tokens on the GPU from the nanogpt-gpu run, with and without the KV cache (greedy: same text)"
for flag in "" --no-kv-cache; do
  timeout 45 ./build-gpu/char_lm sample --device cuda --ckpt "$log_dir/run-nanogpt-gpu" --tokens 200 --top-k 1 $flag \
    >"$log_dir/sample$flag.txt" 2>"$log_dir/sample$flag.log"
  tail -1 "$log_dir/sample$flag.log"
done
# An empty text (a sample that failed) is a failure, not "the same".
if [ -s "$log_dir/sample.txt" ] && [ -s "$log_dir/sample--no-kv-cache.txt" ] &&
   cmp -s "$log_dir/sample.txt" "$log_dir/sample--no-kv-cache.txt"; then
  echo "KV cache: the same text"
else
  echo "KV cache: FAILED, a sample failed or the greedy texts differ (see $log_dir/sample*.log)"
fi

echo "== NCCL: 20 iterations on one MPI process (--device cuda) against one process alone"
mpiexec=$(sed -n 's/^MPIEXEC_EXECUTABLE:FILEPATH=//p' build-gpu/CMakeCache.txt)
if grep -q "NCCL on" "$log_dir/configure.log" && [ -n "$mpiexec" ]; then
  opts="--device cuda --data $data --n-layer 2 --n-head 2 --n-embd 64 --block-size 32 --batch-size 8 --dropout 0
        --max-iters 20 --lr-decay-iters 20 --warmup-iters 5 --eval-interval 10 --eval-iters 2 --log-interval 1 --sample-tokens 0"
  timeout 60 ./build-gpu/char_lm train $opts --out "$log_dir/run-alone" >"$log_dir/nccl-alone.log" 2>&1
  timeout 60 "$mpiexec" --allow-run-as-root --bind-to none -np 1 ./build-gpu/char_lm train $opts --out "$log_dir/run-nccl" \
    >"$log_dir/nccl-mpi.log" 2>&1
  echo "exit status $?; last lines:"
  tail -2 "$log_dir/nccl-mpi.log"
  if cmp -s <(cut -d, -f1-3 "$log_dir/run-alone/log.csv") <(cut -d, -f1-3 "$log_dir/run-nccl/log.csv"); then
    echo "NCCL: the losses in log.csv are the same as alone"
  else
    echo "NCCL: FAILED, the losses differ:"; diff <(cut -d, -f1-3 "$log_dir/run-alone/log.csv") <(cut -d, -f1-3 "$log_dir/run-nccl/log.csv") | head
  fi
else
  echo "NCCL check SKIPPED: this build has no MPI or no NCCL (see the configure line above)"
fi

echo "== ring attention (context parallelism) on one GPU: P = 1, its gradient's hop over NCCL"
if grep -q "NCCL on" "$log_dir/configure.log" && [ -n "$mpiexec" ]; then
  timeout 60 "$mpiexec" --allow-run-as-root --bind-to none -np 1 ./build-gpu/attograd_tests \
    -tc="cuda: context parallel*" 2>&1 | tail -3
else
  echo "ring over NCCL SKIPPED: this build has no MPI or no NCCL"
fi
echo "ring attention with P >= 2 on GPUs needs 2 GPUs (one per process): not run on this machine;"
echo "  mpirun -np 2 ./build-gpu/char_lm train --device cuda --context-parallel 2 ... would run it"
fi

if [ "${PROFILE:-0}" = 1 ]; then
  echo "== where a step's time goes at the nanoGPT size: 20 iterations under each program's profiler"
  # attograd: AG_PROFILE=1 (core/profiler.h) waits for the device around each kernel, so each row is one kernel's own time.
  AG_PROFILE=1 timeout 100 ./build-gpu/char_lm train --device cuda --data "$data" --out "$log_dir/run-profile" \
    --max-iters 20 --eval-interval 100000 --eval-iters 1 --sample-tokens 0 --log-interval 10 \
    --n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 64 --dropout 0.2 2>&1 |
    sed -n '/kernel profile/,$p' | head -60
  timeout 100 python3 bench/torch_char_lm.py --device cuda --data "$data" --iters 20 --profile 20 \
    --n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 64 --dropout 0.2 | tail -36
fi

if [ "${FULL:-0}" = 1 ]; then
  echo "== nanoGPT GPU config, 5000 iterations"
  ./build-gpu/char_lm train --device cuda --data "$data" --out "$log_dir/run-full" --n-layer 6 --n-head 6 \
    --n-embd 384 --block-size 256 --batch-size 64 --dropout 0.2 --max-iters 5000 --lr-decay-iters 5000 \
    --eval-interval 500 --eval-iters 200 --log-interval 100 --warmup-iters 100 --min-lr 1e-4 | grep -E "eval|done"
fi

if [ "${LAB:-0}" = 1 ]; then
  # The columns of a lab's results.csv named in $2.. (the fields read here hold no commas).
  columns() {
    awk -F, -v want="${*:2}" 'NR == 1 {n = split(want, w, " "); for (i = 1; i <= NF; i++) at[$i] = i}
      {line = ""; for (j = 1; j <= n; j++) line = line (j > 1 ? "\t" : "") $(at[w[j]]); print line}' "$1"
  }
  labs=build-gpu/labs
  jobs=${LAB_JOBS:-16}
  mkdir -p "$labs"
  echo "== the lab on the GPU: --preset quick"
  SECONDS=0
  timeout 400 ./build-gpu/lab --preset quick --device cuda --out "$labs/quick" >"$log_dir/lab-quick.log" 2>&1
  echo "exit status $?, $SECONDS s"
  cp "$labs/quick/results.csv" "$log_dir/lab-quick.csv"
  columns "$labs/quick/results.csv" mixer block_size accuracy ms_per_iter peak_mb device status
  columns "$labs/quick/results.csv" mixer accuracy | awk '$1 == "softmax" {found = 1
    print "lab quick: softmax reaches " $2 ($2 >= 0.99 ? " (>= 0.99, as on the CPU)" : ": FAILED, below 0.99")}
    END {if (!found) print "lab quick: FAILED, no softmax row"}'

  echo "== where a step of ssd and of linear attention goes at T = 512, width 128 (AG_PROFILE=1, 20 steps)"
  # Alone on the GPU they took 71 and 35 ms/iter against softmax's 11 (docs/performance.md).
  for mixer in ssd linear:elu1; do
    echo "-- $mixer"
    AG_PROFILE=1 timeout 120 ./build-gpu/lab --task mqar --vocab 1024 --block-size 512 --pairs 64 --n-embd 128 \
      --n-head 2 --n-layer 2 --mixers "$mixer" --lr 0.003 --max-iters 20 --eval-interval 20 --eval-examples 64 \
      --threads 1 --jobs 1 --device cuda --out "$labs/profile-${mixer%%:*}" 2>&1 | sed -n '/kernel profile/,$p' | head -25
  done

  echo "== 100 steps of each cell of --preset recall, $jobs processes sharing the GPU (ms/iter, MB)"
  SECONDS=0
  timeout 300 ./build-gpu/lab --preset recall --device cuda --max-iters 100 --lr 0.003 --eval-interval 100 \
    --eval-examples 64 --jobs "$jobs" --out "$labs/recall-cost" >"$log_dir/lab-recall-cost.log" 2>&1
  echo "exit status $?, $SECONDS s"
  cp "$labs/recall-cost/results.csv" "$log_dir/lab-recall-cost.csv"
  columns "$labs/recall-cost/results.csv" mixer block_size pairs n_embd ms_per_iter peak_mb status

  # The preset's steps at its two rates, at those ms/iter, shared out over the processes.
  left=$(( started + ${LAB_UNTIL:-540} - $(date +%s) ))
  if [ ! -f "$labs/recall.lr" ]; then
    columns "$labs/recall-cost/results.csv" ms_per_iter | awk -v jobs="$jobs" -v left="$left" '
      NR > 1 {total += $1 * 15000 * 2 / 1000} END {
        printf "the recall preset at two rates: about %.0f s on %d processes; %d s left\n", total / jobs, jobs, left
        exit !(total / jobs < 0.8 * left)}' && echo "0.001,0.003" >"$labs/recall.lr" || echo "0.003" >"$labs/recall.lr"
  fi
  lr=$(cat "$labs/recall.lr")
  echo "== --preset recall --lr $lr on the GPU, $jobs processes, for $left s at most"
  SECONDS=0
  [ "$left" -gt 10 ] && timeout "$left" ./build-gpu/lab --preset recall --lr "$lr" --device cuda --jobs "$jobs" --out "$labs/recall" \
    >"$log_dir/lab-recall.log" 2>&1
  echo "exit status $? (124: stopped at LAB_UNTIL), $SECONDS s"
  ./build-gpu/lab --preset recall --lr "$lr" --report-only --out "$labs/recall" >>"$log_dir/lab-recall.log" 2>&1
  tail -3 "$log_dir/lab-recall.log"
  columns "$labs/recall/results.csv" mixer block_size pairs n_embd lr accuracy steps ms_per_iter status
  tar czf "$log_dir/lab-recall.tar.gz" -C "$labs" recall recall.lr
fi

if [ "${COMPARE:-0}" = 1 ]; then
  echo "== issue 48: the precisions, attograd against PyTorch (bench/gpu_compare.sh)"
  DATA="$data" timeout 360 bash bench/gpu_compare.sh "$log_dir/compare" build-gpu
  [ "${CONVERGE:-1}" = 1 ] && echo "== the default model, 2000 iterations at fp32 and at bf16, same seed (issue 48: val losses within 0.01)"
  [ "${CONVERGE:-1}" = 1 ] && for precision in fp32 bf16; do
    rm -rf "$log_dir/run-converge-$precision"
    timeout 120 ./build-gpu/char_lm train --device cuda --precision "$precision" --data "$data" \
      --out "$log_dir/run-converge-$precision" --max-iters 2000 --eval-interval 500 --eval-iters 20 \
      --sample-tokens 0 --log-interval 500 >"$log_dir/converge-$precision.log" 2>&1
    echo "$precision: $(grep "^done:" "$log_dir/converge-$precision.log" || tail -1 "$log_dir/converge-$precision.log")"
  done
  [ "${CONVERGE:-1}" = 1 ] && awk '/^done:/ {sub(/.*final val loss /, ""); v[FILENAME] = $1 + 0; n++}
    END {if (n == 2) {for (f in v) {if (f ~ /bf16/) b = v[f]; else a = v[f]}
         d = b - a; printf "bf16 - fp32 val loss: %+.4f (%s)\n", d, (d < 0.01 && d > -0.01) ? "within 0.01" : "NOT within 0.01"}}' \
    "$log_dir/converge-fp32.log" "$log_dir/converge-bf16.log"
fi

if [ "${GRAPH:-0}" = 1 ]; then
  echo "== issue 48: one CUDA graph per step against kernels launched one by one (bench/gpu_graph.sh)"
  DATA="$data" timeout 300 bash bench/gpu_graph.sh "$log_dir/graph" build-gpu
fi

if [ "${ATTN:-0}" = 1 ]; then
  echo "== issue 49: ssd and linear attention against flash softmax on the GPU (bench_attention --device cuda)"
  cmake --build build-gpu -j "$(nproc)" --target bench_attention >>"$log_dir/build.log" 2>&1 ||
    { grep -B2 -A8 -m5 "error" "$log_dir/build.log"; exit 1; }
  timeout 420 ./build-gpu/bench_attention --device cuda --impls ssd,linear-elu1,flash --masks causal \
    --T "${ATTN_T:-512,16384}" --d 64,128 --budget-s 1 --memory-limit-gb 60 | tee "$log_dir/attention-gpu.md"
  echo "-- each O(T) function's time over flash's (same d and T)"
  # The table's columns (split at '|'): 2 d, 3 T, 6 impl, 8 forward ms, 10 forward + backward ms.
  awk -F'|' 'function trim(x) { gsub(/ /, "", x); return x }
    trim($8) ~ /^[0-9.]+$/ { key = trim($2) " " trim($3); forward[key, trim($6)] = trim($8)
                             total[key, trim($6)] = trim($10); keys[key] = 1 }
    END { for (key in keys) { split(key, at, " ")
            for (i = 1; i <= 2; ++i) { impl = i == 1 ? "ssd" : "linear-elu1"
              if (!((key, impl) in forward) || !((key, "flash") in forward)) continue
              printf "d %4s T %6s %-12s forward %6.2fx flash   forward+backward %6.2fx flash\n", at[1], at[2], impl,
                     forward[key, impl] / forward[key, "flash"], total[key, impl] / total[key, "flash"] } } }' \
    "$log_dir/attention-gpu.md" | sort -k2,2n -k4,4n -k5,5
fi

if [ "${FLASH:-0}" = 1 ]; then
  echo "== issue 49: flash attention on tensor cores (bf16, tf32) against PyTorch SDPA flash, forward + backward"
  cmake --build build-gpu -j "$(nproc)" --target bench_attention >>"$log_dir/build.log" 2>&1 ||
    { grep -B2 -A8 -m5 "error" "$log_dir/build.log"; exit 1; }
  for precision in bf16 tf32 fp32; do
    timeout 120 ./build-gpu/bench_attention --device cuda --precision "$precision" --impls flash --masks causal \
      --T "${FLASH_T:-4096}" --d 64,128 --budget-s 1 | tee "$log_dir/flash-$precision.md"
  done
  timeout 120 python3 bench/flash_torch.py --T "${FLASH_T:-4096}" --d 64,128 --masks causal | tee "$log_dir/flash-torch.md"
  echo "-- attograd bf16 flash against SDPA flash (same d and T; columns: 2 d, 3 T, 9 fwd GFLOP/s, 10 fwd+bwd ms, 11 fwd+bwd GFLOP/s)"
  awk -F'|' 'function trim(x) { gsub(/ /, "", x); return x }
    trim($10) ~ /^[0-9.]+$/ { key = trim($2) " " trim($3); ms[key, FILENAME ~ /flash-torch[.]md$/] = trim($10)
                              rate[key, FILENAME ~ /flash-torch[.]md$/] = trim($11); keys[key] = 1 }
    END { for (key in keys) { if (!((key, 0) in ms) || !((key, 1) in ms)) continue; split(key, at, " ")
            printf "d %4s T %6s  attograd %7.1f TFLOP/s  SDPA %7.1f TFLOP/s  attograd / SDPA time %5.2fx\n", at[1], at[2],
                   rate[key, 0] / 1000, rate[key, 1] / 1000, ms[key, 0] / ms[key, 1] } }' \
    "$log_dir/flash-bf16.md" "$log_dir/flash-torch.md" | sort -k2,2n -k4,4n
fi

if [ "${LONG:-0}" = 1 ]; then
  # Issue 49, item 3: long context on one GPU. Each run: 8 iterations of batch 1 (the first
  # allocates; char_lm's median is over the rest), the device's memory in use sampled every
  # 200 ms by nvidia-smi (the peak, and the peak above the first sample: the process's own).
  echo "== issue 49: long context on one GPU — ssd at T = 131072 (1 layer; 6 x 384 with rope), flash at T = 32768"
  long_run() {  # a name, then char_lm train's options
    local name=$1 status sampler
    shift
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$log_dir/long-$name.mem" 2>/dev/null &
    sampler=$!
    timeout "${LONG_S:-150}" ./build-gpu/char_lm train --device cuda --data "$data" --out "$log_dir/run-long-$name" \
      --batch-size 1 --max-iters 8 --eval-interval 1000 --eval-iters 1 --log-interval 1 --sample-tokens 0 "$@" \
      >"$log_dir/long-$name.log" 2>&1
    status=$?
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null
    printf '%-16s exit %3d  %s  ' "$name" "$status" "$(grep -o 'median [0-9.]* ms/iter' "$log_dir/long-$name.log" || echo 'no median')"
    awk 'NR == 1 {first = $1} $1 > peak {peak = $1} END {printf "device memory peak %d MiB (%d MiB above the first sample)\n", peak, peak - first}' \
      "$log_dir/long-$name.mem"
    [ "$status" = 0 ] || tail -5 "$log_dir/long-$name.log"
  }
  long_run ssd-128k --attention ssd --block-size 131072 --n-layer 1
  long_run ssd-128k-6x384 --attention ssd --block-size 131072 --n-layer 6 --n-head 6 --n-embd 384 --position rope
  long_run flash-32k --attn-impl flash --block-size 32768 --n-layer 1
  long_run flash-32k-bf16 --attn-impl flash --block-size 32768 --n-layer 1 --precision bf16
  echo "(issue 49: ssd at T = 131072 <= 100 ms/iter — the CPU's 4 681 on 2 cores; the 6 x 384 run and flash at 32768 train)"
fi

if [ -n "${ZOOLOGY:-}" ]; then
  # Issue 53: the zoology preset (Zoology's figure 2) on the GPU until ZOOLOGY minutes after the
  # script began, resumed from the cells committed under docs/lab/zoology/cells/ (each finished
  # cell's row, <id>.csv, and each finished learning rate's run of a cell cut short, <id>.run<k>.txt),
  # its cells finished by then brought back in LOG_DIR/zoology/ (rows and runs, not the curves) with
  # results.csv and the plots: copy LOG_DIR/zoology/ over docs/lab/zoology/ and commit it, and the
  # next lease goes on from there (scripts/lab_gpu.sh).
  zoo=build-gpu/labs/zoology
  mkdir -p "$zoo/cells"
  cp docs/lab/zoology/cells/* "$zoo/cells/" 2>/dev/null
  finished() { find "$zoo/cells" -regex '.*/[0-9a-f]*\.csv' | wc -l; }
  before=$(finished)
  left=$(( started + ZOOLOGY * 60 - $(date +%s) ))
  echo "== the zoology preset on the GPU: $left s left, ${ZOOLOGY_JOBS:-8} processes, $before cells finished before"
  [ "$left" -gt 10 ] && timeout "$left" ./build-gpu/lab --preset zoology --device cuda --jobs "${ZOOLOGY_JOBS:-8}" \
    --out "$zoo" >"$log_dir/lab-zoology.log" 2>&1
  echo "exit status $? (124: stopped at the minutes' end), $(( $(finished) - before )) cells finished now"
  ./build-gpu/lab --preset zoology --report-only --out "$zoo" >>"$log_dir/lab-zoology.log" 2>&1
  tail -2 "$log_dir/lab-zoology.log"
  mkdir -p "$log_dir/zoology/cells"
  find "$zoo/cells" -regex '.*/[0-9a-f]*\.\(csv\|run[0-9]*\.txt\)' -exec cp {} "$log_dir/zoology/cells/" \;
  cp "$zoo"/results.csv "$zoo"/*.svg "$zoo"/lab_report.html "$log_dir/zoology/" 2>/dev/null
  grep -h "^mqar" "$zoo"/results.csv | cut -d, -f2,3,9,13,16,18,28 | head -40
fi
