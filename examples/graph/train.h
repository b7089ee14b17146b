// graph's runs: the graph as tensors (its shortest paths and degrees from Boost.Graph), one
// training run per seed with early stopping on the validation loss, and their summary.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "examples/graph/graph_data.h"
#include "examples/graph/graph_options.h"
#include "examples/graph/models.h"

namespace ag::graph {

// X row-normalised, A + I (dense and as an edge list), the distances (also at each edge) and degrees
// clipped as `config` says.
GraphTensors graph_tensors(const GraphData& data, const GraphConfig& config);

struct RunResult {
  int64_t seed = 0;
  int64_t epochs = 0, best_epoch = 0;  // epochs run; the one with the lowest validation loss
  double val_loss = 0, val_accuracy = 0, test_accuracy = 0;  // at best_epoch
  double seconds = 0, cpu_seconds = 0;
};

RunResult train_one(const GraphData& data, const GraphTensors& tensors, const GraphConfig& config, int64_t seed);

// train_one's run and its model, holding the parameters of result.best_epoch (the lowest
// validation loss: the model whose test accuracy is reported), not the last epoch's (those only
// when no epoch had a finite validation loss).
struct ModelRun {
  RunResult result;
  std::unique_ptr<nn::Module> model;
};
ModelRun train_run(const GraphData& data, const GraphTensors& tensors, const GraphConfig& config, int64_t seed);

struct Summary {
  double mean = 0, sd = 0;  // test accuracy over the runs; sd the sample standard deviation (0 for one run)
};
Summary summarise(const std::vector<RunResult>& runs);

// Loads the graph, trains config.seeds runs, prints each and the summary, and writes config.out
// (if given) and config.draw_node's picture (examples/graph/picture.h; the first run's model)
// after the last: a bad graph file or node id throws before anything is trained or written.
std::vector<RunResult> run_graph(const GraphConfig& config);

}  // namespace ag::graph
