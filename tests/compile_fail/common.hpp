#pragma once
// A minimal working run that each compile-fail case breaks in one way.
#include <tp/tp.hpp>
#include <torch/torch.h>

namespace cf {
using Batch = torch::data::Example<>;
inline auto input() { return tp::DummyInput(Batch{torch::zeros({2, 4}), torch::zeros({2, 1})}); }
inline auto desc() {
  return tp::model_desc([] { return torch::nn::Linear(4, 1); })
      .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const Batch& b) {
        return torch::mse_loss(m->forward(b.data), b.target);
      })
      .optimizer([](torch::nn::Linear& m) { return torch::optim::SGD(m->parameters(), 0.1); });
}
inline auto options() { return tp::TrainOptions().steps_per_epoch(1); }
}  // namespace cf
