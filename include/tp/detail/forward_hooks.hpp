#pragma once
// forward_hooks<Self, Inner>: gives a wrapper callback (a trigger, say) exactly the hooks its
// inner callback declares, each forwarded to Self::dispatch<Tag>(trainer). A wrapper that
// declared every hook would be seen as having hooks the inner lacks, and a wrapper that
// declared none would be seen as no callback at all. A checkpointed state (save_state and
// load_state) passes through the same way.
#include <string_view>

#include <tp/concepts/callback.hpp>
#include <tp/detail/hook_dispatch.hpp>

namespace tp::detail {

#define TP_DETAIL_FORWARD_HOOK(hook)                                      \
  template <class Self, bool present>                                     \
  struct forward_##hook {};                                               \
  template <class Self>                                                   \
  struct forward_##hook<Self, true> {                                     \
    template <class Trainer>                                              \
    void hook(Trainer& trainer) {                                         \
      static_cast<Self&>(*this).template dispatch<hook##_tag>(trainer);   \
    }                                                                     \
  };
TP_DETAIL_FORWARD_HOOK(setup)
TP_DETAIL_FORWARD_HOOK(before_train)
TP_DETAIL_FORWARD_HOOK(before_epoch)
TP_DETAIL_FORWARD_HOOK(before_step)
TP_DETAIL_FORWARD_HOOK(after_step)
TP_DETAIL_FORWARD_HOOK(after_epoch)
TP_DETAIL_FORWARD_HOOK(on_interrupt)
TP_DETAIL_FORWARD_HOOK(after_train)
#undef TP_DETAIL_FORWARD_HOOK

// The hooks that take more than the trainer pass straight to the inner callback.
#define TP_DETAIL_FORWARD_TO_INNER(hook, Value)                                   \
  template <class Self, bool present>                                           \
  struct forward_##hook {};                                                     \
  template <class Self>                                                         \
  struct forward_##hook<Self, true> {                                           \
    template <class Trainer>                                                    \
    void hook(Trainer& trainer, std::string_view name, Value value) {           \
      static_cast<Self&>(*this).inner().hook(trainer, name, value);             \
    }                                                                           \
  };
TP_DETAIL_FORWARD_TO_INNER(on_scalar, double)
TP_DETAIL_FORWARD_TO_INNER(on_histogram, const torch::Tensor&)
TP_DETAIL_FORWARD_TO_INNER(on_image, const torch::Tensor&)
TP_DETAIL_FORWARD_TO_INNER(on_text, std::string_view)
#undef TP_DETAIL_FORWARD_TO_INNER

template <class Self, bool present>
struct forward_on_epoch_times {};
template <class Self>
struct forward_on_epoch_times<Self, true> {
  template <class Trainer>
  void on_epoch_times(Trainer& trainer, const epoch_times& times) {
    static_cast<Self&>(*this).inner().on_epoch_times(trainer, times);
  }
};

template <class Self, bool present>
struct forward_state {};
template <class Self>
struct forward_state<Self, true> {
  template <class Trainer, class Archive>
  void save_state(Trainer& trainer, Archive& archive) {
    static_cast<Self&>(*this).inner().save_state(trainer, archive);
  }
  template <class Trainer, class Archive>
  void load_state(Trainer& trainer, Archive& archive) {
    static_cast<Self&>(*this).inner().load_state(trainer, archive);
  }
};

template <class Self, class Inner>
struct forward_hooks : forward_state<Self, names_save_state<Inner>>,
                       forward_setup<Self, names_setup<Inner>>,
                       forward_before_train<Self, names_before_train<Inner>>,
                       forward_before_epoch<Self, names_before_epoch<Inner>>,
                       forward_before_step<Self, names_before_step<Inner>>,
                       forward_after_step<Self, names_after_step<Inner>>,
                       forward_after_epoch<Self, names_after_epoch<Inner>>,
                       forward_on_interrupt<Self, names_on_interrupt<Inner>>,
                       forward_after_train<Self, names_after_train<Inner>>,
                       forward_on_scalar<Self, names_on_scalar<Inner>>,
                       forward_on_histogram<Self, names_on_histogram<Inner>>,
                       forward_on_image<Self, names_on_image<Inner>>,
                       forward_on_text<Self, names_on_text<Inner>>,
                       forward_on_epoch_times<Self, names_on_epoch_times<Inner>> {
  // A wrapper is what its inner callback is: chief-only, a checkpoint writer.
  static constexpr bool chief_only = chief_only_callback<Inner>;
  static constexpr bool writes_checkpoint = checkpoint_writer<Inner>;
};

}  // namespace tp::detail
