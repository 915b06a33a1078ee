// Training a TorchScript model written in Python: tp (tp::ScriptedModule in a tp::Trainer)
// against Python eager training the same file (bench/scripted_peer.py, Debian's python3-torch,
// the same LibTorch), and against the same step written by hand in C++ on the TorchScript
// module (unoptimized, as tp::ScriptedModule runs it). A small MLP (64-64-10, batch 32, SGD, one intra-op thread), so that per-step overhead
// shows. Each iteration times every variant once, in a rotating order (the Python peer is one
// process kept alive, told over a pipe how many steps to run); the counters are ratios within
// the run:
//   tp_over_python   tp's step against Python's
//   tp_over_hand     tp's overhead on the scripted step
#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tp/scripted_module.hpp>
#include <tp/tp.hpp>
#include <torch/torch.h>

extern char** environ;

namespace {

constexpr std::int64_t steps_per_iteration = 200;
const std::string peer = TP_SOURCE_DIR "/bench/scripted_peer.py";

// The Python peer, alive for the whole benchmark: one line in (steps), one line out (seconds).
class python_peer {
 public:
  explicit python_peer(const std::string& model) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) throw std::runtime_error("bench_scripted: pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, in[1]);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::string python = "/usr/bin/python3", run = "run", script = peer, file = model;
    char* argv[] = {python.data(), script.data(), run.data(), file.data(), nullptr};
    if (posix_spawn(&pid_, python.c_str(), &actions, nullptr, argv, environ) != 0) throw std::runtime_error("bench_scripted: cannot start python3");
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    to_ = fdopen(in[1], "w");
    from_ = fdopen(out[0], "r");
  }
  ~python_peer() {
    std::fclose(to_);  // its stdin ends: it exits
    std::fclose(from_);
    waitpid(pid_, nullptr, 0);
  }
  double run(std::int64_t steps) {
    std::fprintf(to_, "%lld\n", static_cast<long long>(steps));
    std::fflush(to_);
    double seconds = 0;
    if (std::fscanf(from_, "%lf", &seconds) != 1) throw std::runtime_error("bench_scripted: the Python peer did not answer (python3-torch installed?)");
    return seconds;
  }

 private:
  pid_t pid_ = 0;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

using Batch = torch::data::Example<>;
Batch batch() {
  torch::manual_seed(0);
  return {torch::randn({32, 64}), torch::randint(0, 10, {32}, torch::kLong)};
}

void scripted_training(benchmark::State& state) {
  at::set_num_threads(1);
  const auto model = (std::filesystem::temp_directory_path() / "tp_bench_scripted_mlp.pt").string();
  const std::string make = "/usr/bin/python3 " + peer + " make " + model;
  if (std::system(make.c_str()) != 0) throw std::runtime_error("bench_scripted: " + make + " failed");
  python_peer python(model);

  auto desc = tp::model_desc([&] { return tp::ScriptedModule(model); })
                  .tower_function([](const tp::TowerContext&, tp::ScriptedModule& m, const Batch& b) {
                    return torch::nn::functional::cross_entropy(m->forward(b.data), b.target);
                  })
                  .optimizer([](tp::ScriptedModule& m) { return torch::optim::SGD(m->parameters(), 0.01); });
  auto trainer = tp::Trainer(tp::DummyInput(batch()), std::move(desc), tp::SingleDevice(), tp::TrainOptions().model_summary(false).intra_op_threads(-1).steps_per_epoch(steps_per_iteration));
  // By hand: the TorchScript module's forward through the IValue interface, loss, zero_grad, backward, step.
  auto hand_model = torch::jit::load(model);
  std::vector<torch::Tensor> parameters;
  for (const auto& p : hand_model.parameters()) parameters.push_back(p);
  torch::optim::SGD sgd(parameters, 0.01);
  const auto b = batch();
  auto hand = [&] {
    const torch::jit::GraphOptimizerEnabledGuard as_tp_runs_it(false);  // see tp/scripted_module.hpp
    for (std::int64_t i = 0; i < steps_per_iteration; ++i) {
      auto loss = torch::nn::functional::cross_entropy(hand_model.forward({b.data}).toTensor(), b.target);
      sgd.zero_grad();
      loss.backward();
      sgd.step();
    }
  };
  std::array<double, 3> seconds{};
  const std::array<std::function<double()>, 3> variants = {
      [&] {
        const auto start = std::chrono::steady_clock::now();
        trainer.train();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      },
      [&] { return python.run(steps_per_iteration); },
      [&] {
        const auto start = std::chrono::steady_clock::now();
        hand();
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }};
  for (auto& v : variants) v();  // warm-up
  int first = 0;
  for (auto _ : state) {
    for (int k = 0; k < 3; ++k) {
      const auto i = static_cast<std::size_t>((first + k) % 3);
      seconds[i] += variants[i]();
    }
    first = (first + 1) % 3;
  }
  const double steps = static_cast<double>(state.iterations() * steps_per_iteration);
  state.counters["us_per_step_tp"] = 1e6 * seconds[0] / steps;
  state.counters["us_per_step_python"] = 1e6 * seconds[1] / steps;
  state.counters["us_per_step_hand"] = 1e6 * seconds[2] / steps;
  state.counters["tp_over_python"] = seconds[0] / seconds[1];
  state.counters["tp_over_hand"] = seconds[0] / seconds[2];
}

BENCHMARK(scripted_training)->Unit(benchmark::kMillisecond)->Iterations(5)->Repetitions(5)->ReportAggregatesOnly(true);

}  // namespace

BENCHMARK_MAIN();
