#pragma once
// Compile-time selection of the callbacks that have a given hook (a tag of concepts/hooks.hpp).
// The loop calls only the selected callbacks, in a fold the compiler unrolls: a callback without
// a hook costs nothing at that hook, and a pack of no-op hooks inlines to nothing.
//
// Plain index sequences and folds, not a metaprogramming library: two small helpers do what
// Boost.Hana's filter and for_each did here, without a dependency (docs/DESIGN.md, "Folds for
// dispatch").
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

namespace tp::detail {

template <std::size_t I>
using index_c = std::integral_constant<std::size_t, I>;

// true_indices<Flags...>::type: the positions of the true flags, as a std::index_sequence.
template <bool... Flags>
struct true_indices {
  static constexpr std::size_t count = (std::size_t{Flags} + ... + 0);
  static constexpr std::array<std::size_t, count> found = [] {
    constexpr std::array<bool, sizeof...(Flags)> flags{Flags...};
    std::array<std::size_t, count> out{};
    std::size_t k = 0;
    for (std::size_t i = 0; i < flags.size(); ++i)
      if (flags[i]) out[k++] = i;
    return out;
  }();
  template <std::size_t... K>
  static constexpr auto make(std::index_sequence<K...>) {
    return std::index_sequence<found[K]...>{};
  }
  using type = decltype(make(std::make_index_sequence<count>{}));
};

// f(index_c<I>{}) for each I of the sequence, in order.
template <std::size_t... I, class F>
constexpr void for_each_index(std::index_sequence<I...>, F&& f) {
  (f(index_c<I>{}), ...);
}

}  // namespace tp::detail
