#include <cmath>
#include <cstring>

#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"

namespace ag::cpu {

void copy_strided(const Tensor& src, const StridedView& src_view, Tensor& dst,
                  const StridedView& dst_view, const Shape& shape) {
  AG_CHECK(src.dtype() == dst.dtype(), "copy_strided: dtypes differ (" << src.dtype() << " vs "
                                                                       << dst.dtype() << ")");
  visit_dtype(src.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* s = src.data<T>() + src_view.offset;
    T* d = dst.data<T>() + dst_view.offset;
    for_each_row<2>(shape, {src_view.strides, dst_view.strides}, true,
                    [&](auto base, int64_t inner, auto stride) {
                      const T* in = s + base[0];
                      T* out = d + base[1];
                      if (stride[0] == 1 && stride[1] == 1) {
                        // Inline: rows are often short (a bias, one head's d_h),
                        // where a memcpy call costs as much as the copy.
#pragma omp simd
                        for (int64_t i = 0; i < inner; ++i) out[i] = in[i];
                      } else {
                        for (int64_t i = 0; i < inner; ++i) out[i * stride[1]] = in[i * stride[0]];
                      }
                    });
  });
}

void fill(Tensor& out, double value) {
  visit_dtype(out.dtype(), [&](auto zero) {
    using T = decltype(zero);
    // Zero (every zero_grad) is all zero bits in each dtype: libc's memset stores
    // 64 bytes at a time where this build's own loop stores 16.
    if (value == 0.0 && !std::signbit(value)) std::memset(out.data<T>(), 0, out.numel() * sizeof(T));
    else std::fill_n(out.data<T>(), out.numel(), static_cast<T>(value));
  });
}

void cast(const Tensor& src, Tensor& dst) {
  visit_dtype(src.dtype(), [&](auto src_zero) {
    visit_dtype(dst.dtype(), [&](auto dst_zero) {
      using S = decltype(src_zero);
      using D = decltype(dst_zero);
      const S* s = src.data<S>();
      D* d = dst.data<D>();
      const int64_t n = src.numel();
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<D>(s[i]);
    });
  });
}

}  // namespace ag::cpu
