// The lab's own options, one line each (core/options.h explains the columns;
// the model's are in nn/gpt_options.h, the training step's in
// optim/train_options.h). On the lab's command line every option of the task
// and budget tables, like those of the model and training tables, takes a comma
// list: the lists span the grid (examples/lab/grid.h).
#pragma once
#include "examples/common/device_option.h"

// What each task is (examples/lab/tasks.h). The default vocabulary is 1024, not
// Zoology's 8192 (the zoology presets'): the head runs at the scored positions
// only, but the tied embedding's gradient and AdamW update are V·C a step, and
// Zoology's own rule (V > T) still holds up to the recall grid's T = 512.
//  kind     type         name         default     min  max      help
#define AG_LAB_TASK_OPTIONS(X) \
  X(Model,   Task,        task,        Task::Mqar, 0,   0,       "mqar (multi-query associative recall), passkey (a number to retrieve), copy (selective copying), text (the char LM, scored by val loss), connectivity or shortest-path (graph tasks: examples/lab/graph_tasks.h)") \
  X(Model,   int64_t,     vocab,       1024,       13,  1 << 20, "mqar, passkey, copy: vocabulary size V (mqar: keys from the first half, values from the second; V > T)") \
  X(Model,   int64_t,     pairs,       4,          1,   1 << 20, "mqar: key-value pairs P at the start, each queried once later (4P <= T)") \
  X(Model,   double,      power_a,     0.01,       0,   1,       "mqar: the queries' gaps are drawn with p(g) ∝ g^(a-1), Zoology's power law (1: uniform)") \
  X(Model,   double,      depth,       0.5,        0,   1,       "passkey: where the number sits in the filler, 0 (start) to 1 (just before the question)") \
  X(Model,   int64_t,     digits,      5,          1,   64,      "passkey: digits k of the number") \
  X(Model,   int64_t,     copy_tokens, 16,         1,   1 << 20, "copy: data tokens n scattered among the noise (2n <= T)") \
  X(Setting, std::string, data,        "",         0,   0,       "text: the training text (default: $ATTOGRAD_DATA, then data/tinyshakespeare.txt, then ../shared/data/tinyshakespeare.txt)") \
  X(Model,   int64_t,     nodes,       16,         2,   32,      "connectivity, shortest-path: the most nodes N_max of a graph (needs N_max + 2(N_max − 1 + N_max/4) <= T)") \
  X(Model,   int64_t,     min_nodes,   8,          2,   32,      "connectivity, shortest-path: the fewest nodes of a graph (each draws N from [min-nodes, nodes])") \
  X(Model,   int64_t,     max_distance, 3,         1,   15,      "connectivity, shortest-path: the longest u–v distance asked, 2(D + 1) <= min-nodes (shortest-path's classes: 1 … D and unreachable)") \
  X(Model,   GraphMask,   graph_mask,  GraphMask::Full, 0, 0,    "connectivity, shortest-path: the attention, full (every position both ways; the edges read as tokens) or adjacency (along the graph's edges and self loops: a message-passing network)") \
  X(Model,   bool,        random_filler, true,     0,   0,       "mqar: every position that is neither a pair nor a query a random token of the whole vocabulary (Zoology's random_non_queries); false: the token 0 (Zoology's figure 2)")

// How long each run of a cell trains and how many held-out examples score it.
// They belong to the cell, not to the invocation: a list spans the grid as the
// task's options do, a preset may give each of its grids its own, and a cell's
// id (its files) covers them, so a lab resumed with another budget trains its
// cells again instead of keeping the results of a different experiment.
//
// The defaults are for MQAR's standard cells (T <= 256, P = T/16, width 64, 2 layers, batches of
// 64, V = 1024): 15000 steps with a warmup over the first fifth are the schedule under which softmax
// attention was measured to leave MQAR's plateau at T = 64 and 128 (docs/lab.md, "Training: the
// plateau"); 1000 steps with a tenth's warmup, the defaults until issue 53, left it on the plateau.
//  kind  type     name           default  min  max               help
#define AG_LAB_BUDGET_OPTIONS(X) \
  X(Run,  int64_t, max_iters,     15000,   1,   int64_t{1} << 40, "training iterations per run (each learning rate of each cell)") \
  X(Run,  double,  max_seconds,   0,       0,   kNoLimit,         "also stop a run after this many seconds (0: no limit)") \
  X(Run,  double,  warmup,        0.2,     0,   0.99,             "the learning rate's linear warmup over this fraction of each run (then the cosine decay to lr·final_lr at its end)") \
  X(Run,  int64_t, eval_examples, 500,     1,   1 << 24,          "held-out examples scored (text: batches of --batch-size windows, this many windows)") \
  X(Run,  int64_t, train_examples, 0,      0,   int64_t{1} << 32, "mqar, passkey, copy: a fixed training set of N examples, fixed by the seed and passed over in order epoch after epoch (Zoology's 100k); 0: fresh examples every step") \
  X(Run,  int64_t, epochs,        0,       0,   1 << 20,          "with --train-examples: the run's length in passes over the set, ceil(N / B) batches each (the last the rest), instead of --max-iters (0: --max-iters)") \
  X(Run,  double,  final_lr,      0.1,     0,   1,                "the cosine decay's end, a fraction of the run's lr (Zoology: 0)") \
  X(Run,  double,  stop_accuracy, 0,       0,   1,                "stop a run once a held-out score on the way (every --eval-interval) exceeds this accuracy (Zoology: 0.99; 0: never)")

//  kind   type         name           default  min  max               help
#define AG_LAB_OPTIONS(X) \
  AG_DEVICE_OPTION(X) \
  X(Local, std::string, preset,        "",      0,   0,                "a ready grid: quick (a handful of cells, minutes), recall (Zoology's MQAR grid), heads (1 to 8 heads and GQA), memory (attention against the recurrent mixers on MQAR and copying), graphs (full against adjacency-masked attention by depth on graph tasks), zoology (Zoology's figure 2 as it ran it, for a GPU) or zoology-cpu (its T = 64 cut to an hour on 2 cores); options given as well replace the preset's") \
  X(Local, std::string, mixers,        "softmax", 0, 0,                "attention functions with options, comma-separated: softmax, softmax:window=16, softmax:gqa=1, softmax:position=alibi, linear:elu1, linear:favor, ssd, s4, s4:s4-state=16, lstm (any model option as :name=value)") \
  X(Local, std::string, zip,           "",      0,   0,                "options whose lists go together item by item instead of spanning the grid, comma-separated (--block-size 64,128 --pairs 4,8 --zip block-size,pairs: two cells, not four)") \
  X(Local, std::string, out,           "lab",   0,   0,                "directory of results.csv, the plots and lab_report.html (finished cells are kept: run again to resume)") \
  X(Local, int64_t,     eval_interval, 100,     1,   int64_t{1} << 40, "score the held-out examples every N iterations (the progress line and the curves)") \
  X(Local, int64_t,     jobs,          1,       1,   1024,             "cells trained at once, each in a process of its own") \
  X(Local, std::string, shard,         "",      0,   0,                "this process's share of the cells, i/N (what --jobs gives its processes; mpirun's ranks take theirs)") \
  X(Local, bool,        report_only,   false,   0,   0,                "train nothing: write results.csv, the plots and lab_report.html from the cells finished so far (a long grid's results while it runs)")
