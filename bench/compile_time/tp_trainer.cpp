// The minimal trainer of issue 24, through the umbrella header: an MLP (torch/torch.h, as in the
// plain loop), DummyInput, SingleDevice, the default step. bench/compile_time.sh compiles it against plain_loop.cpp.
#include <torch/torch.h>
#include <tp/tp.hpp>

int main() {
  auto batch = torch::data::Example<>(torch::randn({32, 64}), torch::randint(10, {32}));
  auto desc = tp::model_desc([] { return torch::nn::Sequential(torch::nn::Linear(64, 64), torch::nn::ReLU(), torch::nn::Linear(64, 10)); })
                  .tower_function([](const tp::TowerContext&, torch::nn::Sequential& net, const torch::data::Example<>& b) {
                    return torch::nn::functional::cross_entropy(net->forward(b.data), b.target);
                  })
                  .optimizer([](torch::nn::Sequential& net) { return torch::optim::SGD(net->parameters(), 0.1); });
  tp::Trainer trainer{tp::DummyInput(batch), desc, tp::SingleDevice(), tp::TrainOptions().steps_per_epoch(100).model_summary(false)};
  trainer.train();
}
