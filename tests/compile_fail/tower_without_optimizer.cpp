// EXPECT: tp rule \[tower_policy: optimizer\]
#include "common.hpp"
int main() {
  auto desc = tp::model_desc([] { return torch::nn::Linear(4, 1); })
                  .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const cf::Batch& b) {
                    return torch::mse_loss(m->forward(b.data), b.target);
                  });  // no .optimizer(...), yet the default step is used
  tp::Trainer trainer(cf::input(), std::move(desc), tp::SingleDevice(), cf::options());
  trainer.train();
}
