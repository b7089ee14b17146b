// graph_tasks_dump: examples of the lab's graph tasks (examples/lab/graph_tasks.h)
// as their tokens, one JSON object a line, so that another implementation can
// check their labels (scripts/check_graph_tasks.py holds them against networkx).
//
//   graph_tasks_dump --task connectivity|shortest-path [--nodes 16 --min-nodes 8 --max-distance 6]
//                    [--block-size 64] [--examples 1000] [--seed 0]
//
// The first line names the token layout: {"nodes": N_max, "pad": ..., "node": ..., "source": ...,
// "target": ..., "unreachable": ..., "distance": ..., "connected": ...}; then each example as
// {"x": [T tokens], "y": [T targets, -100 where nothing is scored]}, drawn by the lab's own
// generator from Generator(seed).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "examples/common/command_line.h"
#include "examples/lab/graph_tasks.h"

using namespace ag;

int main(int argc, char** argv) {
  cli::Program program("The lab's graph tasks' examples as JSON lines, for an outside check of their labels.",
                       "graph_tasks_dump");
  lab::TaskOptions task;
  task.task = lab::Task::Connectivity;
  int64_t T = 64, examples = 1000, seed = 0;
  cli::ProcessOptions process;
  cli::Command& command = program.command();
  command.bind_only(task, std::vector<const char*>{"task", "nodes", "min_nodes", "max_distance"});
  command.option("--block-size", T, "positions T of an example");
  command.option("--examples", examples, "how many examples");
  command.option("--seed", seed, "the generator's seed");
  command.bind(process);
  if (const int code = program.parse_and_apply(argc, argv, process); code >= 0) return code;
  try {
    AG_CHECK(lab::is_graph_task(task.task), "--task " << name_of(task.task) << " is no graph task");
    lab::check_task(task, T);
    const nlohmann::ordered_json layout = {{"task", name_of(task.task)}, {"nodes", task.nodes},
                                           {"pad", lab::kGraphPad}, {"node", lab::kGraphNode},
                                           {"source", lab::kGraphSource}, {"target", lab::kGraphTarget},
                                           {"unreachable", lab::kUnreachable}, {"distance", lab::kDistanceToken},
                                           {"connected", lab::kConnected}};
    std::printf("%s\n", layout.dump().c_str());
    Generator gen(static_cast<uint64_t>(seed));
    for (int64_t i = 0; i < examples; ++i) {
      const lab::Example e = lab::synthetic_example(task, T, gen);
      std::printf("%s\n", nlohmann::ordered_json({{"x", e.x}, {"y", e.y}}).dump().c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "graph_tasks_dump: %s\n", e.what());
    return 1;
  }
}
