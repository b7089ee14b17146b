// Loop helpers shared by the CPU kernels.
#pragma once
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/shape.h"

namespace ag::cpu {

// Below this many elements a loop runs on one thread: starting an OpenMP team
// costs more than it saves.
constexpr int64_t kParallelGrain = 1 << 15;

// Calls body(row) for each of `rows` rows of `cols` elements, in parallel when
// the work is large, so body must write only its own row.
template <class Body> void for_rows(int64_t rows, int64_t cols, Body&& body) {
#pragma omp parallel for schedule(static) if (rows > 1 && rows * cols > kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) body(r);
}

// Calls body(begin, count) over [0, n) in chunks of kChunk elements, in
// parallel when n is large: for flat loops whose body is a function compiled
// for several ISAs (AG_VECTOR_CLONES), called once per chunk.
constexpr int64_t kChunk = 1 << 14;
template <class Body> void for_chunks(int64_t n, Body&& body) {
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
  for (int64_t begin = 0; begin < n; begin += kChunk) body(begin, std::min(kChunk, n - begin));
}

// Walks the rows (all dims but the last) of `shape` for K operands laid out by
// `strides` (in elements, 0 on broadcast dims), calling
//   body(base, inner, inner_stride)
// with each operand's offset of the row's first element, the row length, and
// each operand's stride along the last dim. Rows run in parallel when the total
// is large, so body must write only its own row. A rank-0 shape is one row of 1.
//
// Each thread takes a contiguous range of rows and walks it like an odometer:
// the first row's index from divisions, every next one by incrementing the
// last row dim and carrying, so the offsets cost additions (rows can be as
// short as one head's d_h elements, where a division per dim per row showed).
template <size_t K, class Body>
void for_each_row(const Shape& shape, const std::array<std::vector<int64_t>, K>& strides, bool parallel,
                  Body&& body) {
  using Offsets = std::array<int64_t, K>;
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (rank == 0) {
    body(Offsets{}, int64_t{1}, Offsets{});
    return;
  }
  const int64_t inner = shape.back();
  if (inner == 0) return;
  const int64_t rows = numel(shape) / inner;
  Offsets inner_stride{};
  for (size_t k = 0; k < K; ++k) inner_stride[k] = strides[k].back();
  const auto walk = [&](int64_t first, int64_t last) {
    if (first >= last) return;
    // The row's index along the row dims; on the stack unless the rank is unusual.
    int64_t on_stack[16];
    std::vector<int64_t> on_heap(rank - 1 > 16 ? rank - 1 : 0);
    int64_t* index = rank - 1 > 16 ? on_heap.data() : on_stack;
    Offsets base{};
    for (int64_t d = rank - 2, rest = first; d >= 0; --d) {
      index[d] = rest % shape[d];
      rest /= shape[d];
      for (size_t k = 0; k < K; ++k) base[k] += index[d] * strides[k][d];
    }
    for (int64_t row = first;;) {
      body(base, inner, inner_stride);
      if (++row == last) return;
      for (int64_t d = rank - 2;; --d) {  // the next row: carry through the dims
        for (size_t k = 0; k < K; ++k) base[k] += strides[k][d];
        if (++index[d] < shape[d]) break;
        for (size_t k = 0; k < K; ++k) base[k] -= shape[d] * strides[k][d];
        index[d] = 0;
      }
    }
  };
  if (parallel && rows > 1 && rows * inner > kParallelGrain) {
#pragma omp parallel
    {
      const int64_t team = omp_get_num_threads(), member = omp_get_thread_num();
      walk(rows * member / team, rows * (member + 1) / team);
    }
  } else {
    walk(0, rows);
  }
}

// out[c] = Σ_r of column c of an [N, C] walk, for every c: the bias gradients.
// block(first, last, sums) adds rows 0..N−1 of columns [first, last) into
// sums[0 .. last − first) (zeroed), rows in order, in double; it may also store
// what it sums (a fused backward writes dX as it goes), and is best a plain
// function over raw pointers, so that AG_VECTOR_CLONES (core/cpu/vector_math.h)
// can give it AVX-512. No reduction crosses threads: the columns are cut into
// one block per thread (at most kColumnBlock wide) and blocks run in parallel
// when the work is large, so each sum is the same bits for any thread count.
// A block walks its rows in memory order, its running sums in L1: blocks of 64
// columns, each reading 256 bytes of every 2 KB row of the default model's
// [768, 512] MLP gradient, left the prefetchers nothing to follow, and the GELU
// backward waited on memory (docs/performance.md times both).
constexpr int64_t kColumnBlock = 1024;  // its sums: 8 KB of the stack
constexpr int64_t kBlockAlignment = 16;  // columns: one AVX-512 register of floats

template <class T, class Block> void sum_column_blocks(int64_t N, int64_t C, T* out, Block&& block) {
  const int64_t team = N * C > kParallelGrain ? omp_get_max_threads() : 1;
  const int64_t per_thread = (C + team - 1) / team;
  const int64_t width =
      std::min(kColumnBlock, std::max<int64_t>(1, (per_thread + kBlockAlignment - 1) / kBlockAlignment * kBlockAlignment));
  const int64_t blocks = (C + width - 1) / width;
#pragma omp parallel for schedule(static) if (blocks > 1 && N * C > kParallelGrain)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t first = b * width, last = std::min(C, first + width);
    double sums[kColumnBlock];
    std::fill_n(sums, last - first, 0.0);
    block(first, last, sums);
    for (int64_t c = first; c < last; ++c) out[c] = static_cast<T>(sums[c - first]);
  }
}

}  // namespace ag::cpu
