// Scores a fashion_mnist checkpoint on the Fashion-MNIST test set, with no trainer
// (tp::evaluate), and shows the served model's answers for the first test images
// (tp::InferenceModel).
//
//   evaluate CHECKPOINT [--batch N] [--precision fp32|bf16-mixed] [--channels-last] [--show N]
//   tp-run -n 2 evaluate CHECKPOINT        each process scores every other batch (Gloo)
//
// It prints "test_error E" and "test_cost C" (all digits), the scalars the training run put in
// its stats.json for that checkpoint's epoch. A missing or corrupt checkpoint, or one of another
// model, is an error that says so (status 1); a bad flag exits with status 2.
#include <cstdio>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <tp/policies/comm/gloo.hpp>
#include <tp/tp.hpp>
#include <tp/data.hpp>
#include <tp/distributed.hpp>
#include <torch/torch.h>

#include "fashion_mnist_net.hpp"

int main(int argc, char** argv) try {
  std::string checkpoint, precision = "fp32";
  std::int64_t batch = 1000, show = 0;
  bool channels_last = false;
  CLI::App app("Scores a fashion_mnist checkpoint on the test set.");
  app.add_option("checkpoint", checkpoint, "a checkpoint file fashion_mnist wrote (DIR/model-<step>.ckpt)")->required();
  app.add_option("--batch", batch, "examples per batch")->check(CLI::PositiveNumber);
  app.add_option("--precision", precision, "fp32 or bf16-mixed")->check(CLI::IsMember({"fp32", "bf16-mixed"}));
  app.add_flag("--channels-last", channels_last, "images and convolution weights in channels-last (NHWC) order");
  app.add_option("--show", show, "print the predicted and the true class of the first N test images")->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return e.get_exit_code() == 0 ? 0 : 2;
  }

  const auto env = tp::read_process_environment();
  const auto test = tp::data::fashion_mnist(tp::data::split::test);
  auto options = tp::EvaluateOptions().precision(tp::parse_precision(precision)).channels_last(channels_last);
  fashion_mnist::Net net;
  tp::load_model(checkpoint, *net);
  if (channels_last) tp::channels_last_module(*net);
  const auto scalars = tp::evaluate_across<tp::backend::Gloo>(env, options, net,
                                                             tp::data::examples(fashion_mnist::normalize(test.images), test.labels) | tp::data::batch(batch),
                                                             fashion_mnist::test_outputs, tp::ScalarStats({"cost"}, "test_"),
                                                             tp::ClassificationError("logits", "label", "test_error"));
  if (env.is_chief()) {
    std::printf("test_error %.17g\ntest_cost %.17g\n", scalars.at("test_error"), scalars.at("test_cost"));
    if (show > 0) {
      auto served = tp::InferenceModel<fashion_mnist::Net>::from_checkpoint([] { return fashion_mnist::Net(); }, checkpoint,
                                                                           tp::InferenceOptions().precision(tp::parse_precision(precision)))
                        .preprocess(fashion_mnist::normalize);
      const auto n = std::min<std::int64_t>(show, test.images.size(0));
      const auto predicted = served.predict(test.images.slice(0, 0, n), batch).argmax(1);
      for (std::int64_t i = 0; i < n; ++i)
        std::printf("image %lld: predicted %lld, label %lld\n", static_cast<long long>(i), static_cast<long long>(predicted[i].item<std::int64_t>()),
                    static_cast<long long>(test.labels[i].item<std::int64_t>()));
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "evaluate: " << e.what() << "\n";
  return 1;
}
