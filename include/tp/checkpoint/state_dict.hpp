#pragma once
// Weights and optimizer state across the Python border, in the files Python itself writes:
//
//   torch.save(model.state_dict(), "net.pt")        ->  tp::load_state_dict(*net, "net.pt")
//   tp::save_state_dict(*net, "net.pt")             ->  model.load_state_dict(torch.load("net.pt"))
//   torch.save(optimizer.state_dict(), "opt.pt")    ->  tp::load_optimizer_state(optimizer, "opt.pt")
//
// A module's names are LibTorch's (conv1.weight, features.0.bias), which are Python's for a
// module of the same structure. Loading follows Python's load_state_dict: with strict (the
// default) a missing or unexpected key is an error, and a shape mismatch always is; every
// problem is listed in one error, and nothing is loaded unless everything fits. A file whose
// content is a dictionary with a "state_dict" entry (a Lightning or tp checkpoint) or a "model"
// entry (nanoGPT's ckpt.pt) gives that entry; StateDictOptions().prefix("model.") takes the keys of one submodule, without it.
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include <ATen/core/Dict.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <tp/checkpoint/checkpoint_error.hpp>
#include <tp/compiled_part.hpp>
#include <tp/checkpoint/detail/python_pickle.hpp>
#include <tp/optim/torch_optim_state.hpp>
#include <tp/checkpoint/state_tree.hpp>

namespace tp {

// How a state dict of Python's is read into a model: strictness, and which keys of the file (a
// prefix) go to it.
struct StateDictOptions {
  // Missing and unexpected keys are errors (Python's strict=True); without, they are reported.
  TORCH_ARG(bool, strict) = true;
  // Only the file's keys that start with this are read, without it ("model." for the module a
  // LightningModule keeps as self.model).
  TORCH_ARG(std::string, prefix);

 public:
  StateDictOptions() = default;
};

// What a non-strict load left out, by name (Python's _IncompatibleKeys).
struct state_dict_report {
  std::vector<std::string> missing_keys;     // the module's, not in the file
  std::vector<std::string> unexpected_keys;  // the file's, not in the module
};

namespace detail {
// A module's parameters and buffers by name: parameters first, then buffers.
inline std::vector<std::pair<std::string, torch::Tensor>> module_tensors(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> all;
  for (const auto& p : module.named_parameters(true)) all.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(true)) all.emplace_back(b.key(), b.value());
  return all;
}

// Writes a value as torch.save would, atomically.
TP_DECL void write_torch_save(const std::filesystem::path& path, const c10::IValue& value);
}  // namespace detail

// The module's parameters and buffers by name, as Python's state_dict() has them.
TP_DECL c10::impl::GenericDict state_dict_of(const torch::nn::Module& module);

// Loads a state_dict (tensors by name, as state_dict_of gives); `source` names it in errors.
// Throws checkpoint_error; nothing is loaded then.
TP_DECL state_dict_report load_state_dict(torch::nn::Module& module, const c10::IValue& saved, const StateDictOptions& options,
                                          const std::string& source);

// Loads the state_dict in what detail::read_torch_save read (see detail::state_dict_in).
TP_DECL state_dict_report load_state_dict(torch::nn::Module& module, const detail::py_value& content, const StateDictOptions& options,
                                          const std::string& source);

// Loads a torch.save file's state_dict into `module`.
TP_DECL state_dict_report load_state_dict(torch::nn::Module& module, const std::filesystem::path& path, const StateDictOptions& options = {});

// Writes the module's state_dict as torch.save(model.state_dict(), path) would.
TP_DECL void save_state_dict(const torch::nn::Module& module, const std::filesystem::path& path);

// Writes the optimizer's state as torch.save(optimizer.state_dict(), path) would; an optimizer
// without a torch.optim twin is an error (optim/torch_optim_state.hpp).
TP_DECL void save_optimizer_state(const torch::optim::Optimizer& optimizer, const std::filesystem::path& path);

// Loads torch.optim state into `optimizer`: a torch.save(optimizer.state_dict()) file, or the
// index-th of a checkpoint's optimizer_states (Lightning's and tp's). All or nothing.
TP_DECL void load_optimizer_state(torch::optim::Optimizer& optimizer, const std::filesystem::path& path, std::size_t index = 0);

}  // namespace tp

#if TP_DEFINE_COMPILED_PART
#include <map>
#include <stdexcept>

#include <tp/io/atomic_file.hpp>

namespace tp {

namespace detail {

TP_DECL void write_torch_save(const std::filesystem::path& path, const c10::IValue& value) {
  const auto bytes = detail::torch_save_bytes(value);
  atomic_file_writer file(path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

// The state_dict in a torch.save file's content: the content itself, or its "state_dict" (a
// Lightning or tp checkpoint), or its "model" (nanoGPT's ckpt.pt, and many scripts' own).
inline const py_value& state_dict_in(const py_value& content, const std::string& source) {
  if (content.is_dict()) {
    if (const auto* inner = content.find("state_dict"); inner && inner->is_dict()) return *inner;
    if (const auto* inner = content.find("model"); inner && inner->is_dict()) return *inner;
    bool tensors = true;
    for (const auto& [key, value] : content.entries()) tensors = tensors && key.type() == py_value::kind::string && value.type() == py_value::kind::tensor;
    if (tensors) return content;
  }
  throw checkpoint_error(source + " holds " + content.describe() +
                         ", not a state_dict (a dict of tensors by name, as torch.save(model.state_dict()) writes) "
                         "nor a checkpoint with a 'state_dict' or 'model' entry");
}

inline std::string some_names(const std::vector<std::string>& names) {
  std::string text;
  for (std::size_t i = 0; i < names.size() && i < 8; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > 8) text += " and " + std::to_string(names.size() - 8) + " more";
  return text;
}

}  // namespace detail

TP_DECL c10::impl::GenericDict state_dict_of(const torch::nn::Module& module) {
  c10::Dict<std::string, torch::Tensor> all;
  for (const auto& [name, tensor] : detail::module_tensors(module)) all.insert(name, tensor.detach());
  return c10::impl::toGenericDict(all);
}

TP_DECL state_dict_report load_state_dict(torch::nn::Module& module, const detail::py_value& content, const StateDictOptions& options,
                                          const std::string& source) {
  if (const auto* own = content.is_dict() ? content.find("tp") : nullptr; own && own->is_dict() && own->find("sharded_parameters"))
    throw checkpoint_error(source + " is a parameter-sharded run's checkpoint: its units' parameters are in the parts its processes "
                                    "wrote beside it; load it with tp::load_model or tp::load_checkpoint, which join them, or make "
                                    "one file with tp-export --whole or --state-dict");
  const auto& saved = detail::state_dict_in(content, source);
  auto tensors = state_tree::new_dict();
  for (const auto& [key, value] : saved.entries()) {
    if (key.type() != detail::py_value::kind::string) throw checkpoint_error(source + ": its state_dict has a key that is " + key.describe());
    // (Entries that are not tensors are kept as their description, for load_state_dict's message.)
    tensors.insert_or_assign(key.as_string(), value.is_tensor() ? c10::IValue(value.tensor()) : c10::IValue(value.describe()));
  }
  return load_state_dict(module, tensors, options, source);
}

TP_DECL state_dict_report load_state_dict(torch::nn::Module& module, const c10::IValue& saved, const StateDictOptions& options,
                                          const std::string& source) {
  if (!saved.isGenericDict() || saved.toGenericDict().keyType()->kind() != c10::TypeKind::StringType)
    throw checkpoint_error(source + ": its state_dict is " + state_tree::describe(saved) + ", not a dict of tensors by name");
  std::map<std::string, torch::Tensor> in_file;
  std::vector<std::string> not_tensors;
  for (const auto& entry : saved.toGenericDict()) {
    const auto& name = entry.key().toStringRef();
    if (!name.starts_with(options.prefix())) continue;
    const auto& value = entry.value();
    if (!value.isTensor()) not_tensors.push_back(name + " (" + (value.isString() ? value.toStringRef() : state_tree::describe(value)) + ")");
    else in_file[name.substr(options.prefix().size())] = value.toTensor();
  }
  state_dict_report report;
  std::vector<std::string> shapes;
  const auto mine = detail::module_tensors(module);
  auto unused = in_file;
  for (const auto& [name, tensor] : mine) {
    const auto found = in_file.find(name);
    if (found == in_file.end()) {
      report.missing_keys.push_back(name);
      continue;
    }
    if (found->second.sizes() != tensor.sizes())
      shapes.push_back(name + " is " + c10::str(found->second.sizes()) + " in the file but " + c10::str(tensor.sizes()) + " here");
    unused.erase(name);
  }
  for (const auto& [name, tensor] : unused) report.unexpected_keys.push_back(options.prefix() + name);
  std::string problems;
  if (!not_tensors.empty()) problems += " entries that are not tensors: " + detail::some_names(not_tensors) + ";";
  if (!shapes.empty()) problems += " shapes that differ: " + detail::some_names(shapes) + ";";
  if (options.strict() && !report.missing_keys.empty()) problems += " missing keys: " + detail::some_names(report.missing_keys) + ";";
  if (options.strict() && !report.unexpected_keys.empty()) problems += " unexpected keys: " + detail::some_names(report.unexpected_keys) + ";";
  if (!problems.empty())
    throw checkpoint_error(source + " does not fit this model (nothing was loaded):" + problems +
                           " build the module as the one that saved it (its names are LibTorch's register_module names)" +
                           (options.prefix().empty() ? ", or take one submodule's keys with StateDictOptions().prefix(\"model.\")" : ""));
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : mine)
    if (const auto found = in_file.find(name); found != in_file.end()) tensor.copy_(found->second);  // converts the type, as Python's copy_
  return report;
}

TP_DECL state_dict_report load_state_dict(torch::nn::Module& module, const std::filesystem::path& path, const StateDictOptions& options) {
  return load_state_dict(module, detail::read_torch_save(path), options, path.string());
}

TP_DECL void save_state_dict(const torch::nn::Module& module, const std::filesystem::path& path) {
  detail::write_torch_save(path, state_dict_of(module));
}

TP_DECL void save_optimizer_state(const torch::optim::Optimizer& optimizer, const std::filesystem::path& path) {
  const auto state = optim::to_torch_optim_state(optimizer);
  if (!state)
    throw std::invalid_argument("tp::save_optimizer_state: this optimizer has no torch.optim twin (tp writes SGD, Adam, AdamW, Adagrad, "
                                "RMSprop, NAdam and RAdam); save it with LibTorch's torch::save(optimizer, path)");
  detail::write_torch_save(path, *state);
}

TP_DECL void load_optimizer_state(torch::optim::Optimizer& optimizer, const std::filesystem::path& path, std::size_t index) {
  const auto content = detail::read_torch_save(path);
  const auto* listed = content.is_dict() ? content.find("optimizer_states") : nullptr;
  if (listed && listed->type() == detail::py_value::kind::list) {
    if (index >= listed->items().size())
      throw checkpoint_error(path.string() + " holds " + std::to_string(listed->items().size()) + " optimizer states; asked for number " +
                             std::to_string(index));
    optim::load_torch_optim_state(optimizer, detail::to_ivalue(listed->items()[index], path.string()), path.string());
  } else {
    optim::load_torch_optim_state(optimizer, detail::to_ivalue(content, path.string()), path.string());
  }
}

}  // namespace tp
#endif
