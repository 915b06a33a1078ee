#pragma once
namespace tp::detail {

// What a trainer holds in place of a part that breaks a rule (an input it cannot move, replicas
// it cannot build): the rule's static_assert is then the whole diagnostic, not the first of
// many errors about the part's uses.
struct broken_part {
  template <class... Args>
  explicit broken_part(Args&&...) {}
};

}  // namespace tp::detail
