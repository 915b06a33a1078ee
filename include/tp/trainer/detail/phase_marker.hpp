#pragma once
// Phase markers: the names under which a profiler's trace shows where a step's time goes.
//
//   tp::input_wait        waiting for the input's next batch (and copying it to the device)
//   tp::tower_forward     a tower's forward pass (its tower function)
//   tp::tower_backward    a tower's backward pass
//   tp::reduce            averaging gradients across towers or processes
//   tp::optimizer_step    the optimizer's update
//   tp::callback/NAME.HOOK   one callback's hook
//
// A marker is a LibTorch RecordFunction in the user scope, made only while a profiler runs:
// otherwise it costs the check that every LibTorch operator makes (bench_phase_markers measures
// it). Define TP_NO_PHASE_MARKERS to compile them out.
#include <optional>
#include <string>
#include <typeinfo>

#include <ATen/ThreadLocalState.h>
#include <ATen/record_function.h>

#include <tp/trainer/detail/type_name.hpp>

namespace tp::detail {

// The marker of callback C's hook: made once per callback type and hook.
template <class C, class Tag>
const std::string& callback_phase_name() {
  static const std::string name = "tp::callback/" + readable_type_name(typeid(C)) + "." + std::string(Tag::name);
  return name;
}

// A marker: a RecordFunction when a profiler is running, otherwise an empty optional. The check
// is the one every LibTorch operator makes; `name()` is only called when the marker records.
class phase_scope {
 public:
  template <class Name>
  explicit phase_scope(Name name) {
    if (auto callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE)) {
      record_.emplace(std::move(*callbacks));
      record_->before(name(), c10::ArrayRef<const c10::IValue>{});
    }
  }
  phase_scope(const phase_scope&) = delete;
  phase_scope& operator=(const phase_scope&) = delete;

 private:
  std::optional<at::RecordFunction> record_;
};

// Whether a profiler records user scopes in this thread: asked once for a group of markers
// (the callbacks at one hook), which then cost nothing more when it does not.
inline bool profiling() {
#ifdef TP_NO_PHASE_MARKERS
  return false;
#else
  return at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE).has_value();
#endif
}

#define TP_DETAIL_CONCAT2(a, b) a##b
#define TP_DETAIL_CONCAT(a, b) TP_DETAIL_CONCAT2(a, b)
#ifdef TP_NO_PHASE_MARKERS
#define TP_PHASE(name) ((void)0)
#else
// Marks the rest of the enclosing block as phase `name` (a string literal).
#define TP_PHASE(name) const ::tp::detail::phase_scope TP_DETAIL_CONCAT(tp_phase_, __LINE__)([] { return name; })
#endif

// A profiler runs in the thread that started it; work handed to another thread (a tower's)
// carries it along, as at::launch does. Empty when no profiler runs: nothing is copied then.
class profiler_context {
 public:
  profiler_context() {
    if (at::hasThreadLocalCallbacks()) state_.emplace();
  }
  // Enters the context in another thread, for the life of `guard`.
  void enter(std::optional<at::ThreadLocalStateGuard>& guard) const {
    if (state_) guard.emplace(*state_);
  }

 private:
  std::optional<at::ThreadLocalState> state_;
};

}  // namespace tp::detail
