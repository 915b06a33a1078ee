#pragma once
// What every distribution policy does between the towers' gradients and the optimizer step, in
// LibTorch's fluent style (as TrainOptions). A policy takes them whole or one at a time, with
// the same names:
//
//   tp::Replicated<>::cpu(2).update(tp::UpdateOptions().accumulate(4).bucket_bytes(1 << 20))
//   tp::Replicated<>::cpu(2).accumulate(4).bucket_bytes(1 << 20)
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <torch/arg.h>

#include <tp/gradient_processing.hpp>

namespace tp {

struct UpdateOptions {
  // Gradient processing (clipping, NaN policy), once on the reduced gradients.
  TORCH_ARG(GradientProcessing, gradients);
  // Gradient accumulation: micro-batches per optimizer step (see policies/distribution/detail/micro_batches.hpp).
  TORCH_ARG(int, accumulate) = 1;
  // The largest bucket of fused gradients, in bytes, for the policies that fuse them before
  // reducing (Replicated, ParameterServer, MultiProcess); the others have nothing to fuse.
  TORCH_ARG(std::size_t, bucket_bytes) = std::size_t{25} << 20;
  // Randomness keyed by place: each micro-batch of the default step draws from the default
  // generators seeded by (this seed, global step, global micro-batch index), so that a
  // multi-process run with dropout resumes to the bits of the uninterrupted one and a
  // micro-batch's masks do not depend on which rank runs it
  // (policies/distribution/detail/keyed_randomness.hpp). SingleDevice and MultiProcess only:
  // the other policies' towers share the generators between threads.
  TORCH_ARG(std::optional<std::uint64_t>, keyed_randomness);

 public:
  // Throws std::invalid_argument saying which option is wrong and how to set it right; `owner`
  // is who the message names (a policy passes its own name: the user wrote the policy's setter).
  void validate(std::string_view owner = "UpdateOptions") const {
    const std::string who = "tp::" + std::string(owner) + ": ";
    if (accumulate_ < 1)
      throw std::invalid_argument(who + "accumulate must be >= 1 micro-batch per optimizer step, got " +
                                  std::to_string(accumulate_));
    if (bucket_bytes_ == 0)
      throw std::invalid_argument(who + "bucket_bytes must be > 0 (the largest bucket of fused gradients, in bytes; 1 gives "
                                        "each tensor a bucket of its own)");
  }
};

}  // namespace tp
