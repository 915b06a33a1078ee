#pragma once
// What tp needs to know about a batch, whatever its type: how to move it to a tower's device
// and how to describe its shapes in an error message. Tensors, torch::data::Example, std::pair,
// std::tuple and std::vector of those are understood; any other type is moved with its own
// `to(device)` if it has one and is otherwise left where it is; pin_batch puts a batch in pinned
// memory for a CUDA device.
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/cuda.h>
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

// Applies f (Tensor -> Tensor) to every tensor of a batch and returns the batch.
template <class B, class F>
B map_tensors(B batch, F&& f) {
  if constexpr (std::is_same_v<B, torch::Tensor>) {
    return batch.defined() ? f(std::move(batch)) : batch;
  } else if constexpr (requires { batch.data; batch.target; }) {
    batch.data = map_tensors(std::move(batch.data), f);
    batch.target = map_tensors(std::move(batch.target), f);
    return batch;
  } else if constexpr (detail::tuple_like<B>) {
    std::apply([&](auto&... part) { ((part = map_tensors(std::move(part), f)), ...); }, batch);
    return batch;
  } else if constexpr (detail::is_vector<B>::value) {
    for (auto& part : batch) part = map_tensors(std::move(part), f);
    return batch;
  } else {
    return batch;
  }
}

// Returns `batch` on `device`. Tensors already there are returned as they are (no copy); a type
// tp does not know is moved with its own `to(device)` if it has one.
template <class B>
B to_device(B batch, torch::Device device) {
  if constexpr (!std::is_same_v<B, torch::Tensor> && !requires { batch.data; batch.target; } &&
                !detail::tuple_like<B> && !detail::is_vector<B>::value &&
                requires { { batch.to(device) } -> std::convertible_to<B>; }) {
    return batch.to(device);
  } else {
    return map_tensors(std::move(batch), [device](torch::Tensor t) {
      return t.device() == device ? t : t.to(device, /*non_blocking=*/true);
    });
  }
}

namespace detail {
// Pinned (page-locked) host memory needs LibTorch with CUDA and a GPU: says so, naming `who`.
inline void check_pinned_memory_available(const std::string& who) {
  if (!torch::cuda::is_available())
    throw std::invalid_argument(who + ": pinned memory (for copies to a CUDA device) needs LibTorch with CUDA and a visible GPU, and "
                                      "this process has none; leave pinning off on the CPU (StagingInput asks for it only "
                                      "for a CUDA device)");
}
}  // namespace detail

// Returns `batch` with its CPU tensors in pinned memory, so that their copy to a CUDA device
// runs asynchronously (StagingInput's). Tensors already pinned, or not on the CPU, stay as they
// are (no copy).
template <class B>
B pin_batch(B batch) {
  return map_tensors(std::move(batch), [](torch::Tensor t) { return !t.device().is_cpu() || t.is_pinned() ? t : t.pin_memory(); });
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
