#pragma once
// A parameter-sharded run's weights in its checkpoint (tp::sharding::parameters): no rank holds
// a unit's parameters whole between steps, so none writes them whole. Each rank's part holds
// its row of every unit, as pieces of the parameters the row crosses, and rank 0's file names
// those parameters with their shapes in place of its state_dict entries:
//
//   part:  "parameters": [{"name": "h.0.attn.c_attn.weight", "offset": 0, "length": 221184,
//                          "value": <221184 floats>}, ...]
//   main:  tp/sharded_parameters: {"h.0.attn.c_attn.weight": {"shape": [1152, 384], "at": 2}, ...}
//
// ("at": its place among the state_dict's entries, where joining puts it back.)
// join_parameters() puts them back whole into a state_dict, reading one part at a time: what
// loading on any layout (sharded or not, any number of ranks), tp::load_model, tp::checkpoint_weights
// and tp-export read. Every element must come from exactly one piece; anything else is a
// checkpoint_error naming the parameter.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <torch/types.h>

#include <tp/checkpoint/checkpoint_error.hpp>
#include <tp/checkpoint/state_parts.hpp>
#include <tp/checkpoint/state_tree.hpp>

namespace tp::detail {

// One piece of a parameter's row, as a part holds it.
inline c10::IValue parameter_piece(const std::string& name, std::int64_t offset, const torch::Tensor& value) {
  auto one = state_tree::new_dict();
  one.insert("name", name);
  one.insert("offset", offset);
  one.insert("length", value.numel());
  one.insert("value", value);
  return one;
}

// The flat tensor a sharded parameter of `numel` elements is joined into. A damaged shape can
// ask for more than the machine holds, which the allocator might promise and the kernel then
// fail to keep: refused first, by the machine's memory.
inline torch::Tensor whole_of(const std::string& name, std::int64_t numel, const torch::TensorOptions& options, const std::string& source) {
  const auto bytes = static_cast<long double>(numel) * static_cast<long double>(options.dtype().itemsize());
  const auto memory = static_cast<long double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<long double>(::sysconf(_SC_PAGESIZE));
  if (memory > 0 && bytes > memory)
    throw checkpoint_error(source + ": '" + name + "' is listed with " + std::to_string(numel) + " elements (" +
                           std::to_string(static_cast<double>(bytes / (1 << 30))) + " GiB), more than this machine's memory: the file is damaged");
  try {
    return torch::zeros({numel}, options);
  } catch (const c10::Error& e) {
    throw checkpoint_error(source + ": '" + name + "' of " + std::to_string(numel) + " elements cannot be allocated: " + e.what_without_backtrace());
  }
}

// The state_dict `saved` with the parameters `listed` names (tp/sharded_parameters) joined
// from the parts' pieces, each at its place.
inline c10::impl::GenericDict join_parameters(const c10::IValue& saved, const state_tree& listed, const state_parts& parts,
                                              const std::string& source) {
  struct target {
    std::vector<std::int64_t> shape;
    std::int64_t at = 0;
    std::int64_t numel = 1, covered = 0;
    torch::Tensor flat;
  };
  std::map<std::string, target> targets;
  for (const auto& name : listed.keys()) {
    auto& t = targets[name];
    const auto one = listed.at(name);
    t.shape = one.integers("shape");
    t.at = one.integer("at");
    for (const auto d : t.shape)
      if (d < 0 || __builtin_mul_overflow(t.numel, d, &t.numel))
        throw checkpoint_error(source + ": '" + name + "' is listed with the shape " + c10::str(c10::IntArrayRef(t.shape)) +
                               ", which no tensor has: the file is damaged");
  }
  for (std::size_t k = 0; k < parts.covers.size(); ++k) {
    const auto part = parts.read(k);
    if (!part.contains("parameters"))
      throw checkpoint_error(source + ": its part " + std::to_string(k) + " holds no parameters, though the checkpoint says its "
                             "parameters are sharded: it is another run's part");
    for (const auto& item : part.items("parameters")) {
      const state_tree piece(item, part.path() + "/parameters");
      const auto name = piece.text("name");
      const auto found = targets.find(name);
      if (found == targets.end())
        throw checkpoint_error(source + ": a part holds a piece of '" + name + "', which the checkpoint does not list as sharded");
      auto& t = found->second;
      const auto value = piece.tensor("value").reshape(-1);
      const auto offset = piece.integer("offset");
      if (offset < 0 || value.numel() != piece.integer("length") || offset + value.numel() > t.numel)
        throw checkpoint_error(source + ": a piece of '" + name + "' is [" + std::to_string(offset) + ", " +
                               std::to_string(offset + value.numel()) + ") of a parameter of " + std::to_string(t.numel) + " elements");
      if (!t.flat.defined()) t.flat = whole_of(name, t.numel, value.options(), source);
      t.flat.narrow(0, offset, value.numel()).copy_(value);
      t.covered += value.numel();
    }
  }
  if (!saved.isGenericDict()) throw checkpoint_error(source + ": its state_dict is " + state_tree::describe(saved) + ", not a dict");
  std::map<std::int64_t, std::string> placed;  // by place
  for (auto& [name, t] : targets) {
    if (t.covered != t.numel)
      throw checkpoint_error(source + ": its parts hold " + std::to_string(t.covered) + " elements of '" + name + "', which has " +
                             std::to_string(t.numel) + ": a part is missing or from another checkpoint");
    placed[t.at] = name;
  }
  // The entries in order, the joined ones at their places (the tensors shared, not copied).
  const auto rest = saved.toGenericDict();
  auto whole = state_tree::new_dict();
  auto next = rest.begin();
  const auto size = static_cast<std::int64_t>(rest.size() + targets.size());
  for (std::int64_t i = 0; i < size; ++i) {
    if (const auto found = placed.find(i); found != placed.end()) {
      auto& t = targets[found->second];
      whole.insert(found->second, t.flat.view(t.shape));
    } else if (next != rest.end()) {
      whole.insert(next->key(), next->value());
      ++next;
    }
  }
  if (whole.size() != rest.size() + targets.size())
    throw checkpoint_error(source + ": its tp/sharded_parameters places parameters among the state_dict's entries where they do not fit");
  return whole;
}

}  // namespace tp::detail
