#pragma once
// LAMB: layer-wise adaptive moments for large batches (You et al. 2019, algorithm 2): Adam's
// direction plus decoupled weight decay, with each parameter tensor's step scaled by the trust
// ratio ‖w‖ / ‖u‖. For a parameter w with gradient g at step t:
//
//   m = β1·m + (1−β1)·g           v = β2·v + (1−β2)·g²
//   m̂ = m / (1−β1^t)              v̂ = v / (1−β2^t)
//   u = m̂ / (√v̂ + eps) + weight_decay·w
//   trust = ‖w‖ / ‖u‖   (1 if ‖w‖ = 0 or ‖u‖ = 0)
//   w = w − lr·trust·u
//
// exclude_bias_and_norm(true) takes the parameters of one dimension or less (biases, norms'
// scales and shifts) out of the weight decay and the trust ratio (trust 1). A
// torch::optim::Optimizer.
//
//   tp::optim::LAMB(model->parameters(), tp::optim::LAMBOptions(1e-3).weight_decay(0.01))
#include <cmath>
#include <cstdint>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>
#include <torch/serialize/archive.h>

#include <tp/optim/checks.hpp>
#include <tp/optim/trust_ratio.hpp>

namespace tp::optim {

// LAMB's options (a parameter group's, or the defaults), in LibTorch's fluent style:
// LAMBOptions(1e-3).weight_decay(0.01).
struct LAMBOptions : torch::optim::OptimizerCloneableOptions<LAMBOptions> {
  LAMBOptions(double lr = 1e-3) : lr_(lr) {}
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-6;
  TORCH_ARG(double, weight_decay) = 0;
  TORCH_ARG(bool, exclude_bias_and_norm) = false;

 public:
  void serialize(torch::serialize::InputArchive& archive) override {
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(betas_t, betas);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, exclude_bias_and_norm);
  }
  void serialize(torch::serialize::OutputArchive& archive) const override {
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(betas);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exclude_bias_and_norm);
  }
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

// LAMB's state per parameter: its step count and Adam's two moments.
using LAMBParamState = detail::moments_state;

class LAMB : public detail::serializable_optimizer<LAMBParamState, LAMBOptions> {
 public:
  explicit LAMB(std::vector<torch::optim::OptimizerParamGroup> groups, LAMBOptions defaults = {})
      : serializable_optimizer(std::move(groups), defaults) {
    const auto [beta1, beta2] = defaults.betas();
    detail::check_at_least("LAMB", "lr", defaults.lr(), 0);
    detail::check_at_least("LAMB", "eps", defaults.eps(), 0);
    detail::check_at_least("LAMB", "weight_decay", defaults.weight_decay(), 0);
    detail::check_beta("LAMB", "betas[0]", beta1);
    detail::check_beta("LAMB", "betas[1]", beta2);
  }
  explicit LAMB(std::vector<torch::Tensor> params, LAMBOptions defaults = {})
      : LAMB(std::vector{torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

  torch::Tensor step(LossClosure closure = nullptr) override {
    auto loss = detail::closure_loss(closure);
    torch::NoGradGuard no_grad;
    // The updates first, then every tensor's norms at once (across the ranks when sharded).
    std::vector<torch::Tensor> params, updates;
    std::vector<double> lrs;
    for (auto& group : param_groups_) {
      const auto& o = static_cast<const LAMBOptions&>(group.options());
      const auto [beta1, beta2] = o.betas();
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        const auto& grad = p.grad();
        auto& s = detail::state_of<LAMBParamState>(state_, p, [&](LAMBParamState& fresh) {
          detail::zero_moments(fresh, p);
        });
        s.step(s.step() + 1);
        const auto step = static_cast<double>(s.step());
        detail::update_moments(s, grad, beta1, beta2);
        auto update = (s.exp_avg() / (1 - std::pow(beta1, step))) / (s.exp_avg_sq() / (1 - std::pow(beta2, step))).sqrt().add_(o.eps());
        if (o.exclude_bias_and_norm() && detail::whole_dim(p, shards_.get()) <= 1) {
          p.sub_(update * o.lr());
          continue;
        }
        if (o.weight_decay() != 0) update.add_(p, o.weight_decay());
        params.push_back(p), updates.push_back(update), lrs.push_back(o.lr());
      }
    }
    const auto [w_norms, u_norms] = detail::layer_norms(params, updates, shards_.get());
    for (std::size_t i = 0; i < params.size(); ++i)
      params[i].sub_(updates[i] * (detail::trust_ratio(w_norms[i], u_norms[i], w_norms[i] / u_norms[i]) * lrs[i]));
    return loss;
  }

  // A sharded run's layers (set by MultiProcess's .shard()): the trust ratio uses whole tensors' norms.
  void shard(detail::layer_shards shards) { shards_ = std::make_shared<detail::layer_shards>(std::move(shards)); }

 private:
  std::shared_ptr<detail::layer_shards> shards_;
};

}  // namespace tp::optim
