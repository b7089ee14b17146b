#include "nn/kv_cache.h"

#include "core/dispatch.h"
#include "core/error.h"

namespace ag::nn {

// A plain copy, untracked by autograd: generation runs without gradients, and
// the op reads the rows afterwards in place.
void LayerKVCache::write(const Tensor& k_new, const Tensor& v_new, int64_t start) {
  const int64_t B = k.size(0), T_max = k.size(1), width = k.size(2) * k.size(3), T_new = k_new.size(1);
  AG_CHECK(k_new.shape() == Shape({B, T_new, width}) && v_new.shape() == k_new.shape(),
           "KV cache: new keys " << describe(k_new) << " and values " << describe(v_new) << " are not [" << B
                                 << ", T, " << width << "]");
  AG_CHECK(start >= 0 && start + T_new <= T_max,
           "KV cache: positions " << start << " … " << start + T_new - 1 << " do not fit in " << T_max);
  const kernel::StridedView from{0, {T_new * width, width, 1}}, to{start * width, {T_max * width, width, 1}};
  kernel::copy_strided(k_new, from, k, to, {B, T_new, width});
  kernel::copy_strided(v_new, from, v, to, {B, T_new, width});
}

KVCache::KVCache(int64_t n_layer, int64_t B, int64_t T_max, int64_t H_kv, int64_t d_h, DType dtype, Device device)
    : capacity_(T_max) {
  AG_CHECK(n_layer > 0 && B > 0 && T_max > 0 && H_kv > 0 && d_h > 0,
           "KV cache: every size must be positive (layers " << n_layer << ", B " << B << ", T_max " << T_max
                                                            << ", H_kv " << H_kv << ", d_h " << d_h << ")");
  for (int64_t i = 0; i < n_layer; ++i)
    layers_.push_back({Tensor::zeros({B, T_max, H_kv, d_h}, dtype, device),
                       Tensor::zeros({B, T_max, H_kv, d_h}, dtype, device)});
}

int64_t KVCache::bytes_per_token() const {
  const Tensor& k = layers_.at(0).k;
  return 2 * num_layers() * k.size(2) * k.size(3) * static_cast<int64_t>(dtype_size(k.dtype()));
}

void KVCache::advance(int64_t positions) {
  AG_CHECK(positions >= 0 && length_ + positions <= capacity_,
           "KV cache: " << length_ << " + " << positions << " positions exceed its capacity " << capacity_);
  length_ += positions;
}

}  // namespace ag::nn
