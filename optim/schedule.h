// Learning-rate schedule: linear warmup, then cosine decay to a floor. This is
// nanoGPT's get_lr, term for term, so runs can be compared with it:
//   iter <  warmup_iters:  lr · (iter + 1) / (warmup_iters + 1)
//   iter >  decay_iters:   min_lr
//   otherwise:             min_lr + ½(1 + cos(π·r)) · (lr − min_lr),
//                          r = (iter − warmup_iters) / (decay_iters − warmup_iters)
#pragma once
#include <cstdint>

namespace ag::optim {

struct CosineSchedule {
  double lr = 6e-4;        // peak, reached at iter == warmup_iters
  double min_lr = 6e-5;    // floor, from iter == decay_iters on
  int64_t warmup_iters = 0;
  int64_t decay_iters = 1;  // must exceed warmup_iters
};

double warmup_cosine_lr(int64_t iter, const CosineSchedule& s);

}  // namespace ag::optim
