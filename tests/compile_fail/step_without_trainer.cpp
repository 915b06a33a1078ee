// EXPECT: tp rule \[step: takes the trainer\]
// MAX_LINES: 12
#include "common.hpp"
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), tp::SingleDevice(), cf::options());
  trainer.train([] { return torch::zeros({}); });  // takes no trainer
}
