#pragma once
// weight_decay_groups: a model's parameters as two groups for an optimizer with decoupled weight
// decay: the matrices and embeddings (2 or more dimensions) decay, the biases and the norms'
// scales (1 dimension) do not (GPT-2's, nanoGPT's and minGPT's rule). Each group has the
// options given, with its own weight decay.
//
//   torch::optim::AdamWOptions options(1e-3);
//   options.betas({0.9, 0.99});
//   torch::optim::AdamW adamw(tp::optim::weight_decay_groups(model->parameters(), options, 0.1), options);
//
// The decaying group comes first; an empty group is left out. The learning-rate setters
// (tp::learning_rate()) set every group alike.
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/types.h>

namespace tp::optim {

template <class Options>
std::vector<torch::optim::OptimizerParamGroup> weight_decay_groups(const std::vector<torch::Tensor>& parameters, const Options& options,
                                                                   double decay) {
  if (!(decay >= 0)) throw std::invalid_argument("tp::optim::weight_decay_groups: the weight decay must be >= 0, not " + std::to_string(decay));
  std::vector<torch::Tensor> decayed, kept;
  for (const auto& p : parameters)
    if (p.requires_grad()) (p.dim() >= 2 ? decayed : kept).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  const auto group = [&](std::vector<torch::Tensor> params, double wd) {
    auto o = std::make_unique<Options>(options);
    o->weight_decay(wd);
    groups.emplace_back(std::move(params), std::move(o));
  };
  if (!decayed.empty()) group(std::move(decayed), decay);
  if (!kept.empty()) group(std::move(kept), 0.0);
  return groups;
}

}  // namespace tp::optim
