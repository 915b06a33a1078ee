#pragma once
// Where a checkpoint keeps a callback's state: "callback/KEY", KEY the callback's own
// state_key() or its type's name with template arguments folded; two stateful callbacks of one
// trainer never share a key (trainer/callback_set.hpp, concepts/callback.hpp).
#include <string>
#include <typeinfo>

#include <tp/concepts/callback.hpp>
#include <tp/trainer/detail/type_name.hpp>

namespace tp::detail {

template <class C>
std::string callback_state_key(const C& callback) {
  if constexpr (has_state_key<C>) {
    std::string key(callback.state_key());
    for (char& c : key)
      if (c == '.') c = '_';  // LibTorch's archives take a dot for a level of nesting
    return key;
  } else {
    return state_key_of_type(typeid(C));
  }
}

}  // namespace tp::detail
