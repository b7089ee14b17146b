// The embedding's kernels on CUDA and their launches on any device (cuda/embedding.cu runs them
// on the GPU, with CUB's sort between SortKeys and RunSums), and the loss's scored positions.
// Device code that a host build compiles too: tests/test_cuda_on_host.cpp runs them on the host
// (the sort as std::stable_sort, which CUB's radix sort is: stable by key).
#pragma once
#include <cmath>
#include <cstdint>

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

// dWeight [V, C] = Σ_n onehot(indices[n]) dOut[n], without atomics, in three
// passes (PyTorch's deterministic embedding backward has this shape too):
//   1. sort: the positions n by their row indices[n], stably (CUB's radix sort,
//      keys of ⌈log2(V + 1)⌉ bits), so each row's positions form one segment of
//      the sorted order, in increasing n;
//   2. run sums: the sorted order cut into chunks of S positions, and each chunk
//      cut where the row changes: every piece ("run") sums its dOut rows in
//      increasing n into `partial` at its first sorted position — one thread per
//      (chunk, column), all chunks at once;
//   3. segment sums: for the first position k0 of each row's segment, one thread
//      per column adds the runs of that segment in order: the one at k0, then one
//      at each chunk start inside the segment (⌈k0/S⌉·S, + S, …), and writes the
//      row of dWeight; rows no index names stay zero.
// Every dWeight element is then the same sum in the same order every run: the
// runs' sums, each over at most S rows in increasing n. (The CPU adds all of a
// row's positions in one chain; the two agree to float rounding.) The work is
// spread however the indices are: a character vocabulary (V = 65, where a space
// is a sixth of all positions) and a 50k-token one run the same passes. The
// first version gave each block 32 rows of the table to add in one chain, 3
// blocks at V = 65: 2.7 ms per call on an H200 at nanoGPT's size, 2.4x PyTorch's
// (docs/performance.md, "On the GPU: the first run").
// An index outside the table sorts under key V and is summed but never read:
// its forward's deferred check reports it.
constexpr int64_t kRunChunk = 32;  // S

struct SortKeys {
  const int64_t* indices;
  int64_t V;
  uint32_t* keys;
  int32_t* positions;
  __device__ void operator()(int64_t n) const {
    const int64_t v = indices[n];
    keys[n] = static_cast<uint32_t>(v >= 0 && v < V ? v : V);
    positions[n] = static_cast<int32_t>(n);
  }
};

// Thread i: column c = i % C of chunk i / C (adjacent threads read adjacent columns of a row).
template <class T> struct RunSums {
  const T* dOut;
  const uint32_t* keys;       // sorted
  const int32_t* positions;   // sorted by key, increasing within a key
  T* partial;                 // [N, C]: a run's sum at its first sorted position
  int64_t N, C;
  __device__ void operator()(int64_t i) const {
    const int64_t c = i % C, first = i / C * kRunChunk, end = min(N, first + kRunChunk);
    int64_t run = first;
    uint32_t run_key = keys[first];
    T sum = T(0);
    for (int64_t k = first; k < end; ++k) {
      const uint32_t key = keys[k];
      if (key != run_key) {
        partial[run * C + c] = sum;
        run = k;
        run_key = key;
        sum = T(0);
      }
      sum += dOut[static_cast<int64_t>(positions[k]) * C + c];
    }
    partial[run * C + c] = sum;
  }
};

// Thread i: column c = i % C of sorted position k = i / C, which works only if it
// starts a segment of an in-table row.
template <class T> struct SegmentSums {
  const uint32_t* keys;
  const T* partial;
  T* dWeight;
  int64_t N, C, V;
  __device__ void operator()(int64_t i) const {
    const int64_t k = i / C, c = i % C;
    const uint32_t v = keys[k];
    if (v >= V || (k > 0 && keys[k - 1] == v)) return;
    T sum = partial[k * C + c];
    for (int64_t s = (k / kRunChunk + 1) * kRunChunk; s < N && keys[s] == v; s += kRunChunk) sum += partial[s * C + c];
    dWeight[static_cast<int64_t>(v) * C + c] = sum;
  }
};

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
    const int64_t add = static_cast<int>(threadIdx.x) >= offset ? before[threadIdx.x - offset] : 0;
    __syncthreads();
    before[threadIdx.x] += add;
    __syncthreads();
  }
  int64_t at = before[threadIdx.x] - mine;  // this span's first slot
  for (int64_t i = begin; i < end && at < n; ++i)
    if (targets[i] != ignore_index) rows[at] = i, scored[at++] = targets[i];
}

// --- the launches on a device `dev` (cuda/launch.cuh's Gpu; the host tests' Device) ----------
// Contracts: core/kernels.inc.
template <class Device>
void scored_positions_launch(const Device& dev, const int64_t* targets, int64_t N, int64_t ignore_index, int64_t n,
                             int64_t* rows, int64_t* scored) {
  if (n == 0) return;
  dev.blocks(scored_positions_kernel, 1, kScanThreads, 0, targets, N, ignore_index, n, rows, scored);
}

template <class T, class Device>
void embedding_launch(const Device& dev, const T* weight, const int64_t* indices, int64_t N, int64_t V, int64_t C,
                      T* out) {
  dev(N * C, Gather<T>{weight, indices, out, C, V});
}

// dWeight [V, C], zeroed by the caller; `sort_pairs(keys, sorted_keys, values, sorted_values, N, end_bit)`
// sorts the pairs stably by the keys' low end_bit bits (CUB's DeviceRadixSort::SortPairs on a GPU).
template <class T, class Device, class SortPairs>
void embedding_backward_launch(Device& dev, const SortPairs& sort_pairs, const T* dOut, const int64_t* indices,
                               int64_t N, int64_t V, int64_t C, T* dWeight) {
  if (N == 0 || V == 0 || C == 0) return;
  int end_bit = 1;  // enough bits for the keys 0 … V
  while ((int64_t{1} << end_bit) <= V) ++end_bit;
  uint32_t *keys = dev.template scratch<uint32_t>(N), *sorted_keys = dev.template scratch<uint32_t>(N);
  int32_t *positions = dev.template scratch<int32_t>(N), *sorted_positions = dev.template scratch<int32_t>(N);
  dev(N, SortKeys{indices, V, keys, positions});
  sort_pairs(keys, sorted_keys, positions, sorted_positions, N, end_bit);
  T* partial = dev.template scratch<T>(N * C);
  const int64_t chunks = (N + kRunChunk - 1) / kRunChunk;
  dev(chunks * C, RunSums<T>{dOut, sorted_keys, sorted_positions, partial, N, C});
  dev(N * C, SegmentSums<T>{sorted_keys, partial, dWeight, N, C, V});
}

}  // namespace
}  // namespace ag::cuda
