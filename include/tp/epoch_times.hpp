#pragma once
// How long an epoch and each callback's hooks in it took: what the on_epoch_times hook receives
// (tp::CallbackTimeLogger, tensorpack's CallbackTimeLogger). The trainer times hooks only when
// some callback has that hook.
#include <string>
#include <vector>

namespace tp {

// One callback's share of an epoch: its type's name and the seconds its hooks took.
struct callback_time {
  std::string name;  // the callback's type
  double seconds = 0;
};

// An epoch's time, from before its first before_epoch hook to after its last after_epoch hook,
// and each callback's share of it, in the order the callbacks were given.
struct epoch_times {
  int epoch = 0;
  double seconds = 0;
  std::vector<callback_time> callbacks;
};

}  // namespace tp
