#pragma once
// RAdam: Adam with the variance of its adaptive learning rate rectified (Liu et al. 2019):
// plain momentum SGD while too few steps make the variance estimate unreliable (rho_t <= 5),
// rectified Adam after. The update of Python's torch.optim.RAdam. A torch::optim::Optimizer.
//
//   tp::optim::RAdam(model->parameters(), tp::optim::RAdamOptions(1e-3).weight_decay(1e-4))
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

namespace tp::optim {

// RAdam's options (a parameter group's, or the defaults), torch.optim.RAdam's, in LibTorch's fluent
// style: RAdamOptions(1e-3).weight_decay(0.01).
struct RAdamOptions : torch::optim::OptimizerCloneableOptions<RAdamOptions> {
  RAdamOptions(double lr = 1e-3) : lr_(lr) {}
  using betas_t = std::tuple<double, double>;
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-8;
  TORCH_ARG(double, weight_decay) = 0;

 public:
  void serialize(torch::serialize::InputArchive& archive) override {
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(betas_t, betas);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  }
  void serialize(torch::serialize::OutputArchive& archive) const override {
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(betas);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  }
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

// RAdam's state per parameter: its step count and Adam's two moments.
using RAdamParamState = detail::moments_state;

class RAdam : public detail::serializable_optimizer<RAdamParamState, RAdamOptions> {
 public:
  explicit RAdam(std::vector<torch::optim::OptimizerParamGroup> groups, RAdamOptions defaults = {})
      : serializable_optimizer(std::move(groups), defaults) {
    const auto [beta1, beta2] = defaults.betas();
    detail::check_at_least("RAdam", "lr", defaults.lr(), 0);
    detail::check_at_least("RAdam", "eps", defaults.eps(), 0);
    detail::check_at_least("RAdam", "weight_decay", defaults.weight_decay(), 0);
    detail::check_beta("RAdam", "betas[0]", beta1);
    detail::check_beta("RAdam", "betas[1]", beta2);
  }
  explicit RAdam(std::vector<torch::Tensor> params, RAdamOptions defaults = {})
      : RAdam(std::vector{torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

  torch::Tensor step(LossClosure closure = nullptr) override {
    auto loss = detail::closure_loss(closure);
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups_) {
      const auto& o = static_cast<const RAdamOptions&>(group.options());
      const auto [beta1, beta2] = o.betas();
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto grad = p.grad();
        auto& s = detail::state_of<RAdamParamState>(state_, p, [&](RAdamParamState& fresh) {
          detail::zero_moments(fresh, p);
        });
        s.step(s.step() + 1);
        const auto step = static_cast<double>(s.step());
        const double bias_correction1 = 1 - std::pow(beta1, step);
        const double bias_correction2 = 1 - std::pow(beta2, step);
        if (o.weight_decay() != 0) grad = grad.add(p, o.weight_decay());
        detail::update_moments(s, grad, beta1, beta2);
        const auto bias_corrected_exp_avg = s.exp_avg() / bias_correction1;
        // The length of the approximated simple moving average: its limit, and at this step.
        const double rho_inf = 2 / (1 - beta2) - 1;
        const double rho_t = rho_inf - 2 * step * std::pow(beta2, step) / bias_correction2;
        if (rho_t > 5.) {
          const double rect = std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t));
          const auto adaptive_lr = std::sqrt(bias_correction2) / s.exp_avg_sq().sqrt().add_(o.eps());
          p.add_(bias_corrected_exp_avg * o.lr() * adaptive_lr * rect, -1.0);
        } else {
          p.add_(bias_corrected_exp_avg * o.lr(), -1.0);
        }
      }
    }
    return loss;
  }
};

}  // namespace tp::optim
