#pragma once
// The clock behind tp::epoch_times: how long each callback's hooks took over an epoch. The
// trainer keeps one only when some callback has an on_epoch_times hook: otherwise no hook call
// is timed.
#include <array>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include <tp/epoch_times.hpp>

namespace tp::detail {


template <std::size_t N>
class callback_clock {
 public:
  using clock = std::chrono::steady_clock;
  explicit callback_clock(std::array<std::string, N> names) : names_(std::move(names)) {}

  void start_epoch() {
    seconds_.fill(0);
    began_ = clock::now();
  }
  template <class Hook>
  void time(std::size_t callback, Hook&& hook) {
    const auto start = clock::now();
    hook();
    seconds_[callback] += std::chrono::duration<double>(clock::now() - start).count();
  }
  epoch_times read(int epoch) const {
    epoch_times times{.epoch = epoch, .seconds = std::chrono::duration<double>(clock::now() - began_).count(), .callbacks = {}};
    for (std::size_t i = 0; i < N; ++i) times.callbacks.push_back({names_[i], seconds_[i]});
    return times;
  }

 private:
  std::array<std::string, N> names_;
  std::array<double, N> seconds_{};
  clock::time_point began_ = clock::now();
};

// What the trainer holds when no callback wants the times.
struct no_callback_clock {};

}  // namespace tp::detail
