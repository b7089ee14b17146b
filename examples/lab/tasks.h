// The lab's tasks: seeded generators of examples on which attention functions
// differ (Zoology, Arora et al. 2023; Mamba's selective copying), and the char
// LM. An example is x, y of T tokens each: y_t is what the model should predict
// after reading x_0 … x_t, and kIgnore where nothing is scored, so the loss and
// the accuracy count only the positions the task asks about.
//
//   mqar     k1 v1 k2 v2 … kP vP | noise … k2 … noise … k1 …      y = v2 at the k2, v1 at the k1
//            (Zoology's _mqar: keys from [1, V/2), values from [V/2, V), each
//            key queried once at an even offset 2g after the pairs, the gaps g
//            drawn without replacement with p(g) ∝ (g+1)^(a−1); every other
//            position a uniformly random token of the whole vocabulary, or the
//            token 0 under --random-filler false, as Zoology's figure 2 ran it)
//   passkey  filler … N d1 … dk filler … Q d1 … dk     y = d1 … dk after Q
//            (tokens 0–9 digits, 10 the needle's marker N, 11 the question Q,
//            12 … V−1 filler; the needle starts at round(depth·(T − 2k − 2)))
//   copy     noise d1 noise noise d2 … dn noise | M d1 … d(n−1)    y = d1 … dn after M
//            (Mamba's selective copying: 0 noise, 1 the marker M, 2 … V−1 data)
//   text     the char LM of char_lm on a text (examples/common/text_data.h)
//   connectivity, shortest-path   a pair of nodes of a random graph (examples/lab/graph_tasks.h)
#pragma once
#include <cstdint>
#include <vector>

#include "core/enum_names.h"
#include "core/options.h"
#include "core/random.h"
#include "core/tensor.h"
#include "examples/lab/lab_options.h"

namespace ag::lab {

enum class Task { Mqar, Passkey, Copy, Text, Connectivity, ShortestPath };
// The graph tasks' attention (examples/lab/graph_tasks.h): every position (full) or the graph's edges (adjacency).
enum class GraphMask { Full, Adjacency };
}  // namespace ag::lab
template <> struct ag::EnumNames<ag::lab::Task> {
  static constexpr std::pair<ag::lab::Task, const char*> values[] = {{ag::lab::Task::Mqar, "mqar"},
                                                                     {ag::lab::Task::Passkey, "passkey"},
                                                                     {ag::lab::Task::Copy, "copy"},
                                                                     {ag::lab::Task::Text, "text"},
                                                                     {ag::lab::Task::Connectivity, "connectivity"},
                                                                     {ag::lab::Task::ShortestPath, "shortest-path"}};
};
template <> struct ag::EnumNames<ag::lab::GraphMask> {
  static constexpr std::pair<ag::lab::GraphMask, const char*> values[] = {{ag::lab::GraphMask::Full, "full"},
                                                                          {ag::lab::GraphMask::Adjacency, "adjacency"}};
};

namespace ag::lab {

inline constexpr int64_t kIgnore = -100;  // a target that is not scored (the training step's ignore_index)

// The task's options, from the table in examples/lab/lab_options.h.
struct TaskOptions {
  AG_DECLARE_OPTIONS(AG_LAB_TASK_OPTIONS)
};

struct Example {
  std::vector<int64_t> x, y;  // [T] each
};

// Throws unless a synthetic task fits in T positions (Zoology's own checks for mqar: T even, V > T, 4P <= T).
void check_task(const TaskOptions& task, int64_t T);

Example mqar_example(const TaskOptions& task, int64_t T, Generator& gen);
Example passkey_example(const TaskOptions& task, int64_t T, Generator& gen);
Example copy_example(const TaskOptions& task, int64_t T, Generator& gen);
// The task's example (mqar, passkey or copy).
Example synthetic_example(const TaskOptions& task, int64_t T, Generator& gen);

// B examples as a batch: x, y int64 [B, T].
void synthetic_batch(const TaskOptions& task, int64_t T, int64_t B, Generator& gen, Tensor& x, Tensor& y);

// A fixed training set of N examples (Zoology's: drawn once, then passed over in the same
// order epoch after epoch, batches of B, the last of each epoch the N mod B left). Example i
// is drawn from a generator of its own, seeded from (seed, i), so the set is the seed's alone
// and none of it is kept: a batch draws its examples again, as fresh ones would be drawn.
struct FixedSet {
  uint64_t seed = 0;
  int64_t examples = 0;  // N
  int64_t batch = 1;     // B
  // Batches per epoch: ceil(N / B).
  int64_t batches_per_epoch() const { return (examples + batch - 1) / batch; }
  // The indices of the examples of batch k of the run (k counted over every epoch).
  std::vector<int64_t> batch_indices(int64_t k) const;
};
Example fixed_set_example(const TaskOptions& task, int64_t T, const FixedSet& set, int64_t i);
// Batch k of the run: x, y int64 [b, T], b = B but at an epoch's last batch.
void fixed_set_batch(const TaskOptions& task, int64_t T, const FixedSet& set, int64_t k, Tensor& x, Tensor& y);

// Passkey's tokens.
inline constexpr int64_t kNeedleMarker = 10, kQuestionMarker = 11, kFirstFiller = 12;
// Copy's tokens.
inline constexpr int64_t kNoise = 0, kCopyMarker = 1, kFirstData = 2;

}  // namespace ag::lab
