// The KV cache for generation. A causal model's keys and values at positions
// 0 … t−1 do not change when token t arrives, so generating token by token
// needs only the new token's q, k, v per layer: its k, v are appended to the
// cache and its query attends over every cached key (Tq = 1, bottom-right
// aligned). Without the cache every step reruns the whole context.
//
// The buffers are allocated once for block_size positions and read in place by
// the attention op (AttentionSpec::kv_length), on the CPU or the GPU alike.
// They are laid out [B, T_max, H_kv, d_h], the layout (BTHD) in which the module
// projects K = X W_K, so appending a token's keys is one row copy per batch entry.
//
// Programs own the cache and pass it to GPT::forward_cached, which advances it;
// the layers see only their LayerKVCache.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ag::nn {

// One attention layer's keys and values: K, V [B, T_max, H_kv, d_h].
struct LayerKVCache {
  Tensor k, v;

  // Writes k_new, v_new [B, T_new, H_kv·d_h] into rows start … start + T_new − 1.
  void write(const Tensor& k_new, const Tensor& v_new, int64_t start);
};

class KVCache {
 public:
  KVCache(int64_t n_layer, int64_t B, int64_t T_max, int64_t H_kv, int64_t d_h, DType dtype, Device device);

  int64_t length() const { return length_; }      // positions held: 0 … length − 1
  int64_t capacity() const { return capacity_; }  // T_max
  int64_t batch() const { return layers_.at(0).k.size(0); }
  LayerKVCache& layer(int64_t i) { return layers_.at(i); }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  // Bytes held per position of one sequence: 2 (K and V) · layers · H_kv · d_h · dtype size.
  int64_t bytes_per_token() const;

  void advance(int64_t positions);  // after a forward wrote them; throws past the capacity
  void clear() { length_ = 0; }     // forget every position (the buffers stay)

 private:
  std::vector<LayerKVCache> layers_;
  int64_t length_ = 0, capacity_;
};

}  // namespace ag::nn
