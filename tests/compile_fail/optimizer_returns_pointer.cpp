// EXPECT: tp rule \[optimizer: zero_grad and step\]
#include <memory>

#include "common.hpp"
int main() {
  auto desc = tp::model_desc([] { return torch::nn::Linear(4, 1); })
                  .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const cf::Batch& b) {
                    return torch::mse_loss(m->forward(b.data), b.target);
                  })
                  .optimizer([](torch::nn::Linear& m) {
                    return std::make_unique<torch::optim::SGD>(m->parameters(), 0.1);  // a pointer to one
                  });
  tp::Trainer trainer(cf::input(), std::move(desc), tp::SingleDevice(), cf::options());
  trainer.train();
}
