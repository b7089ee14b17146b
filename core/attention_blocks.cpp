#include "core/attention_blocks.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

namespace ag {

namespace {

// Keys [first, last] of [j0, j1) with first and last the smallest and largest
// key that some query of [i0, i1) sees, classified again.
KeyTile narrowed(const AttentionMask& mask, int64_t h, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  int64_t first = j1, last = j0 - 1;
  if (!mask.allowed && !mask.pattern.limited()) {  // each row sees one interval, [lowest, min(p, highest)]
    for (int64_t i = i0; i < i1; ++i) {
      const AttentionMask::Row row = mask.row(h, i);
      const int64_t lo = std::max(j0, row.lowest), hi = std::min({j1 - 1, row.p, row.highest});
      if (lo > hi) continue;
      first = std::min(first, lo);
      last = std::max(last, hi);
    }
    return {first, last + 1 - first, mask.tile(h, i0, i1, first, last + 1)};
  }
  for (int64_t i = i0; i < i1; ++i) {
    const AttentionMask::Row row = mask.row(h, i);
    for (int64_t j = j0; j < first; ++j)
      if (row.visible(j)) first = j;
    for (int64_t j = j1 - 1; j > last; --j)
      if (row.visible(j)) last = j;
  }
  return {first, last + 1 - first, mask.tile(h, i0, i1, first, last + 1)};
}

}  // namespace

AttentionBlockMap::AttentionBlockMap(const AttentionShape& shape, int64_t query_tile, int64_t key_tile)
    : query_tile_(query_tile),
      batches_(shape.mask.by_batch() ? shape.B : 1),
      heads_(shape.mask.per_head() ? shape.Hq : 1),
      query_tiles_((shape.Tq + query_tile - 1) / query_tile) {
  begin_.reserve(batches_ * heads_ * query_tiles_ + 1);
  begin_.push_back(0);
  for (int64_t b = 0; b < batches_; ++b) {
    const AttentionMask mask = shape.mask.at_batch(b);
    for (int64_t h = 0; h < heads_; ++h)
      for (int64_t i0 = 0; i0 < shape.Tq; i0 += query_tile) {
        const int64_t i1 = std::min(i0 + query_tile, shape.Tq);
        for (int64_t j0 = 0; j0 < shape.Tk; j0 += key_tile) {
          const int64_t j1 = std::min(j0 + key_tile, shape.Tk);
          const TileVisibility visibility = mask.tile(h, i0, i1, j0, j1);
          if (visibility == TileVisibility::All) tiles_.push_back({j0, j1 - j0, visibility});
          if (visibility == TileVisibility::Partial) tiles_.push_back(narrowed(mask, h, i0, i1, j0, j1));
        }
        begin_.push_back(static_cast<int64_t>(tiles_.size()));
      }
  }
}

namespace {

// Everything a map depends on.
using MapKey = std::tuple<int64_t, int64_t, int64_t, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                          uint64_t, int64_t, int64_t, int64_t, int64_t, uint64_t>;
MapKey key_of(const AttentionShape& s, int64_t query_tile, int64_t key_tile) {
  const SparsePattern& p = s.mask.pattern;
  // The seed and the layer only draw random blocks: without them every layer shares one map.
  return {s.Tq, s.Tk, s.mask.per_head() ? s.Hq : 1, s.mask.causal, s.mask.q_offset, s.mask.first_key, p.window,
          p.dilation, p.global, p.random_blocks, p.per_head() ? p.seed : 0, p.per_head() ? p.layer : 0, query_tile,
          key_tile, s.mask.by_batch() ? s.B : 1, s.mask.has_mask_function() ? s.mask.allowed_id : 0};
}

// A model has a map per layer (per shape, when the last batch is shorter);
// past this many the cache starts again rather than grow without bound.
constexpr size_t kCachedMaps = 64;

}  // namespace

std::shared_ptr<const AttentionBlockMap> attention_block_map(const AttentionShape& shape, int64_t query_tile,
                                                             int64_t key_tile) {
  static std::mutex mutex;
  static std::map<MapKey, std::shared_ptr<const AttentionBlockMap>> cache;
  if (shape.mask.has_mask_function() && shape.mask.allowed_id == 0)  // a mask function without a name: not cached
    return std::make_shared<const AttentionBlockMap>(shape, query_tile, key_tile);
  const MapKey key = key_of(shape, query_tile, key_tile);
  {
    const std::lock_guard lock(mutex);
    if (const auto found = cache.find(key); found != cache.end()) return found->second;
  }
  auto map = std::make_shared<const AttentionBlockMap>(shape, query_tile, key_tile);  // built outside the lock
  const std::lock_guard lock(mutex);
  if (cache.size() >= kCachedMaps) cache.clear();
  return cache.emplace(key, std::move(map)).first->second;
}

}  // namespace ag
