// What the guide's C++ fragments assume (tools/doc_snippets.py): first_program's model at
// namespace scope, and in namespace snippet one function per name a fragment's marker lists
// after `given:`, each made as the fragment's first comment says ("flow and desc as in
// examples/first_program.cpp"). Only compiled, never run: the data are random.
#pragma once
#include <string>

#include <torch/torch.h>
#include <tp/tp.hpp>
#include <tp/data.hpp>
#include <tp/distributed.hpp>
#include <tp/images.hpp>
#include <tp/monitors.hpp>
#include <tp/recompute.hpp>
#include <tp/scripted_module.hpp>
#include <tp/sharded.hpp>

struct MlpImpl : torch::nn::Module {
  torch::nn::Linear fc1{register_module("fc1", torch::nn::Linear(28 * 28, 256))};
  torch::nn::Linear fc2{register_module("fc2", torch::nn::Linear(256, 10))};
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
};
TORCH_MODULE(Mlp);

namespace snippet {

inline torch::Tensor x() { return torch::randn({256, 28, 28}); }
inline torch::Tensor y() { return torch::randint(10, {256}); }
inline auto flow() { return tp::data::examples(x(), y()) | tp::data::shuffle(/*seed=*/42) | tp::data::batch(64); }
inline auto test_flow() { return tp::data::examples(x(), y()) | tp::data::batch(1000); }
inline auto desc() {
  return tp::model_desc([] { return Mlp(); })
      .tower_function([](const tp::TowerContext&, Mlp& net, const torch::data::Example<>& b) {
        return torch::nn::functional::cross_entropy(net->forward(b.data), b.target);
      })
      .optimizer([](Mlp& net) { return torch::optim::Adam(net->parameters(), torch::optim::AdamOptions(1e-3)); });
}
// first_program's trainer, with the callbacks given appended.
template <class... Callbacks>
auto trainer_with(Callbacks... callbacks) {
  return tp::Trainer(tp::QueueInput(flow()), desc(), tp::SingleDevice(), tp::TrainOptions().max_epoch(3), tp::ProgressBar(),
                     tp::ModelSaver("train_log/snippet"), std::move(callbacks)...);
}
inline auto trainer() { return trainer_with(); }
inline Mlp net() { return Mlp(); }
inline Mlp model() { return Mlp(); }
inline torch::optim::Adam optimizer() { return torch::optim::Adam(Mlp()->parameters(), torch::optim::AdamOptions(1e-3)); }
inline torch::Tensor cost() { return torch::zeros({}); }
inline std::string name() { return "nadam"; }
inline tp::process_environment env() { return tp::read_process_environment(); }
inline auto augment() {
  return tp::data::transforms(tp::data::color::rgb).random_resized_crop(112).random_horizontal_flip(0.5).normalize({0.485, 0.456, 0.406},
                                                                                                                   {0.229, 0.224, 0.225});
}

}  // namespace snippet
