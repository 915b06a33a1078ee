// EXPECT: tp rule \[step: returns a cost\]
// MAX_LINES: 12
#include "common.hpp"
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), tp::SingleDevice(), cf::options());
  trainer.train([](auto&) { return 0.5; });  // a double, not a tensor
}
