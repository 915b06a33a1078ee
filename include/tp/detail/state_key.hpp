#pragma once
// Where a checkpoint keeps a callback's state: "callback/KEY#N", KEY the callback's own
// state_key() or its type's name with template arguments folded, N its occurrence among the
// trainer's stateful callbacks with that key (concepts/callback.hpp, has_state_key).
#include <string>
#include <typeinfo>

#include <tp/concepts/callback.hpp>
#include <tp/detail/type_name.hpp>

namespace tp::detail {

template <class C>
std::string callback_state_key(const C& callback) {
  if constexpr (has_state_key<C>) return std::string(callback.state_key());
  else return state_key_of_type(typeid(C));
}

}  // namespace tp::detail
