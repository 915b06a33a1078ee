#pragma once
// The callback concept family.
//
// A callback is a plain class with any subset of these hooks, each called with the trainer:
//
//   setup(trainer)          once, first in train(), before the input starts: the place to load
//                           a checkpoint (trainer.load_state) so that the run resumes
//   before_train(trainer)   once, before the first step; end hooks pair with it
//   before_epoch(trainer)   at the start of every epoch
//   before_step(trainer)    before every step
//   after_step(trainer)     after every step (global_step already counts it)
//   after_epoch(trainer)    at the end of every epoch (tensorpack's trigger_epoch)
//   on_interrupt(trainer)   when a stop signal or the time budget ends training early, after
//                           the last step's hooks (or its epoch's end), before after_train:
//                           checkpoint writers save there (the on-stop save)
//   after_train(trainer)    once, on every exit path: normal end, stop request, exception
//   on_scalar(trainer, name, value)   a scalar was put (monitors); name is std::string_view
//   on_histogram(trainer, name, values)   a tensor whose distribution was put (put_histogram)
//   on_image(trainer, name, image)        an image was put (put_image): a uint8 tensor, [H, W, C]
//   on_text(trainer, name, text)          a text was put (put_text); text is std::string_view
//   on_epoch_times(trainer, times)        after an epoch's last hook: how long the epoch and each
//                           callback's hooks in it took (tp::epoch_times); the trainer times the
//                           hooks only when a callback has this hook
//
// Level 1 (detail): for each hook, whether the type *names* it (a member of that name exists,
// whatever its signature) and whether it is *callable* with the trainer. Level 2 (public):
// `callback<C>` names at least one hook; `callback_for<C, Trainer>` also has every named hook
// callable with that trainer. Naming a hook that cannot be called is an error rather than a
// silently ignored hook: a typo in a parameter list must not turn a callback into a no-op.
#include <string_view>
#include <type_traits>
#include <utility>

#include <torch/types.h>

#include <tp/detail/callback_clock.hpp>

namespace tp::detail {

// Name detection: derive from C and from a probe holding a member of the same name. Looking
// the name up in the mix is ambiguous exactly when C declares it (function, template or data).
#define TP_DETAIL_HOOK_TRAITS(hook)                                                             \
  struct hook##_probe {                                                                       \
    void hook();                                                                              \
  };                                                                                          \
  template <class C>                                                                          \
  struct hook##_mix : C, hook##_probe {};                                                     \
  template <class C>                                                                          \
  concept names_##hook =                                                                      \
      std::is_class_v<C> && !std::is_final_v<C> && !requires { &hook##_mix<C>::hook; };       \
  template <class C, class T>                                                                 \
  concept callable_##hook = requires(C& c, T& t) { c.hook(t); };

TP_DETAIL_HOOK_TRAITS(setup)
TP_DETAIL_HOOK_TRAITS(before_train)
TP_DETAIL_HOOK_TRAITS(before_epoch)
TP_DETAIL_HOOK_TRAITS(before_step)
TP_DETAIL_HOOK_TRAITS(after_step)
TP_DETAIL_HOOK_TRAITS(after_epoch)
TP_DETAIL_HOOK_TRAITS(on_interrupt)
TP_DETAIL_HOOK_TRAITS(after_train)
#undef TP_DETAIL_HOOK_TRAITS

// The hooks that take more than the trainer: name detection as above, calls checked below.
#define TP_DETAIL_NAME_TRAITS(hook)                                                              \
  struct hook##_probe {                                                                        \
    void hook();                                                                               \
  };                                                                                           \
  template <class C>                                                                           \
  struct hook##_mix : C, hook##_probe {};                                                      \
  template <class C>                                                                           \
  concept names_##hook = std::is_class_v<C> && !std::is_final_v<C> && !requires { &hook##_mix<C>::hook; };
TP_DETAIL_NAME_TRAITS(on_scalar)
TP_DETAIL_NAME_TRAITS(on_histogram)
TP_DETAIL_NAME_TRAITS(on_image)
TP_DETAIL_NAME_TRAITS(on_text)
TP_DETAIL_NAME_TRAITS(on_epoch_times)
#undef TP_DETAIL_NAME_TRAITS
template <class C, class T>
concept callable_on_scalar =
    requires(C& c, T& t, std::string_view name, double value) { c.on_scalar(t, name, value); };
template <class C, class T>
concept callable_on_histogram =
    requires(C& c, T& t, std::string_view name, const torch::Tensor& values) { c.on_histogram(t, name, values); };
template <class C, class T>
concept callable_on_image =
    requires(C& c, T& t, std::string_view name, const torch::Tensor& image) { c.on_image(t, name, image); };
template <class C, class T>
concept callable_on_text = requires(C& c, T& t, std::string_view name, std::string_view text) { c.on_text(t, name, text); };
template <class C, class T>
concept callable_on_epoch_times = requires(C& c, T& t, const epoch_times& times) { c.on_epoch_times(t, times); };

// State (optional): a callback whose state a resumed run needs (a best value so far, a
// running average) declares save_state(trainer, archive) and load_state(trainer, archive), with
// LibTorch's serialize::OutputArchive and InputArchive; checkpoints hold it.
struct save_state_probe {
  void save_state();
};
template <class C>
struct save_state_mix : C, save_state_probe {};
template <class C>
concept names_save_state =
    std::is_class_v<C> && !std::is_final_v<C> && !requires { &save_state_mix<C>::save_state; };

template <class C>
concept names_any_hook = names_setup<C> || names_before_train<C> || names_before_epoch<C> ||
                         names_before_step<C> || names_after_step<C> || names_after_epoch<C> ||
                         names_on_interrupt<C> || names_after_train<C> || names_on_scalar<C> ||
                         names_on_histogram<C> || names_on_image<C> || names_on_text<C> || names_on_epoch_times<C>;

}  // namespace tp::detail

namespace tp {

// A class that declares at least one hook.
template <class C>
concept callback = std::is_class_v<C> && detail::names_any_hook<C>;

// A callback whose every declared hook can be called with a `Trainer&`.
template <class C, class Trainer>
concept callback_for =
    callback<C> &&
    (!detail::names_setup<C> || detail::callable_setup<C, Trainer>) &&
    (!detail::names_before_train<C> || detail::callable_before_train<C, Trainer>) &&
    (!detail::names_before_epoch<C> || detail::callable_before_epoch<C, Trainer>) &&
    (!detail::names_before_step<C> || detail::callable_before_step<C, Trainer>) &&
    (!detail::names_after_step<C> || detail::callable_after_step<C, Trainer>) &&
    (!detail::names_after_epoch<C> || detail::callable_after_epoch<C, Trainer>) &&
    (!detail::names_on_interrupt<C> || detail::callable_on_interrupt<C, Trainer>) &&
    (!detail::names_after_train<C> || detail::callable_after_train<C, Trainer>) &&
    (!detail::names_on_scalar<C> || detail::callable_on_scalar<C, Trainer>) &&
    (!detail::names_on_histogram<C> || detail::callable_on_histogram<C, Trainer>) &&
    (!detail::names_on_image<C> || detail::callable_on_image<C, Trainer>) &&
    (!detail::names_on_text<C> || detail::callable_on_text<C, Trainer>) &&
    (!detail::names_on_epoch_times<C> || detail::callable_on_epoch_times<C, Trainer>);

// A chief-only callback runs only in the chief process of a multi-process run (rank 0): it
// declares `static constexpr bool chief_only = true;` or is wrapped with tp::chief_only(cb).
// Whatever writes files is one, so that N processes do not write N copies.
template <class C>
concept chief_only_callback = requires { C::chief_only; } && static_cast<bool>(C::chief_only);

template <class C>
struct ChiefOnly : C {
  static constexpr bool chief_only = true;
};
template <class C>
  requires std::is_class_v<C>
ChiefOnly<C> chief_only(C callback) {
  return ChiefOnly<C>{std::move(callback)};
}

// A checkpoint writer (ModelSaver, MinSaver) declares `static constexpr bool writes_checkpoint
// = true;`. At after_step and after_epoch it runs after every other callback, monitors
// included, so that the state it saves is the state at the end of the step or epoch.
template <class C>
concept checkpoint_writer = requires { C::writes_checkpoint; } && static_cast<bool>(C::writes_checkpoint);

// A monitor is a callback that receives scalars.
template <class C, class Trainer>
concept monitor_for = callback_for<C, Trainer> && detail::callable_on_scalar<C, Trainer>;

namespace detail {
// One static_assert per rule, so the compiler's first error names the rule that was broken.
// Each check returns whether its rules hold: the code that depends on them is then left
// uninstantiated when they do not, and the rule's error is the whole diagnostic, not the first
// of many.
template <class C, class Trainer>
constexpr bool check_callback() {
  // Through a variable: given the concept itself, clang explains each of the nine hooks the
  // class does not name (90 lines), where the rule already says what a callback needs.
  constexpr bool declares_a_hook = callback<C>;
  static_assert(declares_a_hook,
                "tp rule [callback: has a hook]: a callback must declare at least one hook: "
                "setup, before_train, before_epoch, before_step, after_step, after_epoch, on_interrupt, "
                "after_train, on_scalar, on_histogram, on_image, on_text or on_epoch_times");
#define TP_DETAIL_CHECK_HOOK(hook)                                                   \
  static_assert(!names_##hook<C> || callable_##hook<C, Trainer>,                     \
                "tp rule [callback_for: hook signature]: the hook " #hook " of this " \
                "callback cannot be called as " #hook "(trainer&); declare it as "     \
                "`void " #hook "(auto& trainer)` or take the trainer type by reference");
  TP_DETAIL_CHECK_HOOK(setup)
  TP_DETAIL_CHECK_HOOK(before_train)
  TP_DETAIL_CHECK_HOOK(before_epoch)
  TP_DETAIL_CHECK_HOOK(before_step)
  TP_DETAIL_CHECK_HOOK(after_step)
  TP_DETAIL_CHECK_HOOK(after_epoch)
  TP_DETAIL_CHECK_HOOK(on_interrupt)
  TP_DETAIL_CHECK_HOOK(after_train)
#undef TP_DETAIL_CHECK_HOOK
  static_assert(!names_on_scalar<C> || callable_on_scalar<C, Trainer>,
                "tp rule [callback_for: hook signature]: the hook on_scalar of this callback "
                "cannot be called as on_scalar(trainer&, std::string_view name, double value)");
  static_assert(!names_on_histogram<C> || callable_on_histogram<C, Trainer>,
                "tp rule [callback_for: hook signature]: the hook on_histogram of this callback "
                "cannot be called as on_histogram(trainer&, std::string_view name, const torch::Tensor& values)");
  static_assert(!names_on_image<C> || callable_on_image<C, Trainer>,
                "tp rule [callback_for: hook signature]: the hook on_image of this callback "
                "cannot be called as on_image(trainer&, std::string_view name, const torch::Tensor& image)");
  static_assert(!names_on_text<C> || callable_on_text<C, Trainer>,
                "tp rule [callback_for: hook signature]: the hook on_text of this callback "
                "cannot be called as on_text(trainer&, std::string_view name, std::string_view text)");
  static_assert(!names_on_epoch_times<C> || callable_on_epoch_times<C, Trainer>,
                "tp rule [callback_for: hook signature]: the hook on_epoch_times of this callback "
                "cannot be called as on_epoch_times(trainer&, const tp::epoch_times& times)");
  return callback_for<C, Trainer>;
}

// What a callback wrapper (a trigger) is replaced by when its callback breaks a rule: a callback
// that does nothing, so that the trainer it goes into adds no error to the rule's.
struct broken_callback {
  void after_train(auto&) {}
};
}  // namespace detail

}  // namespace tp
