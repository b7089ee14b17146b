// The training step's options, one line each (core/options.h explains the
// columns). All but cuda_graph are Run options: saved with the training state,
// kept by a resumed run. cuda_graph is a Setting (it changes how the step is
// launched, not what it computes: a resumed run may turn it on or off).
#pragma once
#include "core/enum_names.h"
#include "core/precision.h"

namespace ag {
// --cuda-graph: whether a CUDA training step is captured once as a CUDA graph and
// replayed (optim/train_step.h says when it applies).
enum class CudaGraph { Off, On };
template <> struct EnumNames<CudaGraph> {
  static constexpr std::pair<CudaGraph, const char*> values[] = {{CudaGraph::Off, "off"}, {CudaGraph::On, "on"}};
};
}  // namespace ag

//  kind  type      name            default  min  max             help
#define AG_TRAIN_OPTIONS(X) \
  X(Run,  int64_t,  batch_size,     12,      1,   1 << 20,        "sequences per micro-batch B") \
  X(Run,  int64_t,  grad_accum,     1,       1,   1 << 16,        "micro-batches per optimizer step (the step's batch is B × this)") \
  X(Run,  double,   lr,             1e-3,    0,   kNoLimit,       "peak learning rate") \
  X(Run,  double,   min_lr,         1e-4,    0,   kNoLimit,       "learning rate at the end of the cosine decay") \
  X(Run,  int64_t,  warmup_iters,   100,     0,   int64_t{1} << 40, "linear warmup iterations") \
  X(Run,  int64_t,  lr_decay_iters, 2000,    1,   int64_t{1} << 40, "the cosine decay ends at this iteration") \
  X(Run,  double,   beta1,          0.9,     0,   0.999999999,    "AdamW beta1") \
  X(Run,  double,   beta2,          0.99,    0,   0.999999999,    "AdamW beta2") \
  X(Run,  double,   weight_decay,   0.1,     0,   kNoLimit,       "AdamW decoupled weight decay (matrices only)") \
  X(Run,  double,   grad_clip,      1.0,     0,   kNoLimit,       "clip the global gradient norm to this (0: no clipping)") \
  X(Run,  uint64_t, seed,           1337,    0,   kNoLimit,       "random seed (weights, batches, dropout)") \
  X(Run,  Precision, precision,     Precision::FP32, 0, 0,        "the matrix products' arithmetic: fp32, tf32 (CUDA: TF32 tensor cores) or bf16 (CUDA: bfloat16 inputs, float32 accumulation, weights and optimizer state)") \
  X(Setting, CudaGraph, cuda_graph, CudaGraph::On,   0, 0,        "on: on CUDA, from the third step of one shape on, each training step is one CUDA graph replayed (the same results as off, bit for bit); off: kernels launched one by one")
