#pragma once
// The one table of callback hooks. Every list of hooks in tp is made from TP_HOOK_TABLE: the
// callback concepts and their rules (concepts/callback.hpp), the tags the trainer dispatches by
// (trainer/callback_set.hpp), and the hooks a wrapper forwards (callbacks/detail/forward_hooks.hpp).
// Adding a hook is one row here (and its place in the loop).
//
// A row is X(name, kind, the hook's parameters after the trainer...). The kinds:
//   train   once per train(): setup, before_train, on_interrupt, after_train
//   epoch   at every epoch: before_epoch, after_epoch (what epoch triggers gate)
//   step    at every step: before_step, after_step (what step triggers gate)
//   value   a value put by the trainer or a callback (put_scalar, ...) to the callbacks that
//           take it; wrappers pass these straight to the callback they wrap
//
// What each hook means (the trainer's contract, trainer.hpp, says in which order they run):
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
#include <string_view>
#include <type_traits>
#include <utility>

#include <torch/types.h>

#include <tp/concepts/member_names.hpp>
#include <tp/epoch_times.hpp>

// The hook table: X(name, kind, parameters after the trainer...) once per hook, in the order the
// loop calls them.
#define TP_HOOK_TABLE(X)                                          \
  X(setup, train)                                                 \
  X(before_train, train)                                          \
  X(before_epoch, epoch)                                          \
  X(before_step, step)                                            \
  X(after_step, step)                                             \
  X(after_epoch, epoch)                                           \
  X(on_interrupt, train)                                          \
  X(after_train, train)                                           \
  X(on_scalar, value, std::string_view, double)                   \
  X(on_histogram, value, std::string_view, const torch::Tensor&)  \
  X(on_image, value, std::string_view, const torch::Tensor&)      \
  X(on_text, value, std::string_view, std::string_view)           \
  X(on_epoch_times, value, const tp::epoch_times&)

namespace tp::detail {

enum class hook_kind { train, epoch, step, value };

template <class... Args>
struct hook_args {};

// For each hook:
// - names_HOOK<C>: C declares a member of that name, whatever its signature
//   (concepts/member_names.hpp).
// - callable_HOOK<C, T>: c.HOOK(t, args...) compiles with a T& trainer and the row's arguments.
// - HOOK_tag: the hook as a type, for dispatch: its name, kind, parameters and a call.
// Naming a hook that cannot be called is a rule error (concepts/callback.hpp), not a silently
// ignored hook: a typo in a parameter list must not turn a callback into a no-op.
#define TP_DETAIL_DEFINE_HOOK(hook, kind_, ...)                                                           \
  TP_DETAIL_NAME_PROBE(hook)                                                                              \
  template <class C>                                                                                      \
  concept names_##hook = names_member_##hook<C>;                                                          \
  template <class C, class T, class... Args>                                                              \
  concept callable_##hook##_with = requires(C& c, T& t) { c.hook(t, std::declval<Args>()...); };          \
  template <class C, class T>                                                                             \
  concept callable_##hook = callable_##hook##_with<C, T __VA_OPT__(, ) __VA_ARGS__>;                      \
  struct hook##_tag {                                                                                     \
    static constexpr std::string_view name = #hook;                                                       \
    static constexpr hook_kind kind = hook_kind::kind_;                                                   \
    using args = hook_args<__VA_ARGS__>;                                                                  \
    template <class C, class T>                                                                           \
    static constexpr bool present = callable_##hook<C, T>;                                                \
    template <class C, class T, class... Args>                                                            \
    static void call(C& c, T& t, Args&&... args) {                                                        \
      c.hook(t, std::forward<Args>(args)...);                                                             \
    }                                                                                                     \
  };
TP_HOOK_TABLE(TP_DETAIL_DEFINE_HOOK)
#undef TP_DETAIL_DEFINE_HOOK

// C declares at least one hook of the table.
#define TP_DETAIL_NAMES_HOOK_OR(hook, ...) names_##hook<C> ||
template <class C>
concept names_any_hook = TP_HOOK_TABLE(TP_DETAIL_NAMES_HOOK_OR) false;
#undef TP_DETAIL_NAMES_HOOK_OR

// Every hook C declares can be called with a T& trainer.
#define TP_DETAIL_NAMED_IS_CALLABLE(hook, ...) (!names_##hook<C> || callable_##hook<C, T>)&&
template <class C, class T>
concept named_hooks_callable = TP_HOOK_TABLE(TP_DETAIL_NAMED_IS_CALLABLE) true;
#undef TP_DETAIL_NAMED_IS_CALLABLE

}  // namespace tp::detail
