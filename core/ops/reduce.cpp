// Reductions, and the pair that every broadcasting op's backward rests on:
// expand (broadcast a tensor up to a shape) and reduce_to_shape (sum it back
// down), each the other's adjoint.
#include "core/ops/common.h"

namespace ag {

namespace {
// True when `small` broadcasts up to exactly `big`.
bool broadcasts_to(const Shape& small, const Shape& big) {
  if (small.size() > big.size()) return false;
  const size_t lead = big.size() - small.size();
  for (size_t i = 0; i < small.size(); ++i)
    if (small[i] != 1 && small[i] != big[lead + i]) return false;
  return true;
}

Shape with_dim_set_to_one(const Shape& shape, int64_t dim) {
  Shape s = shape;
  s[dim] = 1;
  return s;
}

Shape without_dim(const Shape& shape, int64_t dim) {
  Shape s = shape;
  s.erase(s.begin() + dim);
  return s;
}
}  // namespace

// Y = reduce_to_shape(X, s): Y[j] = Σ_{i broadcasting from j} X[i].
// Each X[i] feeds exactly one Y[j], so dX[i] = dY[j]: dX = expand(dY, shape(X)).
Tensor reduce_to_shape(const Tensor& x, const Shape& shape) {
  detail::check_floating("reduce_to_shape", x);
  if (x.shape() == shape) return x;
  AG_CHECK(broadcasts_to(shape, x.shape()), "reduce_to_shape: " << to_string(x.shape()) << " to "
                                                                 << to_string(shape)
                                                                 << ": target does not broadcast to the input");
  Tensor out = detail::empty_as(shape, x);
  kernel::sum_to_shape(x, out);
  return record("reduce_to_shape", {x}, out, [sx = x.shape()](const Tensor& dY) -> Gradients {
    return {expand(dY, sx)};
  });
}

// Y = expand(X, s): Y[i] = X[j(i)]. X[j] feeds every Y[i] broadcast from it,
// so dX = reduce_to_shape(dY, shape(X)).
Tensor expand(const Tensor& x, const Shape& shape) {
  detail::check_floating("expand", x);
  if (x.shape() == shape) return x;
  AG_CHECK(broadcasts_to(x.shape(), shape), "expand: " << to_string(x.shape()) << " to "
                                                       << to_string(shape) << ": shapes do not broadcast");
  Tensor out = detail::empty_as(shape, x);
  kernel::copy_strided(x, {0, broadcast_strides(x.shape(), shape)}, out, {0, contiguous_strides(shape)},
                       shape);
  return record("expand", {x}, out, [sx = x.shape()](const Tensor& dY) -> Gradients {
    return {reduce_to_shape(dY, sx)};
  });
}

// sum: a reduction to shape [] (or to a 1 at dim); the backward is reduce_to_shape's.
Tensor sum(const Tensor& x) { return reduce_to_shape(x, {}); }

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_floating("sum", x);
  dim = wrap_dim("sum", dim, x.dim());
  Tensor kept = reduce_to_shape(x, with_dim_set_to_one(x.shape(), dim));
  return keepdim ? kept : kept.reshape(without_dim(x.shape(), dim));
}

// mean = sum / n: every input gets dY / n.
Tensor mean(const Tensor& x) {
  AG_CHECK(x.numel() > 0, "mean: " << describe(x) << ": empty tensor");
  return mul(sum(x), 1.0 / static_cast<double>(x.numel()));
}

Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_floating("mean", x);
  dim = wrap_dim("mean", dim, x.dim());
  AG_CHECK(x.size(dim) > 0, "mean: " << describe(x) << ": dim " << dim << " is empty");
  return mul(sum(x, dim, keepdim), 1.0 / static_cast<double>(x.size(dim)));
}

// Y = max over dim of X. Only the maximal element (the first, on ties) moves Y,
// so dX is dY at the argmax and zero elsewhere. Saves the argmax indices.
Tensor max(const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_floating("max", x);
  dim = wrap_dim("max", dim, x.dim());
  AG_CHECK(x.size(dim) > 0, "max: " << describe(x) << ": dim " << dim << " is empty");
  kernel::ReduceDims dims{1, x.size(dim), 1};
  for (int64_t d = 0; d < dim; ++d) dims.outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) dims.inner *= x.size(d);
  const Shape out_shape = keepdim ? with_dim_set_to_one(x.shape(), dim) : without_dim(x.shape(), dim);
  Tensor values = detail::empty_as(out_shape, x);
  Tensor argmax = Tensor::empty(out_shape, DType::Int64, x.device());
  kernel::max_dim(x, dims, values, argmax);
  return record("max", {x}, values, [argmax, dims, sx = x.shape()](const Tensor& dY) -> Gradients {
    Tensor dX = detail::empty_as(sx, dY);
    kernel::max_dim_backward(dY, argmax, dims, dX);
    return {dX};
  });
}

namespace {
// A running sum along dim, from the front (y_j = Σ_{j' ≤ j} x_j') or from the back
// (y_j = Σ_{j' ≥ j} x_j'). Each output is one running sum of the terms it names,
// never a difference of two: a sum of same-signed terms keeps float32's digits.
Tensor running_sum(const char* name, const Tensor& x, int64_t dim, bool reverse) {
  detail::check_floating(name, x);
  dim = wrap_dim(name, dim, x.dim());
  kernel::ReduceDims dims{1, x.size(dim), 1};
  for (int64_t d = 0; d < dim; ++d) dims.outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) dims.inner *= x.size(d);
  Tensor y = detail::empty_like(x);
  kernel::cumsum(x, dims, reverse, y);
  return record(name, {x}, y, [dims, reverse](const Tensor& dY) -> Gradients {
    Tensor dX = detail::empty_like(dY);
    kernel::cumsum(dY, dims, !reverse, dX);
    return {dX};
  });
}
}  // namespace

// Y = cumsum(X) along dim: y_j = Σ_{j' ≤ j} x_j'. x_j' feeds every y_j with j ≥ j', so
// dx_j' = Σ_{j ≥ j'} dy_j: the running sum from the other end. Saves nothing.
Tensor cumsum(const Tensor& x, int64_t dim) { return running_sum("cumsum", x, dim, false); }

// Y = reverse_cumsum(X): y_j = Σ_{j' ≥ j} x_j'. x_j' feeds every y_j with j ≤ j', so
// dx_j' = Σ_{j ≤ j'} dy_j: cumsum's running sum. Saves nothing.
Tensor reverse_cumsum(const Tensor& x, int64_t dim) { return running_sum("reverse_cumsum", x, dim, true); }

}  // namespace ag
