// ag::Tensor: an n-dimensional, row-major, contiguous array of float32, float64
// or int64 on one device, with the autograd fields (requires_grad, grad, grad_fn).
//
// Layout policy: every tensor is contiguous and owns (or shares) one Storage.
// reshape() and detach() are views that share storage; transpose, permute, slice,
// concat and split copy. One layout keeps every kernel a plain loop over
// contiguous memory; at attograd's sizes the copies cost little next to the GEMMs.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/random.h"
#include "core/shape.h"

namespace ag {

struct Node;

// Raw bytes on one device. Freed when the last tensor using it goes.
class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_;
  Device device_;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // elements from the start of storage to element 0 (views into a flat buffer)
  Shape shape;
  DType dtype;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated by backward(), leaves only
  // The grad is a view into a flat gradient buffer (optim/flat_parameters.h):
  // backward adds into it in place, zero_grad zeroes it, set_grad copies into it.
  bool grad_pinned = false;
  std::shared_ptr<Node> grad_fn;     // the op that produced this tensor, if tracked
};

class Tensor {
 public:
  Tensor() = default;  // undefined; defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- creation ---------------------------------------------------------------
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = Device::CPU);
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = Device::CPU);
  static Tensor ones(const Shape& shape, DType dtype = DType::Float32, Device device = Device::CPU);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::Float32,
                     Device device = Device::CPU);
  static Tensor arange(int64_t n, DType dtype = DType::Float32, Device device = Device::CPU);
  // Copies `values` (numel(shape) of them) into a new CPU tensor of the given dtype.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                            DType dtype = DType::Float32);
  static Tensor from_indices(const std::vector<int64_t>& values, const Shape& shape);
  static Tensor scalar(double value, DType dtype = DType::Float32) { return full({}, value, dtype); }
  // N(mean, std^2) and U[low, high) from `gen` (the default generator if null).
  static Tensor randn(const Shape& shape, DType dtype = DType::Float32, Generator* gen = nullptr,
                      double mean = 0.0, double std = 1.0);
  static Tensor uniform(const Shape& shape, double low, double high, DType dtype = DType::Float32,
                        Generator* gen = nullptr);

  // --- metadata -----------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  int64_t dim() const { return static_cast<int64_t>(impl_->shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return ag::numel(impl_->shape); }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device(); }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& shared_impl() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

  // Typed pointer to the first element; throws if T does not match dtype().
  template <class T> T* data() const;
  void* raw_data() const {
    return static_cast<char*>(impl_->storage->data()) + impl_->offset * static_cast<int64_t>(dtype_size(dtype()));
  }

  // --- values on the host ----------------------------------------------------------
  double item() const;                     // the value of a one-element tensor
  std::vector<double> to_vector() const;   // every element, as double
  std::vector<int64_t> to_indices() const; // every element of an int64 tensor

  // --- conversion and views ----------------------------------------------------------
  Tensor to(DType dtype) const;   // copy converted (self if already that dtype)
  Tensor to(Device device) const; // copy to device (self if already there)
  Tensor clone() const;           // a fresh copy, not tracked by autograd
  Tensor detach() const;          // shares storage, no autograd history
  // numel(shape) elements of this tensor's storage from element `offset` of
  // this tensor on: a contiguous view, untracked by autograd (flat buffers
  // hand out parameters and gradients this way).
  Tensor view(int64_t offset, const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;  // differentiable view; one dim may be -1

  // --- autograd -------------------------------------------------------------------
  bool requires_grad() const { return impl_->requires_grad; }
  Tensor& requires_grad_(bool value = true);
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  Tensor grad() const { return Tensor(impl_->grad); }
  // Replaces the gradient; a pinned one keeps its storage and takes grad's values.
  void set_grad(const Tensor& grad);
  // Drops the gradient; a pinned one is filled with zeros instead.
  void zero_grad();
  // Makes `view` (a zeroed slice of a flat buffer, this tensor's shape) the pinned gradient.
  void pin_grad(const Tensor& view);
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }

  // Reverse-mode differentiation from this tensor. Without an upstream gradient
  // the tensor must hold one element (dL/dL = 1). The graph is freed afterwards
  // unless retain_graph is set.
  void backward(bool retain_graph = false) const;
  void backward(const Tensor& upstream, bool retain_graph = false) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);  // shape, dtype and values

// A tensor with its hierarchical name, e.g. "blocks.0.attn.w_q.weight": how
// modules list parameters, optimizers their state, and checkpoints their keys.
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// "[3,4] float32"
std::string describe(const Tensor& t);

}  // namespace ag
