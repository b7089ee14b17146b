// Test helpers: gradcheck assertions, closeness with the worst element named,
// float32-vs-float64 agreement, and running a test on every device present.
#pragma once
#include <doctest/doctest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/gradcheck.h"
#include "core/ops.h"
#include "core/sanitizer.h"
#include "core/threads.h"
#include "cuda/context.h"
#include "nn/gpt.h"
#include "nn/module.h"

namespace ag::test {

// A spec's softmax (linear) parameters, to set or read one in place: the spec must compute softmax (linear) attention.
inline SoftmaxAttention& softmax_of(AttentionSpec& spec) { return std::get<SoftmaxAttention>(spec.function); }
inline const SoftmaxAttention& softmax_of(const AttentionSpec& spec) { return std::get<SoftmaxAttention>(spec.function); }
inline LinearAttention& linear_of(AttentionSpec& spec) { return std::get<LinearAttention>(spec.function); }
inline const LinearAttention& linear_of(const AttentionSpec& spec) { return std::get<LinearAttention>(spec.function); }

// Whether `part` occurs in `text` (messages checked by their words).
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The message of the ag::Error that `call` throws, or "" if it returns.
template <class Call> std::string error_of(Call&& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A fresh directory for one test case (unique per process, so parallel CTest
// runs never share one), removed when it goes out of scope.
struct TempDir {
  std::filesystem::path dir;
  explicit TempDir(const std::string& name)
      : dir(std::filesystem::temp_directory_path() / ("attograd_" + name + "_" + std::to_string(getpid()))) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (dir / name).string(); }
  std::string path() const { return dir.string(); }
};

// A GPT's sizes, every other option at its default.
inline nn::GPTConfig gpt_sizes(int64_t vocab_size, int64_t block_size, int64_t n_layer, int64_t n_head, int64_t n_embd) {
  nn::GPTConfig config;
  config.vocab_size = vocab_size;
  config.block_size = block_size;
  config.n_layer = n_layer;
  config.n_head = n_head;
  config.n_embd = n_embd;
  return config;
}

// A whole file's bytes, and a file made of `bytes`.
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// A float64 tensor of N(0, 1) numbers (uniform in [low, high) if low < high),
// requiring grad, from its own seed so tests do not depend on each other.
inline Tensor random(const Shape& shape, uint64_t seed, DType dtype = DType::Float64,
                     bool requires_grad = true) {
  Generator gen(seed);
  Tensor t = Tensor::randn(shape, dtype, &gen);
  if (requires_grad) t.requires_grad_();
  return t;
}

// attention(q, k, v, spec) on copies of in = {q, k, v} converted to `dtype` on `device`,
// backward from `upstream` (float64 on the CPU, converted likewise): Z, lse (softmax's dense
// and flash; else undefined) and the gradients of q, k, v, back on the CPU in float64.
// f's output and every input's gradient, with upstream(output) as the output's gradient.
inline std::vector<Tensor> output_and_gradients(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                                                const std::function<Tensor(const Tensor&)>& upstream) {
  std::vector<Tensor> x;
  for (const Tensor& t : inputs) x.push_back(t.detach().clone().requires_grad_());
  const Tensor z = f(x);
  z.backward(upstream(z));
  std::vector<Tensor> out = {z.detach()};
  for (const Tensor& t : x) out.push_back(t.grad());
  return out;
}

struct AttentionRun {
  Tensor Z = {}, lse = {}, dQ = {}, dK = {}, dV = {};
};
inline AttentionRun run_attention(const std::vector<Tensor>& in, const AttentionSpec& spec, Device device, DType dtype,
                                  const Tensor& upstream) {
  std::vector<Tensor> x;
  for (const Tensor& t : in) x.push_back(t.detach().to(dtype).to(device).clone().requires_grad_());
  AttentionInternals internals;
  const Tensor Z = attention(x[0], x[1], x[2], spec, &internals);
  Z.backward(upstream.to(dtype).to(device));
  const auto host = [](const Tensor& t) { return t.defined() ? t.to(Device::CPU).to(DType::Float64) : Tensor(); };
  return {host(Z), host(internals.log_sum_exp), host(x[0].grad()), host(x[1].grad()), host(x[2].grad())};
}

// The definition of a sparse pattern, written independently of AttentionMask (the
// tests' reference): key j is visible to the query at key position p if j ≤ p and any part allows it.
inline bool defined_visible(const SparsePattern& pattern, int64_t h, int64_t p, int64_t j) {
  if (j > p) return false;
  if (pattern.window == 0) return true;
  const int64_t distance = p - j;
  const bool window = distance < pattern.window * pattern.dilation && distance % pattern.dilation == 0;
  const int64_t query_block = p / kSparseBlock, key_block = j / kSparseBlock;
  const bool random = key_block < query_block && RandomBlocks(pattern, h, query_block).contains(key_block);
  return window || j < pattern.global || random;
}

// The sparse patterns the attention tests try: each part alone and the unions, at sizes where each
// part matters for T ≈ 100.
inline std::vector<SparsePattern> sparse_patterns() {
  return {
      {.window = 1},
      {.window = 8},
      {.window = 5, .dilation = 3},
      {.window = 4, .global = 3},
      {.window = 6, .random_blocks = 2, .seed = 7, .layer = 1},
      {.window = 3, .dilation = 2, .global = 20, .random_blocks = 1, .seed = 3},
      {.window = 7, .global = 2, .random_blocks = 3, .seed = 11, .layer = 2},
  };
}

// max |a − b| over the elements where they differ (equal infinities agree).
inline double max_abs_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  REQUIRE(va.size() == vb.size());
  double worst = 0;
  for (size_t i = 0; i < va.size(); ++i)
    if (va[i] != vb[i]) worst = std::max(worst, std::abs(va[i] - vb[i]));
  return worst;
}

// Largest |a − b| over the tensors, relative to the largest |b| (normwise
// relative error: elementwise relative error is meaningless near zero).
inline double relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  REQUIRE(va.size() == vb.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) {  // std::max would skip a NaN
      if (std::isnan(va[i]) != std::isnan(vb[i])) return INFINITY;
      continue;  // NaN in both: the same answer (log_softmax of a masked row)
    }
    if (std::isfinite(vb[i])) scale = std::max(scale, std::abs(vb[i]));  // over every element, equal or not
    if (va[i] == vb[i]) continue;  // also equal infinities
    diff = std::max(diff, std::abs(va[i] - vb[i]));
  }
  return scale == 0 ? diff : diff / scale;
}

#define CHECK_CLOSE(a, b, rtol)                                                        \
  do {                                                                                 \
    const double ag_rel_ = ::ag::test::relative_error((a), (b));                       \
    INFO(#a " vs " #b ": relative error " << ag_rel_ << " (tolerance " << (rtol) << ")"); \
    CHECK(ag_rel_ <= (rtol));                                                           \
  } while (0)

#define CHECK_GRADCHECK(f, inputs, ...)                                         \
  do {                                                                          \
    const ::ag::GradcheckResult ag_gc_ = ::ag::gradcheck((f), (inputs), ##__VA_ARGS__); \
    INFO(ag_gc_.summary());                                                     \
    CHECK(ag_gc_.passed);                                                       \
  } while (0)

// Gradcheck of `f` over `x` (if defined) and every parameter of module `m`,
// which it converts to float64: gradcheck perturbs the parameters in place and
// f reads them through the module. Attention key biases are left out: their
// gradient is exactly 0 (softmax ignores a constant added to a row of S), so
// both sides are rounding noise with no scale to compare; tests check that they
// are zero directly ("attention module: the key bias gets no gradient (softmax is shift-invariant)").
inline void check_module_gradients(nn::Module& m, const Tensor& x, const std::function<Tensor(const Tensor&)>& f) {
  m.to(DType::Float64);
  std::vector<Tensor> inputs;
  if (x.defined()) inputs.push_back(x);
  for (const NamedTensor& p : m.named_parameters())
    if (!p.name.ends_with("w_k.bias")) inputs.push_back(p.tensor);
  CHECK_GRADCHECK([&](const std::vector<Tensor>&) { return f(x); }, inputs);
}

// Runs f on `inputs64` (float64) and on their float32 copies; checks the output
// and every input's gradient (from the same random upstream gradient) agree to
// `rtol` (normwise relative).
inline void check_float32_matches_float64(const GradcheckFn& f, const std::vector<Tensor>& inputs64,
                                          double rtol = 1e-5) {
  auto run = [&](DType dtype, std::vector<Tensor>& grads) {
    std::vector<Tensor> inputs;
    for (const Tensor& x : inputs64) {
      Tensor c = x.dtype() == DType::Int64 ? x : x.detach().to(dtype).clone();
      if (x.requires_grad()) c.requires_grad_();
      inputs.push_back(c);
    }
    const Tensor y = f(inputs);
    Generator gen(12345);
    y.backward(Tensor::randn(y.shape(), dtype, &gen));
    for (const Tensor& x : inputs) grads.push_back(x.requires_grad() ? x.grad() : Tensor());
    return y;
  };
  std::vector<Tensor> g32, g64;
  const Tensor y32 = run(DType::Float32, g32);
  const Tensor y64 = run(DType::Float64, g64);
  CHECK_CLOSE(y32, y64, rtol);
  for (size_t i = 0; i < g32.size(); ++i) {
    INFO("gradient of input " << i);
    REQUIRE(g32[i].defined() == g64[i].defined());
    if (g64[i].defined()) CHECK_CLOSE(g32[i], g64[i], rtol);
  }
}

// For CUDA-only test cases: true if a device is present; otherwise prints the
// [SKIP] marker that CTest maps to "Skipped".
// With AG_REQUIRE_CUDA set (scripts/gpu_check.sh sets it), a missing device is
// a failure instead: a GPU run must not pass by skipping everything.
inline bool cuda_or_skip() {
  if (cuda::available()) return true;
  if (std::getenv("AG_REQUIRE_CUDA")) FAIL("AG_REQUIRE_CUDA is set but: " << cuda::describe_device());
  MESSAGE("[SKIP] " << cuda::describe_device());
  return false;
}

// For cases whose processes share CUDA tensors over NCCL (mpirun with --device cuda): true
// if the build has NCCL; otherwise prints the [SKIP] marker.
inline bool nccl_or_skip() {
#if ATTOGRAD_HAS_NCCL
  return true;
#else
  MESSAGE("[SKIP] built without NCCL (CMake found no libnccl beside the CUDA toolkit)");
  return false;
#endif
}

// --- tests written once, run on every device (candle's test_device!) ----------------------
//
//   TEST_CASE_EVERY_DEVICE("attention op: gradients, every implementation") {
//     const Inputs qkv = {random({1, 2, 5, 4}, 1), random({1, 2, 5, 4}, 2), random({1, 2, 5, 4}, 3)};
//     for (AttentionImpl impl : ag::test::attention_impls()) {
//       const GradcheckFn f = [impl](const Inputs& x) { return attention(x[0], x[1], x[2], {.function = SoftmaxAttention{.impl = impl}}); };
//       if (device == Device::CPU) CHECK_GRADCHECK(f, qkv);
//       else ag::test::check_device_matches_cpu(device, f, qkv, 1e-10, DType::Float64);
//     }
//   }
//
// registers two doctest cases with one body, which reads `device`: the name as
// given, run with Device::CPU, and "cuda: " + the name, run with Device::CUDA.
// Without a CUDA device the second prints [SKIP] (cuda_or_skip), which CTest
// reports as Skipped; `attograd_tests -tc="cuda*"` runs every CUDA case. A body
// that is already a function of the device, `void check_x(Device)`, becomes
// `TEST_CASE_EVERY_DEVICE("...") { check_x(device); }` (and its hand-written
// "cuda:" twin goes). cuda_or_skip stays for what only CUDA has (test_cuda.cpp).
//
// On a device the body compares with the CPU, the reference of every device
// kernel: it makes its inputs on the CPU (float64) and checks the device's
// output and gradients against the CPU's from the same inputs
// (check_device_matches_cpu, for a function of tensors: every tensor f reads
// must be one of its inputs, int64 indices too, so that it follows them to the
// device), or computes the CPU's answer itself. Checks that only the CPU can
// afford (gradcheck's full Jacobian) run where device == Device::CPU; sizes only
// a device needs (many thread blocks, grid limits) where it is not.
#define TEST_CASE_EVERY_DEVICE(name) AG_TEST_CASE_EVERY_DEVICE_(DOCTEST_ANONYMOUS(ag_every_device_), name)
#define AG_TEST_CASE_EVERY_DEVICE_(body, name)            \
  static void body(::ag::Device device);                  \
  TEST_CASE(name) { body(::ag::Device::CPU); }            \
  TEST_CASE("cuda: " name) {                              \
    if (::ag::test::cuda_or_skip()) body(::ag::Device::CUDA); \
  }                                                       \
  static void body([[maybe_unused]] ::ag::Device device)

// What `run` returns, bit for bit, run twice: on the CPU the second time on one thread
// (a kernel's sums must not depend on how the work is split), on a device as it is.
inline void check_same_bits_again(Device device, const std::function<std::vector<Tensor>()>& run) {
  const auto bits = [&] {
    std::vector<double> all;
    for (const Tensor& t : run())
      for (double x : t.to_vector()) all.push_back(x);
    return all;
  };
  const std::vector<double> first = bits();
  const int threads = num_threads();
  set_num_threads(device == Device::CPU ? 1 : threads);
  const std::vector<double> second = bits();
  set_num_threads(threads);
  REQUIRE(first.size() == second.size());
  CHECK(std::memcmp(first.data(), second.data(), first.size() * sizeof(double)) == 0);
}

// [B, H, T, d] <-> [B, T, H, d], and a per-head-and-position [B, H, T] <-> [B, T, H].
inline Tensor swap_heads_and_positions(const Tensor& t) {
  return t.dim() == 4 ? permute(t, {0, 2, 1, 3}) : permute(t, {0, 2, 1});
}

// Each kv head repeated for the query heads that read it: [B, Hkv, T, d] -> [B, Hq, T, d] (BHTD).
inline Tensor repeat_kv(const Tensor& t, int64_t Hq) {
  const int64_t B = t.size(0), Hkv = t.size(1), T = t.size(2), d = t.size(3);
  return expand(t.reshape({B, Hkv, 1, T, d}), {B, Hkv, Hq / Hkv, T, d}).reshape({B, Hq, T, d});
}

// A copy of x of its own on `device` in `dtype` (int64 stays int64), requiring grad as x does.
inline Tensor copy_to(Device device, const Tensor& x, DType dtype) {
  Tensor c = x.detach().to(x.dtype() == DType::Int64 ? DType::Int64 : dtype).to(device).clone();
  if (x.requires_grad()) c.requires_grad_();
  return c;
}

// f on copies of `inputs` in `dtype` on the CPU and on `device`, each followed
// by backward from the same random upstream gradient: the output and every
// input's gradient on the device within `rtol` (normwise relative) of the CPU's.
// 1e-5 in float32; reductions over 4096 or more terms add in other orders on
// the two devices and get 1e-4.
inline void check_device_matches_cpu(Device device, const GradcheckFn& f, const std::vector<Tensor>& inputs,
                                     double rtol = 1e-5, DType dtype = DType::Float32) {
  struct Run {
    Tensor y;
    std::vector<Tensor> grads;  // undefined where the input needs none
  };
  const auto run_on = [&](Device where) {
    std::vector<Tensor> xs;
    for (const Tensor& x : inputs) xs.push_back(copy_to(where, x, dtype));
    Run run{f(xs), {}};
    if (run.y.requires_grad()) {
      Generator gen(12345);
      run.y.backward(Tensor::randn(run.y.shape(), run.y.dtype(), &gen).to(where));
    }
    for (const Tensor& x : xs) run.grads.push_back(x.requires_grad() ? x.grad() : Tensor());
    return run;
  };
  const Run cpu = run_on(Device::CPU), other = run_on(device);
  CHECK(other.y.device() == device);
  REQUIRE(other.y.shape() == cpu.y.shape());
  CHECK_CLOSE(other.y, cpu.y, rtol);
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    if (!cpu.grads[i].defined()) continue;
    INFO("gradient of input " << i);
    REQUIRE(other.grads[i].defined());
    CHECK(other.grads[i].device() == device);
    CHECK_CLOSE(other.grads[i], cpu.grads[i], rtol);
  }
}

// Every softmax attention implementation, for tests that walk them all.
inline std::vector<AttentionImpl> attention_impls() {
  std::vector<AttentionImpl> impls;
  for (const auto& entry : EnumNames<AttentionImpl>::values) impls.push_back(entry.first);
  return impls;
}

// Runs `command` through the shell; returns its exit status and its output (stdout and stderr).
inline std::pair<int, std::string> run_command(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe);
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WEXITSTATUS(status), output};
}

// How many times `part` occurs in `text` (overlapping ones too).
inline size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// For test cases that start processes with mpirun: the command that starts
// `processes` of them (never past `seconds`: a test that goes wrong must not
// hang the suite), if this build has MPI; otherwise prints the [SKIP] marker
// and returns "". --oversubscribe: CI has 2 cores; --allow-run-as-root: CI is root;
// mpi_yield_when_idle: a process waiting for its peers gives up its core instead of
// polling on it (Open MPI polls unless it sees more processes than cores), so the
// cases that run beside these on CI's 2 cores are not slowed by the waits.
//
// Under AddressSanitizer (the sanitizer build: ATTOGRAD_LSAN_OPENMPI names
// cmake/lsan_openmpi.supp) the processes mpirun starts get LeakSanitizer's
// suppressions of Open MPI's own unfreed blocks, and a preloaded dlclose that
// keeps Open MPI's plugins loaded until exit (ATTOGRAD_KEEP_PLUGINS_LOADED), so
// that the stacks the fast unwinder records at each malloc end in a module the
// suppressions can name, instead of every malloc's stack unwound the slow way far
// enough to reach libmpi.so (docs/performance.md, issue 45's section). A leak of
// attograd's own in these processes is still reported with its whole stack.
//
// Each test process gives its jobs a session directory base of its own (orte_tmpdir_base): two
// mpirun jobs starting at once, as CTest runs entries side by side, race to create Open MPI's
// shared /tmp/ompi.<host>.<uid>, and the loser fails with "A call to mkdir was unable to
// create the desired directory ... File exists" (open-mpi/ompi#8510; it failed CI's sanitizer
// suite once). Open MPI removes what it puts there; the empty base goes at exit.
inline const std::string& mpi_session_base() {
  static const std::string base = [] {
    const char* tmp = std::getenv("TMPDIR");
    const std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/attograd-mpi-" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    return dir;
  }();
  // registered after base is made, so it runs before base is destroyed
  static const bool removed_at_exit = std::atexit([] {
    std::error_code ignored;
    std::filesystem::remove(mpi_session_base(), ignored);  // only if empty
  }) == 0;
  (void)removed_at_exit;
  return base;
}

inline std::string mpirun_or_skip(int processes, int seconds = 120) {
  const std::string mpiexec = ATTOGRAD_MPIEXEC;
  if (mpiexec.empty()) {
    MESSAGE("[SKIP] built without MPI (CMake found none: apt-get install libopenmpi-dev openmpi-bin)");
    return "";
  }
  std::string sanitizer_env;
#ifdef ATTOGRAD_LSAN_OPENMPI
  const auto with = [](const char* name, const std::string& option) {
    const char* given = std::getenv(name);
    return std::string(" -x '") + name + "=" + option + (given ? std::string(":") + given : "") + "'";
  };
  // Open MPI's plugins stay loaded (tests/sanitizer/keep_plugins_loaded.cpp), so the
  // suppressions name their blocks' stacks as the fast unwinder records them.
  sanitizer_env = with("LD_PRELOAD", ATTOGRAD_KEEP_PLUGINS_LOADED) +
                  with("LSAN_OPTIONS", std::string("suppressions=") + ATTOGRAD_LSAN_OPENMPI);
#endif
  return "timeout " + std::to_string(seconds) + " " + mpiexec +
         " --oversubscribe --allow-run-as-root --mca mpi_yield_when_idle 1 --mca orte_tmpdir_base " +
         mpi_session_base() + sanitizer_env + " -np " + std::to_string(processes);
}

}  // namespace ag::test
