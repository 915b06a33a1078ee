// Trains a linear model through an installed tp, saves and loads it (second_file.cpp), and prints
// the final cost.
#include <filesystem>
#include <iostream>
#include <string>

#include <tp/tp.hpp>
// The other umbrellas are installed too, and compile against the installed package's flags.
#include <tp/data.hpp>
#include <tp/distributed.hpp>
#include <tp/images.hpp>
#include <tp/monitors.hpp>
#include <torch/torch.h>

std::string round_trip(const torch::nn::Linear& model, const std::filesystem::path& folder);  // second_file.cpp

int main(int argc, char** argv) {
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
  const std::filesystem::path folder = argc > 1 ? argv[1] : ".";
  const auto summary = round_trip(trainer.model(), folder);
  std::cout << summary;
  return cost < 1e-4 && summary.find("total") != std::string::npos ? 0 : 1;
}
