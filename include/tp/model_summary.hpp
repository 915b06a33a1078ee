#pragma once
// The model summary (tensorpack's describe_trainable_vars, Lightning's ModelSummary, Keras's
// model.summary()): a table with one row per module that holds parameters of its own, then the
// totals.
//
//   std::cout << tp::model_summary(*model);
//
//   module     type    parameters                trainable  frozen      bytes
//   conv1      Conv2d  [32, 1, 5, 5] [32]              832       0    3.2 KiB
//   ...
//   total                                           101,770       0  397.5 KiB  (buffers 0 B)
//
// The trainer prints it when training starts (TrainOptions::model_summary, on by default, in the
// chief only), and the optimizer's state after the first step, when optimizers that make their
// state lazily (Adam's moments) have made it.
#include <concepts>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/serialize/output-archive.h>

#include <tp/compiled_part.hpp>

namespace tp {

namespace detail {
TP_DECL std::string with_commas(std::int64_t n);  // 1234567 -> "1,234,567"
TP_DECL std::string human_bytes(double bytes);    // 1536 -> "1.5 KiB"
inline std::int64_t tensor_bytes(const torch::Tensor& t) { return t.defined() ? t.numel() * static_cast<std::int64_t>(t.element_size()) : 0; }
// The bytes of what `save` writes into a LibTorch archive, counted without keeping them.
TP_DECL std::int64_t archived_bytes(const std::function<void(torch::serialize::OutputArchive&)>& save);
}  // namespace detail

// One row of the model summary: a module with parameters of its own, their shapes, counts and
// bytes.
struct module_summary {
  std::string name, type;
  std::vector<std::vector<std::int64_t>> shapes;
  std::int64_t trainable = 0, frozen = 0, bytes = 0;
};

// The rows: modules with parameters of their own, in registration order ("" is the model itself).
TP_DECL std::vector<module_summary> summarize_modules(const torch::nn::Module& model);

// The table above, one line per row.
TP_DECL std::string model_summary(const torch::nn::Module& model);

// An optimizer's state (its moments, momentum buffers, step counts and options), in bytes, as a
// checkpoint holds it: measured by serializing it, so that it holds for any optimizer.
template <class Optimizer>
std::int64_t optimizer_state_bytes(Optimizer& optimizer) {
  return detail::archived_bytes([&](torch::serialize::OutputArchive& archive) { optimizer.save(archive); });
}

// The line the trainer prints after the first step: the optimizers' state, in bytes (those that
// cannot save themselves left out), or "" when there is none to report.
template <class Replicas>
std::string optimizer_summary(Replicas& replicas) {
  std::int64_t count = 0, bytes = 0;
  replicas.for_each_optimizer([&](auto& optimizer) {
    if constexpr (requires(torch::serialize::OutputArchive& a) { optimizer.save(a); }) ++count, bytes += optimizer_state_bytes(optimizer);
  });
  if (count == 0) return {};
  std::string whose;  // a sharded run's rank holds a shard
  if constexpr (requires { { replicas.state_share() } -> std::convertible_to<std::string>; }) whose = replicas.state_share();
  return "tp: optimizer state after the first step: " + detail::human_bytes(static_cast<double>(bytes)) + whose +
         (count > 1 ? " in " + std::to_string(count) + " optimizers (one per tower)" : std::string()) + "\n";
}

}  // namespace tp

#if TP_DEFINE_COMPILED_PART
#include <algorithm>
#include <map>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <streambuf>

#include <c10/util/accumulate.h>

#include <tp/policies/distribution/detail/unit_runtime.hpp>

namespace tp {

namespace detail {
TP_DECL std::string with_commas(std::int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}
TP_DECL std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return text;
}
// Counts what goes through an ostream without keeping it.
class counting_buffer : public std::streambuf {
 public:
  std::int64_t count = 0;

 protected:
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) ++count;
    return c;
  }
  std::streamsize xsputn(const char*, std::streamsize n) override {
    count += n;
    return n;
  }
};
TP_DECL std::int64_t archived_bytes(const std::function<void(torch::serialize::OutputArchive&)>& save) {
  torch::serialize::OutputArchive archive;
  save(archive);
  counting_buffer counter;
  std::ostream out(&counter);
  archive.save_to(out);
  return counter.count;
}
}  // namespace detail

TP_DECL std::vector<module_summary> summarize_modules(const torch::nn::Module& model) {
  // A unit built sharded (MultiProcess's build_sharded) holds empty parameters: their whole shapes.
  std::map<const void*, std::vector<std::int64_t>> whole;
  const auto note = [&](const torch::nn::Module& module) {
    if (const auto* unit = dynamic_cast<const detail::sharded_unit*>(&module); unit && unit->built()) {
      const auto mine = module.parameters();
      for (std::size_t j = 0; j < mine.size() && j < unit->built()->shapes.size(); ++j) whole[mine[j].unsafeGetTensorImpl()] = unit->built()->shapes[j];
    }
  };
  note(model);
  for (const auto& item : model.named_modules("", /*include_self=*/false)) note(*item.value());
  std::vector<module_summary> rows;
  const auto add = [&](std::string name, const torch::nn::Module& module) {
    module_summary row{.name = std::move(name), .type = module.name(), .shapes = {}};
    for (const auto& p : module.named_parameters(/*recurse=*/false)) {
      const auto found = whole.find(p.value().unsafeGetTensorImpl());
      row.shapes.push_back(found == whole.end() ? p.value().sizes().vec() : found->second);
      const auto numel = c10::multiply_integers(row.shapes.back());
      (p.value().requires_grad() ? row.trainable : row.frozen) += numel;
      row.bytes += numel * static_cast<std::int64_t>(p.value().element_size());
    }
    if (!row.shapes.empty()) rows.push_back(std::move(row));
  };
  add("(model)", model);  // (the model itself may not be in a shared_ptr, which named_modules would need)
  for (const auto& item : model.named_modules("", /*include_self=*/false)) add(item.key(), *item.value());
  return rows;
}

TP_DECL std::string model_summary(const torch::nn::Module& model) {
  const auto rows = summarize_modules(model);
  std::int64_t trainable = 0, frozen = 0, bytes = 0, buffer_bytes = 0;
  for (const auto& b : model.buffers()) buffer_bytes += detail::tensor_bytes(b);
  std::vector<std::vector<std::string>> cells{{"module", "type", "parameters", "trainable", "frozen", "bytes"}};
  for (const auto& r : rows) {
    std::string shapes;
    for (const auto& s : r.shapes) {
      std::ostringstream one;
      one << (shapes.empty() ? "" : " ") << c10::IntArrayRef(s);
      shapes += one.str();
    }
    cells.push_back({r.name, r.type, shapes, detail::with_commas(r.trainable), detail::with_commas(r.frozen), detail::human_bytes(r.bytes)});
    trainable += r.trainable, frozen += r.frozen, bytes += r.bytes;
  }
  cells.push_back({"total", "", "", detail::with_commas(trainable), detail::with_commas(frozen), detail::human_bytes(bytes)});
  std::vector<std::size_t> width(6, 0);
  for (const auto& row : cells)
    for (std::size_t c = 0; c < 6; ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  for (std::size_t r = 0; r < cells.size(); ++r) {
    std::string line;
    for (std::size_t c = 0; c < 6; ++c) {
      const auto& cell = cells[r][c];
      const auto pad = std::string(width[c] - cell.size(), ' ');
      line += c >= 3 ? pad + cell : cell + pad;  // numbers to the right
      if (c < 5) line += "  ";
    }
    if (r + 1 == cells.size()) line += "  (buffers " + detail::human_bytes(static_cast<double>(buffer_bytes)) + ")";
    out += line + "\n";
  }
  return out;
}

}  // namespace tp
#endif
