#pragma once
// CallbackTimeLogger: at the end of each epoch, prints the callbacks that took a noticeable
// share of it, with their times (tensorpack's CallbackTimeLogger), so that a slow validation or
// checkpoint shows before it is guessed at:
//
//   tp: epoch 3 took 41.2 s; callbacks over 5% of it: InferenceRunner<...> 6.1 s (15%), ModelSaver 2.4 s (6%)
//
//   tp::CallbackTimeLogger()                      callbacks over 5% of the epoch
//   tp::CallbackTimeLogger(0.01)                  over 1%
//
// A callback's time is that of all its hooks in the epoch. The trainer times hooks only when a
// callback like this one asks for the times (an on_epoch_times hook): without one it reads no
// clock. Printed by the chief.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>

#include <tp/epoch_times.hpp>

namespace tp {

class CallbackTimeLogger {
 public:
  static constexpr bool chief_only = true;

  explicit CallbackTimeLogger(double min_share = 0.05, std::ostream& out = std::cout) : min_share_(min_share), out_(&out) {
    if (!(min_share >= 0 && min_share <= 1))
      throw std::invalid_argument("tp::CallbackTimeLogger: min_share is a fraction of the epoch, in [0, 1], got " + std::to_string(min_share));
  }

  template <class Trainer>
  void on_epoch_times(Trainer&, const epoch_times& times) {
    last_ = times;
    auto slow = times.callbacks;
    std::erase_if(slow, [&](const callback_time& c) { return c.seconds <= 0 || c.seconds < min_share_ * times.seconds; });
    if (slow.empty()) return;
    std::sort(slow.begin(), slow.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
    char line[64];
    std::snprintf(line, sizeof line, "tp: epoch %d took %.3g s; callbacks over %.3g%% of it:", times.epoch, times.seconds, 100 * min_share_);
    std::string text = line;
    for (std::size_t i = 0; i < slow.size(); ++i) {
      std::snprintf(line, sizeof line, " %.3g s (%.0f%%)", slow[i].seconds, 100 * slow[i].seconds / times.seconds);
      text += (i ? ", " : " ") + slow[i].name + line;
    }
    *out_ << text << "\n" << std::flush;
  }

  // The last epoch's times.
  const epoch_times& last() const noexcept { return last_; }

 private:
  double min_share_;
  std::ostream* out_;
  epoch_times last_;
};

}  // namespace tp
