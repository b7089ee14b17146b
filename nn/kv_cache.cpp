#include "nn/kv_cache.h"

#include "core/error.h"

namespace ag::nn {

KVCache::KVCache(const Config& config) : config_(config) {
  AG_CHECK(config.layers > 0 && config.batch > 0 && config.capacity > 0,
           "KV cache: every size must be positive (layers " << config.layers << ", batch " << config.batch
                                                            << ", capacity " << config.capacity << ")");
  layers_.assign(config.layers, LayerKVCache{.capacity = config.capacity});
}

int64_t KVCache::bytes_per_token() const {
  const Tensor& k = layers_.front().k;
  if (!k.defined()) return 0;
  return 2 * num_layers() * k.size(2) * k.size(3) * static_cast<int64_t>(dtype_size(k.dtype()));
}

int64_t KVCache::bytes() const {
  int64_t total = 0;
  for (const LayerKVCache& layer : layers_) total += layer.bytes();
  return total;
}

void KVCache::clear() {
  for (LayerKVCache& layer : layers_) {
    layer.length = 0;
    layer.rolled = 0;
    layer.state = {};  // a sum over positions: it cannot be rewound, only restarted
    layer.conv = {};   // the inputs before the first position are zeros again
  }
}

void KVCache::truncate(int64_t length) {
  AG_CHECK(length >= 0 && length <= this->length(),
           "KV cache: cannot truncate " << this->length() << " positions to " << length);
  for (const LayerKVCache& layer : layers_)
    AG_CHECK(!layer.state.defined() && layer.rolled == 0,
             "KV cache: only keys and values that have not rolled can be truncated (a recurrent state cannot be rewound)");
  for (LayerKVCache& layer : layers_) layer.length = length;
}

}  // namespace ag::nn
