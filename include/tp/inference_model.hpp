#pragma once
// tp::InferenceModel: the seed framework's InferenceModel, a trained model to serve. It takes a
// model (or builds one and loads a checkpoint into it), puts it on the device asked for in eval
// mode, runs an optional pre-processing of the inputs and an optional warm-up batch, and then
// answers batched calls without gradients, in the precision and memory format asked for.
// Unlike tp::Predictor it needs no trainer.
//
//   auto model = tp::InferenceModel<Net>::from_checkpoint([] { return Net(); }, "train_log/model-0000000937.ckpt",
//                                                          tp::InferenceOptions().device(torch::kCPU))
//                    .preprocess(fashion_mnist::normalize)
//                    .warm_up(torch::zeros({64, 1, 28, 28}));
//   torch::Tensor logits = model(images);              // one batch
//   torch::Tensor all = model.predict(images, 256);    // any number of inputs, 256 at a time
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include <tp/checkpoint/files.hpp>
#include <tp/precision.hpp>

namespace tp {

// Where and how an InferenceModel computes: the device, and the precision and memory format.
struct InferenceOptions {
  InferenceOptions& device(torch::Device d) {
    on = d;
    return *this;
  }
  InferenceOptions& precision(tp::precision p) {
    format.precision = p;
    return *this;
  }
  InferenceOptions& channels_last(bool yes = true) {
    format.channels_last = yes;
    return *this;
  }
  torch::Device on = torch::kCPU;
  compute_format format;
};

template <class Model>
class InferenceModel {
 public:
  explicit InferenceModel(Model model, InferenceOptions options = {}) : model_(std::move(model)), options_(options) {
    (*model_).to(options_.on);
    if (options_.format.channels_last) channels_last_module(*model_);
    (*model_).eval();
  }
  // make_model() builds the model; the checkpoint's weights and buffers go into it (checked by
  // name, shape and type: a checkpoint of another model is a tp::checkpoint_error).
  template <class MakeModel>
  static InferenceModel from_checkpoint(MakeModel make_model, const std::filesystem::path& checkpoint, InferenceOptions options = {}) {
    Model model = make_model();
    load_model(checkpoint, *model);
    return InferenceModel(std::move(model), options);
  }

  // A function every input goes through before the model (normalisation, say).
  InferenceModel& preprocess(std::function<torch::Tensor(torch::Tensor)> f) & {
    preprocess_ = std::move(f);
    return *this;
  }
  InferenceModel&& preprocess(std::function<torch::Tensor(torch::Tensor)> f) && { return std::move(preprocess(std::move(f))); }
  // Runs one batch now, so that the first real call does not pay for lazy initialisation
  // (oneDNN's kernel choice, CUDA's context and cuDNN's autotuning).
  InferenceModel& warm_up(const torch::Tensor& batch) & {
    (void)(*this)(batch);
    return *this;
  }
  InferenceModel&& warm_up(const torch::Tensor& batch) && { return std::move(warm_up(batch)); }

  // The model's output for one batch.
  auto operator()(torch::Tensor inputs) {
    if (!inputs.defined()) throw std::invalid_argument("tp::InferenceModel: the input is an undefined tensor");
    torch::NoGradGuard no_grad;
    inputs = inputs.to(options_.on);
    if (preprocess_) inputs = preprocess_(std::move(inputs));
    if (options_.format.channels_last && inputs.dim() == 4) inputs = inputs.contiguous(torch::MemoryFormat::ChannelsLast);
    const autocast_scope autocast(options_.format.precision, options_.on.type());
    try {
      return model_->forward(inputs);
    } catch (const c10::Error& e) {
      throw std::invalid_argument("tp::InferenceModel: the model failed on an input of shape " + c10::str(inputs.sizes()) +
                                  "; check that it fits the model. LibTorch said: " + e.what_without_backtrace());
    }
  }
  // The outputs for inputs of any number, batch_size at a time, concatenated along dimension 0.
  torch::Tensor predict(const torch::Tensor& inputs, std::int64_t batch_size) {
    if (batch_size < 1) throw std::invalid_argument("tp::InferenceModel::predict: batch_size must be >= 1, got " + std::to_string(batch_size));
    if (!inputs.defined() || inputs.dim() == 0 || inputs.size(0) == 0)
      throw std::invalid_argument("tp::InferenceModel::predict: give at least one input (a tensor of shape [N, ...], N >= 1)");
    std::vector<torch::Tensor> outputs;
    for (std::int64_t start = 0; start < inputs.size(0); start += batch_size)
      outputs.push_back((*this)(inputs.slice(0, start, std::min(start + batch_size, inputs.size(0)))));
    return torch::cat(outputs);
  }

  Model& model() noexcept { return model_; }
  torch::Device device() const noexcept { return options_.on; }

 private:
  Model model_;
  InferenceOptions options_;
  std::function<torch::Tensor(torch::Tensor)> preprocess_;
};

}  // namespace tp
