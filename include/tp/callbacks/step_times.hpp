#pragma once
// StepTimes: each step's wall time, so that a stall shows when it happens (nanoGPT prints one
// per iteration). A step's time runs from the end of the step before it (for a run's first step,
// from its before_step) to its own end: it holds everything the loop did in between, the input,
// the callbacks, an evaluation at an epoch's end, as a clock on the wall would. Every `interval`
// steps it puts the time of the step just finished as the scalar "step_ms"; at an epoch's end, the
// median and the slowest of the epoch's steps as "step_ms_median" and "step_ms_max".
//
//   tp::StepTimes()              "step_ms" after every step
//   tp::StepTimes(/*interval=*/10)
//
// Times are of this process; under many processes each rank measures its own (the slowest rank
// sets the pace, and its times are what a stall looks like).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tp {

class StepTimes {
 public:
  explicit StepTimes(std::int64_t interval = 1) : interval_(interval) {
    if (interval <= 0) throw std::invalid_argument("tp::StepTimes: interval must be > 0 steps, got " + std::to_string(interval));
  }

  template <class Trainer>
  void before_step(Trainer&) {
    if (!last_end_) last_end_ = clock::now();
  }

  template <class Trainer>
  void after_step(Trainer& trainer) {
    const auto now = clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - *last_end_).count();
    last_end_ = now;
    epoch_ms_.push_back(ms);
    if (trainer.global_step() % interval_ == 0) trainer.put_scalar("step_ms", ms);
  }

  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    if (epoch_ms_.empty()) return;  // a resumed run that starts at an epoch's end
    auto middle = epoch_ms_.begin() + static_cast<std::ptrdiff_t>(epoch_ms_.size() / 2);
    std::nth_element(epoch_ms_.begin(), middle, epoch_ms_.end());
    trainer.put_scalar("step_ms_median", *middle);
    trainer.put_scalar("step_ms_max", *std::max_element(epoch_ms_.begin(), epoch_ms_.end()));
    epoch_ms_.clear();
  }

  std::int64_t interval() const noexcept { return interval_; }

 private:
  using clock = std::chrono::steady_clock;
  std::int64_t interval_;
  std::optional<clock::time_point> last_end_;
  std::vector<double> epoch_ms_;  // this epoch's step times so far
};

}  // namespace tp
