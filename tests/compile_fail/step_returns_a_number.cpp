// EXPECT: tp rule \[step: returns a cost\]
#include "common.hpp"
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), tp::SingleDevice(), cf::options());
  trainer.train([](auto&) { return 0.5; });  // a double, not a tensor
}
