#pragma once
// Throughput: samples per second over each epoch, put as the scalar "throughput", and the
// estimated time left in the run, put as "seconds_left" (tensorpack's ThroughputTracker and
// EstimatedTimeLeft). The time left is the remaining epochs times the median epoch time so far:
// the median, so that one slow epoch (a validation, a checkpoint) does not skew it.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace tp {

class Throughput {
 public:
  // samples_per_step: the global batch (per-tower batch x towers).
  explicit Throughput(std::int64_t samples_per_step) : samples_per_step_(samples_per_step) {
    if (samples_per_step <= 0)
      throw std::invalid_argument("tp::Throughput: samples_per_step must be > 0, got " + std::to_string(samples_per_step));
  }

  template <class Trainer>
  void before_epoch(Trainer& trainer) {
    start_ = clock::now();
    start_step_ = trainer.global_step();
  }

  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    const double seconds = std::chrono::duration<double>(clock::now() - start_).count();
    const auto steps = trainer.global_step() - start_step_;
    if (seconds > 0) trainer.put_scalar("throughput", static_cast<double>(steps * samples_per_step_) / seconds);
    epoch_seconds_.push_back(seconds);
    auto sorted = epoch_seconds_;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2), sorted.end());
    const double median = sorted[sorted.size() / 2];
    trainer.put_scalar("seconds_left", median * (trainer.max_epoch() - trainer.epoch_num()));
  }

 private:
  using clock = std::chrono::steady_clock;
  std::int64_t samples_per_step_;
  clock::time_point start_{};
  std::int64_t start_step_ = 0;
  std::vector<double> epoch_seconds_;
};

}  // namespace tp
