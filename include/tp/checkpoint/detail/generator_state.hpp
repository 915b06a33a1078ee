#pragma once
// The random generators a checkpoint holds, so that a resumed run draws the numbers the
// uninterrupted one would have: the default CPU generator (dropout, randn, randperm) and every
// visible CUDA device's (dropout on the GPU), as their state tensors:
//
//   {"cpu": uint8 tensor, "cuda": [uint8 tensor, ...]}      (cuda empty without CUDA)
//
// CUDA's are reached through ATen's device-generic context, so this compiles and runs with a
// CPU-only LibTorch. A run resumed on fewer GPUs restores those it has.
#include <algorithm>
#include <cstdint>
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/cuda.h>

#include <tp/checkpoint/state_tree.hpp>

namespace tp::detail {

inline std::int64_t cuda_generator_count() {
  return torch::cuda::is_available() ? static_cast<std::int64_t>(torch::cuda::device_count()) : 0;
}
inline at::Generator cuda_generator(std::int64_t i) {
  return at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)));
}

inline void save_generators(state_tree& out) {
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    out.put("cpu", generator.get_state());
  }
  c10::impl::GenericList cuda(c10::AnyType::get());
  for (std::int64_t i = 0; i < cuda_generator_count(); ++i) {
    auto generator = cuda_generator(i);
    std::lock_guard<std::mutex> lock(generator.mutex());
    cuda.push_back(generator.get_state());
  }
  out.put("cuda", cuda);
}

inline void load_cpu_generator(const state_tree& in) {
  const auto state = in.tensor("cpu");
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  try {
    generator.set_state(state);
  } catch (const c10::Error& e) {
    throw checkpoint_error("the checkpoint's '" + in.path() + "/cpu' is not a CPU generator's state: " + e.what_without_backtrace());
  }
}

inline void load_generators(const state_tree& in) {
  load_cpu_generator(in);
  const auto cuda = in.items("cuda");
  for (std::int64_t i = 0; i < std::min<std::int64_t>(static_cast<std::int64_t>(cuda.size()), cuda_generator_count()); ++i) {
    if (!cuda[i].isTensor()) throw checkpoint_error("the checkpoint's '" + in.path() + "/cuda' holds something else than generator states");
    auto generator = cuda_generator(i);
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(cuda[i].toTensor());
  }
}

}  // namespace tp::detail
