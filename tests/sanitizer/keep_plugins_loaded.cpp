// Preloaded (LD_PRELOAD) into the sanitized processes that mpirun starts in the
// sanitizer build's tests (tests/helpers.h, mpirun_or_skip), nowhere else.
//
// Open MPI 4.1 loads its plugins (mca_*.so) with dlopen and unloads them with
// dlclose before the process exits, and has no setting to keep them. Blocks that
// the plugins allocate and never free (Open MPI's, not attograd's) are then
// reported by LeakSanitizer with stacks in "<unknown module>", which no
// suppression can name, unless every stack is unwound the slow way (DWARF) far
// enough to reach libmpi.so, at every malloc: the slowest part of those tests
// (docs/performance.md, issue 45's section). With
// dlclose a no-op the plugins stay mapped until exit, their frames keep their
// module's name, and cmake/lsan_openmpi.supp can name them with the fast
// unwinder that the rest of the suite uses. Compiled without sanitizers, as a
// preloaded library that needs no sanitizer runtime of its own.
extern "C" int dlclose(void* handle) {
  (void)handle;
  return 0;
}
