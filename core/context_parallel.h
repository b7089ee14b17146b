// Context parallelism's split of one sequence over the P processes of a
// context-parallel group (issue 26; docs/attention.md, "Ring attention").
//
// The T positions go in 2P chunks of T / (2P), zigzag: process r holds chunks
// r and 2P − 1 − r, in that order. Under the causal mask a chunk's queries see
// every earlier chunk, so chunk c costs c + ½ chunk pairs; each process holds
// one early and one late chunk, r + (2P − 1 − r) + 1 = 2P chunk pairs, the same
// on every process. With P = 1 the split is the sequence itself.
#pragma once
#include <cstdint>

#include "core/error.h"

namespace ag {

struct ZigzagSplit {
  int64_t T, P, rank;

  ZigzagSplit(int64_t T_, int64_t P_, int64_t rank_) : T(T_), P(P_), rank(rank_) {
    AG_CHECK(P >= 1 && rank >= 0 && rank < P, "context parallel: process " << rank << " of a group of " << P);
    AG_CHECK(T % (2 * P) == 0, "context parallel: the sequence's " << T << " positions do not split into 2·P = "
                                                                    << 2 * P << " equal chunks (make block_size a "
                                                                       "multiple of 2·--context-parallel)");
  }
  int64_t chunk() const { return T / (2 * P); }
  int64_t local_positions() const { return 2 * chunk(); }
  // The sequence chunk held as this process's half 0 or 1.
  int64_t chunk_of(int64_t half) const { return half == 0 ? rank : 2 * P - 1 - rank; }
  // The sequence position of this process's row i < local_positions().
  int64_t position(int64_t i) const { return chunk_of(i / chunk()) * chunk() + i % chunk(); }
};

}  // namespace ag
