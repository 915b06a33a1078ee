#pragma once
// A stop code (detail/stop_arbiter.hpp: 0 none, 1 a request, 2 the time budget, 1000 + a
// signal's number) as a few numbers that ride in a step's own collective instead of one of
// their own: one slot per code, set to 1 by a rank that votes for it. Summed (an all-reduce,
// even averaged and in fp16) or gathered, a slot is > 0 where any rank voted, and the highest
// such slot is the largest code: what a MAX all-reduce of the codes gives.
#include <algorithm>
#include <cstdint>

#include <torch/types.h>

namespace tp::detail::stop_vote {

inline constexpr int largest_signal = 64;
inline constexpr std::int64_t slots = 3 + largest_signal;

inline std::int64_t slot_of(int code) {
  if (code >= 1000) return 2 + std::clamp(code - 1000, 0, largest_signal);
  return std::clamp(code, 1, 2) - 1;
}
inline int code_of(std::int64_t slot) { return slot >= 2 ? 1000 + static_cast<int>(slot - 2) : static_cast<int>(slot + 1); }

// The largest code voted for in `votes` (slots numbers, or several ranks' one after another).
inline int decode(const torch::Tensor& votes) {
  const auto sums = votes.reshape({-1, slots}).to(torch::kCPU, torch::kFloat).abs().sum(0).contiguous();
  const float* v = sums.data_ptr<float>();
  for (std::int64_t s = slots - 1; s >= 0; --s)
    if (v[s] > 0) return code_of(s);
  return 0;
}

}  // namespace tp::detail::stop_vote
