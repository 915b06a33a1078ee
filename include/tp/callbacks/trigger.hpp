#pragma once
// Triggers: run a callback's step hooks every N steps or once at a step, or its epoch hooks
// every N epochs (tensorpack's PeriodicTrigger). The other hooks (setup, before_train,
// on_interrupt, after_train, on_scalar and the hooks of the other kind) always pass through, so the wrapped callback can
// still set itself up and tear itself down.
//
//   tp::every_n_steps(100, PrintWeights{})     after_step at global_step 100, 200, ...
//   tp::every_n_epochs(2, Validation{...})      after_epoch at epoch 2, 4, ...
//   tp::once_at_step(500, DumpActivations{})    after_step when global_step reaches 500
//   tp::enable_if(pred, cb)                     epoch and step hooks only while pred(trainer)
//
// Steps are counted by global_step and epochs by epoch_num, so a schedule survives a resume.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <tp/concepts/callback.hpp>
#include <tp/callbacks/detail/forward_hooks.hpp>

namespace tp {

// When a trigger lets its callback's hooks run: every_n_steps, once_at_step, every_n_epochs.
namespace schedule {

// Step hooks at every step s (counted by global_step after the step) with s % n == 0.
struct every_n_steps {
  std::int64_t n;
  static constexpr bool gates_steps = true;
  bool due_at_step(std::int64_t step) const noexcept { return step % n == 0; }
};

// Step hooks once, for the step that makes global_step equal to `step`.
struct once_at_step {
  std::int64_t step;
  static constexpr bool gates_steps = true;
  bool due_at_step(std::int64_t s) const noexcept { return s == step; }
};

// Epoch hooks at every epoch e with e % n == 0.
struct every_n_epochs {
  std::int64_t n;
  static constexpr bool gates_steps = false;
  bool due_at_epoch(int epoch) const noexcept { return epoch % n == 0; }
};

}  // namespace schedule

namespace detail {
// A trigger's rules; returns whether they hold (see check_callback). The hook rules are checked
// only for a callback: for anything else they would repeat its error.
template <class Inner, class Schedule>
constexpr bool check_trigger() {
  constexpr bool wraps_a_callback = callback<Inner>;  // a variable: see check_callback
  static_assert(wraps_a_callback, "tp rule [callback: has a hook]: a trigger wraps a callback, and this is none");
  if constexpr (wraps_a_callback) {
    static_assert(!Schedule::gates_steps || names_before_step<Inner> || names_after_step<Inner>,
                  "tp rule [trigger: step hook]: a step trigger (every_n_steps, once_at_step) "
                  "wraps a callback with before_step or after_step; this one has neither");
    static_assert(Schedule::gates_steps || names_before_epoch<Inner> || names_after_epoch<Inner>,
                  "tp rule [trigger: epoch hook]: every_n_epochs wraps a callback with "
                  "before_epoch or after_epoch; this one has neither");
    return Schedule::gates_steps ? names_before_step<Inner> || names_after_step<Inner>
                                 : names_before_epoch<Inner> || names_after_epoch<Inner>;
  }
  return false;
}
}  // namespace detail

// What every_n_steps, every_n_epochs and once_at_step return: the callback inner, whose step or
// epoch hooks run only when the schedule says; make one with those functions.
template <class Inner, class Schedule>
class Trigger : public detail::forward_hooks<Trigger<Inner, Schedule>, Inner> {
  // The factories check first and make no Trigger when a rule fails; this catches direct use.
  static_assert(detail::check_trigger<Inner, Schedule>());

 public:
  Trigger(Schedule schedule, Inner inner) : schedule_(schedule), inner_(std::move(inner)) {}

  Inner& inner() noexcept { return inner_; }
  const Inner& inner() const noexcept { return inner_; }

  template <class Tag, class Trainer>
  void dispatch(Trainer& trainer) {
    if constexpr (Schedule::gates_steps && std::is_same_v<Tag, detail::before_step_tag>) {
      if (!schedule_.due_at_step(trainer.global_step() + 1)) return;
    } else if constexpr (Schedule::gates_steps && std::is_same_v<Tag, detail::after_step_tag>) {
      if (!schedule_.due_at_step(trainer.global_step())) return;
    } else if constexpr (!Schedule::gates_steps && Tag::kind == detail::hook_kind::epoch) {
      if (!schedule_.due_at_epoch(trainer.epoch_num())) return;
    }
    Tag::call(inner_, trainer);
  }

 private:
  Schedule schedule_;
  Inner inner_;
};

namespace detail {
inline std::int64_t positive(std::int64_t n, const char* what) {
  if (n <= 0)
    throw std::invalid_argument(std::string("tp::") + what + ": the period must be > 0, got " + std::to_string(n));
  return n;
}

// A callback that breaks a trigger rule makes no Trigger (see broken_callback).
template <class Schedule, class Inner>
auto make_trigger(Schedule schedule, Inner inner) {
  if constexpr (check_trigger<Inner, Schedule>()) return Trigger<Inner, Schedule>(schedule, std::move(inner));
  else return broken_callback{};
}
}  // namespace detail

// Runs inner's before_step and after_step hooks only at the steps whose global_step (after the
// step) is a multiple of n > 0.
template <class Inner>
auto every_n_steps(std::int64_t n, Inner inner) {
  return detail::make_trigger(schedule::every_n_steps{detail::positive(n, "every_n_steps")}, std::move(inner));
}

// Runs inner's before_epoch and after_epoch hooks only in the epochs whose number is a multiple of
// n > 0.
template <class Inner>
auto every_n_epochs(std::int64_t n, Inner inner) {
  return detail::make_trigger(schedule::every_n_epochs{detail::positive(n, "every_n_epochs")}, std::move(inner));
}

// Runs inner's step hooks only for the step that makes global_step equal to step (> 0).
template <class Inner>
auto once_at_step(std::int64_t step, Inner inner) {
  return detail::make_trigger(schedule::once_at_step{detail::positive(step, "once_at_step")}, std::move(inner));
}

// Runs a callback's epoch and step hooks only while pred(trainer) holds (tensorpack's
// EnableCallbackIf); setup, before_train, on_interrupt, after_train and on_scalar always pass.
template <class Inner, class Predicate>
class EnabledIf : public detail::forward_hooks<EnabledIf<Inner, Predicate>, Inner> {
 public:
  EnabledIf(Predicate predicate, Inner inner) : predicate_(std::move(predicate)), inner_(std::move(inner)) {}
  Inner& inner() noexcept { return inner_; }

  template <class Tag, class Trainer>
  void dispatch(Trainer& trainer) {
    constexpr bool gated = Tag::kind == detail::hook_kind::epoch || Tag::kind == detail::hook_kind::step;
    if constexpr (gated) {
      if (!predicate_(std::as_const(trainer))) return;
    }
    Tag::call(inner_, trainer);
  }

 private:
  Predicate predicate_;
  Inner inner_;
};

// Runs inner's epoch and step hooks only while predicate(trainer) holds; its other hooks always run
// (see EnabledIf).
template <class Predicate, class Inner>
auto enable_if(Predicate predicate, Inner inner) {
  constexpr bool wraps_a_callback = callback<Inner>;  // a variable: see check_callback
  static_assert(wraps_a_callback, "tp rule [callback: has a hook]: enable_if wraps a callback, and this is none");
  if constexpr (wraps_a_callback) return EnabledIf<Inner, Predicate>(std::move(predicate), std::move(inner));
  else return detail::broken_callback{};
}

}  // namespace tp
