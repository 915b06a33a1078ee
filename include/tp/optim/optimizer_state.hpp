#pragma once
// Any optimizer's state as plain values (a tp::state_tree's), both ways:
//
//   - torch.optim's own state_dict when the optimizer has a Python twin (SGD, Adam, AdamW, ...:
//     optim/torch_optim_state.hpp), so that Python's optimizer.load_state_dict takes it;
//   - else {"libtorch": {...}}: the entries LibTorch's optimizer serialization writes (the
//     optimizer's save(): its param groups' options, each parameter's state), as nested
//     dictionaries of numbers, strings and tensors. LAMB, LARS, LBFGS and a user's optimizer
//     keep their state this way: Python reads every tensor and number, and only tp loads it back.
//
// `Optimizer` is anything with LibTorch's save(OutputArchive&) and load(InputArchive&): a
// torch::optim::Optimizer, tp::optim::AnyOptimizer or a user's. Loading is all or nothing for a
// torch.optim state; for the other, what LibTorch's load() checks (it throws, naming the key).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <tp/checkpoint/checkpoint_error.hpp>
#include <tp/optim/any_optimizer.hpp>
#include <tp/optim/torch_optim_state.hpp>
#include <tp/checkpoint/state_tree.hpp>

namespace tp::optim {

namespace detail {

// An archive's entries as a tree: nested archives as dictionaries, everything else as the value
// it holds. ("training" is the archive's module's own flag, not an entry.)
inline c10::impl::GenericDict archive_tree(torch::serialize::InputArchive& archive) {
  auto tree = state_tree::new_dict();
  for (const auto& key : archive.keys()) {
    if (key == "training") continue;
    torch::serialize::InputArchive inner;
    if (archive.try_read(key, inner)) {
      tree.insert(key, archive_tree(inner));
      continue;
    }
    c10::IValue value;
    if (!archive.try_read(key, value)) continue;
    if (value.isList() && value.toList().elementType()->kind() != c10::TypeKind::AnyType) {  // pickled without LibTorch's list constructors
      c10::impl::GenericList any(c10::AnyType::get());
      for (const auto& item : value.toListRef()) any.push_back(item);
      value = any;
    }
    tree.insert(key, value.isTensor() ? value.toTensor().detach() : value);
  }
  return tree;
}

// The items as a c10::List<T> when there are some and each is a T (`is`), else nothing.
template <class T, class Is>
std::optional<c10::IValue> list_of(c10::ArrayRef<c10::IValue> items, Is is) {
  if (items.empty() || !std::all_of(items.begin(), items.end(), is)) return std::nullopt;
  c10::List<T> out;
  for (const auto& item : items) out.push_back(item.to<T>());
  return out;
}

// A list of one type as LibTorch's typed list (what its optimizers read back), else as it is.
inline c10::IValue typed_list(const c10::IValue& value) {
  const auto items = value.toListRef();
  if (auto l = list_of<std::string>(items, [](const c10::IValue& v) { return v.isString(); })) return *l;
  if (auto l = list_of<std::int64_t>(items, [](const c10::IValue& v) { return v.isInt(); })) return *l;
  if (auto l = list_of<double>(items, [](const c10::IValue& v) { return v.isDouble(); })) return *l;
  if (auto l = list_of<torch::Tensor>(items, [](const c10::IValue& v) { return v.isTensor(); })) return *l;
  return value;
}

// archive_tree's inverse; `where` names the entry in errors.
inline void write_tree(const c10::IValue& tree, torch::serialize::OutputArchive& archive, const std::string& where) {
  const state_tree entries(tree, where);
  for (const auto& key : entries.keys()) {
    const auto& value = entries.value(key);
    if (value.isGenericDict()) {
      torch::serialize::OutputArchive inner(archive.compilation_unit());
      write_tree(value, inner, where + "/" + key);
      archive.write(key, inner);
    } else if (value.isTensor()) {
      archive.write(key, value.toTensor(), /*is_buffer=*/true);
    } else {
      archive.write(key, value.isList() ? typed_list(value) : value);
    }
  }
}

// What an archive wrote, as an archive to read (LibTorch has no other way from one to the other).
inline torch::serialize::InputArchive reopened(torch::serialize::OutputArchive& out) {
  std::string bytes;
  out.save_to([&](const void* data, std::size_t n) -> std::size_t {
    bytes.append(static_cast<const char*>(data), n);
    return n;
  });
  torch::serialize::InputArchive in;
  in.load_from(bytes.data(), bytes.size());
  return in;
}

}  // namespace detail

// The optimizer's state as a tree.
template <class Optimizer>
c10::IValue state_of(Optimizer& optimizer) {
  if (const torch::optim::Optimizer* base = tp::detail::torch_optimizer_of(optimizer))
    if (auto in_python = to_torch_optim_state(*base)) return *in_python;
  torch::serialize::OutputArchive out;
  optimizer.save(out);
  auto in = detail::reopened(out);
  auto own = state_tree::new_dict();
  own.insert("libtorch", detail::archive_tree(in));
  return own;
}

// Loads what state_of gave (or Python's torch.optim state_dict); `source` names it in errors.
// Throws checkpoint_error.
template <class Optimizer>
void load_state(Optimizer& optimizer, const c10::IValue& saved, const std::string& source) {
  const auto* base = tp::detail::torch_optimizer_of(optimizer);
  if (saved.isGenericDict() && saved.toGenericDict().keyType()->kind() == c10::TypeKind::StringType &&
      saved.toGenericDict().contains("libtorch")) {
    torch::serialize::OutputArchive out;
    detail::write_tree(saved.toGenericDict().at("libtorch"), out, source + "/libtorch");
    auto in = detail::reopened(out);
    try {
      optimizer.load(in);
    } catch (const c10::Error& e) {
      throw checkpoint_error(source + " does not fit this optimizer (" + e.what_without_backtrace() +
                             "); build the optimizer as the run that saved it did");
    }
    return;
  }
  if (!base || !torch_optim_name(*base))
    throw checkpoint_error(source + " is in torch.optim's format, which this optimizer (without a torch.optim twin) cannot take");
  load_torch_optim_state(*tp::detail::torch_optimizer_of(optimizer), saved, source);
}

}  // namespace tp::optim
