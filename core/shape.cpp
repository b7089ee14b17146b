#include "core/shape.h"

#include "core/error.h"

namespace ag {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
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
