// Trains a linear model through an installed tp and prints the final cost.
#include <iostream>

#include <tp/tp.hpp>
// The other umbrellas are installed too, and compile against the installed package's flags.
#include <tp/data.hpp>
#include <tp/distributed.hpp>
#include <tp/images.hpp>
#include <tp/monitors.hpp>
#include <torch/torch.h>

int main() {
  torch::manual_seed(0);
  auto x = torch::randn({32, 3});
  auto y = x.matmul(torch::tensor({{1.0f}, {-2.0f}, {0.5f}}));
  auto desc = tp::model_desc([] { return torch::nn::Linear(3, 1); })
                  .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const torch::data::Example<>& b) {
                    return torch::mse_loss(m->forward(b.data), b.target);
                  })
                  .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), 0.1); });
  tp::Trainer trainer(tp::DummyInput(torch::data::Example<>{x, y}), std::move(desc), tp::SingleDevice(),
                      tp::TrainOptions().steps_per_epoch(200));
  trainer.train();
  const double cost = trainer.last_cost().item<double>();
  std::cout << "consumer: final cost " << cost << "\n";
  return cost < 1e-4 ? 0 : 1;
}
