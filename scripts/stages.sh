# Sourced by scripts/test.sh and scripts/sanitize.sh.
#
# stage NAME COMMAND...   runs COMMAND and prints how long it took, and the CPU time
#                         its processes used (user + system, summed over processes:
#                         up to 2x the wall time on 2 cores; less means idle cores). Under .ci/run
#                         (ATTOGRAD_CI_START set: the run's start, in seconds since
#                         the epoch) it records the stage in ATTOGRAD_STAGE_LOG and
#                         fails as soon as the run has taken more than
#                         ATTOGRAD_CI_LIMIT_S seconds, printing every stage's time.
# doctest_totals DIR      what CTest's last run in build folder DIR ran: doctest's own
#                         count of cases, summed over the processes CTest started
#                         (an entry runs a test file's cases, or one case); fails if
#                         an entry ran no case (doctest passes a filter that matches
#                         nothing, and CTest cuts a case's name at a ";").

# children_cpu_seconds VAR: sets VAR to the CPU seconds this shell's finished children
# have used, from bash's `times` (its second line). `times` must run in this shell, so
# through a file: in a pipe or in $(...) it would count a subshell's children.
children_cpu_seconds() {
  local file
  file=$(mktemp)
  times >"$file"
  printf -v "$1" '%s' "$(awk 'NR == 2 { for (f = 1; f <= 2; ++f) { split($f, t, /[ms]/); s += t[1] * 60 + t[2] }; printf "%d", s }' "$file")"
  rm -f "$file"
}

stage() {
  local name=$1
  shift
  local start end cpu_start cpu_end cpu
  start=$(date +%s)
  children_cpu_seconds cpu_start
  "$@"
  end=$(date +%s)
  children_cpu_seconds cpu_end
  cpu=$((cpu_end - cpu_start))
  echo "stage: $name: $((end - start)) s (CPU $cpu s)"
  [ -z "${ATTOGRAD_CI_START:-}" ] && return 0
  printf '%s\t%s\t%s\n' "$((end - start))" "$name" "$cpu" >>"$ATTOGRAD_STAGE_LOG"
  if ((end - ATTOGRAD_CI_START > ATTOGRAD_CI_LIMIT_S)); then
    echo "CI: the run has taken $((end - ATTOGRAD_CI_START)) s, over its limit of ${ATTOGRAD_CI_LIMIT_S} s; the stages so far:" >&2
    awk -F'\t' '{printf "  %5d s  (CPU %4d s)  %s\n", $1, $3, $2}' "$ATTOGRAD_STAGE_LOG" >&2
    echo "CI: a change made a stage slower: find it above (docs/performance.md, \"Build and test times\", has the last good run's)" >&2
    exit 1
  fi
}

doctest_totals() {
  awk -v dir="$1" '
    /^[0-9]+\/[0-9]+ Testing: / { name = $0; sub(/^[0-9]+\/[0-9]+ Testing: /, "", name); summary = "" }
    /^\[doctest\] test cases:/ { summary = $0 }  # the last one is the process CTest started (mpirun children print theirs before)
    /^<end of output>/ {
      if (summary == "") next
      split(summary, field, "|")
      sub(/.*:/, "", field[1]); cases += field[1]; processes++
      split(field[2], p, " "); passed += p[1]
      split(field[3], f, " "); failed += f[1]
      if (field[1] + 0 == 0) empty = empty "\n  " name
    }
    END {
      printf "doctest: %d test cases in %d processes: %d passed, %d failed (CTest counts a CUDA case without a device as Skipped; doctest as passed)\n", cases, processes, passed, failed
      if (empty != "") { print "doctest: these entries ran no test case (a name CTest split at a \";\"?):" empty > "/dev/stderr"; exit 1 }
    }' "$1/Testing/Temporary/LastTest.log"
}
