// A (query tile, key tile) pair's visibility, found by a whole thread block
// (cuda/attention.cu's float32 flash kernels, cuda/flash_mma.cu's masked ones).
#pragma once
#include "core/attention_math.h"

namespace ag::cuda {

// AttentionMask::tile(h, i0, i1, j0, j1), the same answer, with the work split: the
// cheap tests (causality, the window's reach, a document's start) by every thread,
// and where they do not decide, the count of each query row's visible keys over the
// block's threads — a thread counts rows i0 + threadIdx.x, + blockDim.x, …, and two
// barriers combine "some row sees a key" (not None) and "some row misses one" (not
// All). Before, every thread counted every row: the same answer, at blockDim times
// the work (with a mask function's bytes, each row is j1 − j0 reads). Every thread
// of the block must call it with the same arguments; all get the answer.
__device__ inline TileVisibility block_tile(const AttentionMask& mask, int64_t h, int64_t i0, int64_t i1, int64_t j0,
                                            int64_t j1) {
  bool count = false;
  const TileVisibility quick = mask.tile_without_count(h, i0, i1, j0, j1, count);
  if (!count) return quick;  // the same for every thread: the barriers below are reached by all or none
  bool sees = false, misses = false;
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    const int64_t shown = mask.row(h, i).count(j0, j1);
    sees = sees || shown > 0;
    misses = misses || shown < j1 - j0;
  }
  if (!__syncthreads_or(sees)) return TileVisibility::None;
  return __syncthreads_or(misses) ? TileVisibility::Partial : TileVisibility::All;
}

}  // namespace ag::cuda
