#pragma once
// DummyInput: gives the same batch at every step. For benchmarks and smoke tests: it measures
// the step without the cost of data.
#include <utility>

#include <tp/batch.hpp>
#include <tp/precision.hpp>

namespace tp {

template <class Batch>
class DummyInput {
 public:
  explicit DummyInput(Batch batch) : batch_(std::move(batch)) {}
  // A copy of the batch (for tensors: new handles to the same storage, no data copied).
  Batch next_batch() const { return batch_; }
  // Batches in channels-last order (set by the trainer when the tower asks for it).
  void channels_last(bool on) {
    if (on) batch_ = channels_last_batch(std::move(batch_));
  }
  // The batch in pinned memory, once (StagingInput asks for it for a CUDA device): its copy to
  // the device is then asynchronous, and nothing pins it again each step.
  void pin_memory(bool on) {
    if (!on) return;
    detail::check_pinned_memory_available("tp::DummyInput::pin_memory");
    batch_ = pin_batch(std::move(batch_));
  }

 private:
  Batch batch_;
};

}  // namespace tp
