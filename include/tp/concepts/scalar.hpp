#pragma once
// Scalars: what trainer.put_scalar(name, value) sends to the monitors (callbacks with on_scalar).
// A scalar is a number, or a one-element tensor (read only when some monitor listens).
#include <concepts>

#include <torch/types.h>

namespace tp {

// What put_scalar takes: a number (anything convertible to double) or a one-element tensor.
template <class V>
concept scalar_value = std::convertible_to<const V&, double> || std::convertible_to<const V&, const torch::Tensor&>;

namespace detail {
// Returns whether the rule holds (see check_callback).
template <class V>
constexpr bool check_scalar() {
  static_assert(scalar_value<V>,
                "tp rule [put_scalar: number]: put_scalar takes a number or a one-element "
                "torch::Tensor, and this value is neither");
  return scalar_value<V>;
}
}  // namespace detail

}  // namespace tp
