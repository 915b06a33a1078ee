#pragma once
// The time budget of TrainOptions::max_time: at each step boundary the loop asks whether one more
// step, and the epoch's end when that step closes an epoch, and then the on-stop checkpoint
// still fit in what is left. It judges by the longest of each it has seen in this run, so
// that the run ends with its checkpoint written before the budget runs out, not after.
//
// A checkpoint's time is known once one has been written (at an epoch's end, or every N steps);
// before that, the budget reserves as long as the longest step for it.
#include <algorithm>
#include <chrono>

namespace tp::detail {

class time_budget {
 public:
  using clock = std::chrono::steady_clock;
  using duration = clock::duration;

  // limit 0: no budget.
  time_budget(duration limit, clock::time_point start) : limit_(limit), start_(start) {}

  bool limited() const noexcept { return limit_ > duration::zero(); }

  void saw_step(duration d) noexcept { longest_step_ = std::max(longest_step_, d); }
  void saw_epoch_end(duration d) noexcept { longest_epoch_end_ = std::max(longest_epoch_end_, d); }
  void saw_checkpoint(duration d) noexcept { longest_checkpoint_ = std::max(longest_checkpoint_, d); }

  // Whether the next step (and the epoch end after it, if it closes an epoch) and a checkpoint
  // after it can finish by the limit, as of `now`.
  bool allows_next_step(bool closes_epoch, clock::time_point now) const noexcept {
    if (!limited()) return true;
    const auto checkpoint = longest_checkpoint_ > duration::zero() ? longest_checkpoint_ : longest_step_;
    const auto needed = longest_step_ + (closes_epoch ? longest_epoch_end_ : duration::zero()) + checkpoint;
    return (now - start_) + needed <= limit_;
  }

 private:
  duration limit_;
  clock::time_point start_;
  duration longest_step_{};
  duration longest_epoch_end_{};
  duration longest_checkpoint_{};
};

}  // namespace tp::detail
