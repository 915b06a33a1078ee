#pragma once
// forward_hooks<Self, Inner>: gives a wrapper callback (a trigger, say) exactly the hooks its
// inner callback declares, made from the hook table (concepts/hooks.hpp). A wrapper that
// declared every hook would be seen as having hooks the inner lacks, and a wrapper that
// declared none would be seen as no callback at all. The loop's hooks (train, epoch and step
// kinds) go to Self::dispatch<Tag>(trainer), where the wrapper decides; value hooks go straight
// to Self::inner(). A checkpointed state (save_state, load_state, state_key) passes through.
#include <string>

#include <tp/concepts/callback.hpp>
#include <tp/concepts/hooks.hpp>
#include <tp/trainer/detail/state_key.hpp>
#include <tp/checkpoint/state_tree.hpp>

namespace tp::detail {

template <class Tag, class Self, class Trainer, class... Args>
void forward_hook(Self& self, Trainer& trainer, Args&&... args) {
  if constexpr (Tag::kind == hook_kind::value) Tag::call(self.inner(), trainer, std::forward<Args>(args)...);
  else self.template dispatch<Tag>(trainer);
}

// forward_HOOK<Self, present>: the hook with the table's parameters, when `present`.
#define TP_DETAIL_FORWARD_HOOK(hook, ...)                                      \
  template <class Self, bool present, class Args = hook##_tag::args>           \
  struct forward_##hook {};                                                    \
  template <class Self, class... Args>                                         \
  struct forward_##hook<Self, true, hook_args<Args...>> {                      \
    template <class Trainer>                                                   \
    void hook(Trainer& trainer, Args... args) {                                \
      forward_hook<hook##_tag>(static_cast<Self&>(*this), trainer, args...);   \
    }                                                                          \
  };
TP_HOOK_TABLE(TP_DETAIL_FORWARD_HOOK)
#undef TP_DETAIL_FORWARD_HOOK

template <class Self, class Inner, bool present = names_save_state<Inner>>
struct forward_state {};
template <class Self, class Inner>
struct forward_state<Self, Inner, true> {
  template <class Trainer>
  void save_state(Trainer& trainer, state_tree& out) {
    static_cast<Self&>(*this).inner().save_state(trainer, out);
  }
  template <class Trainer>
  void load_state(Trainer& trainer, const state_tree& in) {
    static_cast<Self&>(*this).inner().load_state(trainer, in);
  }
  // The inner callback's key: wrapping a callback does not change where its state is kept.
  std::string state_key() const { return callback_state_key(static_cast<const Self&>(*this).inner()); }
};

// A wrapper is what its inner callback is: chief-only, a checkpoint writer.
template <class Inner>
struct forwarded_traits {
  static constexpr bool chief_only = chief_only_callback<Inner>;
  static constexpr bool writes_checkpoint = checkpoint_writer<Inner>;
};

#define TP_DETAIL_FORWARD_BASE(hook, ...) forward_##hook<Self, names_##hook<Inner>>,
template <class Self, class Inner>
struct forward_hooks : forward_state<Self, Inner>, TP_HOOK_TABLE(TP_DETAIL_FORWARD_BASE) forwarded_traits<Inner> {};
#undef TP_DETAIL_FORWARD_BASE

}  // namespace tp::detail
