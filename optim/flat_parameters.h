// Flat parameter and gradient storage, owned by an optimizer.
//
// All parameters of one dtype and device are moved into one contiguous value
// buffer, group after group, and each parameter tensor becomes a view into it
// (a storage offset): the module, a tied head and the optimizer keep holding
// the same Tensor objects, which now read and write the buffer. A second
// buffer of the same layout holds the gradients, and each parameter's grad is
// pinned to its view of it:
//   - backward adds into the pinned gradient in place (no tensor per gradient);
//   - zero_grad is one fill of the whole buffer;
//   - an optimizer updates each group's contiguous range with one kernel, and
//     clip_grad_norm reads one buffer instead of a list of tensors.
//
// Layout: each parameter starts at a multiple of kAlignment elements (64 bytes
// in float32), so vector loads of a parameter stay aligned; the gaps are zero
// in both buffers and stay zero under every update.
#pragma once
#include <vector>

#include "optim/param_group.h"

namespace ag::optim {

class FlatParameters {
 public:
  static constexpr int64_t kAlignment = 16;

  // The contiguous range of one group's parameters that share a dtype and device.
  struct Segment {
    size_t group;   // index into the groups given to the constructor
    size_t buffer;  // index into buffers()
    int64_t begin = 0, end = 0;  // elements of the buffer
    std::vector<NamedParameter> params;
    std::vector<int64_t> offsets;  // each parameter's first element in the buffer
  };
  struct Buffer {
    Tensor values, grads;  // 1-D, the same layout
  };

  FlatParameters() = default;
  // Moves every parameter of `groups` into the buffers (values copied; grads start at zero).
  explicit FlatParameters(const std::vector<ParamGroup>& groups);

  const std::vector<Segment>& segments() const { return segments_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }

  // A zero buffer laid out like buffers()[buffer] (for optimizer state such as Adam's moments).
  Tensor zeros_like_buffer(size_t buffer) const;
  // The range of `segment` in a buffer of this layout (values, grads or state).
  static Tensor range(const Tensor& buffer, const Segment& segment);
  // The i-th parameter's view of a buffer of this layout.
  static Tensor param_view(const Tensor& buffer, const Segment& segment, size_t i);

  void zero_grad();  // one fill per buffer
  // Throws naming the parameter if one no longer lives in its buffer (converted
  // or moved with Module::to after the optimizer was made).
  void check_in_place(const char* kind) const;

 private:
  std::vector<Buffer> buffers_;
  std::vector<Segment> segments_;
};

}  // namespace ag::optim
