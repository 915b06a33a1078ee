// The training run of the kill-and-resume test: a run whose every source of state matters.
//
//   resume_worker <logdir> <weights_out> [--lockstep]
//
// An MLP with dropout (the CPU generator), Adam (optimizer state), a warmup and a schedule of
// the learning rate (hyperparameters), a shuffled dataflow read through QueueInput (the
// dataflow's position, a background thread), WeightEMA and MovingAverage (callback state), and a
// ModelSaver that checkpoints every 5 steps and every epoch and resumes from the newest whole
// checkpoint. It prints "step N" after every step, so that a driver can kill it at a chosen
// moment (with --lockstep it then waits for a byte on stdin before it goes on, so that the
// moment is exact), and writes the final weights (and the averaged ones) to weights_out.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include <tp/tp.hpp>
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

// Prints the global step after every step (flushed: the driver reads it through a pipe); in
// lockstep, waits for the driver's go-ahead. Checkpoint writers run after it at after_step.
struct PrintStep {
  bool lockstep = false;
  void after_step(auto& trainer) {
    std::printf("step %lld\n", static_cast<long long>(trainer.global_step()));
    std::fflush(stdout);
    if (lockstep) std::getchar();
  }
};

}  // namespace

int main(int argc, char** argv) try {
  const bool lockstep = argc == 4 && std::string(argv[3]) == "--lockstep";
  if (argc != 3 && !lockstep) {
    std::cerr << "usage: resume_worker <logdir> <weights_out> [--lockstep]\n";
    return 2;
  }
  torch::set_num_threads(1);  // the driver runs two of these at once on a small machine
  torch::manual_seed(3);
  const auto x = torch::randn({200, 64});
  const auto y = x.slice(1, 0, 10).argmax(1);
  auto flow = tp::data::examples(x, y) | tp::data::shuffle(5) | tp::data::batch(16);

  auto desc = tp::model_desc([] { return NetHolder(); })
                  .tower_function([](const tp::TowerContext&, NetHolder& net, const torch::data::Example<>& b) {
                    return torch::nn::functional::cross_entropy(net->forward(b.data), b.target);
                  })
                  .optimizer([](NetHolder& net) { return torch::optim::Adam(net->parameters(), torch::optim::AdamOptions(1e-3)); });
  tp::Trainer trainer(tp::QueueInput(std::move(flow), 4), std::move(desc), tp::SingleDevice(),
                      tp::TrainOptions().steps_per_epoch(9).max_epoch(6), tp::Warmup(tp::learning_rate(), 12, 1e-4),
                      tp::ScheduledHyperParamSetter(tp::learning_rate(), {{3, 5e-4}, {5, 2e-4}}), tp::WeightEMA(0.9),
                      tp::MovingAverage("cost", 0.9), tp::ModelSaver(argv[1]).every_n_steps(5).keep_last(3), PrintStep{lockstep});
  trainer.train();

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
