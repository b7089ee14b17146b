#include "core/shape.h"

#include <algorithm>

#include "core/error.h"

namespace ag {

namespace {
// factor × the shape's non-zero dims. Leaving out zero dims makes every partial
// product of a valid shape fit in int64 too (strides, row counts, a tensor's
// bytes), even when a zero dim makes the element count 0.
int64_t product_of_nonzero_dims(const char* op, const Shape& shape, int64_t factor) {
  int64_t product = factor;
  for (int64_t d : shape) {
    AG_CHECK(d >= 0, op << ": negative dim in shape " << to_string(shape));
    AG_CHECK(d == 0 || !__builtin_mul_overflow(product, d, &product),
             op << ": shape " << to_string(shape) << (factor == 1 ? "" : " of " + std::to_string(factor) + "-byte elements")
                << " is too large: its size overflows int64");
  }
  return product;
}

bool has_zero_dim(const Shape& shape) { return std::find(shape.begin(), shape.end(), 0) != shape.end(); }
}  // namespace

int64_t numel(const Shape& shape) {
  const int64_t product = product_of_nonzero_dims("numel", shape, 1);
  return has_zero_dim(shape) ? 0 : product;
}

int64_t byte_size(const Shape& shape, size_t element_size) {
  const int64_t product = product_of_nonzero_dims("byte_size", shape, static_cast<int64_t>(element_size));
  return has_zero_dim(shape) ? 0 : product;
}

std::string to_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(shape[i]);
  }
  s += ']';
  return s;
}

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    AG_CHECK(da == db || da == 1 || db == 1, op << ": " << to_string(a) << " and " << to_string(b)
                                                << ": shapes do not broadcast (dim " << i << ": " << da
                                                << " vs " << db << ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& target) {
  const std::vector<int64_t> own = contiguous_strides(shape);
  const size_t lead = target.size() - shape.size();
  std::vector<int64_t> strides(target.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) strides[lead + i] = shape[i] == 1 ? 0 : own[i];
  return strides;
}

int64_t wrap_dim(const char* op, int64_t dim, int64_t rank) {
  const int64_t wrapped = dim < 0 ? dim + rank : dim;
  AG_CHECK(wrapped >= 0 && wrapped < rank,
           op << ": dim " << dim << " out of range for a tensor of rank " << rank);
  return wrapped;
}

}  // namespace ag
