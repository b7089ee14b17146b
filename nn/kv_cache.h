// The KV cache for generation. A causal model's keys and values at positions
// 0 … t−1 do not change when token t arrives, so generating token by token
// needs only the new token's q, k, v per layer: its k, v join the cache and its
// query attends over every cached position (Tq = 1, bottom-right aligned).
// Without the cache every step reruns the whole context.
//
// Each layer's state is a LayerKVCache (core/ops.h), which the attention op
// itself fills and reads (AttentionSpec::cache), so generation is one contract
// for every attention function: softmax attention's K, V [B, T_max, H_kv, d_h]
// (allocated once for its capacity on the first call, read in place, laid out
// BTHD as the module projects K = X W_K, so appending a token is one row copy
// per batch entry; under rope, the rotated keys; a window model's cache rolls
// when full, so it can hold fewer positions than it takes), or linear
// attention's and ssd's recurrent state (ssd's with its convolution's last
// inputs), whose size does not grow with the positions; the LSTM's (h, c) in
// `state` [2, B, C] (nn/lstm.h).
//
// Programs own the cache and pass it to GPT::forward_cached; the layers see
// only their LayerKVCache.
#pragma once
#include <cstdint>
#include <vector>

#include "core/ops.h"

namespace ag::nn {

class KVCache {
 public:
  struct Config {
    int64_t layers = 1;
    int64_t batch = 1;
    int64_t capacity = 1;  // T_max: positions per sequence
  };
  explicit KVCache(const Config& config);

  // Positions taken so far, 0 … length − 1 (a cache that rolled holds only the newest of them and the global ones).
  int64_t length() const { return layers_.front().length + layers_.front().rolled; }
  int64_t capacity() const { return config_.capacity; }  // T_max: positions it holds at once
  int64_t batch() const { return config_.batch; }
  LayerKVCache& layer(int64_t i) { return layers_.at(i); }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  // Bytes held per position of one sequence once the first position is in:
  // 2 (K and V) · layers · H_kv · d_h · dtype size; 0 for linear attention and ssd,
  // whose states do not grow with the positions.
  int64_t bytes_per_token() const;
  // Bytes the cache holds now: K and V for every position up to T_max (allocated
  // on the first call), or linear attention's and ssd's states, constant once the first position is in.
  int64_t bytes() const;

  void clear();  // forget every position (the K, V buffers stay)
  // Forget the positions from `length` on (a token tree's nodes once scored, GPT::forward_tree): the
  // keys and values of the earlier ones stay as they were. Only a cache of keys and values that has
  // not rolled (a recurrent state is a sum over positions: it cannot be rewound).
  void truncate(int64_t length);

 private:
  Config config_;
  std::vector<LayerKVCache> layers_;
};

}  // namespace ag::nn
