// The same loop as tp_trainer.cpp, written against LibTorch alone.
#include <torch/torch.h>

int main() {
  auto batch = torch::data::Example<>(torch::randn({32, 64}), torch::randint(10, {32}));
  torch::nn::Sequential net(torch::nn::Linear(64, 64), torch::nn::ReLU(), torch::nn::Linear(64, 10));
  torch::optim::SGD sgd(net->parameters(), 0.1);
  for (int step = 0; step < 100; ++step) {
    sgd.zero_grad();
    auto cost = torch::nn::functional::cross_entropy(net->forward(batch.data), batch.target);
    cost.backward();
    sgd.step();
  }
}
