// Shape ops. All copy (see the layout policy in core/tensor.h) through the one
// strided-copy kernel; each backward moves the gradient back to where the
// element came from.
#include <numeric>

#include "core/ops/common.h"

namespace ag {

using kernel::StridedView;

namespace {
StridedView contiguous_view(const Shape& shape) { return {0, contiguous_strides(shape)}; }
}  // namespace

// Y = permute(X, order): Y[i_0..] = X[i at positions order]. Each element moves
// once, so dX = permute(dY, order⁻¹).
Tensor permute(const Tensor& x, const std::vector<int64_t>& order) {
  AG_CHECK(x.defined(), "permute: undefined tensor");
  AG_CHECK(static_cast<int64_t>(order.size()) == x.dim(),
           "permute: " << to_string(x.shape()) << ": order has " << order.size() << " dims");
  std::vector<int64_t> inverse(order.size(), -1);
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t d = wrap_dim("permute", order[i], x.dim());
    AG_CHECK(inverse[d] < 0, "permute: " << to_string(x.shape()) << ": dim " << d << " repeated in order");
    inverse[d] = static_cast<int64_t>(i);
  }
  const std::vector<int64_t> x_strides = contiguous_strides(x.shape());
  Shape out_shape(order.size());
  StridedView src{0, std::vector<int64_t>(order.size())};
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t d = wrap_dim("permute", order[i], x.dim());
    out_shape[i] = x.shape()[d];
    src.strides[i] = x_strides[d];
  }
  Tensor out = detail::empty_as(out_shape, x);
  kernel::copy_strided(x, src, out, contiguous_view(out_shape), out_shape);
  return record("permute", {x}, out, [inverse](const Tensor& dY) -> Gradients { return {permute(dY, inverse)}; });
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  AG_CHECK(x.defined(), "transpose: undefined tensor");
  std::vector<int64_t> order(x.dim());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[wrap_dim("transpose", dim0, x.dim())], order[wrap_dim("transpose", dim1, x.dim())]);
  return permute(x, order);
}

// Y = X[..., start:end, ...] along dim. dX is dY placed back in that window and
// zero elsewhere.
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end) {
  AG_CHECK(x.defined(), "slice: undefined tensor");
  dim = wrap_dim("slice", dim, x.dim());
  AG_CHECK(0 <= start && start <= end && end <= x.size(dim),
           "slice: " << to_string(x.shape()) << ": range [" << start << ", " << end << ") out of bounds for dim "
                     << dim << " of size " << x.size(dim));
  Shape out_shape = x.shape();
  out_shape[dim] = end - start;
  const std::vector<int64_t> x_strides = contiguous_strides(x.shape());
  const StridedView window{start * x_strides[dim], x_strides};
  Tensor out = detail::empty_as(out_shape, x);
  kernel::copy_strided(x, window, out, contiguous_view(out_shape), out_shape);
  return record("slice", {x}, out, [sx = x.shape(), window](const Tensor& dY) -> Gradients {
    Tensor dX = Tensor::zeros(sx, dY.dtype(), dY.device());
    kernel::copy_strided(dY, contiguous_view(dY.shape()), dX, window, dY.shape());
    return {dX};
  });
}

// Y = [X_0, X_1, ...] along dim. Each X_k's gradient is its own window of dY.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  AG_CHECK(!xs.empty(), "concat: no tensors");
  const Tensor& first = xs.front();
  AG_CHECK(first.defined(), "concat: undefined tensor");
  dim = wrap_dim("concat", dim, first.dim());
  Shape out_shape = first.shape();
  out_shape[dim] = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& x : xs) {
    AG_CHECK(x.defined() && x.dtype() == first.dtype() && x.device() == first.device(),
             "concat: " << describe(first) << " and " << describe(x) << ": mixed dtypes or devices");
    Shape expected = first.shape();
    expected[dim] = x.dim() == first.dim() ? x.size(dim) : -1;
    AG_CHECK(x.shape() == expected, "concat: " << to_string(first.shape()) << " and " << to_string(x.shape())
                                               << ": shapes differ outside dim " << dim);
    out_shape[dim] += x.size(dim);
    sizes.push_back(x.size(dim));
  }
  Tensor out = detail::empty_as(out_shape, first);
  const std::vector<int64_t> out_strides = contiguous_strides(out_shape);
  int64_t start = 0;
  for (const Tensor& x : xs) {
    kernel::copy_strided(x, contiguous_view(x.shape()), out, {start * out_strides[dim], out_strides}, x.shape());
    start += x.size(dim);
  }
  return record("concat", xs, out, [sizes, dim](const Tensor& dY) -> Gradients { return split(dY, sizes, dim); });
}

// split: consecutive slices; each piece's backward is slice's.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  AG_CHECK(x.defined(), "split: undefined tensor");
  dim = wrap_dim("split", dim, x.dim());
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  AG_CHECK(total == x.size(dim), "split: " << to_string(x.shape()) << ": sizes sum to " << total
                                           << ", dim " << dim << " has " << x.size(dim));
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t size : sizes) {
    pieces.push_back(slice(x, dim, start, start + size));
    start += size;
  }
  return pieces;
}

}  // namespace ag
