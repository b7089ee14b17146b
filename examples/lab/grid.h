// The lab's grid: every option of the model (nn/gpt_options.h), the training
// step (optim/train_options.h) and the task (examples/lab/lab_options.h) takes
// a comma list on the lab's command line, under the name `char_lm train` gives
// it (--block-size 64,128 --n-embd 64,128); the lists and the mixers span the
// cells, one per combination. --lr's list is not an axis but each cell's
// learning-rate sweep: the cell keeps the rate whose held-out score is best.
//
// A mixer is an attention function and its options, as one word:
//   softmax | linear | ssd | lstm | s4  [ :option=value | :value ]...
// where an option is any model option (dashed or snake, e.g. attn-window,
// n-kv-head, position, n-features) or its short name below (window=16,
// gqa=1), and a bare value sets the model option it names (elu1, favor: the
// feature map; rope, alibi, none, learned: the positions). softmax:window=16
// is char_lm train --attention softmax --attn-window 16.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "examples/common/command_line.h"
#include "examples/lab/tasks.h"
#include "nn/gpt.h"
#include "optim/train_step.h"

namespace ag::lab {

// How long each run of a cell trains and how it is scored (examples/lab/lab_options.h).
struct Budget {
  AG_DECLARE_OPTIONS(AG_LAB_BUDGET_OPTIONS)
};

// One cell: what the model computes, how it trains, on what, for how long.
struct Cell {
  std::string mixer = "softmax";
  nn::GPTConfig model;
  optim::TrainOptions optim;
  TaskOptions task;
  Budget budget;
  std::vector<double> lrs;  // the sweep (each a value of optim.lr)
  std::vector<std::string> axes;  // the names of the options that vary over the grid, for label()

  // Calls visit(table) for the model's, the training step's, the task's and the budget's table.
  template <class Self, class Visit> static void for_each_table(Self& self, Visit&& visit) {
    visit(self.model);
    visit(self.optim);
    visit(self.task);
    visit(self.budget);
  }
  // "mqar softmax:window=16 block-size=128 pairs=8": the task, the mixer and the varying options.
  std::string label() const;
  // A name for its files, the same for the same options: the hex fingerprint of the mixer, the options that
  // differ from their tables' defaults and the lr sweep (so an option added later, at its default, changes no id).
  std::string id() const;
};

// Sets option `name` (snake_case or dashed) of whichever table has it, from
// text, range-checked. Returns false if no table has it.
bool set_option(Cell& cell, const std::string& name, const std::string& text);
// The option's value as text, "" if no table has it.
std::string get_option(const Cell& cell, const std::string& name);

// Sets the model options `mixer` names (the grammar above). Throws ag::Error
// naming the known functions or options when one is unknown.
void apply_mixer(const std::string& mixer, nn::GPTConfig& model);

using cli::split_list;  // "a,b,c" -> {a, b, c} (examples/common/command_line.h)

struct Axis {
  std::string name;  // snake_case
  std::vector<std::string> values;
};

// A grid: its axes (each value checked), its mixers and its learning rates.
// The zipped axes go together, item by item, as one axis (Zoology's lengths and
// pairs: --block-size 64,128 --pairs 4,8 --zip block-size,pairs is two cells, not four).
struct Grid {
  std::vector<Axis> axes;
  std::vector<std::string> mixers;
  std::vector<double> lrs;
  std::vector<std::string> zipped = {};  // axis names (snake_case or dashed), their lists of one length
};

// Every combination of the axes and the mixers, each from `defaults`, in order
// (the last axis varying fastest, the mixers fastest of all; zipped axes where
// the first of them stands). Throws ag::Error when a zipped name is no axis of
// the grid or the zipped lists differ in length.
std::vector<Cell> expand(const Grid& grid, const Cell& defaults);

// --- results.csv: one row per cell ----------------------------------------------------

using Row = std::map<std::string, std::string>;
// The columns, in the file's order.
const std::vector<std::string>& result_columns();
// A header line, then each row (a field with a comma, a quote or a newline quoted, "" for a quote).
std::string csv_text(const std::vector<Row>& rows);
// The rows of csv_text's text: csv_text(parse_csv(t)) == t.
std::vector<Row> parse_csv(const std::string& text);

}  // namespace ag::lab
