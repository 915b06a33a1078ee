#pragma once
// state_tree: the state of one part of a run (the loop, the loss scaler, the input's position, a
// callback) as a dictionary of plain values: integers, floats, booleans, strings, tensors,
// lists of them and dictionaries nested inside. A checkpoint is the tree of all the parts,
// written once as torch.save writes it, so that Python's torch.load sees every part as plain
// values and can change one (a learning rate) before the run resumes.
//
// A part writes with put() and child(), and reads with the typed getters, which name the entry
// by its path in the checkpoint ("callbacks/EarlyStopping(val_loss)/best") when it is missing
// or of another type, never returning a default:
//
//   template <class Trainer>
//   void save_state(Trainer&, tp::state_tree& out) const { out.put("best", best_); out.put("stalled", stalled_); }
//   template <class Trainer>
//   void load_state(Trainer&, const tp::state_tree& in) { best_ = in.real("best"); stalled_ = in.integer("stalled"); }
//
// The tree is LibTorch's c10::IValue (a c10::Dict of str to any value), shared, not copied, as
// Python's dictionaries are: a child written into stays in its parent.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>

#include <tp/checkpoint/checkpoint_error.hpp>

namespace tp {

class state_tree {
 public:
  using dict_type = c10::impl::GenericDict;  // what the tree is: LibTorch's dictionary of str -> any value

  // An empty tree, to write into.
  state_tree() : dict_(new_dict()) {}
  // The tree `value` holds, to read; `path` names it in errors. Throws checkpoint_error when
  // `value` is not a dictionary with str keys.
  state_tree(const c10::IValue& value, std::string path) : dict_(new_dict()), path_(std::move(path)) {
    if (!value.isGenericDict() || !value.toGenericDict().keyType()->isSubtypeOf(*c10::StringType::get()))
      fail("", "is " + describe(value) + ", not a dictionary of entries by name");
    dict_ = value.toGenericDict();
  }

  // --- writing ---
  // Puts a value under `key`; a key written twice is a bug in the part that writes it. Typed
  // lists (std::vector<std::int64_t>, ...) become lists of any value, which torch.load reads
  // without LibTorch's list constructors (PyTorch 2.6 refuses those).
  void put(const std::string& key, c10::IValue value) {
    if (dict_.contains(key)) throw std::logic_error("tp::state_tree: '" + where(key) + "' written twice");
    dict_.insert(key, plain(std::move(value)));
  }
  void put(const std::string& key, const state_tree& tree) { put(key, c10::IValue(tree.dict_)); }  // a tree under `key`
  // A new dictionary under `key`, to write into.
  state_tree child(const std::string& key) {
    state_tree inner;
    put(key, inner.dict_);
    inner.path_ = where(key);
    return inner;
  }

  // --- reading ---
  bool contains(const std::string& key) const { return dict_.contains(key); }  // whether `key` has an entry
  // The entry under `key`, whatever it holds. Each reader below throws tp::checkpoint_error,
  // naming the entry's path, when the entry is missing or holds another kind of value.
  const c10::IValue& value(const std::string& key) const {
    const auto found = dict_.find(key);
    if (found == dict_.end()) fail(key, "is missing");
    return found->value();
  }
  // An integer.
  std::int64_t integer(const std::string& key) const {
    const auto& v = value(key);
    if (!v.isInt()) fail(key, "is " + describe(v) + ", not an integer");
    return v.toInt();
  }
  // A float; an integer too (Python writes 1 for 1.0).
  double real(const std::string& key) const {
    const auto& v = value(key);
    if (v.isInt()) return static_cast<double>(v.toInt());
    if (!v.isDouble()) fail(key, "is " + describe(v) + ", not a number");
    return v.toDouble();
  }
  // A float, or nothing where the entry is None.
  std::optional<double> optional_real(const std::string& key) const {
    if (value(key).isNone()) return std::nullopt;
    return real(key);
  }
  // A boolean.
  bool boolean(const std::string& key) const {
    const auto& v = value(key);
    if (!v.isBool()) fail(key, "is " + describe(v) + ", not a boolean");
    return v.toBool();
  }
  // A str.
  std::string text(const std::string& key) const {
    const auto& v = value(key);
    if (!v.isString()) fail(key, "is " + describe(v) + ", not a str");
    return v.toStringRef();
  }
  // A tensor (the tree's own, not a copy).
  torch::Tensor tensor(const std::string& key) const {
    const auto& v = value(key);
    if (!v.isTensor()) fail(key, "is " + describe(v) + ", not a tensor");
    return v.toTensor();
  }
  // A list of integers (a list or tuple of ints in Python).
  std::vector<std::int64_t> integers(const std::string& key) const {
    std::vector<std::int64_t> out;
    for (const auto& item : items(key)) {
      if (!item.isInt()) fail(key, "holds " + describe(item) + " where it should hold integers");
      out.push_back(item.toInt());
    }
    return out;
  }
  // A list's or tuple's items.
  std::vector<c10::IValue> items(const std::string& key) const {
    const auto& v = value(key);
    if (v.isList()) return v.toListRef().vec();
    if (v.isTuple()) return v.toTupleRef().elements().vec();
    fail(key, "is " + describe(v) + ", not a list");
  }
  // The dictionary under `key`.
  state_tree at(const std::string& key) const { return state_tree(value(key), where(key)); }

  const dict_type& dict() const noexcept { return dict_; }  // the dictionary itself
  const std::string& path() const noexcept { return path_; }  // where the tree is, as errors name it
  // The entries' keys, in the order they were written.
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const auto& entry : dict_) out.push_back(entry.key().toStringRef());
    return out;
  }

  // For messages: "an int", "a str", "a tensor Float[2, 3]", "a dict of 3 entries".
  static std::string describe(const c10::IValue& v) {
    if (v.isNone()) return "None";
    if (v.isBool()) return "a bool";
    if (v.isInt()) return "an int";
    if (v.isDouble()) return "a float";
    if (v.isString()) return "a str";
    if (v.isTensor()) return "a tensor " + c10::str(v.toTensor().scalar_type(), v.toTensor().sizes());
    if (v.isGenericDict()) return "a dict of " + std::to_string(v.toGenericDict().size()) + " entries";
    if (v.isList() || v.isIntList() || v.isDoubleList()) return "a list";
    if (v.isTuple()) return "a tuple";
    return "a " + v.tagKind();
  }

  // An empty dictionary of the tree's kind (str -> any value).
  static dict_type new_dict() { return dict_type(c10::StringType::get(), c10::AnyType::get()); }

  // A copy that shares nothing with `value`: its dictionaries and lists new, its tensors cloned
  // (what a part restores when a load fails half-way), or copied to the CPU's memory with
  // to_host (what a checkpoint written in the background works from).
  static c10::IValue deep_copy(const c10::IValue& value, bool to_host = false) {
    if (value.isTensor())
      return to_host ? value.toTensor().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true) : value.toTensor().clone();
    if (value.isGenericDict()) {
      const auto from = value.toGenericDict();
      dict_type to(from.keyType(), from.valueType());
      for (const auto& entry : from) to.insert(entry.key(), deep_copy(entry.value(), to_host));
      return to;
    }
    if (value.isList()) {
      c10::impl::GenericList to(c10::AnyType::get());
      for (const auto& item : value.toListRef()) to.push_back(deep_copy(item, to_host));
      return to;
    }
    if (value.isTuple()) {
      std::vector<c10::IValue> to;
      for (const auto& item : value.toTupleRef().elements()) to.push_back(deep_copy(item, to_host));
      return c10::ivalue::Tuple::create(std::move(to));
    }
    return value;
  }

 private:
  static c10::IValue plain(c10::IValue value) {
    if (!value.isList() || value.toList().elementType()->kind() == c10::TypeKind::AnyType) return value;
    c10::impl::GenericList any(c10::AnyType::get());
    for (const auto& item : value.toListRef()) any.push_back(plain(item));
    return any;
  }
  std::string where(const std::string& key) const { return path_.empty() ? key : key.empty() ? path_ : path_ + "/" + key; }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw checkpoint_error("the checkpoint's " + (where(key).empty() ? std::string("state") : "'" + where(key) + "'") + " " + what);
  }

  dict_type dict_;
  std::string path_;
};

}  // namespace tp
