// char_lm test helpers: a run small enough to train in a second.
#pragma once
#include <string>
#include <type_traits>

#include "examples/char_lm/train.h"

namespace ag::test {

// A model small enough to train in a second, with dropout on so that resuming
// must restore the dropout generator too.
inline char_lm::TrainConfig tiny_run(const std::string& out_dir) {
  char_lm::TrainConfig c;
  c.run.data = ATTOGRAD_DATA_FILE;
  c.run.out = out_dir;
  c.model.n_layer = 1;
  c.model.n_head = 2;
  c.model.n_embd = 32;
  c.model.block_size = 16;
  c.optim.batch_size = 4;
  c.model.dropout = 0.1;
  c.run.max_iters = 20;
  c.optim.warmup_iters = 5;
  c.optim.lr_decay_iters = 20;
  c.run.eval_interval = 10;
  c.run.eval_iters = 2;
  c.run.sample_tokens = 0;
  c.quiet = true;
  return c;
}

// `char_lm train`'s command line for `c`: every option of its tables, so the
// program (say under mpirun) trains what train(c) trains in-process.
inline std::string train_arguments(const char_lm::TrainConfig& c) {
  std::string args = "train";
  char_lm::TrainConfig::for_each_table(c, [&](const auto& table) {
    std::decay_t<decltype(table)>::for_each_option(table, [&](const auto& value, const OptionInfo& info) {
      if (info.kind == OptionKind::Derived) return;
      if constexpr (std::is_same_v<std::decay_t<decltype(value)>, bool>) {
        if (value) args += " " + info.flag();
      } else {
        args += " " + info.flag() + " '" + option_to_string(value) + "'";
      }
    });
  });
  return args;
}

}  // namespace ag::test
