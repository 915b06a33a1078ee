// A first tp program: an MLP on Fashion-MNIST, 3 epochs, the test error after each one,
// a checkpoint after each one. Run it again with the same log folder and it resumes.
//
//   first_program [FASHION_MNIST_DIR [LOGDIR]]
#include <filesystem>
#include <iostream>

#include <torch/torch.h>
#include <tp/tp.hpp>        // the trainer, its policies and callbacks
#include <tp/data.hpp>      // dataflows and the Fashion-MNIST reader
#include <tp/monitors.hpp>  // ScalarPrinter, JSONWriter, TensorBoardWriter

struct MlpImpl : torch::nn::Module {
  torch::nn::Linear fc1{register_module("fc1", torch::nn::Linear(28 * 28, 256))};
  torch::nn::Linear fc2{register_module("fc2", torch::nn::Linear(256, 10))};
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
};
TORCH_MODULE(Mlp);

// Pixels (uint8) to floats of about zero mean and unit variance.
torch::Tensor normalize(const torch::Tensor& pixels) { return (pixels.to(torch::kFloat) / 255.0 - 0.2860) / 0.3530; }

// A callback of your own: any class with some of the hooks (docs/guide/trainer.md).
struct WeightNorm {
  void after_epoch(auto& trainer) {
    torch::NoGradGuard no_grad;
    trainer.put_scalar("fc1_weight_norm", trainer.model()->fc1->weight.norm());
  }
};

int main(int argc, char** argv) try {
  const std::filesystem::path data = argc > 1 ? std::filesystem::path(argv[1]) : tp::data::fashion_mnist_dir();
  const std::filesystem::path logdir = tp::log_dir(argc > 2 ? argv[2] : "train_log/first_program", tp::if_exists::keep);
  torch::manual_seed(0);  // the same first weights on every run; a resumed run restores its generators

  const auto train = tp::data::fashion_mnist(tp::data::split::train, data);
  const auto test = tp::data::fashion_mnist(tp::data::split::test, data);
  auto flow = tp::data::examples(normalize(train.images), train.labels) | tp::data::shuffle(/*seed=*/42) | tp::data::batch(64);
  auto test_flow = tp::data::examples(normalize(test.images), test.labels) | tp::data::batch(1000);

  auto desc = tp::model_desc([] { return Mlp(); })  // called once per tower
                  .tower_function([](const tp::TowerContext&, Mlp& net, const torch::data::Example<>& b) {
                    return torch::nn::functional::cross_entropy(net->forward(b.data), b.target);
                  })
                  .optimizer([](Mlp& net) { return torch::optim::Adam(net->parameters(), torch::optim::AdamOptions(1e-3)); });
  auto test_error = tp::InferenceRunner(
      std::move(test_flow),
      [](Mlp& net, const torch::data::Example<>& b) { return tp::outputs{{"logits", net->forward(b.data)}, {"label", b.target}}; },
      tp::ClassificationError("logits", "label", "test_error"));

  tp::Trainer trainer(tp::QueueInput(std::move(flow)), std::move(desc), tp::SingleDevice(),
                      tp::TrainOptions().max_epoch(3),  // an epoch: one pass of the flow (938 steps)
                      tp::ProgressBar(), tp::ScheduledHyperParamSetter(tp::learning_rate(), {{1, 1e-3}, {3, 3e-4}}),
                      std::move(test_error), WeightNorm(), tp::ScalarPrinter(), tp::JSONWriter(logdir),
                      tp::ModelSaver(logdir));  // saves every epoch and on Ctrl-C; resumes from logdir
  const auto outcome = trainer.train();
  if (outcome.interrupted()) {
    std::cout << "interrupted at global step " << outcome.global_step << "; run the same command to resume\n";
    return outcome.exit_status();
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "first_program: " << e.what() << "\n";
  return 1;
}
