// EXPECT: tp rule \[callback: has a hook\]: enable_if wraps a callback
#include "common.hpp"
struct Logger {  // meant to be a callback, but its method is not a hook
  void log_step(auto&) {}
};
int main() {
  auto late = [](const auto& trainer) { return trainer.epoch_num() > 1; };
  tp::Trainer trainer(cf::input(), cf::desc(), tp::SingleDevice(), cf::options(), tp::enable_if(late, Logger{}));
  trainer.train();
}
