# Sanitizer and fuzzing builds (scripts/sanitize.sh and scripts/fuzz.sh drive them).
#
#   -DATTOGRAD_SANITIZE=address,undefined   every target built with these sanitizers;
#                                           a finding stops the program (no recovery)
#   -DATTOGRAD_FUZZ=ON                      also the libFuzzer targets in fuzz/ (clang only)
#
# Both turn CUDA off: the sanitizers do not see into CUDA kernels, and ASan's
# shadow memory and the CUDA runtime's address-space reservations collide.
set(ATTOGRAD_SANITIZE "" CACHE STRING "Sanitizers for every target, e.g. address,undefined (turns CUDA off)")
option(ATTOGRAD_FUZZ "Build the libFuzzer targets in fuzz/ (clang; turns CUDA off)" OFF)

if(ATTOGRAD_FUZZ AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "ATTOGRAD_FUZZ needs clang's libFuzzer: configure with CXX=clang++ (apt-get install clang libclang-rt-14-dev)")
endif()
# The loader is compiled with coverage hooks, which the sanitizers' runtime provides.
if(ATTOGRAD_FUZZ AND NOT ATTOGRAD_SANITIZE)
  message(FATAL_ERROR "ATTOGRAD_FUZZ needs ATTOGRAD_SANITIZE too, e.g. -DATTOGRAD_SANITIZE=address,undefined (scripts/build_sanitize.sh)")
endif()

if(ATTOGRAD_SANITIZE)
  # -fno-sanitize-recover: UBSan otherwise reports and carries on, and a test
  # that passes despite undefined behaviour would hide it. Frame pointers and
  # line tables make the reports' stacks readable; -g1 keeps only those (over the
  # build type's -g, whose types and variables no report reads).
  add_compile_options(-fsanitize=${ATTOGRAD_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer -g1)
  # clang warns for each `omp simd` loop it cannot vectorise (a speed matter,
  # already seen in the plain clang build); here it would only bury findings.
  add_compile_options($<$<CXX_COMPILER_ID:Clang>:-Wno-pass-failed>)
  add_link_options(-fsanitize=${ATTOGRAD_SANITIZE})
  # libstdc++'s std::vector tells ASan which part of its capacity lies past its size, so
  # an index past size() but within capacity() (a scratch vector reused at a smaller
  # size) is reported too, as tensors' memory is (core/tensor.cpp poisons the
  # caching allocator's slack).
  if(ATTOGRAD_SANITIZE MATCHES "address")
    add_compile_definitions(_GLIBCXX_SANITIZE_VECTOR)
  endif()
  # Position-dependent programs: as PIE, a sanitized test binary's relocations are
  # applied by the loader at every start, and CTest starts one process per test
  # case (docs/performance.md, "Build and test times").
  add_link_options($<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:-no-pie>)
  message(STATUS "attograd: sanitizers ${ATTOGRAD_SANITIZE}")
endif()
