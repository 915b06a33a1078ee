#pragma once
// tp::evaluate: the seed framework's `eval` entry point. A model (trained, or loaded from a
// checkpoint with tp::load_model), a dataflow, an inference function and inferencers give the
// scalars InferenceRunner would put, with no trainer: the same loop, in eval mode, without
// gradients, in the precision and memory format asked for.
//
//   Net net;
//   tp::load_model("train_log/model-0000000937.ckpt", *net);
//   auto scalars = tp::evaluate(net, test_flow, outputs, tp::ClassificationError("logits", "label", "test_error"));
//
// tp::evaluate_across (tp/distributed/evaluate_across.hpp) splits the work across processes.
#include <chrono>
#include <concepts>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <torch/types.h>

#include <tp/callbacks/inference_runner.hpp>
#include <tp/precision.hpp>

namespace tp {

// How tp::evaluate runs: the precision and memory format to compute in (a trained tower's,
// usually), and how long evaluate_across waits for the other processes.
struct EvaluateOptions {
  EvaluateOptions& precision(tp::precision p) {
    format.precision = p;
    return *this;
  }
  EvaluateOptions& channels_last(bool on = true) {
    format.channels_last = on;
    return *this;
  }
  // How long evaluate_across (tp/distributed/evaluate_across.hpp) waits for the other processes.
  EvaluateOptions& timeout(std::chrono::milliseconds t) {
    wait = t;
    return *this;
  }
  compute_format format;
  std::chrono::milliseconds wait = std::chrono::minutes(5);
};

namespace detail {
// Runs the inference with the model in eval mode, and puts its mode back after.
template <class Model, class Dataflow, class Infer, class Inferencers>
std::pair<std::map<std::string, double>, std::int64_t> evaluate_share(const EvaluateOptions& options, Model& model, Dataflow& dataflow,
                                                                      Infer& infer, Inferencers& inferencers, batch_share share) {
  struct mode_back {
    Model& m;
    bool was_training;
    ~mode_back() { (*m).train(was_training); }
  } restore{model, (*model).is_training()};
  (*model).eval();
  return run_inference(model, dataflow, infer, inferencers, options.format, "evaluate", share);
}
}  // namespace detail

template <class Model, class Dataflow, class Infer, class... Inferencers>
std::map<std::string, double> evaluate(const EvaluateOptions& options, Model& model, Dataflow dataflow, Infer infer, Inferencers... inferencers) {
  std::tuple<Inferencers...> all(std::move(inferencers)...);
  return detail::evaluate_share(options, model, dataflow, infer, all, {}).first;
}
// The same, with the default options (fp32, contiguous).
template <class Model, class Dataflow, class Infer, class... Inferencers>
  requires(!std::same_as<std::remove_cvref_t<Model>, EvaluateOptions>)
std::map<std::string, double> evaluate(Model& model, Dataflow dataflow, Infer infer, Inferencers... inferencers) {
  return evaluate(EvaluateOptions(), model, std::move(dataflow), std::move(infer), std::move(inferencers)...);
}

}  // namespace tp
