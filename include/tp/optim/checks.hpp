#pragma once
// What tp's optimizers share: the checks of their options (an error that names the optimizer,
// the option and the allowed range), a parameter's state, created at its first step, Adam's
// moments, and saving and loading through LibTorch's optimizer serialization.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <sstream>

#include <torch/optim/optimizer.h>
#include <torch/optim/serialize.h>
#include <torch/serialize/archive.h>

namespace tp::optim::detail {

inline void check_at_least(const char* optimizer, const char* option, double value, double low) {
  if (!(value >= low))
    throw std::invalid_argument(std::string("tp::optim::") + optimizer + ": " + option + " must be >= " + std::to_string(low) +
                                ", got " + std::to_string(value));
}
inline void check_beta(const char* optimizer, const char* option, double value) {
  if (!(value >= 0 && value < 1))
    throw std::invalid_argument(std::string("tp::optim::") + optimizer + ": " + option + " must be in [0, 1), got " + std::to_string(value));
}

// The key of parameter p in an optimizer's state map. LibTorch keys the states by the
// parameter's TensorImpl: as a string up to 2.0, as a pointer after.
template <class States>
typename std::remove_cvref_t<States>::key_type param_state_key(const States&, const torch::Tensor& p) {
  using key_type = typename std::remove_cvref_t<States>::key_type;
  if constexpr (std::is_same_v<key_type, std::string>) {
    std::ostringstream text;  // as LibTorch 1.13 writes it
    text << p.unsafeGetTensorImpl();
    return text.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

// The state of parameter p, made by init(fresh) at its first step.
template <class State, class States, class Init>
State& state_of(States& states, const torch::Tensor& p, Init&& init) {
  const auto key = param_state_key(states, p);
  auto found = states.find(key);
  if (found == states.end()) {
    auto fresh = std::make_unique<State>();
    init(*fresh);
    found = states.emplace(key, std::move(fresh)).first;
  }
  return static_cast<State&>(*found->second);
}

// The loss of an optimizer's closure, evaluated with gradients on (none without a closure).
inline torch::Tensor closure_loss(const torch::optim::Optimizer::LossClosure& closure) {
  if (!closure) return {};
  torch::AutoGradMode enable_grad(true);
  return closure();
}

// The state of an optimizer with Adam's moments: its step count and the two moments.
struct moments_state : torch::optim::OptimizerCloneableParamState<moments_state> {
  TORCH_ARG(std::int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);

 public:
  void serialize(torch::serialize::InputArchive& archive) override {
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(std::int64_t, step);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg);
    _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg_sq);
  }
  void serialize(torch::serialize::OutputArchive& archive) const override {
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
    _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
  }
};

// Adam's first and second moments of the gradient, updated in place.
template <class State>
void update_moments(State& s, const torch::Tensor& grad, double beta1, double beta2) {
  s.exp_avg().mul_(beta1).add_(grad, 1 - beta1);
  s.exp_avg_sq().mul_(beta2).addcmul_(grad, grad, 1 - beta2);
}
// The zero moments of a parameter's first step.
template <class State>
void zero_moments(State& s, const torch::Tensor& p) {
  s.exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
  s.exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
}

// An optimizer whose per-parameter state is State and whose options are Options: saved and
// loaded as LibTorch saves its own (so tp's checkpoints hold them like Adam's).
template <class State, class Options>
class serializable_optimizer : public torch::optim::Optimizer {
 public:
  serializable_optimizer(std::vector<torch::optim::OptimizerParamGroup> groups, const Options& defaults)
      : Optimizer(std::move(groups), std::make_unique<Options>(defaults)) {}
  void save(torch::serialize::OutputArchive& archive) const override { torch::optim::serialize<State, Options>(archive, *this); }
  void load(torch::serialize::InputArchive& archive) override { torch::optim::serialize<State, Options>(archive, *this); }
};

}  // namespace tp::optim::detail
