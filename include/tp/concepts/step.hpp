#pragma once
// A user's step: what Trainer::train(step) calls once per step, as step(trainer). It returns the
// step's cost (a torch::Tensor, which the progress bar shows) or nothing.
#include <concepts>
#include <type_traits>

#include <torch/types.h>

namespace tp {

namespace detail {
enum class step_returns { cost, nothing, broken };

// What the step returns, once its rules are checked; a step that breaks one is not called, so
// that the rule is the only error.
template <class Step, class Trainer>
constexpr step_returns check_step() {
  static_assert(std::bool_constant<std::invocable<Step&, Trainer&>>::value,  // bool: see check_input
                "tp rule [step: takes the trainer]: a step is called as step(trainer); declare it "
                "as [](auto& trainer) { ... }");
  if constexpr (!std::invocable<Step&, Trainer&>) return step_returns::broken;
  else {
    using result = std::invoke_result_t<Step&, Trainer&>;
    static_assert(std::is_void_v<result> || std::is_convertible_v<result, torch::Tensor>,
                  "tp rule [step: returns a cost]: a step returns its cost as a torch::Tensor, or "
                  "nothing; wrap a number in torch::tensor(x)");
    if constexpr (std::is_void_v<result>) return step_returns::nothing;
    else if constexpr (std::is_convertible_v<result, torch::Tensor>) return step_returns::cost;
    else return step_returns::broken;
  }
}
}  // namespace detail

}  // namespace tp
