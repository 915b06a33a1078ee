#pragma once
// The input concept family.
//
// An input policy is where batches come from. It must have `next_batch()`, which returns the
// batch for the next step by value (a tensor, a `torch::data::Example`, a tuple, any type the
// tower function accepts). It never returns "nothing": an input that runs out of data starts a
// new pass, and one that cannot produce a batch at all throws, saying why. With several towers
// next_batch() is called from several threads at once, so such an input must be thread-safe.
//
// Optional capabilities, each a named concept required whole or not at all (an input that has
// half of one fails to compile, naming the rule, rather than misbehaving at run time):
//   background_input   start() and stop(): the trainer calls them when training starts and when
//                      it ends (on every exit path), for inputs that run threads
//   resumable_input    position() and restore(p): the input's place in its data, saved with a
//                      checkpoint so that a resumed run sees exactly the batches it would have
//   channels_last_input channels_last(bool): the trainer asks for channels-last batches when the
//                      tower wants them
//   sized_input        batches_per_pass(): how many batches a pass of its data has, where it can
//                      tell (std::optional); TrainOptions' default steps_per_epoch is one pass
//   pinned_memory_input pin_memory(bool): StagingInput asks for batches in pinned (page-locked)
//                      host memory when it feeds a CUDA device, so that their copy is asynchronous
//
// Level 1: `detail::has_next_batch<I>` (the member exists and returns a value).
// Level 2: `input_policy<I>`, which also requires the policy to be movable into the trainer.
#include <concepts>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include <tp/concepts/member_names.hpp>
#include <tp/data/state.hpp>

namespace tp::detail {
TP_DETAIL_NAME_PROBE(start)
TP_DETAIL_NAME_PROBE(stop)
TP_DETAIL_NAME_PROBE(position)
TP_DETAIL_NAME_PROBE(restore)
TP_DETAIL_NAME_PROBE(channels_last)
TP_DETAIL_NAME_PROBE(batches_per_pass)
TP_DETAIL_NAME_PROBE(pin_memory)

template <class I>
concept has_next_batch = requires(I& input) {
  { input.next_batch() };
} && !std::is_void_v<decltype(std::declval<I&>().next_batch())>;
}  // namespace tp::detail

namespace tp {

// An input policy: next_batch() returns the next step's batch by value, and the policy moves into
// the trainer.
template <class I>
concept input_policy = detail::has_next_batch<I> && std::move_constructible<I>;

// An input that runs threads: the trainer calls start() when training starts and stop() when it
// ends.
template <class I>
concept background_input = requires(I& input) {
  input.start();
  input.stop();
};

// An input whose place in its data (position(), restore(p)) is saved with checkpoints, so that a
// resumed run sees the batches it would have.
template <class I>
concept resumable_input = requires(I& input, const I& constant, const data::position& where) {
  { constant.position() } -> std::convertible_to<data::position>;
  input.restore(where);
};

// An input that makes channels-last batches when the trainer asks (channels_last(true)), for a
// tower that computes in that format.
template <class I>
concept channels_last_input = requires(I& input) { input.channels_last(true); };

// An input that makes its batches in pinned host memory when asked (pin_memory(true)), for
// StagingInput's asynchronous copies.
template <class I>
concept pinned_memory_input = requires(I& input) { input.pin_memory(true); };

// An input that can tell how many batches a pass of its data has (batches_per_pass()), where it
// knows.
template <class I>
concept sized_input = requires(I& input) {
  { input.batches_per_pass() } -> std::convertible_to<std::optional<std::int64_t>>;
};

// The batch an input policy produces.
template <input_policy I>
using batch_t = std::remove_cvref_t<decltype(std::declval<I&>().next_batch())>;

namespace detail {
// The optional capabilities: a member that names one must be all of it. Through variables, as
// in check_callback: given the concept, the compiler explains each of its requirements.
template <class I>
constexpr void check_input_capabilities() {
  constexpr bool half_background = (names_member_start<I> || names_member_stop<I>) && !background_input<I>;
  static_assert(!half_background,
                "tp rule [input_policy: background threads]: an input with start() or stop() must have "
                "both, callable without arguments: the trainer starts its threads when training "
                "starts and stops them on every exit path");
  constexpr bool half_resumable = (names_member_position<I> || names_member_restore<I>) && !resumable_input<I>;
  static_assert(!half_resumable,
                "tp rule [input_policy: resumable]: an input with position() or restore() must have "
                "both: `tp::data::position position() const` and `void restore(const "
                "tp::data::position&)`; a checkpoint saves one and a resumed run restores it");
  constexpr bool bad_channels_last = names_member_channels_last<I> && !channels_last_input<I>;
  static_assert(!bad_channels_last,
                "tp rule [input_policy: channels_last]: an input's channels_last must be callable as "
                "channels_last(bool)");
  constexpr bool bad_pin = names_member_pin_memory<I> && !pinned_memory_input<I>;
  static_assert(!bad_pin,
                "tp rule [input_policy: pin_memory]: an input's pin_memory must be callable as "
                "pin_memory(bool); StagingInput calls it for a CUDA device");
  constexpr bool bad_size = names_member_batches_per_pass<I> && !sized_input<I>;
  static_assert(!bad_size,
                "tp rule [input_policy: batches_per_pass]: an input's batches_per_pass must be callable "
                "as batches_per_pass(), returning a std::optional<std::int64_t> (empty: it cannot tell)");
}

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
  if constexpr (has_next_batch<I>) check_input_capabilities<I>();
  return input_policy<I>;
}
}  // namespace detail

}  // namespace tp
