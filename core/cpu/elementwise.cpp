// Elementwise CPU kernels: flat loops over contiguous memory, a row walk for
// broadcasting binary ops, and the bias-plus-activation pair of the MLP.
#include <cmath>

#include "core/cpu/cpu.h"
#include "core/cpu/loops.h"
#include "core/cpu/vector_math.h"
#include "core/elementwise_math.h"

namespace ag::cpu {

namespace {

// out[i] = f(in[i]) over n contiguous elements, in parallel when large.
template <class T, class F> void map(const T* in, T* out, int64_t n, F f) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) out[i] = f(in[i]);
}

template <class T, class F> void map2(const T* a, const T* b, T* out, int64_t n, F f) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}

template <class T, class F> void broadcast_binary(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  if (a.shape() == b.shape()) return map2(pa, pb, po, out.numel(), f);
  const Shape& shape = out.shape();
  for_each_row<3>(shape,
                  {broadcast_strides(a.shape(), shape), broadcast_strides(b.shape(), shape),
                   contiguous_strides(shape)},
                  true, [&](auto base, int64_t inner, auto stride) {
                    const T* ra = pa + base[0];
                    const T* rb = pb + base[1];
                    T* ro = po + base[2];
                    // One straight loop per stride pattern, so each vectorises.
                    if (stride[0] && stride[1]) {
                      for (int64_t i = 0; i < inner; ++i) ro[i] = f(ra[i], rb[i]);
                    } else if (stride[0]) {
                      const T vb = rb[0];
                      for (int64_t i = 0; i < inner; ++i) ro[i] = f(ra[i], vb);
                    } else if (stride[1]) {
                      const T va = ra[0];
                      for (int64_t i = 0; i < inner; ++i) ro[i] = f(va, rb[i]);
                    } else {
                      const T v = f(ra[0], rb[0]);
                      for (int64_t i = 0; i < inner; ++i) ro[i] = v;
                    }
                  });
}
// Calls body(f, f_grad) with the activation `op` and its derivative, for the
// ops whose derivative is not a cheap expression of y (Relu, GeluErf, GeluTanh, Silu, Softplus, Elu).
// Exact GELU in float32 takes Φ and φ from normal_cdf_pdf_float
// (core/cpu/vector_math.h explains the trade).
template <class T, class Body> void with_activation(UnaryOp op, const char* kernel, Body&& body) {
  switch (op) {
    case UnaryOp::Relu: return body([](T v) { return math::relu(v); }, [](T v) { return math::relu_grad(v); });
    case UnaryOp::GeluErf:
      if constexpr (std::is_same_v<T, float>)
        return body([](float v) { return v * math::normal_cdf_pdf_float(v).cdf; },
                    [](float v) {
                      const math::NormalCdfPdf n = math::normal_cdf_pdf_float(v);
                      return n.cdf + v * n.pdf;
                    });
      else
        return body([](T v) { return math::gelu_erf(v); }, [](T v) { return math::gelu_erf_grad(v); });
    case UnaryOp::GeluTanh:
      return body([](T v) { return math::gelu_tanh(v); }, [](T v) { return math::gelu_tanh_grad(v); });
    case UnaryOp::Silu: return body([](T v) { return math::silu(v); }, [](T v) { return math::silu_grad(v); });
    case UnaryOp::Softplus:
      return body([](T v) { return math::softplus(v); }, [](T v) { return math::softplus_grad(v); });
    case UnaryOp::Elu: return body([](T v) { return math::elu(v); }, [](T v) { return math::elu_grad(v); });
    default: throw Error(std::string(kernel) + ": no kernel for this op (its derivative is an expression of y)");
  }
}
}  // namespace

void unary(UnaryOp op, const Tensor& x, Tensor& y) {
  visit_floating(x.dtype(), "unary", [&](auto zero) {
    using T = decltype(zero);
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const int64_t n = x.numel();
    switch (op) {
      case UnaryOp::Neg: return map(in, out, n, [](T v) { return -v; });
      case UnaryOp::Exp: return map(in, out, n, [](T v) { return std::exp(v); });
      case UnaryOp::Log: return map(in, out, n, [](T v) { return std::log(v); });
      case UnaryOp::Tanh: return map(in, out, n, [](T v) { return std::tanh(v); });
      default: return with_activation<T>(op, "unary", [&](auto f, auto) { map(in, out, n, f); });
    }
  });
}

void unary_backward(UnaryOp op, const Tensor& x, const Tensor& dY, Tensor& dX) {
  visit_floating(x.dtype(), "unary_backward", [&](auto zero) {
    using T = decltype(zero);
    with_activation<T>(op, "unary_backward", [&](auto, auto f_grad) {
      map2(x.data<T>(), dY.data<T>(), dX.data<T>(), x.numel(), [=](T v, T d) { return d * f_grad(v); });
    });
  });
}

namespace {

// The exact GELU in float32 (the default MLP's activation) as plain loops over
// raw pointers, so that AG_VECTOR_CLONES gives them AVX-512 where the CPU has
// it (core/cpu/vector_math.h): as libmvec calls in 4-wide loops GELU's forward
// and backward were the default training step's largest cost after its GEMMs
// (docs/performance.md). The other activations and float64 take the generic loops below.
//   y = u·Φ(u),  y' = Φ(u) + u·φ(u),  u = pre-activation + bias
// One row: y[c] = GELU(u[c]), and y'(u[c]) into derivative[c] if it is given.
AG_VECTOR_CLONES void bias_gelu_erf_row(const float* x, const float* bias, float* y, float* derivative, int64_t C) {
  if (!derivative) {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float u = x[c] + bias[c];
      y[c] = u * math::normal_cdf_pdf_float(u).cdf;
    }
    return;
  }
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) {
    const float u = x[c] + bias[c];
    const math::NormalCdfPdf n = math::normal_cdf_pdf_float(u);
    y[c] = u * n.cdf;
    derivative[c] = n.cdf + u * n.pdf;
  }
}
// Columns [first, last) of all N rows of [N, C]: dX = dY ∘ derivative, and each
// column's dX added into sums[c − first] in double, rows in order (as
// sum_column_blocks asks).
template <class T> struct ScaledColumns {
  const T *derivative, *dY;
  T* dX;
  int64_t N, C;
};
template <class T>
[[gnu::always_inline]] inline void scale_and_sum_columns(const ScaledColumns<T>& g, int64_t first, int64_t last,
                                                         double* sums) {
  for (int64_t r = 0; r < g.N; ++r) {
    const int64_t row = r * g.C;
#pragma omp simd
    for (int64_t c = first; c < last; ++c) {
      const T d = g.dY[row + c] * g.derivative[row + c];
      g.dX[row + c] = d;
      sums[c - first] += static_cast<double>(d);
    }
  }
}
AG_VECTOR_CLONES void scale_and_sum_columns(const ScaledColumns<float>& g, int64_t first, int64_t last, double* sums) {
  scale_and_sum_columns<float>(g, first, last, sums);
}
void scale_and_sum_columns(const ScaledColumns<double>& g, int64_t first, int64_t last, double* sums) {
  scale_and_sum_columns<double>(g, first, last, sums);
}

}  // namespace

void bias_activation(UnaryOp op, const Tensor& x, const Tensor& bias, Tensor& y, Tensor* derivative) {
  const int64_t C = bias.numel(), N = x.numel() / std::max<int64_t>(C, 1);
  if (op == UnaryOp::GeluErf && x.dtype() == DType::Float32) {
    const float *px = x.data<float>(), *b = bias.data<float>();
    float* py = y.data<float>();
    float* pd = derivative ? derivative->data<float>() : nullptr;
    return for_rows(N, C, [&](int64_t r) { bias_gelu_erf_row(px + r * C, b, py + r * C, pd ? pd + r * C : nullptr, C); });
  }
  visit_floating(x.dtype(), "bias_activation", [&](auto zero) {
    using T = decltype(zero);
    const T *px = x.data<T>(), *b = bias.data<T>();
    T* py = y.data<T>();
    T* pd = derivative ? derivative->data<T>() : nullptr;
    with_activation<T>(op, "bias_activation", [&](auto f, auto f_grad) {
#pragma omp parallel for schedule(static) if (N * C > kParallelGrain)
      for (int64_t r = 0; r < N; ++r) {
        const T* xr = px + r * C;
        T* yr = py + r * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yr[c] = f(xr[c] + b[c]);
        if (pd)
          for (int64_t c = 0; c < C; ++c) pd[r * C + c] = f_grad(xr[c] + b[c]);
      }
    });
  });
}

// dX, and its column sums as it goes (sum_column_blocks: a block of columns at a time).
void bias_activation_backward(const Tensor& derivative, const Tensor& dY, Tensor& dX, Tensor& dBias) {
  const int64_t C = dBias.numel(), N = dX.numel() / std::max<int64_t>(C, 1);
  visit_floating(dX.dtype(), "bias_activation_backward", [&](auto zero) {
    using T = decltype(zero);
    const ScaledColumns<T> g{derivative.data<T>(), dY.data<T>(), dX.data<T>(), N, C};
    sum_column_blocks(N, C, dBias.data<T>(), [&](int64_t first, int64_t last, double* sums) {
      scale_and_sum_columns(g, first, last, sums);
    });
  });
}

void affine(const Tensor& x, double scale, double shift, Tensor& y) {
  visit_floating(x.dtype(), "affine", [&](auto zero) {
    using T = decltype(zero);
    const T s = static_cast<T>(scale), b = static_cast<T>(shift);
    map(x.data<T>(), y.data<T>(), x.numel(), [=](T v) { return s * v + b; });
  });
}

void leaky_relu(const Tensor& x, double slope, Tensor& y) {
  visit_floating(x.dtype(), "leaky_relu", [&](auto zero) {
    using T = decltype(zero);
    const T a = static_cast<T>(slope);
    map(x.data<T>(), y.data<T>(), x.numel(), [=](T v) { return math::leaky_relu(v, a); });
  });
}

void leaky_relu_backward(const Tensor& x, const Tensor& dY, double slope, Tensor& dX) {
  visit_floating(x.dtype(), "leaky_relu_backward", [&](auto zero) {
    using T = decltype(zero);
    const T a = static_cast<T>(slope);
    map2(x.data<T>(), dY.data<T>(), dX.data<T>(), x.numel(), [=](T v, T d) { return d * math::leaky_relu_grad(v, a); });
  });
}

void pow_scalar(const Tensor& x, double exponent, Tensor& y) {
  visit_floating(x.dtype(), "pow", [&](auto zero) {
    using T = decltype(zero);
    const T e = static_cast<T>(exponent);
    map(x.data<T>(), y.data<T>(), x.numel(), [=](T v) { return std::pow(v, e); });
  });
}

namespace {
// out = a op b over n floats of two same-shape operands (the gradient sums of
// backward, the residual adds): compiled for AVX-512 too (AG_VECTOR_CLONES), as
// the row walk below, a template over the op, cannot be.
AG_VECTOR_CLONES void binary_floats(BinaryOp op, const float* a, const float* b, float* out, int64_t n) {
  switch (op) {
    case BinaryOp::Add:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
      return;
    case BinaryOp::Sub:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] - b[i];
      return;
    case BinaryOp::Mul:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
      return;
    case BinaryOp::Div:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] / b[i];
      return;
  }
}
}  // namespace

void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  if (a.dtype() == DType::Float32 && a.shape() == b.shape()) {
    const float *pa = a.data<float>(), *pb = b.data<float>();
    float* po = out.data<float>();
    return for_chunks(out.numel(), [&](int64_t begin, int64_t n) { binary_floats(op, pa + begin, pb + begin, po + begin, n); });
  }
  visit_floating(a.dtype(), "binary", [&](auto zero) {
    using T = decltype(zero);
    switch (op) {
      case BinaryOp::Add: return broadcast_binary<T>(a, b, out, [](T u, T v) { return u + v; });
      case BinaryOp::Sub: return broadcast_binary<T>(a, b, out, [](T u, T v) { return u - v; });
      case BinaryOp::Mul: return broadcast_binary<T>(a, b, out, [](T u, T v) { return u * v; });
      case BinaryOp::Div: return broadcast_binary<T>(a, b, out, [](T u, T v) { return u / v; });
    }
  });
}

}  // namespace ag::cpu
