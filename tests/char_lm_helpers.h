// char_lm test helpers: a run small enough to train in a second.
#pragma once
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>
#include <utility>

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

// Runs the built char_lm with `args` (after `env`, e.g. "VAR=1 "); returns its
// exit status and output (stdout and stderr together).
inline std::pair<int, std::string> run_char_lm(const std::string& args, const std::string& env = "") {
  const std::string command = env + std::string(ATTOGRAD_CHAR_LM) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe);
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WEXITSTATUS(status), output};
}

}  // namespace ag::test
