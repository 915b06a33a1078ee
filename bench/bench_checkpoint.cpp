// What a checkpoint costs the steps around it: ModelSaver writing in the background (the
// default) against writing in the step, and against no checkpoint at all, on an MLP whose
// checkpoint is about 75 MB (6.3M parameters and Adam's two moments). One train() is 100 steps,
// with a checkpoint every 20 (the last one, at the epoch's end, is waited for before train()
// returns, in both modes). The three trainers run in every iteration, in rotating order, and
// the figures are the ratios of their summed times (paired, as bench_callbacks).
//
//   build/bench/bench_checkpoint --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>

#include <tp/tp.hpp>
#include <torch/torch.h>

namespace {

constexpr std::int64_t steps = 100, every = 20;

struct Mlp : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
  Mlp() {
    a = register_module("a", torch::nn::Linear(1024, 2048));
    b = register_module("b", torch::nn::Linear(2048, 2048));
    c = register_module("c", torch::nn::Linear(2048, 1024));
  }
  torch::Tensor forward(const torch::Tensor& x) { return c(torch::relu(b(torch::relu(a(x))))); }
};

torch::data::Example<> batch() {
  torch::manual_seed(0);
  return {torch::randn({64, 1024}), torch::randn({64, 1024})};
}

auto desc() {
  return tp::model_desc([] {
           torch::manual_seed(1);
           return std::make_shared<Mlp>();
         })
      .tower_function([](const tp::TowerContext&, std::shared_ptr<Mlp>& m, const torch::data::Example<>& b) {
        return torch::mse_loss(m->forward(b.data), b.target);
      })
      .optimizer([](std::shared_ptr<Mlp>& m) { return torch::optim::Adam(m->parameters(), torch::optim::AdamOptions(1e-4)); });
}

// threads: the step's intra-op threads (0: tp's default, every physical core).
tp::TrainOptions options(int threads) {
  return tp::TrainOptions().model_summary(false).steps_per_epoch(steps).max_epoch(1).intra_op_threads(threads);
}
std::filesystem::path folder(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("tp_bench_checkpoint_" + name + "_" + std::to_string(::getpid()));
}
std::ostringstream quiet;

double seconds(auto&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Argument: the step's threads (0: all cores; 1 leaves the writer a core of its own on 2).
void paired(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  auto saver = [](const std::string& name, bool background) {
    return tp::ModelSaver(folder(name)).resume(false).keep_last(2).every_n_steps(every).background(background).log_to(quiet);
  };
  auto none = tp::Trainer(tp::DummyInput(batch()), desc(), tp::SingleDevice(), options(threads));
  auto inline_ = tp::Trainer(tp::DummyInput(batch()), desc(), tp::SingleDevice(), options(threads), saver("inline", false));
  auto background = tp::Trainer(tp::DummyInput(batch()), desc(), tp::SingleDevice(), options(threads), saver("background", true));
  none.train(), inline_.train(), background.train();  // warm-up
  double t_none = 0, t_inline = 0, t_background = 0;
  int turn = 0;
  for (auto _ : state) {
    for (int i = 0; i < 3; ++i) {
      switch ((turn + i) % 3) {
        case 0: t_none += seconds([&] { none.train(); }); break;
        case 1: t_inline += seconds([&] { inline_.train(); }); break;
        default: t_background += seconds([&] { background.train(); }); break;
      }
    }
    ++turn;
  }
  state.counters["background_over_none"] = t_background / t_none;
  state.counters["inline_over_none"] = t_inline / t_none;
  state.counters["background_over_inline"] = t_background / t_inline;
  state.counters["ms_per_step_none"] = 1000 * t_none / static_cast<double>(state.iterations() * steps);
  for (const auto* name : {"inline", "background"}) std::filesystem::remove_all(folder(name));
}
BENCHMARK(paired)->Unit(benchmark::kMillisecond)->Iterations(3)->Arg(0)->Arg(1);

}  // namespace

BENCHMARK_MAIN();
