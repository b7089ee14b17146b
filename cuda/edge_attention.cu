// Attention over a graph's edges on the GPU (core/kernels.inc): cuda/edge_attention_kernels.cuh's
// launches on the device. Reference: core/cpu/edge_attention.cpp, the same sums in the same
// order (in double); tests/test_edge_attention.cpp runs every case on both devices.
#include "cuda/cuda.h"
#include "cuda/edge_attention_kernels.cuh"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {
EdgeLayout edge_layout(const Tensor& graph, const AttentionShape& s) {
  return EdgeLayout::of(ptr<const int64_t>(graph), graph.numel(), s.Tq, s.Tk);
}
}  // namespace

void edge_scores(const Tensor& Q, const Tensor& K, const Tensor& graph, const AttentionShape& shape, Tensor& S) {
  visit_floating(Q.dtype(), "edge_scores", [&](auto zero) {
    using T = decltype(zero);
    edge_scores_launch(Gpu(), ptr<const T>(Q), ptr<const T>(K), edge_layout(graph, shape), shape, ptr<T>(S));
  });
}

void edge_scores_backward(const Tensor& Q, const Tensor& K, const Tensor& dS, const Tensor& graph,
                          const AttentionShape& shape, Tensor& dQ, Tensor& dK) {
  visit_floating(Q.dtype(), "edge_scores_backward", [&](auto zero) {
    using T = decltype(zero);
    edge_scores_backward_launch(Gpu(), ptr<const T>(Q), ptr<const T>(K), ptr<const T>(dS),
                                edge_layout(graph, shape), shape, ptr<T>(dQ), ptr<T>(dK));
  });
}

void edge_softmax(const Tensor& S, const Tensor& graph, const AttentionShape& shape, Tensor& A, Tensor& lse) {
  visit_floating(S.dtype(), "edge_softmax", [&](auto zero) {
    using T = decltype(zero);
    edge_softmax_launch(Gpu(), ptr<const T>(S), edge_layout(graph, shape), shape, ptr<T>(A),
                        lse.defined() ? ptr<double>(lse) : nullptr);
  });
}

void edge_softmax_backward(const Tensor& A, const Tensor& dA, const Tensor& graph, const AttentionShape& shape,
                           Tensor& dS) {
  visit_floating(A.dtype(), "edge_softmax_backward", [&](auto zero) {
    using T = decltype(zero);
    edge_softmax_backward_launch(Gpu(), ptr<const T>(A), ptr<const T>(dA), edge_layout(graph, shape), shape,
                                 ptr<T>(dS));
  });
}

void edge_product(const Tensor& A, const Tensor& V, const Tensor& graph, const AttentionShape& shape, Tensor& Z) {
  visit_floating(A.dtype(), "edge_product", [&](auto zero) {
    using T = decltype(zero);
    edge_product_launch(Gpu(), ptr<const T>(A), ptr<const T>(V), edge_layout(graph, shape), shape, ptr<T>(Z));
  });
}

void edge_product_backward(const Tensor& A, const Tensor& V, const Tensor& dZ, const Tensor& graph,
                           const AttentionShape& shape, Tensor& dA, Tensor& dV) {
  visit_floating(A.dtype(), "edge_product_backward", [&](auto zero) {
    using T = decltype(zero);
    edge_product_backward_launch(Gpu(), ptr<const T>(A), ptr<const T>(V), ptr<const T>(dZ),
                                 edge_layout(graph, shape), shape, ptr<T>(dA), ptr<T>(dV));
  });
}

}  // namespace ag::cuda
