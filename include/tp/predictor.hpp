#pragma once
// Predictor: an inference tower built from a trained one (tensorpack's OnlinePredictor). It is
// a model of its own, built by the tower policy's make_model(), holding a copy of the trained
// weights, in eval mode, on the device asked for; calls run without gradients. Training goes
// on without touching it; sync() takes the trained weights again.
//
//   auto predict = tp::make_predictor(trainer);         // after, or during, training
//   torch::Tensor logits = predict(images);
#include <utility>

#include <torch/types.h>

#include <tp/batch.hpp>
#include <tp/concepts/tower.hpp>
#include <tp/policies/distribution/detail/tower_set.hpp>

namespace tp {

template <tower_policy Tower>
class Predictor {
 public:
  using model_type = model_t<Tower>;

  Predictor(Tower& tower, const model_type& trained, torch::Device device = torch::kCPU)
      : model_(tower.make_model()), device_(device) {
    (*model_).to(device_);
    sync(trained);
    (*model_).eval();
  }

  template <class... Inputs>
  auto operator()(Inputs&&... inputs) {
    torch::NoGradGuard no_grad;
    return model_->forward(to_device(std::forward<Inputs>(inputs), device_)...);
  }

  void sync(const model_type& trained) { detail::copy_state(model_, trained); }
  model_type& model() noexcept { return model_; }
  torch::Device device() const noexcept { return device_; }

 private:
  model_type model_;
  torch::Device device_;
};

// A predictor of the trainer's main model.
template <class Trainer>
auto make_predictor(Trainer& trainer, torch::Device device = torch::kCPU) {
  return Predictor<typename Trainer::tower_type>(trainer.tower(), trainer.model(), device);
}

}  // namespace tp
