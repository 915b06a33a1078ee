// EXPECT: tp rule \[put_scalar: number\]
#include <string>

#include "common.hpp"
#include <tp/monitors.hpp>
struct Tagger {
  void after_epoch(auto& trainer) { trainer.put_scalar("best", std::string("epoch 1")); }  // not a number
};
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), tp::SingleDevice(), cf::options(), Tagger{}, tp::ScalarPrinter());
  trainer.train();
}
