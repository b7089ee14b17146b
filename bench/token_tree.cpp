// bench_token_tree: a tree of candidate continuations scored in one cached forward
// (GPT::forward_tree, char_lm sample --tree) against decoding its paths one by one
// from the same cached prefix (issue 50, item 5). The model is char_lm's default
// shape (4 layers, 4 heads, 128 wide, block size 256 here so the prefix and the tree
// fit); the tree is complete: `branching` children per node, `depth` levels, so it
// holds b + b² + … + b^depth nodes and b^depth paths of `depth` tokens. Three ways,
// each after the same prefill of `prefix` tokens (not timed):
//   tree      one forward_tree of every node;
//   paths     each path as one forward_cached of its depth tokens (cache truncated between);
//   tokens    each path a token at a time, as generation decodes (cache truncated between).
// Times are medians of wall (or, --clock cpu, the process's CPU) ms (bench/measure.h).
//
//   ./build/bench_token_tree --threads 2 --prefix 128 --branching 2,4 --depth 4
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench/measure.h"
#include "core/autograd.h"
#include "core/threads.h"
#include "examples/common/command_line.h"
#include "nn/gpt.h"
#include "nn/kv_cache.h"

using namespace ag;

namespace {

struct Tree {
  std::vector<int64_t> tokens, parents;
  std::vector<std::vector<int64_t>> paths;  // each leaf's tokens, root first
};

Tree complete_tree(int64_t branching, int64_t depth, int64_t V) {
  Tree tree;
  std::vector<int64_t> level{-1};  // the nodes of the level above (−1: the prefix)
  std::vector<std::vector<int64_t>> tokens_to{{}};
  for (int64_t d = 0; d < depth; ++d) {
    std::vector<int64_t> next;
    std::vector<std::vector<int64_t>> next_tokens;
    for (size_t i = 0; i < level.size(); ++i)
      for (int64_t c = 0; c < branching; ++c) {
        const int64_t token = (static_cast<int64_t>(tree.tokens.size()) * 7 + 3) % V;
        next.push_back(static_cast<int64_t>(tree.tokens.size()));
        tree.tokens.push_back(token);
        tree.parents.push_back(level[i]);
        next_tokens.push_back(tokens_to[i]);
        next_tokens.back().push_back(token);
      }
    level = std::move(next);
    tokens_to = std::move(next_tokens);
  }
  tree.paths = std::move(tokens_to);
  return tree;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  int64_t prefix = 128, depth = 4;
  std::string branchings = "2,4";
  cli::Program program{"A token tree in one forward against its paths decoded one by one (see bench/token_tree.cpp)"};
  cli::Command& command = program.command();
  command.option("--threads", threads, "CPU threads (OpenMP and OpenBLAS)");
  command.option("--prefix", prefix, "cached tokens before the tree");
  command.option("--branching", branchings, "children per node, comma-separated (one tree each)");
  command.option("--depth", depth, "levels of the tree");
  std::string clock = "wall";
  command.option("--clock", clock, "wall, or cpu: the process's CPU time (for one thread on a busy machine)")
      .one_of({"wall", "cpu"});
  if (const int code = program.parse_plain(argc, argv); code >= 0) return code;
  set_num_threads(threads);
  NoGradGuard no_grad;
  nn::GPTConfig config{.vocab_size = 65, .block_size = 256, .n_layer = 4, .n_head = 4, .n_embd = 128};
  Generator gen(1);
  nn::GPT model(config, gen);
  model.eval();
  std::vector<int64_t> context(static_cast<size_t>(prefix));
  for (int64_t t = 0; t < prefix; ++t) context[static_cast<size_t>(t)] = (t * 5 + 1) % config.vocab_size;
  const bench::Clock timing = clock == "cpu" ? bench::Clock::Cpu : bench::Clock::Wall;
  std::printf("threads %d, prefix %lld, depth %lld, GPT 4 x 128, 4 heads (float32, %s attention), %s ms\n", threads,
              static_cast<long long>(prefix), static_cast<long long>(depth), name_of(config.attn_impl), clock.c_str());
  std::printf("%9s %6s %6s  %12s %12s %12s  %8s %8s\n", "branching", "nodes", "paths", "tree ms", "paths ms",
              "tokens ms", "paths/tree", "tokens/tree");
  std::istringstream list(branchings);
  for (std::string item; std::getline(list, item, ',');) {
    const int64_t b = std::stoll(item);
    const Tree tree = complete_tree(b, depth, config.vocab_size);
    const int64_t N = static_cast<int64_t>(tree.tokens.size());
    nn::KVCache cache = model.make_kv_cache(1, prefix + N);
    model.forward_cached(Tensor::from_indices(context, {1, prefix}), cache);
    const auto median = [&](auto&& f, bench::Clock clock) { return bench::median_ms(f, clock, 3, 50, 3000); };
    const auto one_tree = [&] {
      model.forward_tree(Tensor::from_indices(tree.tokens, {1, N}), tree.parents, cache);
      cache.truncate(prefix);
    };
    const auto path_chunks = [&] {
      for (const std::vector<int64_t>& path : tree.paths) {
        model.forward_cached(Tensor::from_indices(path, {1, depth}), cache);
        cache.truncate(prefix);
      }
    };
    const auto path_tokens = [&] {
      for (const std::vector<int64_t>& path : tree.paths) {
        for (int64_t token : path) model.forward_cached(Tensor::from_indices({token}, {1, 1}), cache);
        cache.truncate(prefix);
      }
    };
    const double t_tree = median(one_tree, timing), t_paths = median(path_chunks, timing),
                 t_tokens = median(path_tokens, timing);
    std::printf("%9lld %6lld %6zu  %12.2f %12.2f %12.2f  %8.1fx %8.1fx\n", static_cast<long long>(b),
                static_cast<long long>(N), tree.paths.size(), t_tree, t_paths, t_tokens, t_paths / t_tree,
                t_tokens / t_tree);
  }
  return 0;
}
