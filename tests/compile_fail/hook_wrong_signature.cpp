// EXPECT: tp rule \[callback_for: hook signature\]: the hook after_epoch
#include "common.hpp"
struct Validation {
  void after_epoch(int epoch) { (void)epoch; }  // takes an int, not the trainer
};
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), tp::SingleDevice(), cf::options(), Validation{});
  trainer.train();
}
