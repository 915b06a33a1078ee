#pragma once
// LARS: layer-wise adaptive rate scaling (You, Gitman, Ginsburg 2017), SGD with momentum whose
// step for each parameter tensor (a layer's weight) is scaled by a trust ratio, so that large
// global batches train stably. For a parameter w with gradient g:
//
//   d     = g + weight_decay·w
//   trust = trust_coefficient·‖w‖ / (‖g‖ + weight_decay·‖w‖ + eps)   (1 if ‖w‖ = 0 or ‖g‖ = 0)
//   v     = momentum·v + lr·trust·d
//   w     = w − v
//
// exclude_bias_and_norm(true) takes the parameters of one dimension or less (biases, the scales
// and shifts of batch and layer norms) out of both the weight decay and the trust ratio: they
// get plain momentum SGD, as the paper's large-batch recipes do. A torch::optim::Optimizer.
//
//   tp::optim::LARS(model->parameters(), tp::optim::LARSOptions(0.1).weight_decay(5e-4))
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>
#include <torch/serialize/archive.h>

#include <tp/optim/checks.hpp>
#include <tp/optim/trust_ratio.hpp>

namespace tp::optim {

// LARS's options (a parameter group's, or the defaults), in LibTorch's fluent style:
// LARSOptions(0.1).momentum(0.9).
struct LARSOptions : torch::optim::OptimizerCloneableOptions<LARSOptions> {
  LARSOptions(double lr = 0.1) : lr_(lr) {}
  TORCH_ARG(double, lr) = 0.1;
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(double, weight_decay) = 0;
  TORCH_ARG(double, trust_coefficient) = 1e-3;
  TORCH_ARG(double, eps) = 0;
  TORCH_ARG(bool, exclude_bias_and_norm) = false;

 public:
  void serialize(torch::serialize::InputArchive& archive) override {
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, momentum);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, trust_coefficient);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, exclude_bias_and_norm);
  }
  void serialize(torch::serialize::OutputArchive& archive) const override {
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(momentum);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(trust_coefficient);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exclude_bias_and_norm);
  }
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

// LARS's state per parameter: its momentum buffer.
struct LARSParamState : torch::optim::OptimizerCloneableParamState<LARSParamState> {
  TORCH_ARG(torch::Tensor, momentum_buffer);

 public:
  void serialize(torch::serialize::InputArchive& archive) override { _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, momentum_buffer); }
  void serialize(torch::serialize::OutputArchive& archive) const override { _TORCH_OPTIM_SERIALIZE_TORCH_ARG(momentum_buffer); }
};

class LARS : public detail::serializable_optimizer<LARSParamState, LARSOptions> {
 public:
  explicit LARS(std::vector<torch::optim::OptimizerParamGroup> groups, LARSOptions defaults = {})
      : serializable_optimizer(std::move(groups), defaults) {
    detail::check_at_least("LARS", "lr", defaults.lr(), 0);
    detail::check_at_least("LARS", "momentum", defaults.momentum(), 0);
    detail::check_at_least("LARS", "weight_decay", defaults.weight_decay(), 0);
    detail::check_at_least("LARS", "trust_coefficient", defaults.trust_coefficient(), 0);
    detail::check_at_least("LARS", "eps", defaults.eps(), 0);
  }
  explicit LARS(std::vector<torch::Tensor> params, LARSOptions defaults = {})
      : LARS(std::vector{torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

  torch::Tensor step(LossClosure closure = nullptr) override {
    auto loss = detail::closure_loss(closure);
    torch::NoGradGuard no_grad;
    // Every tensor's norms first, at once (across the ranks when sharded), then the updates.
    std::vector<torch::Tensor> params, grads;
    for (auto& group : param_groups_)
      for (auto& p : group.params())
        if (p.grad().defined()) params.push_back(p), grads.push_back(p.grad());
    const auto [w_norms, g_norms] = detail::layer_norms(params, grads, shards_.get());
    std::size_t i = 0;
    for (auto& group : param_groups_) {
      const auto& o = static_cast<const LARSOptions&>(group.options());
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        const auto& grad = p.grad();
        const auto &w_norm = w_norms[i], &g_norm = g_norms[i];
        ++i;
        torch::Tensor update;
        if (o.exclude_bias_and_norm() && detail::whole_dim(p, shards_.get()) <= 1) {
          update = grad * o.lr();
        } else {
          const auto trust = detail::trust_ratio(w_norm, g_norm, o.trust_coefficient() * w_norm / (g_norm + o.weight_decay() * w_norm + o.eps()));
          update = (o.weight_decay() != 0 ? grad.add(p, o.weight_decay()) : grad) * (trust * o.lr());
        }
        auto& s = detail::state_of<LARSParamState>(state_, p, [&](LARSParamState& fresh) {
          fresh.momentum_buffer(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        });
        s.momentum_buffer().mul_(o.momentum()).add_(update);
        p.sub_(s.momentum_buffer());
      }
    }
    return loss;
  }

  // A sharded run's layers (set by MultiProcess's .shard()): the trust ratio uses whole tensors' norms.
  void shard(detail::layer_shards shards) { shards_ = std::make_shared<detail::layer_shards>(std::move(shards)); }

 private:
  std::shared_ptr<detail::layer_shards> shards_;
};

}  // namespace tp::optim
