#pragma once
// The input concept family.
//
// An input policy is where batches come from. It must have `next_batch()`, which returns the
// batch for the next step by value (a tensor, a `torch::data::Example`, a tuple, any type the
// tower function accepts). It never returns "nothing": an input that runs out of data starts a
// new pass, and one that cannot produce a batch at all throws, saying why. With several towers
// next_batch() is called from several threads at once, so such an input must be thread-safe.
//
// Optional: `start()` and `stop()`, which the trainer calls when training starts and when it
// ends (on every exit path), for inputs that run threads; `position()` and `restore(p)`, for
// inputs whose place in the data can be saved with a checkpoint.
//
// Level 1: `detail::has_next_batch<I>` (the member exists and returns a value).
// Level 2: `input_policy<I>`, which also requires the policy to be movable into the trainer.
#include <concepts>
#include <type_traits>
#include <utility>

namespace tp::detail {
template <class I>
concept has_next_batch = requires(I& input) {
  { input.next_batch() };
} && !std::is_void_v<decltype(std::declval<I&>().next_batch())>;
}  // namespace tp::detail

namespace tp {

template <class I>
concept input_policy = detail::has_next_batch<I> && std::move_constructible<I>;

// The batch an input policy produces.
template <input_policy I>
using batch_t = std::remove_cvref_t<decltype(std::declval<I&>().next_batch())>;

namespace detail {
// Returns whether the rules hold (see check_callback).
template <class I>
constexpr bool check_input() {
  static_assert(has_next_batch<I>,
                "tp rule [input_policy: next_batch]: an input policy must have a member "
                "`next_batch()` that returns the next batch by value (see FeedInput, "
                "DummyInput)");
  // The concept as a plain bool: the compiler's account of std::move_constructible would only
  // add the standard library's include chain to the rule.
  static_assert(std::bool_constant<std::move_constructible<I>>::value,
                "tp rule [input_policy: movable]: an input policy must be move-constructible; "
                "the trainer owns it");
  return input_policy<I>;
}
}  // namespace detail

}  // namespace tp
