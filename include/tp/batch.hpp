#pragma once
// What tp needs to know about a batch, whatever its type: how to move it to a tower's device
// and how to describe its shapes in an error message. Tensors, torch::data::Example, std::pair,
// std::tuple and std::vector of those are understood; any other type is moved with its own
// `to(device)` if it has one and is otherwise left where it is.
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/data/example.h>
#include <torch/types.h>

namespace tp {

namespace detail {
template <class T>
struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};
template <class T>
concept tuple_like = requires { std::tuple_size<T>::value; } && !std::is_same_v<T, torch::Tensor>;
}  // namespace detail

// Returns `batch` on `device`. Tensors already there are returned as they are (no copy).
template <class B>
B to_device(B batch, torch::Device device) {
  if constexpr (std::is_same_v<B, torch::Tensor>) {
    if (!batch.defined() || batch.device() == device) return batch;
    return batch.to(device, /*non_blocking=*/true);
  } else if constexpr (requires { batch.data; batch.target; }) {
    batch.data = to_device(std::move(batch.data), device);
    batch.target = to_device(std::move(batch.target), device);
    return batch;
  } else if constexpr (detail::tuple_like<B>) {
    std::apply([&](auto&... part) { ((part = to_device(std::move(part), device)), ...); }, batch);
    return batch;
  } else if constexpr (detail::is_vector<B>::value) {
    for (auto& part : batch) part = to_device(std::move(part), device);
    return batch;
  } else if constexpr (requires { { batch.to(device) } -> std::convertible_to<B>; }) {
    return batch.to(device);
  } else {
    return batch;
  }
}

// "[64, 1, 28, 28]" for a tensor, "(data [64, 1, 28, 28], target [64])" for an Example.
template <class B>
std::string describe_shapes(const B& batch) {
  std::ostringstream out;
  if constexpr (std::is_same_v<B, torch::Tensor>) {
    if (batch.defined()) out << batch.sizes(); else out << "undefined tensor";
  } else if constexpr (requires { batch.data; batch.target; }) {
    out << "(data " << describe_shapes(batch.data) << ", target " << describe_shapes(batch.target) << ")";
  } else if constexpr (detail::tuple_like<B>) {
    out << "(";
    std::size_t i = 0;
    std::apply([&](const auto&... part) { ((out << (i++ ? ", " : "") << describe_shapes(part)), ...); }, batch);
    out << ")";
  } else if constexpr (detail::is_vector<B>::value) {
    out << "{";
    for (std::size_t i = 0; i < batch.size(); ++i) out << (i ? ", " : "") << describe_shapes(batch[i]);
    out << "}";
  } else {
    out << "a batch of a type tp cannot describe";
  }
  return out.str();
}

}  // namespace tp
