// EXPECT: tp rule \[tower_policy: module handle\]
#include "common.hpp"
int main() {
  auto desc = tp::model_desc([] { return torch::nn::LinearImpl(4, 1); });  // the module, not a handle to it
  tp::Trainer trainer(cf::input(), std::move(desc), tp::SingleDevice(), cf::options());
  trainer.train([](auto&) {});
}
