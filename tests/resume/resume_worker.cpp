// The training run of the kill-and-resume and interrupt tests: a run whose every source of state
// matters.
//
//   resume_worker <logdir> <weights_out> [--lockstep]
//
// An MLP with dropout (the CPU generator), Adam (optimizer state), a warmup and a schedule of
// the learning rate (hyperparameters), a shuffled dataflow read through QueueInput (the
// dataflow's position, a background thread), WeightEMA and MovingAverage (callback state), a
// validation at every epoch's end (InferenceRunner), and a ModelSaver that checkpoints every 5
// steps and every epoch and resumes from the newest whole checkpoint.
//
// It prints an event line at chosen moments, so that a driver can kill or signal it there:
// "compute N" inside step N's forward pass, "step N" after step N, "validate N" inside each
// validation batch (N: the global step). With --lockstep it then waits for a byte on stdin
// before it goes on, so that the moment is exact. Stop signals end it gracefully: it prints
// "interrupted at global step N" and exits with 128 + the signal. At the end it writes the
// final weights (and the averaged ones) to weights_out.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <tp/tp.hpp>
#include <tp/data.hpp>
#include <torch/torch.h>

namespace {

struct Net : torch::nn::Module {
  Net() {
    torch::manual_seed(11);
    fc1 = register_module("fc1", torch::nn::Linear(64, 768));
    fc2 = register_module("fc2", torch::nn::Linear(768, 768));
    fc3 = register_module("fc3", torch::nn::Linear(768, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::dropout(torch::relu(fc1->forward(x)), 0.3, is_training());
    x = torch::dropout(torch::relu(fc2->forward(x)), 0.3, is_training());
    return fc3->forward(x);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};
TORCH_MODULE_IMPL(NetHolder, Net);

bool lockstep = false;
long long steps_done = 0;

// Prints an event (flushed: the driver reads it through a pipe); in lockstep, waits for the
// driver's go-ahead.
void event(const char* what, long long step) {
  std::printf("%s %lld\n", what, step);
  std::fflush(stdout);
  if (lockstep) std::getchar();
}

// Checkpoint writers run after it at after_step.
struct PrintStep {
  void before_train(auto& trainer) { steps_done = trainer.global_step(); }  // a resumed run starts past 0
  void after_step(auto& trainer) {
    steps_done = trainer.global_step();
    event("step", steps_done);
  }
};

}  // namespace

int main(int argc, char** argv) try {
  lockstep = argc == 4 && std::string(argv[3]) == "--lockstep";
  if (argc != 3 && !lockstep) {
    std::cerr << "usage: resume_worker <logdir> <weights_out> [--lockstep]\n";
    return 2;
  }
  torch::set_num_threads(1);  // the driver runs two of these at once on a small machine
  torch::manual_seed(3);
  const auto x = torch::randn({200, 64});
  const auto y = x.slice(1, 0, 10).argmax(1);
  auto flow = tp::data::examples(x, y) | tp::data::shuffle(5) | tp::data::batch(16);
  const auto vx = torch::randn({40, 64});
  auto validation = tp::data::examples(vx, vx.slice(1, 0, 10).argmax(1)) | tp::data::batch(20);
  auto validate = [](NetHolder& net, const torch::data::Example<>& b) {
    event("validate", steps_done);
    return tp::outputs{{"cost", torch::nn::functional::cross_entropy(net->forward(b.data), b.target)}};
  };

  auto desc = tp::model_desc([] { return NetHolder(); })
                  .tower_function([](const tp::TowerContext&, NetHolder& net, const torch::data::Example<>& b) {
                    auto logits = net->forward(b.data);
                    event("compute", steps_done + 1);
                    return torch::nn::functional::cross_entropy(logits, b.target);
                  })
                  .optimizer([](NetHolder& net) { return torch::optim::Adam(net->parameters(), torch::optim::AdamOptions(1e-3)); });
  tp::Trainer trainer(tp::QueueInput(std::move(flow), 4), std::move(desc), tp::SingleDevice(),
                      tp::TrainOptions().model_summary(false).intra_op_threads(-1).steps_per_epoch(9).max_epoch(6), tp::Warmup(tp::learning_rate(), 12, 1e-4),
                      tp::ScheduledHyperParamSetter(tp::learning_rate(), {{3, 5e-4}, {5, 2e-4}}), tp::WeightEMA(0.9),
                      tp::MovingAverage("cost", 0.9), tp::InferenceRunner(std::move(validation), validate, tp::ScalarStats({"cost"}, "val/")),
                      tp::ModelSaver(argv[1]).every_n_steps(5).keep_last(3), PrintStep{});
  if (const auto outcome = trainer.train(); outcome.interrupted()) {
    std::printf("interrupted at global step %lld\n", static_cast<long long>(outcome.global_step));
    return outcome.exit_status();
  }

  std::ofstream out(argv[2], std::ios::binary);
  auto write = [&](const torch::Tensor& t) {
    const auto c = t.contiguous();
    out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  };
  for (const auto& p : trainer.model()->parameters()) write(p);
  for (const auto& a : trainer.callback<tp::WeightEMA>().averages()) write(a);
  write(trainer.callback<tp::MovingAverage<>>().average());
  return out ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "resume_worker: " << e.what() << "\n";
  return 1;
}
