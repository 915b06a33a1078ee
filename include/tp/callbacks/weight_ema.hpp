#pragma once
// WeightEMA: an exponential moving average of the main model's weights (Polyak averaging, as
// Keras's use_ema and timm's ModelEma), updated after every step:
//   average = decay * average + (1 - decay) * weight      (buffers, e.g. batch-norm statistics,
//                                                          are copied as they are)
// It starts from the weights training starts with, lives on the weights' device, and is part
// of the checkpoint. with_ema_weights(callback) runs a callback's hooks with the averaged
// weights swapped into the model and the trained ones back afterwards (on every exit path):
// validation on the averaged weights.
//
//   tp::WeightEMA(0.999),
//   tp::with_ema_weights(tp::InferenceRunner(test, infer, tp::ClassificationError("logits", "label", "ema/val_error")))
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <tp/concepts/callback.hpp>
#include <tp/checkpoint/state_dict.hpp>
#include <tp/checkpoint/state_tree.hpp>
#include <tp/callbacks/detail/forward_hooks.hpp>

namespace tp {

class WeightEMA {
 public:
  explicit WeightEMA(double decay = 0.999) : decay_(decay) {
    if (!(decay > 0 && decay < 1)) throw std::invalid_argument("tp::WeightEMA: decay must be in (0, 1), got " + std::to_string(decay));
  }

  template <class Trainer>
  void before_train(Trainer& trainer) {
    if (trainer.parameters_are_sharded())
      throw std::invalid_argument("tp::WeightEMA: this run shards the parameters (tp::sharding::parameters), so no rank holds the whole "
                                  "weights it would average; average them in a run that shards the gradients at most "
                                  "(tp::sharding::gradients)");
    if (!average_.empty()) return;  // resumed from a checkpoint, or a second train()
    torch::NoGradGuard no_grad;
    for (const auto& [name, t] : detail::module_tensors(*trainer.model_module())) average_.push_back(t.detach().clone());
    parameters_ = trainer.model_module()->parameters().size();
  }
  template <class Trainer>
  void after_step(Trainer& trainer) {
    torch::NoGradGuard no_grad;
    const auto current = detail::module_tensors(*trainer.model_module());
    for (std::size_t i = 0; i < current.size(); ++i) {
      if (i < parameters_ && average_[i].is_floating_point()) average_[i].lerp_(current[i].second, 1.0 - decay_);
      else average_[i].copy_(current[i].second);
    }
  }

  // Exchanges the model's weights with the averages (twice puts everything back).
  template <class Trainer>
  void swap(Trainer& trainer) {
    torch::NoGradGuard no_grad;
    const auto current = detail::module_tensors(*trainer.model_module());
    if (current.size() != average_.size()) throw std::logic_error("tp::WeightEMA: no averages yet (swap before training started)");
    for (std::size_t i = 0; i < current.size(); ++i) {
      auto trained = current[i].second.clone();
      current[i].second.copy_(average_[i]);
      average_[i].copy_(trained);
    }
  }

  template <class Trainer>
  void save_state(Trainer& trainer, state_tree& out) const {
    auto average = out.child("average");  // by the model's names, as a state_dict
    for (const auto& [name, t] : named(trainer)) average.put(name, t);
  }
  // Every name, shape and type is checked before any average changes.
  template <class Trainer>
  void load_state(Trainer& trainer, const state_tree& in) {
    if (average_.empty())
      for (const auto& [name, t] : detail::module_tensors(*trainer.model_module())) average_.push_back(t.detach().clone());
    const auto saved = in.at("average");
    const auto tensors = named(trainer);
    if (saved.keys().size() != tensors.size())
      throw checkpoint_error("the checkpoint's '" + saved.path() + "' holds " + std::to_string(saved.keys().size()) +
                             " averages but this model has " + std::to_string(tensors.size()) + " tensors; build the model as the run that saved it did");
    std::vector<torch::Tensor> values;
    for (const auto& [name, t] : tensors) {
      auto v = saved.tensor(name);
      if (v.sizes() != t.sizes() || v.scalar_type() != t.scalar_type())
        throw checkpoint_error("the checkpoint's '" + saved.path() + "/" + name + "' is " + c10::str(v.scalar_type(), v.sizes()) +
                               " but this model's is " + c10::str(t.scalar_type(), t.sizes()));
      values.push_back(std::move(v));
    }
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < values.size(); ++i) average_[i].copy_(values[i]);
    parameters_ = trainer.model_module()->parameters().size();
  }

  double decay() const noexcept { return decay_; }
  const std::vector<torch::Tensor>& averages() const noexcept { return average_; }

 private:
  // The averages under the model's names (checked on load).
  template <class Trainer>
  std::vector<std::pair<std::string, torch::Tensor>> named(Trainer& trainer) const {
    auto tensors = detail::module_tensors(*trainer.model_module());
    if (tensors.size() != average_.size()) throw checkpoint_error("tp::WeightEMA: the model has changed since the averages began");
    for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].second = average_[i];
    return tensors;
  }
  double decay_;
  std::vector<torch::Tensor> average_;  // parameters first, then buffers, as module_tensors lists them
  std::size_t parameters_ = 0;
};

// Runs `inner`'s hooks with the WeightEMA's averages in the model (the trainer must have
// exactly one WeightEMA callback).
template <class Inner>
class WithEMAWeights : public detail::forward_hooks<WithEMAWeights<Inner>, Inner> {
 public:
  explicit WithEMAWeights(Inner inner) : inner_(std::move(inner)) {}
  Inner& inner() noexcept { return inner_; }

  template <class Tag, class Trainer>
  void dispatch(Trainer& trainer) {
    if constexpr (std::is_same_v<Tag, detail::setup_tag> || std::is_same_v<Tag, detail::before_train_tag> ||
                  std::is_same_v<Tag, detail::after_train_tag>) {
      Tag::call(inner_, trainer);
    } else {
      auto& ema = trainer.template callback<WeightEMA>();
      ema.swap(trainer);
      struct swap_back {
        WeightEMA& ema;
        Trainer& trainer;
        ~swap_back() { ema.swap(trainer); }
      } restore{ema, trainer};
      Tag::call(inner_, trainer);
    }
  }

 private:
  Inner inner_;
};

// Runs inner's hooks with the WeightEMA callback's averaged weights in the model (the trainer must
// have a WeightEMA), and the trained ones back afterwards.
template <callback Inner>
WithEMAWeights<Inner> with_ema_weights(Inner inner) {
  return WithEMAWeights<Inner>(std::move(inner));
}

}  // namespace tp
