#pragma once
// Compile-time selection of the callbacks that have a given hook (a tag of concepts/hooks.hpp),
// with Boost.Hana. The loop calls only the selected callbacks, in a fold the compiler unrolls: a
// callback without a hook costs nothing at that hook, and a pack of no-op hooks inlines to
// nothing.
#include <cstddef>
#include <string_view>

#include <boost/hana/at.hpp>
#include <boost/hana/filter.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/range.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>

#include <tp/concepts/hooks.hpp>

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

}  // namespace tp::detail
