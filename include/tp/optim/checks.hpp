#pragma once
// What tp's optimizers share: the checks of their options (an error that names the optimizer,
// the option and the allowed range), and a parameter's state, created at its first step.
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <sstream>

#include <torch/optim/optimizer.h>

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

// The state of parameter p, made by init(fresh) at its first step. LibTorch keys the states
// by the parameter's TensorImpl: as a string up to 2.0, as a pointer after.
template <class State, class States, class Init>
State& state_of(States& states, const torch::Tensor& p, Init&& init) {
  using key_type = typename std::remove_cvref_t<States>::key_type;
  key_type key;
  if constexpr (std::is_same_v<key_type, std::string>) {
    std::ostringstream text;  // as LibTorch 1.13 writes it
    text << p.unsafeGetTensorImpl();
    key = text.str();
  } else {
    key = p.unsafeGetTensorImpl();
  }
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

}  // namespace tp::optim::detail
