#pragma once
// NAdam: Adam with Nesterov momentum (Dozat 2016), the update of Python's torch.optim.NAdam
// (PyTorch 2.x; 1.13's has a bug, an extra factor mu in mu_product_next, fixed by PyTorch's
// PR 92699). The default optimizer of the seed framework. A torch::optim::Optimizer: learning
// rate setters, checkpoints and every distribution policy work with it as with Adam.
//
//   tp::optim::NAdam(model->parameters(), tp::optim::NAdamOptions(2e-3).weight_decay(1e-4))
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>
#include <torch/serialize/archive.h>

#include <tp/optim/checks.hpp>

namespace tp::optim {

// NAdam's options (a parameter group's, or the defaults), torch.optim.NAdam's, in LibTorch's fluent
// style: NAdamOptions(2e-3).weight_decay(0.01).
struct NAdamOptions : torch::optim::OptimizerCloneableOptions<NAdamOptions> {
  NAdamOptions(double lr = 2e-3) : lr_(lr) {}
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(double, lr) = 2e-3;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 0;
  TORCH_ARG(double, momentum_decay) = 4e-3;

 public:
  void serialize(torch::serialize::InputArchive& archive) override {
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(betas_t, betas);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, momentum_decay);
  }
  void serialize(torch::serialize::OutputArchive& archive) const override {
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(betas);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(momentum_decay);
  }
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

// NAdam's state per parameter: its step count, the momentum cache's product, and Adam's two
// moments.
struct NAdamParamState : torch::optim::OptimizerCloneableParamState<NAdamParamState> {
  TORCH_ARG(std::int64_t, step) = 0;
  // The product of the momentum cache so far, kept in float as Python keeps it (a float32 tensor).
  TORCH_ARG(double, mu_product) = 1.0;
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);

 public:
  void serialize(torch::serialize::InputArchive& archive) override {
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(std::int64_t, step);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, mu_product);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg_sq);
  }
  void serialize(torch::serialize::OutputArchive& archive) const override {
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(mu_product);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
  }
};

class NAdam : public detail::serializable_optimizer<NAdamParamState, NAdamOptions> {
 public:
  explicit NAdam(std::vector<torch::optim::OptimizerParamGroup> groups, NAdamOptions defaults = {})
      : serializable_optimizer(std::move(groups), defaults) {
    const auto [beta1, beta2] = defaults.betas();
    detail::check_at_least("NAdam", "lr", defaults.lr(), 0);
    detail::check_at_least("NAdam", "eps", defaults.eps(), 0);
    detail::check_at_least("NAdam", "weight_decay", defaults.weight_decay(), 0);
    detail::check_at_least("NAdam", "momentum_decay", defaults.momentum_decay(), 0);
    detail::check_beta("NAdam", "betas[0]", beta1);
    detail::check_beta("NAdam", "betas[1]", beta2);
  }
  explicit NAdam(std::vector<torch::Tensor> params, NAdamOptions defaults = {})
      : NAdam(std::vector{torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

  torch::Tensor step(LossClosure closure = nullptr) override {
    auto loss = detail::closure_loss(closure);
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups_) {
      const auto& o = static_cast<const NAdamOptions&>(group.options());
      const auto [beta1, beta2] = o.betas();
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto grad = p.grad();
        auto& s = detail::state_of<NAdamParamState>(state_, p, [&](NAdamParamState& fresh) {
          detail::zero_moments(fresh, p);
        });
        s.step(s.step() + 1);
        const auto step = static_cast<double>(s.step());
        const double bias_correction2 = 1 - std::pow(beta2, step);
        if (o.weight_decay() != 0) grad = grad.add(p, o.weight_decay());
        // The momentum cache mu_t and mu_{t+1}.
        const double mu = beta1 * (1. - 0.5 * std::pow(0.96, step * o.momentum_decay()));
        const double mu_next = beta1 * (1. - 0.5 * std::pow(0.96, (step + 1) * o.momentum_decay()));
        s.mu_product(static_cast<float>(static_cast<float>(s.mu_product()) * static_cast<float>(mu)));
        const double mu_product_next = s.mu_product() * mu_next;
        detail::update_moments(s, grad, beta1, beta2);
        const auto denom = s.exp_avg_sq().div(bias_correction2).sqrt().add_(o.eps());
        p.addcdiv_(grad, denom, -o.lr() * (1. - mu) / (1. - s.mu_product()));
        p.addcdiv_(s.exp_avg(), denom, -o.lr() * mu_next / (1. - mu_product_next));
      }
    }
    return loss;
  }
};

}  // namespace tp::optim
