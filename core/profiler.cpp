#include "core/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>

#include "core/autograd.h"
#include "cuda/context.h"

namespace ag::profiler {

namespace {
std::atomic<bool> is_recording{false};

struct State {
  std::mutex mutex;
  std::vector<KernelRecord> records;
};
State& state() {
  static State* instance = new State;  // never destroyed: kernels may run during static destruction
  return *instance;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// AG_PROFILE=1: record the whole program and print the summary at exit.
void print_at_exit() { std::cerr << "\n--- kernel profile (AG_PROFILE) ---\n" << summary(stop()); }
const bool started_from_environment = [] {
  const char* flag = std::getenv("AG_PROFILE");
  if (!flag || std::string(flag).empty() || std::string(flag) == "0") return false;
  start();
  std::atexit(print_at_exit);
  return true;
}();

std::string format(const char* pattern, auto... values) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, pattern, values...);
  return buffer;
}
}  // namespace

double KernelRecord::gemm_flops() const {
  return is_gemm ? 2.0 * static_cast<double>(gemm.groups * gemm.batch) * static_cast<double>(gemm.M) *
                       static_cast<double>(gemm.N) * static_cast<double>(gemm.K)
                 : 0.0;
}

void start() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.records.clear();
  is_recording = true;
}

std::vector<KernelRecord> stop() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  is_recording = false;
  return std::move(s.records);
}

bool recording() { return is_recording.load(std::memory_order_relaxed); }

std::vector<Total> totals(const std::vector<KernelRecord>& records,
                          const std::function<std::string(const KernelRecord&)>& key) {
  std::map<std::string, Total> by_key;
  for (const KernelRecord& r : records) {
    const std::string k = key(r);
    Total& t = by_key[k];
    t.key = k;
    t.calls += 1;
    t.ms += r.ms;
    t.flops += r.gemm_flops();
  }
  std::vector<Total> sorted;
  for (auto& [k, t] : by_key) sorted.push_back(t);
  std::stable_sort(sorted.begin(), sorted.end(), [](const Total& a, const Total& b) { return a.ms > b.ms; });
  return sorted;
}

std::string describe_gemm(const kernel::GemmShape& g) {
  // The stored shapes: A is [K, M] when BLAS transposes it, B is [N, K].
  const auto stored = [](int64_t rows, int64_t cols, bool transposed) {
    return transposed ? format("[%lld,%lld]ᵀ", static_cast<long long>(cols), static_cast<long long>(rows))
                      : format("[%lld,%lld]", static_cast<long long>(rows), static_cast<long long>(cols));
  };
  std::string s = (g.groups > 1 ? format("%lldx", static_cast<long long>(g.groups)) : std::string()) +
                  format("%lldx ", static_cast<long long>(g.batch)) + stored(g.M, g.K, g.trans_a) + "·" +
                  stored(g.K, g.N, g.trans_b);
  if (g.lda || g.ldb || g.ldc)
    s += format(" ld %lld,%lld,%lld", static_cast<long long>(g.row_stride_a()),
                static_cast<long long>(g.row_stride_b()), static_cast<long long>(g.row_stride_c()));
  if (g.beta != 0.0) s += format(" beta %g", g.beta);
  return s;
}

std::string table(const std::vector<Total>& rows, const char* heading, double per) {
  double all_ms = 0;
  for (const Total& t : rows) all_ms += t.ms;
  std::string s = format("%-44s %8s %10s %7s %9s\n", heading, "calls", "ms", "share", "us/call");
  for (const Total& t : rows)
    s += format("%-44s %8.0f %10.3f %6.1f%% %9.1f\n", t.key.c_str(), static_cast<double>(t.calls) / per,
                t.ms / per, all_ms > 0 ? 100.0 * t.ms / all_ms : 0.0, 1000.0 * t.ms / static_cast<double>(t.calls));
  s += format("%-44s %8s %10.3f\n", "total", "", all_ms / per);
  return s;
}

std::string summary(const std::vector<KernelRecord>& records) {
  return table(totals(records, [](const KernelRecord& r) { return std::string(r.kernel); }), "kernel", 1) + "\n" +
         table(totals(records, [](const KernelRecord& r) { return std::string(r.family); }), "family", 1);
}

namespace {
// An optional argument: a null pointer, or an undefined tensor (FAVOR+'s ω under elu1).
bool present(const Tensor* t) { return t != nullptr && t->defined(); }
}  // namespace

KernelCall::KernelCall(const char* family, const char* kernel, std::span<const Tensor* const> tensors,
                       const kernel::GemmShape* gemm)
    : device_(tensors.front()->device()) {
  for (const Tensor* t : tensors)
    AG_CHECK(!present(t) || t->device() == device_, kernel << ": tensors on different devices (" << device_name(device_)
                                                            << " and " << device_name(t->device()) << ")");
  if (!recording()) return;
  record_ = std::make_unique<KernelRecord>();
  record_->kernel = kernel;
  record_->family = family;
  for (const Tensor* t : tensors)
    if (present(t)) record_->shapes.push_back(t->shape());
  record_->dtype = tensors.front()->dtype();
  record_->device = device_;
  record_->grad_mode = grad_enabled();
  if (gemm) {
    record_->gemm = *gemm;
    record_->is_gemm = true;
  }
  if (device_ == Device::CUDA) cuda::wait_for_queue();  // time this kernel, not the queue before it
  start_ms_ = now_ms();
}

KernelCall::~KernelCall() {
  if (!record_) return;
  if (device_ == Device::CUDA) {
    try {
      cuda::wait_for_queue();
    } catch (const Error&) {
      return;  // the kernel failed; the next call into CUDA reports it
    }
  }
  record_->ms = now_ms() - start_ms_;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!is_recording) return;  // stopped while this call ran
  s.records.push_back(std::move(*record_));
}

}  // namespace ag::profiler
