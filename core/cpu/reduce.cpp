#include <algorithm>

#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"
#include "core/cpu/vector_math.h"

namespace ag::cpu {

namespace {
// True when out keeps exactly x's trailing dims (leading 1s aside), so the sum
// runs over whole rows of x viewed as [N, numel(out)]: the bias gradient.
bool sums_leading_dims(const Shape& x, const Shape& out) {
  size_t first = 0;
  while (first < out.size() && out[first] == 1) ++first;
  const size_t kept = out.size() - first;
  return kept <= x.size() && std::equal(out.begin() + first, out.end(), x.end() - kept);
}

// Columns [first, last) of x [N, C] added into sums[c − first], rows in order
// (sum_column_blocks); the float version is compiled for AVX-512 too
// (AG_VECTOR_CLONES, core/cpu/vector_math.h, which explains the always_inline).
template <class T>
[[gnu::always_inline]] inline void add_column_block(const T* x, int64_t N, int64_t C, int64_t first, int64_t last,
                                                    double* sums) {
  for (int64_t r = 0; r < N; ++r) {
#pragma omp simd
    for (int64_t c = first; c < last; ++c) sums[c - first] += static_cast<double>(x[r * C + c]);
  }
}
AG_VECTOR_CLONES void add_column_block(const float* x, int64_t N, int64_t C, int64_t first, int64_t last,
                                       double* sums) {
  add_column_block<float>(x, N, C, first, last, sums);
}
}  // namespace

// Sums are kept in double so float32 reductions over long rows stay accurate.
// Over leading dims: sum_column_blocks (core/cpu/loops.h), in parallel. Otherwise:
// x row by row, each element added into the out element it broadcasts from
// (out read with stride 0 on the reduced dims); serial, since rows may share outputs.
void sum_to_shape(const Tensor& x, Tensor& out) {
  visit_floating(x.dtype(), "sum_to_shape", [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    const int64_t n_out = out.numel();
    if (n_out > 0 && sums_leading_dims(x.shape(), out.shape())) {
      const int64_t C = n_out, N = x.numel() / C;
      sum_column_blocks(N, C, po, [&](int64_t first, int64_t last, double* sums) {
        add_column_block(px, N, C, first, last, sums);
      });
      return;
    }
    std::vector<double> acc(n_out, 0.0);
    for_each_row<2>(x.shape(), {contiguous_strides(x.shape()), broadcast_strides(out.shape(), x.shape())},
                    false, [&](auto base, int64_t inner, auto stride) {
                      const T* row = px + base[0];
                      double* o = acc.data() + base[1];
                      if (stride[1] == 0) {
                        double s = 0;
                        for (int64_t i = 0; i < inner; ++i) s += row[i];
                        o[0] += s;
                      } else {
                        for (int64_t i = 0; i < inner; ++i) o[i] += row[i];
                      }
                    });
    for (int64_t i = 0; i < n_out; ++i) po[i] = static_cast<T>(acc[i]);
  });
}

void max_dim(const Tensor& x, const ReduceDims& dims, Tensor& values, Tensor& argmax) {
  visit_floating(x.dtype(), "max", [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* pv = values.data<T>();
    int64_t* pi = argmax.data<int64_t>();
    for (int64_t o = 0; o < dims.outer; ++o)
      for (int64_t i = 0; i < dims.inner; ++i) {
        const T* column = px + o * dims.n * dims.inner + i;
        int64_t best = 0;
        for (int64_t j = 1; j < dims.n; ++j)
          if (column[j * dims.inner] > column[best * dims.inner]) best = j;
        pv[o * dims.inner + i] = column[best * dims.inner];
        pi[o * dims.inner + i] = best;
      }
  });
}

void max_dim_backward(const Tensor& dValues, const Tensor& argmax, const ReduceDims& dims,
                      Tensor& dX) {
  visit_floating(dValues.dtype(), "max_backward", [&](auto zero) {
    using T = decltype(zero);
    const T* g = dValues.data<T>();
    const int64_t* pi = argmax.data<int64_t>();
    T* dx = dX.data<T>();
    std::fill_n(dx, dX.numel(), T(0));
    for (int64_t o = 0; o < dims.outer; ++o)
      for (int64_t i = 0; i < dims.inner; ++i)
        dx[(o * dims.n + pi[o * dims.inner + i]) * dims.inner + i] = g[o * dims.inner + i];
  });
}

void cumsum(const Tensor& x, const ReduceDims& dims, bool reverse, Tensor& y) {
  visit_floating(x.dtype(), "cumsum", [&](auto zero) {
    using T = decltype(zero);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const int64_t step = reverse ? -dims.inner : dims.inner;
    for (int64_t o = 0; o < dims.outer; ++o)
      for (int64_t i = 0; i < dims.inner; ++i) {
        const int64_t first = o * dims.n * dims.inner + i + (reverse ? (dims.n - 1) * dims.inner : 0);
        double running = 0;
        for (int64_t j = 0, at = first; j < dims.n; ++j, at += step) py[at] = static_cast<T>(running += px[at]);
      }
  });
}

}  // namespace ag::cpu
