// Random draws inside a captured CUDA graph (cuda/graph.h, optim/train_step.h).
//
// A graph replays its kernels with the arguments they were captured with, and a
// dropout kernel's arguments include its first counter (core/random.h): replayed
// as captured, every step would draw the captured step's masks. So while a
// capture runs, an op that draws on the device asks counter_shift(g) for a device
// uint64 that its kernel adds to every counter, and the graph's owner writes
// there, before each replay, how far g has moved since the capture:
//
//   counter = offset_captured + i + shift,   shift = start_now − start_captured
//
// where start is g's offset when the step begins. That is the counter an eager
// step at this point would use (offset_now + i: the step reserves the same counts
// in the same order), so a replayed step draws the same numbers as an eager one,
// bit for bit. Outside a capture counter_shift is null and kernels add nothing.
#pragma once
#include <cstdint>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace ag {

// Null unless a CounterShifts records and the draws are on `device` (CUDA).
// Call it before reserving the counters (g.advance): it notes where g starts.
const uint64_t* counter_shift(Generator& g, Device device);

// The generators a capture draws from, and their shifts. One records at a time.
class CounterShifts {
 public:
  CounterShifts() = default;
  CounterShifts(const CounterShifts&) = delete;
  CounterShifts& operator=(const CounterShifts&) = delete;
  ~CounterShifts();

  // Around the capture. end() notes how many counters each generator gave the
  // step, and puts every generator back where the capture found it: the capture
  // ran nothing, so the first replay is the step that draws them.
  void begin();
  void end();
  // Before each replay: writes each shift (fill kernels, queued before the
  // replay) and reserves the step's counters on the host, as an eager step would.
  // False, writing nothing, when a generator's seed has changed since the capture
  // (a loaded checkpoint), or it is now before where the capture found it (reseeded
  // with the same seed), or 2^53 counters or more past it: the graph must be captured again.
  bool prepare_replay();
  bool empty() const { return entries_.empty(); }

  // counter_shift's: the entry for g, made on first use. With the recorder's lock held.
  const uint64_t* shift_for(Generator& g);

 private:
  struct Entry {
    Generator* generator;
    uint64_t seed, start, drawn = 0;
    Tensor shift;  // int64 [1] on the device, allocated during the capture (the graph's pool keeps it)
  };
  std::vector<Entry> entries_;
  bool recording_ = false;
};

}  // namespace ag
