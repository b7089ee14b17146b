#include "core/ops/common.h"

namespace ag::detail {

namespace {
std::string all_shapes(std::initializer_list<const Tensor*> tensors) {
  std::string s;
  for (const Tensor* t : tensors) s += (s.empty() ? "" : ", ") + describe(*t);
  return s;
}
}  // namespace

void check_floating(const char* op, const Tensor& t) {
  AG_CHECK(t.defined(), op << ": undefined tensor");
  AG_CHECK(is_floating(t.dtype()), op << ": " << describe(t) << ": expected float32 or float64");
}

void check_compatible(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor& first = **tensors.begin();
  for (const Tensor* t : tensors) {
    check_floating(op, *t);
    AG_CHECK(t->dtype() == first.dtype(), op << ": " << all_shapes(tensors) << ": mixed dtypes");
    AG_CHECK(t->device() == first.device(), op << ": " << all_shapes(tensors) << ": mixed devices");
  }
}

void check_indices(const char* op, const Tensor& indices, const Tensor& like) {
  AG_CHECK(indices.defined() && indices.dtype() == DType::Int64,
           op << ": indices " << describe(indices) << ": expected int64");
  AG_CHECK(indices.device() == like.device(),
           op << ": indices " << describe(indices) << " and " << describe(like) << ": mixed devices");
}

}  // namespace ag::detail
