#pragma once
// Whether a class declares a member of a given name, whatever its signature: the ground of
// every rule of the form "you named X, but it cannot be called as X must be" (a hook with a
// typo in its parameters, half of a policy's capability). Detected by deriving from C and from
// a probe that has a member of the same name: looking the name up in the mix is ambiguous
// exactly when C declares it (function, template or data member). A final class cannot be
// probed, and is taken to name nothing.
//
//   TP_DETAIL_NAME_PROBE(restore)   // defines tp::detail::names_member_restore<C>
#include <type_traits>

#define TP_DETAIL_NAME_PROBE(member)                                                              \
  struct member##_name_probe {                                                                    \
    void member();                                                                                \
  };                                                                                              \
  template <class C>                                                                              \
  struct member##_name_mix : C, member##_name_probe {};                                           \
  template <class C>                                                                              \
  concept names_member_##member =                                                                 \
      std::is_class_v<C> && !std::is_final_v<C> && !requires { &member##_name_mix<C>::member; };
