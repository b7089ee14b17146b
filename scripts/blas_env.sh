# Sourced by scripts/train.sh and bench/compare_cpu.sh (not run): makes OpenBLAS
# use its AVX-512 kernels on a CPU that has AVX-512.
#
# OpenBLAS picks its kernel set once, when it loads, from its own CPU detection
# or from OPENBLAS_CORETYPE when that is set. If the variable names an older
# set (some environments export OPENBLAS_CORETYPE=Haswell) or OpenBLAS does not
# know a newer CPU, an AVX-512 machine runs the AVX2 kernels, about 1.5x slower
# at attograd's sizes. On a CPU with AVX-512 F, BW, DQ and VL this sets
# SKYLAKEX unless the variable already names an AVX-512 set, and says so on
# stderr. Whoever sources it (a comparison sources it once for both programs)
# passes the same setting to everything it starts.
if grep -qw avx512f /proc/cpuinfo 2>/dev/null && grep -qw avx512bw /proc/cpuinfo && grep -qw avx512dq /proc/cpuinfo &&
   grep -qw avx512vl /proc/cpuinfo; then
  case "${OPENBLAS_CORETYPE:-}" in
    [Ss][Kk][Yy][Ll][Aa][Kk][Ee][Xx] | [Cc][Oo][Oo][Pp][Ee][Rr][Ll][Aa][Kk][Ee] | [Ss][Aa][Pp][Pp][Hh][Ii][Rr][Ee]*) ;;
    *)
      echo "note: OPENBLAS_CORETYPE=SKYLAKEX (was ${OPENBLAS_CORETYPE:-unset}): this CPU has AVX-512" >&2
      export OPENBLAS_CORETYPE=SKYLAKEX ;;
  esac
fi
