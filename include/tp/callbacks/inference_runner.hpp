#pragma once
// InferenceRunner: evaluates the main model on validation data in inference mode (eval mode,
// no gradients) and puts the results as scalars (tensorpack's InferenceRunner). It runs in the
// tower's precision and memory format, as the training step does. An inference
// function turns (model, batch) into named outputs; inferencers reduce the outputs of all
// batches to scalars. It runs at every epoch's end: wrap it in tp::every_n_epochs(n, ...) to
// run it less often. The model is back in training mode afterwards, on every exit path.
//
//   auto outputs = [](Net& net, const Batch& b) {
//     auto logits = net->forward(b.data);
//     return tp::outputs{{"cost", cross_entropy(logits, b.target)}, {"logits", logits}, {"label", b.target}};
//   };
//   tp::InferenceRunner(test_flow, outputs, tp::ScalarStats({"cost"}, "val/"),
//                       tp::ClassificationError("logits", "label", "val/error"))
//
// Several datasets: one InferenceRunner each, with its own prefix. In a multi-process run each
// process evaluates its dataflow (shard it to split the work) and the results put are the
// means over every process's examples.
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/types.h>

#include <tp/batch.hpp>
#include <tp/data/length.hpp>
#include <tp/precision.hpp>

namespace tp {

// What an inference function returns for one batch: its output tensors by name, which the
// inferencers read.
using outputs = std::map<std::string, torch::Tensor>;

namespace detail {
inline const torch::Tensor& output(const outputs& out, const std::string& name, const char* who) {
  const auto it = out.find(name);
  if (it == out.end()) {
    std::string have;
    for (const auto& [key, value] : out) have += (have.empty() ? "" : ", ") + key;
    throw std::invalid_argument(std::string("tp::") + who + ": the inference function gives no output named '" + name +
                                "'; it gives: " + (have.empty() ? "nothing" : have));
  }
  return it->second;
}
}  // namespace detail

// The mean over the whole dataset of scalar outputs (each batch weighted by its size), put as
// prefix + name.
class ScalarStats {
 public:
  explicit ScalarStats(std::vector<std::string> names, std::string prefix = "validation_") : names_(std::move(names)), prefix_(std::move(prefix)) {}
  void start() {
    sums_.assign(names_.size(), 0.0);
    count_ = 0;
  }
  void add(const outputs& out, std::int64_t batch_size) {
    for (std::size_t i = 0; i < names_.size(); ++i) {
      const auto& t = detail::output(out, names_[i], "ScalarStats");
      if (t.numel() != 1)
        throw std::invalid_argument("tp::ScalarStats: output '" + names_[i] + "' must be a scalar, got shape " + c10::str(t.sizes()));
      sums_[i] += t.item<double>() * static_cast<double>(batch_size);
    }
    count_ += batch_size;
  }
  std::map<std::string, double> result() const {
    std::map<std::string, double> r;
    for (std::size_t i = 0; i < names_.size(); ++i) r[prefix_ + names_[i]] = count_ ? sums_[i] / static_cast<double>(count_) : 0.0;
    return r;
  }

 private:
  std::vector<std::string> names_;
  std::string prefix_;
  std::vector<double> sums_;
  std::int64_t count_ = 0;
};

// The fraction of examples whose arg-max logit is not the label.
class ClassificationError {
 public:
  ClassificationError(std::string logits, std::string labels, std::string name = "validation_error")
      : logits_(std::move(logits)), labels_(std::move(labels)), name_(std::move(name)) {}
  void start() { wrong_ = total_ = 0; }
  void add(const outputs& out, std::int64_t) {
    const auto& logits = detail::output(out, logits_, "ClassificationError");
    const auto& labels = detail::output(out, labels_, "ClassificationError");
    if (logits.dim() != 2 || labels.dim() != 1 || logits.size(0) != labels.size(0))
      throw std::invalid_argument("tp::ClassificationError: expects logits [N, classes] and labels [N], got " + c10::str(logits.sizes()) +
                                  " and " + c10::str(labels.sizes()));
    wrong_ += logits.argmax(1).ne(labels).sum().item<std::int64_t>();
    total_ += labels.size(0);
  }
  std::map<std::string, double> result() const {
    return {{name_, total_ ? static_cast<double>(wrong_) / static_cast<double>(total_) : 0.0}};
  }

 private:
  std::string logits_, labels_, name_;
  std::int64_t wrong_ = 0, total_ = 0;
};

namespace detail {
// The number of examples in a batch: its first tensor's first dimension.
template <class Batch>
std::int64_t examples_in(const Batch& batch, std::int64_t fallback) {
  std::int64_t n = -1;
  map_tensors(batch, [&](torch::Tensor t) {
    if (n < 0 && t.dim() > 0) n = t.size(0);
    return t;
  });
  return n < 0 ? fallback : n;
}

// Which batches of a dataflow one process takes: batch i when i % every == first.
struct batch_share {
  std::int64_t first = 0, every = 1;
};

// Runs `infer` on the batches of `dataflow` (this process's share of them) without gradients,
// in the given precision and memory format, on the model's device, and feeds the outputs to
// the inferencers. Returns their results and the number of examples. What InferenceRunner and
// tp::evaluate share. `may_be_empty`: a share with no batch is no error (one rank of many, whose
// results weigh nothing; the caller checks the sum).
template <class Model, class Dataflow, class Infer, class Inferencers>
std::pair<std::map<std::string, double>, std::int64_t> run_inference(Model& model, Dataflow& dataflow, Infer& infer, Inferencers& inferencers,
                                                                     compute_format format, const char* who, batch_share share = {},
                                                                     bool may_be_empty = false) {
  torch::NoGradGuard no_grad;
  std::apply([](auto&... inf) { (inf.start(), ...); }, inferencers);
  std::int64_t index = 0, examples = 0;
  const auto device = (*model).parameters().empty() ? torch::Device(torch::kCPU) : (*model).parameters().front().device();
  for (auto&& batch : dataflow) {
    if (index++ % share.every != share.first) continue;
    auto on_device = to_device(batch, device);
    if (format.channels_last) on_device = channels_last_batch(std::move(on_device));
    outputs out;
    {
      const autocast_scope autocast(format.precision, device.type());
      out = infer(model, on_device);
    }
    const auto size = out.empty() ? 1 : out.begin()->second.dim() > 0 ? out.begin()->second.size(0) : 1;
    const auto n = examples_in(on_device, size);
    std::apply([&](auto&... inf) { (inf.add(out, n), ...); }, inferencers);
    examples += n;
  }
  if (index == 0 && !may_be_empty) throw std::runtime_error(std::string("tp::") + who + ": the dataflow gave no batch");
  std::map<std::string, double> results;
  std::apply([&](auto&... inf) { (results.merge(inf.result()), ...); }, inferencers);
  return {results, examples};
}
}  // namespace detail

template <class Dataflow, class Infer, class... Inferencers>
class InferenceRunner {
 public:
  InferenceRunner(Dataflow dataflow, Infer infer, Inferencers... inferencers)
      : dataflow_(std::move(dataflow)), infer_(std::move(infer)), inferencers_(std::move(inferencers)...) {}

  // A dataflow that says it is empty (on every process) is refused before any step is trained,
  // rather than at the first epoch's end.
  template <class Trainer>
  void before_train(Trainer& trainer) {
    const auto items = data::items_per_pass(dataflow_);
    std::vector<double> counts{items ? static_cast<double>(*items) : 0.0, items ? 0.0 : 1.0};  // items; processes that cannot tell
    trainer.sum_across_processes(counts);
    if (counts[1] == 0 && counts[0] == 0)
      throw std::invalid_argument(std::string("tp::InferenceRunner: the validation dataflow is empty") +
                                  (trainer.process_count() > 1 ? " on every one of the " + std::to_string(trainer.process_count()) +
                                                                     " processes (tp::data::shard gives each an equal share of a sized "
                                                                     "dataflow: it needs at least one example per process)"
                                                               : "") +
                                  ": give it at least one batch of examples");
  }

  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    auto& model = trainer.model();
    struct back_to_training {
      decltype(model)& m;
      ~back_to_training() { (*m).train(); }
    } restore{model};
    (*model).eval();
    // Validation computes as training does: in the tower's precision and memory format.
    // A process whose share is empty (more ranks than validation batches) weighs nothing.
    const bool many = trainer.process_count() > 1;
    auto [results, examples] =
        detail::run_inference(model, dataflow_, infer_, inferencers_, compute_format_of(trainer.tower()), "InferenceRunner", {}, many);
    if (many) {
      // Each process evaluated its own share: weigh each one's results by its examples.
      std::vector<double> sums{static_cast<double>(examples)};
      for (const auto& [name, value] : results) sums.push_back(value * static_cast<double>(examples));
      trainer.sum_across_processes(sums);
      if (sums[0] == 0) throw std::runtime_error("tp::InferenceRunner: the dataflow gave no batch on any of the " + std::to_string(trainer.process_count()) + " processes");
      std::size_t i = 1;
      for (auto& [name, value] : results) value = sums[i++] / sums[0];
    }
    for (const auto& [name, value] : results) trainer.put_scalar(name, value);
  }

 private:
  Dataflow dataflow_;
  Infer infer_;
  std::tuple<Inferencers...> inferencers_;
};

}  // namespace tp
