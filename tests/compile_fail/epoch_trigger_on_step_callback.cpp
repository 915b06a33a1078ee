// EXPECT: tp rule \[trigger: epoch hook\]
// MAX_LINES: 12
#include "common.hpp"
struct PrintWeights {
  void after_step(auto&) {}
};
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), tp::SingleDevice(), cf::options(), tp::every_n_epochs(2, PrintWeights{}));
  trainer.train();
}
