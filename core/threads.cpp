#include "core/threads.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "core/error.h"

namespace ag {

void set_num_threads(int n) {
  AG_CHECK(n >= 1, "set_num_threads: " << n << " threads");
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

namespace {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// Per CPU: ticks spent idle (idle + iowait) and in all (steal counts as busy:
// the hypervisor gave that time to someone else).
struct CpuTicks {
  long long idle = 0, total = 0;
};
std::vector<CpuTicks> read_cpu_ticks(const std::vector<int>& cpus) {
  std::vector<CpuTicks> ticks(cpus.size());
  std::ifstream stat("/proc/stat");
  std::string line;
  while (std::getline(stat, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || !std::isdigit(static_cast<unsigned char>(line[3]))) continue;
    std::istringstream fields(line.substr(3));
    int cpu = -1;
    long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    fields >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
    const auto at = std::find(cpus.begin(), cpus.end(), cpu);
    if (at == cpus.end()) continue;
    ticks[at - cpus.begin()] = {idle + iowait, user + nice + system + idle + iowait + irq + softirq + steal};
  }
  return ticks;
}

// How many of `cpus` sat idle over `window`: the sum of their idle fractions.
// /proc/stat counts in 10 ms ticks, so a CPU-bound job shows as a CPU with no
// idle ticks; a CPU that reported no ticks at all counts as idle.
double idle_cpus(const std::vector<int>& cpus, std::chrono::milliseconds window) {
  const std::vector<CpuTicks> before = read_cpu_ticks(cpus);
  std::this_thread::sleep_for(window);
  const std::vector<CpuTicks> after = read_cpu_ticks(cpus);
  double idle = 0;
  for (size_t i = 0; i < cpus.size(); ++i) {
    const long long total = after[i].total - before[i].total;
    idle += total > 0 ? static_cast<double>(after[i].idle - before[i].idle) / static_cast<double>(total) : 1.0;
  }
  return idle;
}

}  // namespace

int default_num_threads(int processes_on_machine) {
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.empty()) return machine;
  const int allowed = static_cast<int>(cpus.size());
  // Processes an MPI launcher started here take the cores they are bound to
  // (mpirun's default), or share the machine; measuring the load, they would
  // count each other.
  if (processes_on_machine > 1) return allowed < machine ? allowed : std::max(1, machine / processes_on_machine);
  const int idle = static_cast<int>(std::lround(idle_cpus(cpus, std::chrono::milliseconds(60))));
  return std::clamp(idle, 1, allowed);
}

// --- OpenBLAS's kernel set ------------------------------------------------------------------

CpuFeatures this_cpu_features() {
  CpuFeatures cpu;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();  // this may run before any constructor, from .preinit_array
  cpu.avx512f = __builtin_cpu_supports("avx512f");
  cpu.avx512bw = __builtin_cpu_supports("avx512bw");
  cpu.avx512dq = __builtin_cpu_supports("avx512dq");
  cpu.avx512vl = __builtin_cpu_supports("avx512vl");
  cpu.avx2 = __builtin_cpu_supports("avx2");
  cpu.fma = __builtin_cpu_supports("fma");
  cpu.avx = __builtin_cpu_supports("avx");
#endif
  return cpu;
}

namespace {

struct KernelSet {
  const char* coretype;  // OPENBLAS_CORETYPE's spelling
  const char* features;  // what the CPU needs for it, in words
  int generation;        // newer sets run wider vectors
};
constexpr KernelSet kAvx512{"SKYLAKEX", "AVX-512 F/BW/DQ/VL", 3};
constexpr KernelSet kAvx2{"HASWELL", "AVX2+FMA", 2};
constexpr KernelSet kAvx{"SANDYBRIDGE", "AVX", 1};

const KernelSet* kernel_set_for(const CpuFeatures& cpu) {
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512dq && cpu.avx512vl) return &kAvx512;
  if (cpu.avx2 && cpu.fma) return &kAvx2;
  if (cpu.avx) return &kAvx;
  return nullptr;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// The vector width of a set OPENBLAS_CORETYPE may name (OpenBLAS 0.3.21's
// x86-64 names); -1 for a name not listed here.
int generation_of(const std::string& coretype) {
  const std::string name = upper(coretype);
  for (const char* avx512 : {"SKYLAKEX", "COOPERLAKE", "SAPPHIRERAPIDS"})
    if (name == avx512) return 3;
  for (const char* avx2 : {"HASWELL", "ZEN", "EXCAVATOR", "STEAMROLLER"})
    if (name == avx2) return 2;
  for (const char* avx : {"SANDYBRIDGE", "BULLDOZER", "PILEDRIVER"})
    if (name == avx) return 1;
  for (const char* sse : {"PRESCOTT", "CORE2", "PENRYN", "DUNNINGTON", "NEHALEM", "ATHLON", "OPTERON",
                          "OPTERON_SSE3", "BARCELONA", "NANO", "BOBCAT", "KATMAI", "COPPERMINE", "NORTHWOOD",
                          "BANIAS", "ATOM"})
    if (name == sse) return 0;
  return -1;
}

}  // namespace

BlasKernelChoice choose_blas_kernels(const CpuFeatures& cpu, const char* given_coretype) {
  const KernelSet* best = kernel_set_for(cpu);
  if (given_coretype == nullptr || *given_coretype == '\0')
    return {best ? best->coretype : "", best != nullptr, ""};
  const int given = generation_of(given_coretype), best_generation = best ? best->generation : 0;
  const std::string variable = std::string("OPENBLAS_CORETYPE=") + given_coretype;
  // OpenBLAS would run them and die of an illegal instruction at the first GEMM.
  if (given > best_generation)
    return {best ? best->coretype : "", best != nullptr,
            variable + " names kernels this CPU cannot run; " +
                (best ? std::string("using ") + best->coretype + " (" + best->features + ")"
                      : std::string("using OpenBLAS's own detection"))};
  BlasKernelChoice choice{given_coretype, false, ""};
  if (best && given >= 0 && given < best->generation)
    choice.note = variable + " names older kernels than this CPU runs (" + best->features + ": " + best->coretype +
                  "); unset it to let attograd choose";
  return choice;
}

namespace {

// Set from .preinit_array, before any constructor runs: built on first use (a
// global's constructor would run later and reset it), never destroyed.
BlasKernelChoice& start_choice() {
  static BlasKernelChoice* const choice = new BlasKernelChoice;
  return *choice;
}

// What attograd set, in the environment it starts again with: a process that
// finds it knows its settings came from attograd, not from its user.
constexpr const char* kSetupVariable = "ATTOGRAD_CPU_SETUP";
constexpr const char* kNoteVariable = "ATTOGRAD_CPU_NOTE";  // the first start's note
// About ten microseconds of spinning: longer than most gaps between a training
// step's parallel loops, far shorter than a time slice (libgomp's default, 300000,
// spins for milliseconds).
constexpr const char* kSpinCount = "1000";

// environ is not set yet in .preinit_array (libc sets it after): read envp.
const char* find_variable(char** envp, const char* name) {
  const size_t length = std::strlen(name);
  for (char** entry = envp; *entry; ++entry)
    if (std::strncmp(*entry, name, length) == 0 && (*entry)[length] == '=') return *entry + length + 1;
  return nullptr;
}

// Defined (true) by a program that opts out of the second start (threads.h).
extern "C" {
[[gnu::weak]] extern const bool ag_no_cpu_setup;
}

// Runs from the executable's .preinit_array, before any shared library's
// initialiser (threads.h says why). To change what libgomp and OpenBLAS read,
// the process starts itself again (execve of /proc/self/exe, same arguments)
// with the variables added; that one finds ATTOGRAD_CPU_SETUP and goes on.
void choose_at_process_start(int, char** argv, char** envp) {
  BlasKernelChoice& choice = start_choice();
  const char* given = find_variable(envp, "OPENBLAS_CORETYPE");
  if (&ag_no_cpu_setup && ag_no_cpu_setup) {  // threads.h: a program that runs no GEMM
    choice = {given ? given : "", false, "OPENBLAS_CORETYPE and GOMP_SPINCOUNT not set: this program opted out"};
    return;
  }
  if (const char* setup = find_variable(envp, kSetupVariable)) {
    const std::string ours = std::string("OPENBLAS_CORETYPE=") + (given ? given : "");
    choice = choose_blas_kernels(this_cpu_features(), given);
    if (given && std::strstr(setup, ours.c_str())) choice.chosen = true;
    if (const char* note = find_variable(envp, kNoteVariable)) choice.note = note;
    return;
  }
  choice = choose_blas_kernels(this_cpu_features(), given);
  const bool bound_spin = !find_variable(envp, "GOMP_SPINCOUNT") && !find_variable(envp, "OMP_WAIT_POLICY");
  const bool replace_coretype = choice.coretype != (given ? given : "");
  if (!replace_coretype && !bound_spin) return;

  std::vector<std::string> added;
  std::string setup;
  if (replace_coretype && !choice.coretype.empty()) {
    added.push_back("OPENBLAS_CORETYPE=" + choice.coretype);
    setup = added.back();
  }
  if (bound_spin) {
    added.push_back(std::string("GOMP_SPINCOUNT=") + kSpinCount);
    setup += (setup.empty() ? "" : " ") + added.back();
  }
  added.push_back(std::string(kSetupVariable) + "=" + setup);
  if (!choice.note.empty()) added.push_back(std::string(kNoteVariable) + "=" + choice.note);
  std::vector<char*> environment;
  for (char** entry = envp; *entry; ++entry)
    if (!replace_coretype || std::strncmp(*entry, "OPENBLAS_CORETYPE=", 18) != 0) environment.push_back(*entry);
  for (std::string& variable : added) environment.push_back(variable.data());
  environment.push_back(nullptr);
  execve("/proc/self/exe", argv, environment.data());
  // Still here (no /proc, say): OpenBLAS and libgomp run as the environment says.
  choice = {given ? given : "", false, "could not start again with " + setup + ": " + std::strerror(errno)};
}

}  // namespace

const BlasKernelChoice& blas_kernel_choice() { return start_choice(); }

std::string blas_kernels() { return openblas_get_corename(); }

std::string cpu_runtime_summary() {
  std::string version = openblas_get_config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
  version = version.substr(0, version.find(' ', version.find(' ') + 1));
  const BlasKernelChoice& choice = blas_kernel_choice();
  std::string line = std::to_string(num_threads()) + (num_threads() == 1 ? " thread, " : " threads, ") + version +
                     " " + blas_kernels() + " kernels";
  if (choice.chosen)
    line += " (OPENBLAS_CORETYPE=" + choice.coretype + ", from the CPU's " +
            kernel_set_for(this_cpu_features())->features + ")";
  else if (!choice.coretype.empty())
    line += " (OPENBLAS_CORETYPE=" + choice.coretype + " as set)";
  if (!choice.note.empty()) line += "\nnote: " + choice.note;
  return line;
}

// Kept by the linker through the library's link interface (CMakeLists.txt:
// --undefined=ag_threads_preinit), so that every program gets it.
extern "C" void (*ag_threads_preinit)(int, char**, char**);
[[gnu::used, gnu::section(".preinit_array")]] void (*ag_threads_preinit)(int, char**, char**) = &choose_at_process_start;

}  // namespace ag
