// EXPECT: tp rule \[tower_policy: make_model\]
#include "common.hpp"
struct Tower {  // builds a model, under another name
  torch::nn::Linear build() { return torch::nn::Linear(4, 1); }
};
int main() {
  tp::Trainer trainer(cf::input(), Tower{}, tp::SingleDevice(), cf::options());
  trainer.train();
}
