// Checks and helpers shared by the op files (not part of the public API).
#pragma once
#include <initializer_list>

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/ops.h"

namespace ag::detail {

// Throws unless every tensor is defined, floating, and shares the first one's
// dtype and device; the message names the op and every shape.
void check_compatible(const char* op, std::initializer_list<const Tensor*> tensors);
void check_floating(const char* op, const Tensor& t);
void check_indices(const char* op, const Tensor& indices, const Tensor& like);

inline Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }
inline Tensor empty_as(const Shape& shape, const Tensor& like) {
  return Tensor::empty(shape, like.dtype(), like.device());
}

}  // namespace ag::detail
