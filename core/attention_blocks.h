// The block map of an attention problem (FlashAttention's block-sparse form,
// FlexAttention's BlockMask): per query head and query tile, the key tiles
// that hold a visible entry, each marked All (no element mask) or Partial.
// The flash loops visit only these. A Partial tile is narrowed to the columns
// from its first to its last visible key (a random block of 16 keys in a tile
// of 128 costs 16 columns, not 128), and classified again. Built once per (problem geometry, mask,
// tile sizes) from AttentionMask::tile, and cached, so a training run builds
// it once per layer.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "core/attention_math.h"

namespace ag {

struct KeyTile {
  int64_t j0, cols;           // keys [j0, j0 + cols): within one key tile
  TileVisibility visibility;  // of those keys: All or Partial, never None
};

class AttentionBlockMap {
 public:
  // Query tiles of query_tile rows, key tiles of key_tile keys.
  AttentionBlockMap(const AttentionShape& shape, int64_t query_tile, int64_t key_tile);

  // The visible key tiles of query head h's query tile starting at query i0 in batch entry b, in
  // key order. Each tile's first and last keys are visible to some query of the tile.
  std::span<const KeyTile> key_tiles(int64_t b, int64_t h, int64_t i0) const {
    const int64_t at = ((b % batches_) * heads_ + h % heads_) * query_tiles_ + i0 / query_tile_;
    return {tiles_.data() + begin_[at], tiles_.data() + begin_[at + 1]};
  }
  std::span<const KeyTile> key_tiles(int64_t h, int64_t i0) const { return key_tiles(0, h, i0); }  // batch entry 0's
  int64_t visible_tiles() const { return static_cast<int64_t>(tiles_.size()); }  // over every head stored

 private:
  int64_t query_tile_, batches_, heads_, query_tiles_;  // batches_, heads_: B, Hq when the mask differs by them, else 1
  std::vector<int64_t> begin_;                          // [batches_ · heads_ · query_tiles_ + 1]: offsets into tiles_
  std::vector<KeyTile> tiles_;
};

// The map for this problem and these tile sizes, from a cache of recent maps
// (thread-safe). Only the geometry and the mask matter, not the data: a mask function's
// matrix by its AttentionMask::allowed_id (a map for a matrix without one is built anew).
std::shared_ptr<const AttentionBlockMap> attention_block_map(const AttentionShape& shape, int64_t query_tile,
                                                             int64_t key_tile);

}  // namespace ag
