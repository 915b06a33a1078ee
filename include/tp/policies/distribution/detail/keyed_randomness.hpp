#pragma once
// Randomness keyed by where it is drawn, not by what was drawn before: with
// UpdateOptions::keyed_randomness(seed), each micro-batch of the default step draws its random
// numbers (dropout, noise) from the default generators seeded by (seed, global step, global
// micro-batch index), the index as TokenWindows numbers a step's batches: rank r's micro-batch m
// is r * micro_batches + m. So a micro-batch's dropout masks are the same whichever rank runs
// it, and a resumed run draws what the uninterrupted one drew without any rank's generator in
// the checkpoint (each rank's own generator, seeded apart, is not kept there: only rank 0's is).
//
// Only the micro-batches' forward passes are keyed (a backward that recomputes replays the
// forward's state, tp/recompute.hpp): the generators are put back as they were after each, so
// what draws outside them (weight initialisation, a data pipeline on the loop's thread) draws as
// it would without the option.
#include <cstdint>
#include <mutex>
#include <optional>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/types.h>

namespace tp::detail {

// SplitMix64's finaliser: a bijection that spreads every input bit over the output, so that
// neighbouring (step, index) pairs get unrelated seeds.
constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
constexpr std::uint64_t micro_batch_seed(std::uint64_t seed, std::int64_t step, std::int64_t index) noexcept {
  return mix64(mix64(mix64(seed) ^ static_cast<std::uint64_t>(step)) ^ static_cast<std::uint64_t>(index));
}

// For one micro-batch's forward: seeds the CPU generator (and `device`'s, on a GPU) with
// micro_batch_seed(seed, step, index); the destructor puts back the states they had. Without a
// seed it does nothing.
class keyed_generators {
 public:
  keyed_generators(std::optional<std::uint64_t> seed, torch::Device device, std::int64_t step, std::int64_t index) {
    if (!seed) return;
    generators_[0] = at::detail::getDefaultCPUGenerator();
    if (device.is_cuda()) generators_[1] = at::globalContext().defaultGenerator(device);
    const auto keyed = micro_batch_seed(*seed, step, index);
    for (int i = 0; i < 2; ++i)
      if (generators_[i].defined()) {
        std::lock_guard<std::mutex> lock(generators_[i].mutex());
        saved_[i] = generators_[i].get_state();
        generators_[i].set_current_seed(keyed);  // CPU: a fresh Mersenne twister, no cached normal; CUDA: Philox at offset 0
      }
  }
  keyed_generators(const keyed_generators&) = delete;
  keyed_generators& operator=(const keyed_generators&) = delete;
  ~keyed_generators() {
    for (int i = 0; i < 2; ++i)
      if (generators_[i].defined()) {
        std::lock_guard<std::mutex> lock(generators_[i].mutex());
        generators_[i].set_state(saved_[i]);
      }
  }

 private:
  at::Generator generators_[2];
  at::Tensor saved_[2];
};

}  // namespace tp::detail
