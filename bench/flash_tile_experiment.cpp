// Experiment timing (not part of the repo): attention fwd and fwd+bwd.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>
#include <cblas.h>
#include "core/ops.h"
#include "core/threads.h"
using namespace ag;
using Clock = std::chrono::steady_clock;
#include <ctime>
static double cpu_ms() { timespec ts; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6; }
template <class F> double median_ms(F f, int reps) { std::vector<double> t; for (int i = 0; i < reps; ++i) { double a = cpu_ms(); f(); t.push_back(cpu_ms() - a); } std::sort(t.begin(), t.end()); return getenv("MIN") ? t[0] : t[t.size()/2]; }
int main(int argc, char** argv) {
  int64_t T = argc > 1 ? atoll(argv[1]) : 1024, d = argc > 2 ? atoll(argv[2]) : 32; bool causal = argc > 3 ? atoi(argv[3]) : 1;
  int reps = argc > 4 ? atoi(argv[4]) : 5;
  set_num_threads(getenv("THREADS") ? atoi(getenv("THREADS")) : 1);
  { int n = 2048; std::vector<float> a(n*n, 1.f), b(n*n, 1.f), c(n*n);
    double ms = median_ms([&]{ cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a.data(), n, b.data(), n, 0, c.data(), n); }, 5);
    printf("sgemm 2048^3: %.1f GFLOP/s\n", 2.0*n*n*n/ms/1e6); }
  Generator g(1);
  const int64_t B = 1, H = 8;
  Tensor q = Tensor::randn({B, H, T, d}, DType::Float32, &g), k = Tensor::randn({B, H, T, d}, DType::Float32, &g), v = Tensor::randn({B, H, T, d}, DType::Float32, &g);
  Tensor up = Tensor::randn({B, H, T, d}, DType::Float32, &g);
  double flops = 4.0 * B * H * T * T * d * (causal ? 0.5 : 1.0);
  for (AttentionImpl impl : {AttentionImpl::Dense, AttentionImpl::Flash}) { if (getenv("ONLY_FLASH") && impl == AttentionImpl::Dense) continue;
    AttentionSpec spec{.causal = causal, .impl = impl};
    double f = median_ms([&]{ attention(q, k, v, spec); }, reps);
    Tensor qq = q.clone().requires_grad_(), kk = k.clone().requires_grad_(), vv = v.clone().requires_grad_();
    double fb = median_ms([&]{ Tensor z = attention(qq, kk, vv, spec); z.backward(up); }, reps);
    printf("%s T %ld d %ld causal %d: fwd %.2f ms (%.1f GFLOP/s)  fwd+bwd %.2f ms (%.1f GFLOP/s)\n", impl == AttentionImpl::Dense ? "dense" : "flash", T, d, causal, f, flops/f/1e6, fb, 3.5*flops/fb/1e6);
  }
}
