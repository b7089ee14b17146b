#include "examples/lab/tasks.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "examples/lab/graph_tasks.h"

namespace ag::lab {

namespace {
// `n` distinct integers from [first, end), in the order drawn.
std::vector<int64_t> distinct(int64_t n, int64_t first, int64_t end, Generator& gen) {
  std::vector<int64_t> chosen;
  while (static_cast<int64_t>(chosen.size()) < n) {
    const int64_t candidate = first + static_cast<int64_t>(gen.integer(static_cast<uint64_t>(end - first)));
    if (std::find(chosen.begin(), chosen.end(), candidate) == chosen.end()) chosen.push_back(candidate);
  }
  return chosen;
}

// `n` distinct gaps from [0, space) with p(g) ∝ (g+1)^(a−1), drawn one after
// another from what is left (numpy's choice without replacement, as Zoology draws them).
std::vector<int64_t> power_law_gaps(int64_t n, int64_t space, double a, Generator& gen) {
  std::vector<double> weight(space);
  for (int64_t g = 0; g < space; ++g) weight[g] = std::pow(static_cast<double>(g + 1), a - 1);
  std::vector<int64_t> gaps;
  for (int64_t i = 0; i < n; ++i) {
    double total = 0;
    for (const double w : weight) total += w;
    double u = gen.uniform() * total;
    int64_t g = 0;
    while (g + 1 < space && (weight[g] == 0 || u >= weight[g])) u -= weight[g++];
    while (weight[g] == 0) --g;  // rounding ran past the last one left
    gaps.push_back(g);
    weight[g] = 0;
  }
  return gaps;
}
}  // namespace

void check_task(const TaskOptions& task, int64_t T) {
  check_option_ranges(task, "lab");
  switch (task.task) {
    case Task::Mqar:
      AG_CHECK(T % 2 == 0, "mqar: --block-size " << T << " must be even (Zoology's rule)");
      AG_CHECK(task.vocab > T, "mqar: --vocab " << task.vocab << " must exceed --block-size " << T << " (Zoology's rule)");
      AG_CHECK(4 * task.pairs <= T, "mqar: --pairs " << task.pairs << " needs 4P <= --block-size, got " << T);
      AG_CHECK(task.pairs < task.vocab / 2, "mqar: --pairs " << task.pairs << " needs as many keys: --vocab / 2 − 1 is " << task.vocab / 2 - 1);
      break;
    case Task::Passkey:
      AG_CHECK(T >= 2 * task.digits + 3, "passkey: --block-size " << T << " cannot hold the number twice: needs 2k + 3 = "
                                                                   << 2 * task.digits + 3);
      break;
    case Task::Copy:
      AG_CHECK(T >= 2 * task.copy_tokens, "copy: --block-size " << T << " needs 2n = " << 2 * task.copy_tokens);
      break;
    case Task::Text:
      break;
    case Task::Connectivity:
    case Task::ShortestPath:
      AG_CHECK(task.min_nodes <= task.nodes, name_of(task.task) << ": --min-nodes " << task.min_nodes << " exceeds --nodes " << task.nodes);
      AG_CHECK(2 * (task.max_distance + 1) <= task.min_nodes,
               name_of(task.task) << ": --max-distance " << task.max_distance << " needs two paths of as many edges in the smallest graph: "
                                  << "2(D + 1) = " << 2 * (task.max_distance + 1) << " <= --min-nodes, got " << task.min_nodes);
      AG_CHECK(T >= graph_positions(task), name_of(task.task) << ": --block-size " << T << " cannot hold " << task.nodes << " nodes and "
                                                              << max_graph_edges(task) << " edges: needs " << graph_positions(task));
      break;
  }
}

Example mqar_example(const TaskOptions& task, int64_t T, Generator& gen) {
  const int64_t P = task.pairs, V = task.vocab, context = 2 * P;
  const std::vector<int64_t> keys = distinct(P, 1, V / 2, gen);
  const std::vector<int64_t> values = distinct(P, V / 2, V, gen);
  const std::vector<int64_t> gaps = power_law_gaps(P, (T - context) / 2, task.power_a, gen);
  Example e{std::vector<int64_t>(T, 0), std::vector<int64_t>(T, kIgnore)};
  for (int64_t i = 0; i < P; ++i) {
    e.x[2 * i] = keys[i];
    e.x[2 * i + 1] = values[i];
    const int64_t query = context + 2 * gaps[i];
    e.x[query] = keys[i];
    e.y[query] = values[i];
  }
  // Zoology fills every position left 0 (none of the pairs, no query) with a token of the whole
  // vocabulary, or leaves it 0 (random_non_queries = False; no key is 0, keys start at 1).
  if (task.random_filler)
    for (int64_t& token : e.x)
      if (token == 0) token = static_cast<int64_t>(gen.integer(static_cast<uint64_t>(V)));
  return e;
}

Example passkey_example(const TaskOptions& task, int64_t T, Generator& gen) {
  const int64_t k = task.digits;
  Example e{std::vector<int64_t>(T), std::vector<int64_t>(T, kIgnore)};
  for (int64_t& token : e.x) token = kFirstFiller + static_cast<int64_t>(gen.integer(static_cast<uint64_t>(task.vocab - kFirstFiller)));
  std::vector<int64_t> number(k);
  for (int64_t& digit : number) digit = static_cast<int64_t>(gen.integer(10));
  const int64_t needle = std::llround(task.depth * static_cast<double>(T - 2 * k - 2));
  const int64_t question = T - k - 1;
  e.x[needle] = kNeedleMarker;
  e.x[question] = kQuestionMarker;
  for (int64_t i = 0; i < k; ++i) {
    e.x[needle + 1 + i] = number[i];
    e.x[question + 1 + i] = number[i];
    e.y[question + i] = number[i];
  }
  return e;
}

Example copy_example(const TaskOptions& task, int64_t T, Generator& gen) {
  const int64_t n = task.copy_tokens, context = T - n;
  Example e{std::vector<int64_t>(T, kNoise), std::vector<int64_t>(T, kIgnore)};
  std::vector<int64_t> places = distinct(n, 0, context, gen);
  std::sort(places.begin(), places.end());
  e.x[context] = kCopyMarker;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t token = kFirstData + static_cast<int64_t>(gen.integer(static_cast<uint64_t>(task.vocab - kFirstData)));
    e.x[places[i]] = token;
    if (i + 1 < n) e.x[context + 1 + i] = token;
    e.y[context + i] = token;
  }
  return e;
}

Example synthetic_example(const TaskOptions& task, int64_t T, Generator& gen) {
  switch (task.task) {
    case Task::Mqar: return mqar_example(task, T, gen);
    case Task::Passkey: return passkey_example(task, T, gen);
    case Task::Copy: return copy_example(task, T, gen);
    case Task::Connectivity:
    case Task::ShortestPath: return graph_example(task, T, gen);
    case Task::Text: break;
  }
  throw Error("the text task has no synthetic examples");
}

namespace {
// The examples `draw(b)` gives for b = 0 … B−1 as a batch: x, y int64 [B, T].
template <class Draw> void as_batch(int64_t T, int64_t B, const Draw& draw, Tensor& x, Tensor& y) {
  std::vector<int64_t> xs, ys;
  xs.reserve(B * T);
  ys.reserve(B * T);
  for (int64_t b = 0; b < B; ++b) {
    const Example e = draw(b);
    xs.insert(xs.end(), e.x.begin(), e.x.end());
    ys.insert(ys.end(), e.y.begin(), e.y.end());
  }
  x = Tensor::from_indices(xs, {B, T});
  y = Tensor::from_indices(ys, {B, T});
}
}  // namespace

void synthetic_batch(const TaskOptions& task, int64_t T, int64_t B, Generator& gen, Tensor& x, Tensor& y) {
  as_batch(T, B, [&](int64_t) { return synthetic_example(task, T, gen); }, x, y);
}

std::vector<int64_t> FixedSet::batch_indices(int64_t k) const {
  const int64_t first = (k % batches_per_epoch()) * batch, end = std::min(first + batch, examples);
  std::vector<int64_t> indices;
  for (int64_t i = first; i < end; ++i) indices.push_back(i);
  return indices;
}

Example fixed_set_example(const TaskOptions& task, int64_t T, const FixedSet& set, int64_t i) {
  Generator gen(random_bits(set.seed, static_cast<uint64_t>(i)));  // example i's own stream
  return synthetic_example(task, T, gen);
}

void fixed_set_batch(const TaskOptions& task, int64_t T, const FixedSet& set, int64_t k, Tensor& x, Tensor& y) {
  const std::vector<int64_t> indices = set.batch_indices(k);
  as_batch(T, static_cast<int64_t>(indices.size()), [&](int64_t b) { return fixed_set_example(task, T, set, indices[b]); }, x, y);
}

}  // namespace ag::lab
