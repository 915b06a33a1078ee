// EXPECT: tp rule \[trigger: step hook\]
// MAX_LINES: 12
#include "common.hpp"
struct Validation {
  void after_epoch(auto&) {}
};
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), tp::SingleDevice(), cf::options(), tp::every_n_steps(100, Validation{}));
  trainer.train();
}
