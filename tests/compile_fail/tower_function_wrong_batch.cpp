// EXPECT: tp rule \[tower_function: callable\]
#include "common.hpp"
int main() {
  auto desc = tp::model_desc([] { return torch::nn::Linear(4, 1); })
                  .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const torch::Tensor& x) {
                    return m->forward(x).sum();  // takes a tensor, but the input gives an Example
                  })
                  .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), 0.1); });
  tp::Trainer trainer(cf::input(), std::move(desc), tp::SingleDevice(), cf::options());
  trainer.train();
}
