// EXPECT: tp rule \[tower_function: returns tensor\]
#include "common.hpp"
int main() {
  auto desc = tp::model_desc([] { return torch::nn::Linear(4, 1); })
                  .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const cf::Batch& b) {
                    return torch::mse_loss(m->forward(b.data), b.target).item<float>();  // a float
                  })
                  .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), 0.1); });
  tp::Trainer trainer(cf::input(), std::move(desc), tp::SingleDevice(), cf::options());
  trainer.train();
}
