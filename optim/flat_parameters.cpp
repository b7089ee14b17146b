#include "optim/flat_parameters.h"

#include "core/autograd.h"
#include "core/dispatch.h"

namespace ag::optim {

namespace {
int64_t aligned(int64_t n) { return (n + FlatParameters::kAlignment - 1) / FlatParameters::kAlignment * FlatParameters::kAlignment; }
}  // namespace

FlatParameters::FlatParameters(const std::vector<ParamGroup>& groups) {
  // Pass 1: where each parameter goes. A buffer per (dtype, device), in order of
  // first appearance; within it, each group's parameters form one segment.
  std::vector<std::pair<DType, Device>> kinds;
  std::vector<int64_t> sizes;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const NamedParameter& p : groups[g].params) {
      const std::pair<DType, Device> kind{p.tensor.dtype(), p.tensor.device()};
      size_t b = 0;
      while (b < kinds.size() && kinds[b] != kind) ++b;
      if (b == kinds.size()) {
        kinds.push_back(kind);
        sizes.push_back(0);
      }
      if (segments_.empty() || segments_.back().group != g || segments_.back().buffer != b) {
        // A group's parameters of one kind stay contiguous only if no other kind interleaves:
        // a group mixing dtypes gets a segment per run of one kind.
        segments_.push_back({g, b, sizes[b], sizes[b], {}, {}});
      }
      Segment& s = segments_.back();
      s.params.push_back(p);
      s.offsets.push_back(sizes[b]);
      sizes[b] += aligned(p.tensor.numel());
      s.end = sizes[b];
    }
  }
  // Pass 2: allocate, copy the values in, and re-point each parameter at its view.
  NoGradGuard no_grad;
  for (size_t b = 0; b < kinds.size(); ++b) {
    const auto [dtype, device] = kinds[b];
    buffers_.push_back({Tensor::zeros({sizes[b]}, dtype, device), Tensor::zeros({sizes[b]}, dtype, device)});
  }
  for (const Segment& s : segments_) {
    const Buffer& buffer = buffers_[s.buffer];
    for (size_t i = 0; i < s.params.size(); ++i) {
      const Tensor& p = s.params[i].tensor;
      Tensor value = param_view(buffer.values, s, i);
      kernel::cast(p, value);  // same dtype: a copy
      // The parameter's own TensorImpl now reads the buffer, so every holder sees it.
      p.impl()->storage = value.impl()->storage;
      p.impl()->offset = value.impl()->offset;
      Tensor(p).pin_grad(param_view(buffer.grads, s, i));
    }
  }
}

Tensor FlatParameters::zeros_like_buffer(size_t buffer) const {
  const Tensor& values = buffers_.at(buffer).values;
  return Tensor::zeros(values.shape(), values.dtype(), values.device());
}

Tensor FlatParameters::range(const Tensor& buffer, const Segment& segment) {
  return buffer.view(segment.begin, {segment.end - segment.begin});
}

Tensor FlatParameters::param_view(const Tensor& buffer, const Segment& segment, size_t i) {
  const Tensor& p = segment.params.at(i).tensor;
  return buffer.view(segment.offsets[i], p.shape());
}

void FlatParameters::zero_grad() {
  for (Buffer& b : buffers_) kernel::fill(b.grads, 0.0);
}

void FlatParameters::check_in_place(const char* kind) const {
  for (const Segment& s : segments_) {
    const Buffer& buffer = buffers_[s.buffer];
    for (size_t i = 0; i < s.params.size(); ++i) {
      const TensorImpl& p = *s.params[i].tensor.impl();
      AG_CHECK(p.storage == buffer.values.impl()->storage && p.offset == s.offsets[i] && p.grad_pinned,
               kind << ": parameter '" << s.params[i].name
                    << "' no longer lives in the optimizer's flat buffer (converted or moved with Module::to "
                       "after the optimizer was made): make the optimizer after moving the model");
    }
  }
}

}  // namespace ag::optim
