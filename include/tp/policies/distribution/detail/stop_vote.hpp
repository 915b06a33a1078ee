#pragma once
// A stop code (detail/stop_arbiter.hpp: 0 none, 1 a request, 2 the time budget, 1000 + a
// signal's number) as a few numbers that ride in a step's own collective instead of one of
// their own: one slot per code, set to 1 by a rank that votes for it. Summed (an all-reduce,
// even averaged and in fp16) or gathered, a slot is > 0 where any rank voted, and the highest
// such slot is the largest code: what a MAX all-reduce of the codes gives.
//
// reader reads the agreed slots without making the host wait for a device: votes in host
// memory are read at once; votes on a GPU are copied to pinned host memory behind the step's
// own work (an event marks the copy) and read at the next boundary, when the copy is long done.
// So on a GPU the ranks stop one step later still, all after the same step.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <thread>
#include <utility>

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
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

class reader {
 public:
  // `defer`: read each step's votes at the next boundary (votes on a device), else at once.
  explicit reader(bool defer) : defer_(defer) {}

  // After a step whose collectives carried the votes: `votes`, the slots as reduced or gathered.
  void post(const torch::Tensor& votes) {
    if (!defer_) {
      posted_.push_back({decode(votes), {}, std::nullopt});
      return;
    }
    torch::NoGradGuard no_grad;
    ballot b{0, torch::empty(votes.sizes(), votes.options().device(torch::kCPU).pinned_memory(votes.is_cuda())), std::nullopt};
    b.host.copy_(votes, /*non_blocking=*/true);
    if (!votes.is_cpu()) {  // the copy is queued behind the step on the device's current stream
      b.copied.emplace(votes.device().type());
      b.copied->record(c10::impl::VirtualGuardImpl(votes.device().type()).getStream(votes.device()));
    }
    posted_.push_back(std::move(b));
  }
  // The code to act on at a step boundary: the votes posted last (at once), or the ones before.
  int at_boundary() {
    if (posted_.size() <= (defer_ ? 1u : 0u)) return 0;
    const int code = read(posted_.front());
    posted_.pop_front();
    return code;
  }
  // Everything posted, read now and forgotten (an epoch's end agrees in a collective anyway).
  int drain() {
    int code = 0;
    for (auto& b : posted_) code = std::max(code, read(b));
    posted_.clear();
    return code;
  }

 private:
  struct ballot {
    int code;
    torch::Tensor host;  // deferred: the slots, in (pinned) host memory
    std::optional<c10::Event> copied;
  };
  static int read(ballot& b) {
    if (!b.host.defined()) return b.code;
    if (b.copied)
      while (!b.copied->query()) std::this_thread::yield();  // done a step ago, in practice
    return decode(b.host);
  }
  bool defer_;
  std::deque<ballot> posted_;
};

}  // namespace tp::detail::stop_vote
