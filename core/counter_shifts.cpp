#include "core/counter_shifts.h"

#include <mutex>

#include "core/dispatch.h"

namespace ag {

namespace {
std::mutex recorder_mutex;
CounterShifts* recorder = nullptr;  // the one recording, if any
}  // namespace

const uint64_t* counter_shift(Generator& g, Device device) {
  if (device != Device::CUDA) return nullptr;
  std::lock_guard<std::mutex> lock(recorder_mutex);
  return recorder ? recorder->shift_for(g) : nullptr;
}

CounterShifts::~CounterShifts() {
  std::lock_guard<std::mutex> lock(recorder_mutex);
  if (recorder == this) recorder = nullptr;
}

void CounterShifts::begin() {
  std::lock_guard<std::mutex> lock(recorder_mutex);
  AG_CHECK(!recorder, "CounterShifts: another capture records its draws");
  entries_.clear();
  recorder = this;
  recording_ = true;
}

void CounterShifts::end() {
  std::lock_guard<std::mutex> lock(recorder_mutex);
  if (recorder == this) recorder = nullptr;
  if (!recording_) return;
  recording_ = false;
  for (Entry& e : entries_) {
    e.drawn = e.generator->offset() - e.start;
    e.generator->set_state(e.seed, e.start);
  }
}

const uint64_t* CounterShifts::shift_for(Generator& g) {
  for (const Entry& e : entries_)
    if (e.generator == &g) return static_cast<const uint64_t*>(e.shift.raw_data());
  // Allocated, not filled: a fill now would be captured, and each replay would
  // zero the shift the host has just written.
  entries_.push_back({&g, g.seed(), g.offset(), 0, Tensor::empty({1}, DType::Int64, Device::CUDA)});
  return static_cast<const uint64_t*>(entries_.back().shift.raw_data());
}

bool CounterShifts::prepare_replay() {
  // Capture again when a shift cannot be written: a generator reseeded (a loaded checkpoint), one
  // rewound before where the capture found it (manual_seed with the captured seed: offset 0), or
  // moved 2^53 counters or more past it (fill takes a double: exact below 2^53).
  for (const Entry& e : entries_) {
    const uint64_t offset = e.generator->offset();
    if (e.generator->seed() != e.seed || offset < e.start || offset - e.start >= (uint64_t{1} << 53)) return false;
  }
  for (Entry& e : entries_) {
    const uint64_t shift = e.generator->offset() - e.start;
    kernel::fill(e.shift, static_cast<double>(shift));
    e.generator->advance(e.drawn);
  }
  return true;
}

}  // namespace ag
