#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <iomanip>

#include "core/autograd.h"
#include "core/caching_allocator.h"
#include "core/dispatch.h"
#include "core/sanitizer.h"
#include "cuda/context.h"

namespace ag {

// --- Storage ------------------------------------------------------------------------

namespace {
struct HostMemory {
  // 64-byte alignment suits AVX-512 loads (sizes arrive rounded to 512 bytes,
  // a multiple of it, as aligned_alloc requires).
  static void* allocate(size_t bytes) { return std::aligned_alloc(64, bytes); }
  static void release(void* ptr) { std::free(ptr); }
  // Under AddressSanitizer (scripts/build_sanitize.sh) only a tensor's own bytes
  // may be touched: the rest of its rounded block, and every byte of a block in
  // the cache, are poisoned, and an access there is reported ("use-after-poison")
  // where malloc's red zones and quarantine would have caught it. And a lent
  // block's bytes are set to 0xFF (NaN in float32 and float64, -1 in int64), as
  // ASan fills what malloc hands out, so a kernel that reads an output it never
  // wrote sees NaN, not the values a block's last tensor left. Elsewhere nothing.
  static void lend(void* ptr, size_t nbytes, size_t size) {
    ASAN_UNPOISON_MEMORY_REGION(ptr, nbytes);
    ASAN_POISON_MEMORY_REGION(static_cast<char*>(ptr) + nbytes, size - nbytes);
    if (AG_ADDRESS_SANITIZER) std::memset(ptr, 0xFF, nbytes);
  }
  static void take_back(void* ptr, size_t size) { ASAN_POISON_MEMORY_REGION(ptr, size); }
};

CachingAllocator<HostMemory>& host_allocator() {
  // Never destroyed: tensors released during static destruction still find it.
  static auto* instance = new CachingAllocator<HostMemory>("host memory");
  return *instance;
}
}  // namespace

MemoryStats host_memory_stats() { return host_allocator().stats(); }
void host_empty_cache() { host_allocator().empty_cache(); }

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = device == Device::CUDA ? cuda::allocate(nbytes) : host_allocator().allocate(nbytes);
}

Storage::~Storage() {
  if (device_ == Device::CUDA)
    cuda::deallocate(data_, nbytes_);
  else
    host_allocator().deallocate(data_, nbytes_);
}

// --- creation ------------------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) AG_CHECK(d >= 0, "empty: negative dim in shape " << to_string(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(byte_size(shape, dtype_size(dtype)), device);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  kernel::fill(t, value);
  return t;
}
Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor Tensor::arange(int64_t n, DType dtype, Device device) {
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<double>(i);
  return from_vector(values, {n}, dtype).to(device);
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype) {
  AG_CHECK(static_cast<int64_t>(values.size()) == ag::numel(shape),
           "from_vector: " << values.size() << " values for shape " << to_string(shape));
  Tensor t = empty(shape, dtype);
  switch (dtype) {
    case DType::Float32: std::copy(values.begin(), values.end(), t.data<float>()); break;
    case DType::Float64: std::copy(values.begin(), values.end(), t.data<double>()); break;
    case DType::Int64:
      for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = static_cast<int64_t>(values[i]);
      break;
  }
  return t;
}

Tensor Tensor::from_indices(const std::vector<int64_t>& values, const Shape& shape) {
  AG_CHECK(static_cast<int64_t>(values.size()) == ag::numel(shape),
           "from_indices: " << values.size() << " values for shape " << to_string(shape));
  Tensor t = empty(shape, DType::Int64);
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return t;
}

// Random tensors are drawn on the host, in float64, then converted: the values
// depend only on the generator's state, never on dtype, device or thread count.
Tensor Tensor::randn(const Shape& shape, DType dtype, Generator* gen, double mean, double std) {
  Generator& g = gen ? *gen : default_generator();
  const int64_t n = ag::numel(shape);
  const uint64_t first = g.advance(n);
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = mean + std * random_normal(g.seed(), first + i);
  return from_vector(values, shape, dtype);
}

Tensor Tensor::uniform(const Shape& shape, double low, double high, DType dtype, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  const int64_t n = ag::numel(shape);
  const uint64_t first = g.advance(n);
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = low + (high - low) * random_uniform(g.seed(), first + i);
  return from_vector(values, shape, dtype);
}

// --- metadata and host access -----------------------------------------------------------

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim("size", d, dim())]; }

template <class T> T* Tensor::data() const {
  AG_CHECK(dtype() == dtype_of<T>(), "data<" << dtype_name(dtype_of<T>()) << ">: tensor "
                                             << describe(*this) << " has another dtype");
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;

double Tensor::item() const {
  AG_CHECK(numel() == 1, "item: tensor " << describe(*this) << " does not hold exactly one element");
  return to_vector()[0];
}

std::vector<double> Tensor::to_vector() const {
  const Tensor host = to(Device::CPU);
  const Tensor as_double = host.dtype() == DType::Float64 ? host : host.to(DType::Float64);
  const double* p = as_double.data<double>();
  return std::vector<double>(p, p + numel());
}

std::vector<int64_t> Tensor::to_indices() const {
  const Tensor host = to(Device::CPU);
  const int64_t* p = host.data<int64_t>();
  return std::vector<int64_t>(p, p + numel());
}

// --- conversion and views ---------------------------------------------------------------

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  Tensor out = empty(shape(), target, device());
  kernel::cast(*this, out);
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  Tensor out = empty(shape(), dtype(), target);
  const size_t nbytes = numel() * dtype_size(dtype());
  if (target == Device::CUDA)
    cuda::copy_host_to_device(out.raw_data(), raw_data(), nbytes);
  else
    cuda::copy_device_to_host(out.raw_data(), raw_data(), nbytes);
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  kernel::copy_strided(*this, {0, contiguous_strides(shape())}, out, {0, contiguous_strides(shape())},
                       shape());
  return out;
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  impl->shape = impl_->shape;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::view(int64_t offset, const Shape& shape) const {
  AG_CHECK(offset >= 0 && offset <= numel() && ag::numel(shape) <= numel() - offset,
           "view: " << to_string(shape) << " at offset " << offset << " does not fit in " << describe(*this));
  Tensor out = detach();
  out.impl()->offset += offset;
  out.impl()->shape = shape;
  return out;
}

// reshape: a view (same storage, same order of elements). Backward: the
// gradient's elements are in the same order too, so dX = reshape(dY, shape(X)).
Tensor Tensor::reshape(const Shape& requested) const {
  Shape shape = requested;
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      AG_CHECK(infer_at < 0, "reshape: " << to_string(this->shape()) << " to " << to_string(requested)
                                         << ": more than one -1");
      infer_at = static_cast<int64_t>(i);
    } else {
      AG_CHECK(shape[i] >= 0, "reshape: " << to_string(this->shape()) << " to " << to_string(requested)
                                          << ": negative dim " << shape[i]);
      AG_CHECK(!__builtin_mul_overflow(known, shape[i], &known),
               "reshape: " << to_string(this->shape()) << " to " << to_string(requested) << ": size overflows int64");
    }
  }
  if (infer_at >= 0) {
    AG_CHECK(known > 0, "reshape: " << to_string(this->shape()) << " to " << to_string(requested)
                                    << ": -1 is ambiguous next to a zero dim");
    shape[infer_at] = numel() / known;
  }
  AG_CHECK(ag::numel(shape) == numel(), "reshape: " << to_string(this->shape()) << " to "
                                                    << to_string(requested)
                                                    << ": element counts differ");
  Tensor out = detach();
  out.impl()->shape = shape;
  const Shape input_shape = this->shape();
  return record("reshape", {*this}, out, [input_shape](const Tensor& dOut) -> Gradients {
    return {dOut.reshape(input_shape)};
  });
}

// A gradient is the parameter's shape, dtype and device, as PyTorch's .grad = requires; an
// undefined one clears it, unless it is pinned (a view into a flat buffer: zero_grad() instead).
void Tensor::set_grad(const Tensor& grad) {
  AG_CHECK(grad.defined() ? grad.shape() == shape() && grad.dtype() == dtype() && grad.device() == device()
                          : !impl_->grad_pinned,
           "set_grad: " << describe(grad) << " for a parameter " << describe(*this)
                        << (grad.defined() ? "" : " whose gradient is a view into a flat buffer (zero_grad() clears it)"));
  if (!impl_->grad_pinned) {
    impl_->grad = grad.impl_;
    return;
  }
  Tensor pinned(impl_->grad);
  kernel::cast(grad, pinned);  // same dtype: a copy into the flat buffer
}

void Tensor::zero_grad() {
  if (!impl_->grad_pinned) {
    impl_->grad.reset();
    return;
  }
  Tensor pinned(impl_->grad);
  kernel::fill(pinned, 0.0);
}

void Tensor::pin_grad(const Tensor& view) {
  AG_CHECK(view.shape() == shape() && view.dtype() == dtype() && view.device() == device(),
           "pin_grad: " << describe(view) << " for a parameter " << describe(*this));
  impl_->grad = view.impl_;
  impl_->grad_pinned = true;
}

Tensor& Tensor::requires_grad_(bool value) {
  AG_CHECK(is_floating(dtype()) || !value, "requires_grad_: " << describe(*this)
                                                               << ": only floating tensors have gradients");
  AG_CHECK(is_leaf() || value, "requires_grad_: cannot turn off requires_grad on a non-leaf tensor");
  impl_->requires_grad = value;
  return *this;
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "(undefined tensor)";
  return to_string(t.shape()) + " " + dtype_name(t.dtype()) +
         (t.device() == Device::CUDA ? " cuda" : "");
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  os << "tensor(" << describe(t) << ") ";
  if (!t.defined()) return os;
  const std::vector<double> v = t.to_vector();
  const int64_t row = t.dim() == 0 ? 1 : t.shape().back();
  os << "\n";
  for (size_t i = 0; i < v.size(); ++i) {
    os << std::setw(10) << std::setprecision(5) << v[i] << ((i + 1) % row == 0 ? "\n" : " ");
  }
  return os;
}

}  // namespace ag
