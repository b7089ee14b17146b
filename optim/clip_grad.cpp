#include "optim/clip_grad.h"

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/ops.h"

namespace ag::optim {

namespace {
Tensor clip_gradients(std::vector<Tensor> grads, double max_norm) {
  AG_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got " << max_norm);
  NoGradGuard no_grad;
  const Device device = grads.empty() ? Device::CPU : grads[0].device();
  Tensor sum_of_squares = Tensor::zeros({}, DType::Float64, device);
  for (const Tensor& g : grads) {
    AG_CHECK(g.device() == device, "clip_grad_norm: gradients on " << device_name(device) << " and "
                                                                    << device_name(g.device()));
    Tensor part = Tensor::empty({}, DType::Float64, device);
    kernel::sum_of_squares(g, part);
    sum_of_squares = grads.size() == 1 ? part : add(sum_of_squares, part);
  }
  for (Tensor& g : grads) kernel::clip_by_norm(g, sum_of_squares, max_norm);
  return pow(sum_of_squares, 0.5);
}
}  // namespace

Tensor clip_grad_norm(const Optimizer& optimizer, double max_norm) {
  return clip_gradients(optimizer.gradient_buffers(), max_norm);
}

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  return clip_gradients(std::move(grads), max_norm);
}

Tensor clip_grad_norm(const std::vector<NamedParameter>& params, double max_norm) {
  std::vector<Tensor> tensors;
  tensors.reserve(params.size());
  for (const NamedParameter& p : params) tensors.push_back(p.tensor);
  return clip_grad_norm(tensors, max_norm);
}

}  // namespace ag::optim
