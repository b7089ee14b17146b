// Embedding: a row gather forward, a deterministic scatter-add backward.
// Reference: core/cpu/embedding.cpp.
#include "cuda/cuda.h"
#include "cuda/launch.cuh"

namespace ag::cuda {

namespace {
// out [N, C]: element i copies weight[indices[i / C], i % C].
template <class T> struct Gather {
  const T* weight;
  const int64_t* indices;
  T* out;
  int64_t C;
  int64_t V;
  // An index outside the table reads nothing: the deferred check reports it.
  __device__ void operator()(int64_t i) const {
    const int64_t row = indices[i / C];
    out[i] = row >= 0 && row < V ? weight[row * C + i % C] : T(NAN);
  }
};

// This thread's slot among the block's threads with keep set, in thread order;
// `count` receives how many there are. Every thread of the block must call it.
__device__ int block_compact(bool keep, int* warp_counts, int& count) {
  const unsigned ballot = __ballot_sync(0xffffffffu, keep);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_counts[warp] = __popc(ballot);
  __syncthreads();
  int before = 0;
  count = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
    if (w < warp) before += warp_counts[w];
    count += warp_counts[w];
  }
  __syncthreads();  // warp_counts is free again
  return before + __popc(ballot & ((1u << lane) - 1));
}

// dWeight [V, C] = Σ_n onehot(indices[n]) dOut[n], without atomics.
//
// Block g owns the group of vocabulary rows [g·R, g·R + R) and is their only
// writer. It zeroes them, then walks the indices in tiles of kThreads: each
// thread tests one position, block_compact lists the tile's positions that
// fall in the group (in increasing n), and the block adds those dOut rows into
// dWeight one position after another, each thread owning a set of columns. So
// every dWeight element is a sum in increasing n, the same bits every run (and
// the CPU's order). Cost: each block reads all N indices, (V/R)·N reads in all.
constexpr int64_t kRowsPerGroup = 32;  // R

template <class T>
__global__ void embedding_backward_kernel(const T* dOut, const int64_t* indices, T* dWeight, int64_t N, int64_t V,
                                          int64_t C) {
  __shared__ int64_t positions[kThreads];
  __shared__ int group_rows[kThreads];
  __shared__ int warp_counts[32];
  const int64_t groups = (V + kRowsPerGroup - 1) / kRowsPerGroup;
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) {
    const int64_t first_row = group * kRowsPerGroup;
    const int64_t rows = V - first_row < kRowsPerGroup ? V - first_row : kRowsPerGroup;
    T* dw = dWeight + first_row * C;
    for (int64_t v = 0; v < rows; ++v)
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dw[v * C + c] = T(0);  // each thread its columns
    for (int64_t base = 0; base < N; base += blockDim.x) {
      const int64_t n = base + threadIdx.x;
      const int64_t v = n < N ? indices[n] - first_row : -1;
      const bool mine = v >= 0 && v < rows;
      int count = 0;
      const int slot = block_compact(mine, warp_counts, count);
      if (mine) {
        positions[slot] = n;
        group_rows[slot] = static_cast<int>(v);
      }
      __syncthreads();
      for (int k = 0; k < count; ++k) {
        const T* g = dOut + positions[k] * C;
        T* row = dw + group_rows[k] * C;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) row[c] += g[c];
      }
      __syncthreads();  // the lists are refilled by the next tile
    }
  }
}

// scored_positions in one block of kScanThreads: thread k counts the scored targets
// of its contiguous span of positions, a scan of the counts gives each span's first
// slot, and each thread writes its span's positions there in increasing order. One
// block: the batches it serves (B·T targets) are small, and the order is the CPU's.
constexpr int kScanThreads = 1024;
__global__ void scored_positions_kernel(const int64_t* targets, int64_t N, int64_t ignore_index, int64_t n,
                                        int64_t* rows, int64_t* scored) {
  __shared__ int64_t before[kScanThreads];
  const int64_t span = (N + kScanThreads - 1) / kScanThreads;
  const int64_t begin = min(N, threadIdx.x * span), end = min(N, begin + span);
  int64_t mine = 0;
  for (int64_t i = begin; i < end; ++i) mine += targets[i] != ignore_index;
  before[threadIdx.x] = mine;
  __syncthreads();
  for (int offset = 1; offset < kScanThreads; offset *= 2) {  // inclusive scan (Hillis and Steele)
    const int64_t add = threadIdx.x >= offset ? before[threadIdx.x - offset] : 0;
    __syncthreads();
    before[threadIdx.x] += add;
    __syncthreads();
  }
  int64_t at = before[threadIdx.x] - mine;  // this span's first slot
  for (int64_t i = begin; i < end && at < n; ++i)
    if (targets[i] != ignore_index) rows[at] = i, scored[at++] = targets[i];
}
}  // namespace

void scored_positions(const Tensor& targets, int64_t ignore_index, Tensor& rows, Tensor& scored) {
  if (rows.numel() == 0) return;
  scored_positions_kernel<<<1, kScanThreads, 0, current_stream()>>>(
      ptr<const int64_t>(targets), targets.numel(), ignore_index, rows.numel(), ptr<int64_t>(rows), ptr<int64_t>(scored));
  AG_CUDA_CHECK_LAUNCH();
}

void embedding(const Tensor& weight, const Tensor& indices, Tensor& out) {
  const int64_t V = weight.size(0), C = weight.size(1);
  check_indices_later(indices, V, false, 0, [V](int64_t position, int64_t value) {
    return "embedding: index " + std::to_string(value) + " at position " + std::to_string(position) +
           " out of range for a table of " + std::to_string(V) + " rows";
  });
  visit_floating(weight.dtype(), "embedding", [&](auto zero) {
    using T = decltype(zero);
    for_each_index(indices.numel() * C, Gather<T>{ptr<const T>(weight), ptr<const int64_t>(indices), ptr<T>(out), C, V});
  });
}

void embedding_backward(const Tensor& dOut, const Tensor& indices, Tensor& dWeight) {
  visit_floating(dOut.dtype(), "embedding_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t V = dWeight.size(0), C = dWeight.size(1), N = indices.numel();
    if (V == 0 || C == 0) return;
    const int64_t groups = (V + kRowsPerGroup - 1) / kRowsPerGroup;
    embedding_backward_kernel<<<static_cast<unsigned>(std::min(groups, kMaxBlocks)), kThreads, 0, current_stream()>>>(
        ptr<const T>(dOut), ptr<const int64_t>(indices), ptr<T>(dWeight), N, V, C);
    AG_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace ag::cuda
