// EXPECT: tp rule \[callback: has a hook\]: a trigger wraps a callback
#include "common.hpp"
struct Logger {  // meant to be a callback, but its method is not a hook
  void log_step(auto&) {}
};
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), tp::SingleDevice(), cf::options(), tp::every_n_steps(100, Logger{}));
  trainer.train();
}
