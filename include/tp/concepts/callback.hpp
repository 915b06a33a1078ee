#pragma once
// The callback concept family.
//
// A callback is a plain class with any subset of the hooks of concepts/hooks.hpp (what each
// means and when it runs is said there), each called with the trainer first.
//
// The hooks, their kinds and parameters are one table, concepts/hooks.hpp; for each hook it gives
// (level 1, detail) whether a type *names* it (a member of that name exists, whatever its
// signature) and whether it is *callable* with the trainer. Level 2 (public): `callback<C>`
// names at least one hook; `callback_for<C, Trainer>` also has every named hook callable with
// that trainer. Naming a hook that cannot be called is an error rather than a silently ignored
// hook: a typo in a parameter list must not turn a callback into a no-op.
#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <tp/concepts/hooks.hpp>
#include <tp/concepts/member_names.hpp>

namespace tp::detail {

// State (optional): a callback whose state a resumed run needs (a best value so far, a
// running average) declares save_state(trainer, tp::state_tree&) and
// load_state(trainer, const tp::state_tree&) (checkpoint/state_tree.hpp); checkpoints hold its tree.
TP_DETAIL_NAME_PROBE(save_state)
template <class C>
concept names_save_state = names_member_save_state<C>;

// A checkpoint keys a callback's state by the callback's type name, with template arguments
// folded (`EarlyStopping<...>`, without tp::), or by its `std::string state_key() const` (tp's
// own stateful callbacks name what they watch: `EarlyStopping(val_loss)`). Two stateful
// callbacks of one trainer with the same key are refused when the trainer is made: adding,
// removing or moving a callback never moves another's state.
template <class C>
concept has_state_key = requires(const C& c) {
  { c.state_key() } -> std::convertible_to<std::string>;
};

}  // namespace tp::detail

namespace tp {

// A class that declares at least one hook.
template <class C>
concept callback = std::is_class_v<C> && detail::names_any_hook<C>;

// A callback whose every declared hook can be called with a `Trainer&`.
template <class C, class Trainer>
concept callback_for = callback<C> && detail::named_hooks_callable<C, Trainer>;

// A chief-only callback runs only in the chief process of a multi-process run (rank 0): it
// declares `static constexpr bool chief_only = true;` or is wrapped with tp::chief_only(cb).
// Whatever writes files is one, so that N processes do not write N copies.
template <class C>
concept chief_only_callback = requires { C::chief_only; } && static_cast<bool>(C::chief_only);

// A callback C that runs only in the chief process (rank 0) of a multi-process run; made by
// chief_only(callback).
template <class C>
struct ChiefOnly : C {
  static constexpr bool chief_only = true;
};
// The callback, run only in the chief process (rank 0): for one that writes files or prints, when
// its class does not say chief_only itself.
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
#define TP_DETAIL_HOOK_NAME_TEXT(hook, ...) " " #hook
  static_assert(declares_a_hook,
                "tp rule [callback: has a hook]: a callback must declare at least one hook of "
                "tp/concepts/hooks.hpp:" TP_HOOK_TABLE(TP_DETAIL_HOOK_NAME_TEXT));
#undef TP_DETAIL_HOOK_NAME_TEXT
  // Through a variable per hook: given the expression, the compiler repeats it as a note.
#define TP_DETAIL_CHECK_HOOK(hook, kind, ...)                                                         \
  constexpr bool hook##_ok = !names_##hook<C> || callable_##hook<C, Trainer>;                        \
  static_assert(hook##_ok,                                                                           \
                "tp rule [callback_for: hook signature]: the hook " #hook " of this callback cannot " \
                "be called as " #hook "(trainer&" __VA_OPT__(", " #__VA_ARGS__) "); declare it with " \
                "those parameters, the trainer as `auto& trainer` or by reference");
  TP_HOOK_TABLE(TP_DETAIL_CHECK_HOOK)
#undef TP_DETAIL_CHECK_HOOK
  return callback_for<C, Trainer>;
}

// What a callback wrapper (a trigger) is replaced by when its callback breaks a rule: a callback
// that does nothing, so that the trainer it goes into adds no error to the rule's.
struct broken_callback {
  void after_train(auto&) {}
};
}  // namespace detail

}  // namespace tp
