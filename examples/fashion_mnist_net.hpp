#pragma once
// The example's small CNN for Fashion-MNIST, its input normalisation, what its validation
// computes, and the accuracy a run ended with; the benchmarks time the same model, and
// `evaluate` scores its checkpoints.
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include <tp/callbacks/inference_runner.hpp>
#include <tp/monitors/json.hpp>

namespace fashion_mnist {

struct NetImpl : torch::nn::Module {
  torch::nn::Conv2d conv1{torch::nn::Conv2dOptions(1, 32, 3).padding(1)};
  torch::nn::Conv2d conv2{torch::nn::Conv2dOptions(32, 64, 3).padding(1)};
  torch::nn::Linear fc1{64 * 7 * 7, 128};
  torch::nn::Linear fc2{128, 10};
  NetImpl() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);  // 14x14
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);  // 7x7
    x = torch::relu(fc1(x.flatten(1)));
    return fc2(x);
  }
};
TORCH_MODULE(Net);

// Pixels to roughly zero mean and unit variance (Fashion-MNIST's mean and std).
inline torch::Tensor normalize(const torch::Tensor& pixels) { return (pixels.to(torch::kFloat) / 255.0 - 0.2860) / 0.3530; }

// The test set's cost and logits, and the labels, for tp::ScalarStats({"cost"}, "test_") and
// tp::ClassificationError("logits", "label", "test_error").
inline tp::outputs test_outputs(Net& net, const torch::data::Example<>& b) {
  auto logits = net->forward(b.data);
  return tp::outputs{{"cost", torch::nn::functional::cross_entropy(logits, b.target)}, {"logits", logits}, {"label", b.target}};
}

// The last test accuracy a trainer with a JSONWriter recorded (1 - test_error), from its
// stats.json: a resumed run that had nothing left to do still reports the accuracy it ended with.
template <class Trainer>
double last_test_accuracy(Trainer& trainer) {
  const auto& path = trainer.template callback<tp::JSONWriter>().path();
  const auto history = tp::JSONWriter::read(path);
  for (auto it = history.rbegin(); it != history.rend(); ++it)
    if (const auto found = it->scalars.find("test_error"); found != it->scalars.end()) return 1.0 - found->second;
  throw std::runtime_error("the run's " + path.string() + " has no test error");
}

}  // namespace fashion_mnist
