#pragma once
// An optimizer's per-parameter state cut into flat pieces, and joined again on another cut: what
// lets a sharded run's ranks each save the state they own, and a run on any other layout
// (other ranks, sharded or not) load it (DeepSpeed's universal checkpoints, DCP's resharding).
//
// A piece is [offset, offset + length) of one parameter, flattened; the parameter is named by
// its number in the whole optimizer (torch.optim's numbering: across the param groups, in
// order). A saved piece is a dictionary of plain values:
//
//   {"parameter": 3, "name": "fc1.weight", "offset": 1024, "length": 512,
//    "state": {"exp_avg": <512 floats>, "exp_avg_sq": <512 floats>, "step": tensor(12.)}}
//
// in the optimizer's own state format (optim/optimizer_state.hpp: torch.optim's keys when it has
// a Python twin, else LibTorch's): a state tensor with as many elements as the piece is cut and
// joined with it, any other value (a step count) is the same in every piece and kept as it is.
// This holds for every elementwise optimizer, which is what sharding allows.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <torch/types.h>

#include <tp/checkpoint/checkpoint_error.hpp>
#include <tp/optim/optimizer_state.hpp>
#include <tp/checkpoint/state_parts.hpp>
#include <tp/checkpoint/state_tree.hpp>

namespace tp::optim {

using piece = state_piece;  // tp/checkpoint/state_parts.hpp

namespace detail {

// Calls f(key, index) for each parameter an optimizer state tree (state_of's) lists, in
// position order: torch.optim's "params" numbers, or LibTorch's "params/<i>" names.
template <class F>
void for_each_listed_parameter(const c10::IValue& tree, const std::string& source, F&& f) {
  const state_tree all(tree, source);
  std::size_t position = 0;
  if (all.contains("libtorch")) {  // LibTorch's optimizer archive (optim/optimizer_state.hpp)
    const auto groups = all.at("libtorch").at("param_groups");
    const auto count = groups.value("param_groups/size").toTensor().item<std::int64_t>();
    for (std::int64_t g = 0; g < count; ++g) {
      const auto group = groups.at("param_groups/" + std::to_string(g));
      const auto n = group.value("params/size").toTensor().item<std::int64_t>();
      for (std::int64_t i = 0; i < n; ++i) f(group.value("params/" + std::to_string(i)), position++);
    }
    return;
  }
  for (const auto& group : all.items("param_groups"))
    for (const auto& id : state_tree(group, source + "/param_groups").items("params")) f(id, position++);
}

// The tree's per-parameter states (made empty when an empty optimizer's archive left none).
inline c10::impl::GenericDict state_section(const c10::IValue& tree) {
  auto top = tree.toGenericDict();
  if (top.contains("libtorch")) top = top.at("libtorch").toGenericDict();
  if (!top.contains("state")) top.insert("state", state_tree::new_dict());
  return top.at("state").toGenericDict();
}

}  // namespace detail

// Each parameter's state in an optimizer state tree, by position (None where it has none).
inline std::vector<c10::IValue> position_states(const c10::IValue& tree, const std::string& source) {
  std::vector<c10::IValue> states;
  const auto section = detail::state_section(tree);
  detail::for_each_listed_parameter(tree, source, [&](const c10::IValue& key, std::size_t) {
    const auto found = section.find(key);
    states.push_back(found == section.end() ? c10::IValue() : found->value());
  });
  return states;
}

// `tree` (state_of's, of the optimizer that will load it: its groups and options) with its
// per-parameter states replaced by `states`, by position.
inline c10::IValue with_position_states(const c10::IValue& tree, const std::vector<c10::IValue>& states, const std::string& source) {
  auto copy = state_tree::deep_copy(tree);
  auto section = detail::state_section(copy);
  section.clear();
  detail::for_each_listed_parameter(copy, source, [&](const c10::IValue& key, std::size_t position) {
    if (position >= states.size())
      throw checkpoint_error(source + " lists more parameters than the states given (" + std::to_string(states.size()) + ")");
    if (!states[position].isNone()) section.insert(key, states[position]);
  });
  return copy;
}

// The pieces' states as saved pieces (skipping those without state); `states` by position in
// the optimizer that holds the pieces, `pieces` and `names` likewise.
inline c10::impl::GenericList saved_pieces(const std::vector<c10::IValue>& states, const std::vector<piece>& pieces,
                                           const std::vector<std::string>& names) {
  c10::impl::GenericList out(c10::AnyType::get());
  for (std::size_t i = 0; i < states.size() && i < pieces.size(); ++i) {
    if (states[i].isNone()) continue;
    auto one = state_tree::new_dict();
    one.insert("parameter", pieces[i].parameter);
    one.insert("name", names[i]);
    one.insert("offset", pieces[i].offset);
    one.insert("length", pieces[i].length);
    one.insert("state", states[i]);
    out.push_back(one);
  }
  return out;
}

// Whether two lists of pieces share an element.
inline bool overlap(const std::vector<piece>& a, const std::vector<piece>& b) {
  for (const auto& x : a)
    for (const auto& y : b)
      if (x.parameter == y.parameter && x.offset < y.offset + y.length && y.offset < x.offset + x.length) return true;
  return false;
}

// Joins saved pieces (added a part at a time, in any cut) into the states of target pieces.
class piece_joiner {
 public:
  // `shapes[i]`: what target i's joined tensors are viewed as (empty: flat).
  piece_joiner(std::vector<piece> targets, std::vector<std::vector<std::int64_t>> shapes)
      : targets_(std::move(targets)), shapes_(std::move(shapes)), joined_(targets_.size()) {}

  const std::vector<piece>& targets() const noexcept { return targets_; }

  // A part: a tree whose "pieces" are saved_pieces' list (`part.path()` names it in errors).
  void add(const state_tree& part) {
    const auto& source = part.path();
    for (const auto& item : part.items("pieces")) {
      const state_tree one(item, source + "/pieces");
      const piece from{one.integer("parameter"), one.integer("offset"), one.integer("length")};
      if (from.offset < 0 || from.length < 1)
        throw checkpoint_error(source + " holds a piece of parameter " + std::to_string(from.parameter) + " at offset " +
                               std::to_string(from.offset) + " of length " + std::to_string(from.length) + ": not a piece a run writes");
      const auto state = one.at("state");
      for (std::size_t t = 0; t < targets_.size(); ++t) {
        const auto& to = targets_[t];
        if (to.parameter != from.parameter) continue;
        const auto lo = std::max(to.offset, from.offset), hi = std::min(to.offset + to.length, from.offset + from.length);
        if (lo >= hi) continue;
        auto& j = joined_[t];
        for (const auto& key : state.keys()) {
          const auto& v = state.value(key);
          if (v.isTensor() && v.toTensor().numel() == from.length && v.toTensor().dim() >= 1) {
            auto& into = j.tensors[key];
            if (!into.defined()) into = torch::zeros({to.length}, v.toTensor().options());
            into.narrow(0, lo - to.offset, hi - lo).copy_(v.toTensor().reshape(-1).narrow(0, lo - from.offset, hi - lo));
          } else {
            j.values[key] = v;
          }
        }
        j.covered += hi - lo;
      }
    }
  }

  // Each target's state (None where no saved piece had any), by position; a target only partly
  // covered is an error: the parts do not make a whole state.
  std::vector<c10::IValue> states(const std::string& source) const {
    std::vector<c10::IValue> out;
    for (std::size_t t = 0; t < targets_.size(); ++t) {
      const auto& j = joined_[t];
      if (j.covered == 0 && j.values.empty()) {
        out.emplace_back();
        continue;
      }
      if (j.covered != targets_[t].length)
        throw checkpoint_error(source + ": its parts hold " + std::to_string(j.covered) + " of the " + std::to_string(targets_[t].length) +
                               " elements of parameter " + std::to_string(targets_[t].parameter) + "'s state from offset " +
                               std::to_string(targets_[t].offset) + "; a part is missing or belongs to another checkpoint");
      auto one = state_tree::new_dict();
      for (const auto& [key, v] : j.values) one.insert(key, v);
      for (const auto& [key, v] : j.tensors) one.insert(key, shapes_[t].empty() ? v : v.view(shapes_[t]));
      out.push_back(one);
    }
    return out;
  }

 private:
  struct joined {
    std::map<std::string, torch::Tensor> tensors;
    std::map<std::string, c10::IValue> values;
    std::int64_t covered = 0;
  };
  std::vector<piece> targets_;
  std::vector<std::vector<std::int64_t>> shapes_;
  std::vector<joined> joined_;
};

// An optimizer's parameters as pieces, each whole, by position, and their shapes.
inline std::pair<std::vector<piece>, std::vector<std::vector<std::int64_t>>> whole_pieces(const torch::optim::Optimizer& optimizer) {
  std::pair<std::vector<piece>, std::vector<std::vector<std::int64_t>>> out;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) {
      out.first.push_back({static_cast<std::int64_t>(out.first.size()), 0, p.numel()});
      out.second.push_back(p.sizes().vec());
    }
  return out;
}

// Adds to `joiner` every part that holds some of its targets, one at a time.
inline void add_parts(piece_joiner& joiner, const state_parts& parts) {
  for (std::size_t k = 0; k < parts.covers.size(); ++k)
    if (overlap(parts.covers[k], joiner.targets())) joiner.add(parts.read(k));
}

// Loads into `optimizer` (whose options are already loaded) the state of `targets`, its
// parameters by position (flat pieces, or each whole, viewed as `shapes`), from the parts.
template <class Optimizer>
void load_joined(Optimizer& optimizer, std::vector<piece> targets, std::vector<std::vector<std::int64_t>> shapes, const state_parts& parts,
                 const std::string& source) {
  if (shapes.empty()) shapes.resize(targets.size());
  piece_joiner joiner(std::move(targets), std::move(shapes));
  add_parts(joiner, parts);
  load_state(optimizer, with_position_states(state_of(optimizer), joiner.states(source), source), source);
}

}  // namespace tp::optim
