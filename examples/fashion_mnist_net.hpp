#pragma once
// The example's small CNN for Fashion-MNIST, its input normalisation, and what its validation
// computes; the benchmarks time the same model, and `evaluate` scores its checkpoints.
#include <torch/torch.h>

#include <tp/callbacks/inference_runner.hpp>

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

}  // namespace fashion_mnist
