#pragma once
// Small typed reads and writes on LibTorch's serialize archives, for the state a checkpoint
// holds. A missing or mistyped entry is an error that names the entry, never a default value.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/cuda.h>
#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <tp/checkpoint_error.hpp>

namespace tp::detail {

using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

inline c10::IValue read_value(InputArchive& archive, const std::string& key) {
  c10::IValue value;
  if (!archive.try_read(key, value)) throw checkpoint_error("the checkpoint has no entry '" + key + "'");
  return value;
}

inline std::int64_t read_int(InputArchive& archive, const std::string& key) {
  const auto v = read_value(archive, key);
  if (!v.isInt()) throw checkpoint_error("the checkpoint entry '" + key + "' is not an integer");
  return v.toInt();
}
inline double read_double(InputArchive& archive, const std::string& key) {
  const auto v = read_value(archive, key);
  if (!v.isDouble()) throw checkpoint_error("the checkpoint entry '" + key + "' is not a number");
  return v.toDouble();
}
inline bool read_bool(InputArchive& archive, const std::string& key) {
  const auto v = read_value(archive, key);
  if (!v.isBool()) throw checkpoint_error("the checkpoint entry '" + key + "' is not a boolean");
  return v.toBool();
}
inline std::vector<std::int64_t> read_ints(InputArchive& archive, const std::string& key) {
  const auto v = read_value(archive, key);
  if (!v.isIntList()) throw checkpoint_error("the checkpoint entry '" + key + "' is not a list of integers");
  return v.toIntVector();
}
inline torch::Tensor read_tensor(InputArchive& archive, const std::string& key) {
  torch::Tensor t;
  if (!archive.try_read(key, t)) throw checkpoint_error("the checkpoint has no tensor '" + key + "'");
  return t;
}
inline void read_archive(InputArchive& archive, const std::string& key, InputArchive& into) {
  if (!archive.try_read(key, into)) throw checkpoint_error("the checkpoint has no section '" + key + "'");
}

// The default CPU generator (dropout, randn, randperm): its whole state, so that a resumed run
// draws the numbers the uninterrupted one would have.
inline void save_cpu_rng(OutputArchive& archive, const std::string& key) {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  archive.write(key, generator.get_state());
}
inline void load_cpu_rng(InputArchive& archive, const std::string& key) {
  const auto state = read_tensor(archive, key);
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// Every visible CUDA device's default generator (dropout on the GPU), under key/0, key/1, ...,
// and their count under key/count; nothing but a count of 0 without CUDA. Reached through
// ATen's device-generic context, so this compiles and runs with a CPU-only LibTorch. A run
// resumed on fewer GPUs restores those it has.
inline void save_cuda_rng(OutputArchive& archive, const std::string& key) {
  const std::int64_t count = torch::cuda::is_available() ? static_cast<std::int64_t>(torch::cuda::device_count()) : 0;
  archive.write(key + "/count", c10::IValue(count));
  for (std::int64_t i = 0; i < count; ++i) {
    auto generator = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)));
    std::lock_guard<std::mutex> lock(generator.mutex());
    archive.write(key + "/" + std::to_string(i), generator.get_state());
  }
}
inline void load_cuda_rng(InputArchive& archive, const std::string& key) {
  const auto saved = read_value(archive, key + "/count");
  if (!saved.isInt()) throw checkpoint_error("the checkpoint entry '" + key + "/count' is not an integer");
  const std::int64_t here = torch::cuda::is_available() ? static_cast<std::int64_t>(torch::cuda::device_count()) : 0;
  for (std::int64_t i = 0; i < std::min(saved.toInt(), here); ++i) {
    const auto state = read_tensor(archive, key + "/" + std::to_string(i));
    auto generator = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)));
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }
}

// A module's parameters and buffers by name. Loading checks every name, shape and type against
// the module and copies the values in place, so the optimizer's references stay valid; LibTorch's
// own Module::load would silently take a saved tensor of another shape.
inline std::vector<std::pair<std::string, torch::Tensor>> module_tensors(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> all;  // parameters first, then buffers
  for (const auto& p : module.named_parameters(true)) all.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(true)) all.emplace_back(b.key(), b.value());
  return all;
}

using named_tensors = std::vector<std::pair<std::string, torch::Tensor>>;

inline void save_named(OutputArchive& archive, const named_tensors& tensors) {
  std::string names;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    names += tensors[i].first;
    names += '\n';
    // (Appended, not "t" + ...: g++ 12 warns about that concatenation, wrongly, at -O2.)
    std::string key = "t";
    key += std::to_string(i);
    archive.write(key, tensors[i].second.detach(), /*is_buffer=*/true);
  }
  archive.write("names", c10::IValue(names));
}

// Reads into `tensors` (in place), after checking every name, shape and type: a mismatch
// changes nothing.
inline void load_named(InputArchive& archive, const named_tensors& tensors) {
  const auto names_value = read_value(archive, "names");
  if (!names_value.isString()) throw checkpoint_error("the checkpoint's model has no list of tensor names");
  const std::string& names = names_value.toStringRef();
  std::vector<torch::Tensor> saved;
  std::size_t start = 0;
  for (std::size_t i = 0; start < names.size(); ++i) {
    const auto end = names.find('\n', start);
    const std::string name = names.substr(start, end - start);
    start = end + 1;
    if (i >= tensors.size())
      throw checkpoint_error("the checkpoint's model has more tensors than this model (" + std::to_string(tensors.size()) +
                             "), starting with '" + name + "'; build the model as the run that saved it did");
    if (name != tensors[i].first)
      throw checkpoint_error("the checkpoint's model has '" + name + "' where this model has '" + tensors[i].first +
                             "'; build the model as the run that saved it did");
    auto value = read_tensor(archive, "t" + std::to_string(i));
    const auto& target = tensors[i].second;
    if (value.sizes() != target.sizes() || value.scalar_type() != target.scalar_type())
      throw checkpoint_error("the checkpoint's '" + name + "' is " + c10::str(value.scalar_type(), value.sizes()) + " but this model's is " +
                             c10::str(target.scalar_type(), target.sizes()) + "; build the model as the run that saved it did");
    saved.push_back(std::move(value));
  }
  if (saved.size() != tensors.size())
    throw checkpoint_error("the checkpoint's model has " + std::to_string(saved.size()) + " tensors but this model has " +
                           std::to_string(tensors.size()) + "; build the model as the run that saved it did");
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < saved.size(); ++i) tensors[i].second.copy_(saved[i]);
}

// An archive's bytes (LibTorch writes a zip), as a string and as a uint8 tensor (how a
// checkpoint's dictionary carries an archive: Python sees a tensor it need not understand).
inline std::string archive_bytes_string(OutputArchive& archive) {
  std::string bytes;
  archive.save_to([&](const void* data, std::size_t n) -> std::size_t {
    bytes.append(static_cast<const char*>(data), n);
    return n;
  });
  return bytes;
}
inline torch::Tensor archive_bytes(OutputArchive& archive) {
  const auto bytes = archive_bytes_string(archive);
  auto tensor = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(tensor.data_ptr<std::uint8_t>()));
  return tensor;
}

inline void save_module(OutputArchive& archive, const torch::nn::Module& module) { save_named(archive, module_tensors(module)); }
inline void load_module(InputArchive& archive, torch::nn::Module& module) { load_named(archive, module_tensors(module)); }

}  // namespace tp::detail
