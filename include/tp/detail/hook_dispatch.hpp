#pragma once
// Compile-time selection of the callbacks that have a given hook, with Boost.Hana. The loop
// calls only the selected callbacks, in a fold the compiler unrolls: a callback without a hook
// costs nothing at that hook, and a pack of no-op hooks inlines to nothing.
#include <cstddef>
#include <string_view>

#include <boost/hana/at.hpp>
#include <boost/hana/filter.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/range.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include <tp/concepts/callback.hpp>

namespace tp::detail {

namespace hana = boost::hana;

// The indices i (as hana::size_t<i>) of the types in Ts... for which pred(hana::type_c<T_i>)
// is a true IntegralConstant.
template <class... Ts, class Pred>
constexpr auto indices_where(Pred pred) {
  constexpr auto types = hana::tuple_t<Ts...>;
  constexpr auto all = hana::to_tuple(hana::make_range(hana::size_c<0>, hana::size_c<sizeof...(Ts)>));
  return hana::filter(all, [=](auto i) { return pred(types[i]); });
}

// One tag per lifecycle hook: whether a callback has it for a trainer, and how to call it.
#define TP_DETAIL_HOOK_TAG(hook)                          \
  struct hook##_tag {                                     \
    static constexpr const char* name = #hook;            \
    template <class C, class T>                           \
    static constexpr bool present = callable_##hook<C, T>; \
    template <class C, class T>                           \
    static void call(C& c, T& t) {                        \
      c.hook(t);                                          \
    }                                                     \
  };
TP_DETAIL_HOOK_TAG(setup)
TP_DETAIL_HOOK_TAG(before_train)
TP_DETAIL_HOOK_TAG(before_epoch)
TP_DETAIL_HOOK_TAG(before_step)
TP_DETAIL_HOOK_TAG(after_step)
TP_DETAIL_HOOK_TAG(after_epoch)
TP_DETAIL_HOOK_TAG(on_interrupt)
TP_DETAIL_HOOK_TAG(after_train)
#undef TP_DETAIL_HOOK_TAG

}  // namespace tp::detail
