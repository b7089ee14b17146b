// The lab's graph tasks (issue 51): reasoning over a random graph of N nodes
// (--min-nodes ≤ N ≤ --nodes ≤ 32) given as tokens, about a pair (u, v):
//
//   connectivity    are u and v connected?                     yes / no
//   shortest-path   the length of the shortest u–v path        1 … D (--max-distance), or unreachable
//
// One sequence serves two models that differ in their attention mask only
// (--graph-mask, GPT::set_adjacency):
//
//   position  0 … N_max − 1              N_max … N_max + 2E_max − 1
//   token     one per node: its id,      the edge list, two tokens an edge: a b
//             marked as u or v or plain   (the endpoints' plain ids), then padding
//             (slots past N: padding)
//
//   full       every position sees every other (the complete graph, both ways): a
//              transformer that must read the edges from the edge list;
//   adjacency  a node's position sees its neighbours' and its own (A + I over the node
//              slots; every other position itself only): the same transformer as a
//              message-passing network on the graph (GAT with dot-product scores),
//              each layer one hop, which never reads the edge tokens.
//
// The answer is read at v's position (y there, kIgnore elsewhere): after L layers
// the adjacency model's v has heard of the nodes within L hops only.
//
// The generator draws the label first, uniformly (connectivity: yes or no, and a
// path length c uniform in 1 … D; shortest-path: each of the D + 1 classes, an
// unreachable pair's c uniform), then builds a graph with it: two paths of c edges,
// u at the start of the first and v at the end of the first (distance c) or of the
// second (unreachable), so that u and v look alike in both cases; the other nodes
// hung on as random trees or starting components of their own; up to N/4 extra
// edges, each kept only if both paths stay shortest paths and stay apart (one rule
// for every label, so the unmarked graph is drawn alike whatever the label); the
// node ids then permuted, the edges shuffled. A pair's distance is at most D, with
// 2(D + 1) <= N.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "examples/lab/tasks.h"

namespace ag::lab {

inline constexpr int64_t kMaxGraphNodes = 32;
// Tokens: padding, the nodes' ids (plain, as u, as v), the answers.
inline constexpr int64_t kGraphPad = 0, kGraphNode = 1, kGraphSource = kGraphNode + kMaxGraphNodes,
                         kGraphTarget = kGraphSource + kMaxGraphNodes;
inline constexpr int64_t kUnreachable = kGraphTarget + kMaxGraphNodes;  // also connectivity's "no"
inline constexpr int64_t kDistanceToken = kUnreachable;                 // distance c: kDistanceToken + c, c ≥ 1
inline constexpr int64_t kConnected = kDistanceToken + kMaxGraphNodes;  // connectivity's "yes"
inline constexpr int64_t kGraphVocab = kConnected + 1;

bool is_graph_task(Task task);

// A graph with its pair: nodes 0 … n − 1, each edge once (a ≠ b), u ≠ v, and the
// u–v distance (−1: unreachable).
struct Graph {
  int64_t n = 0;
  std::vector<std::pair<int64_t, int64_t>> edges;
  int64_t u = 0, v = 1, distance = -1;
};

// The most edges a graph of the task has: a forest's n − 1 and up to n/4 more.
int64_t max_graph_edges(const TaskOptions& task);
// The positions a graph task needs: N_max + 2·E_max.
int64_t graph_positions(const TaskOptions& task);

// A graph whose pair carries a label drawn uniformly (above).
Graph random_graph(const TaskOptions& task, Generator& gen);
// The answer token for the graph's pair under the task.
int64_t graph_answer(const TaskOptions& task, const Graph& graph);
// The graph as x, y of T tokens (the layout above).
Example encode_graph(const TaskOptions& task, int64_t T, const Graph& graph);
Example graph_example(const TaskOptions& task, int64_t T, Generator& gen);

// The attention mask of the task's --graph-mask for a batch x int64 [B, T] of
// graph examples (read from x's tokens): full, all ones [T, T]; adjacency,
// [B, T, T] with 1 where position i sees j (A + I over the node slots, the
// identity elsewhere). On the host.
Tensor graph_attention_mask(const TaskOptions& task, const Tensor& x);

}  // namespace ag::lab
