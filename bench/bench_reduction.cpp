// The cost of reducing the towers' gradients, against the step itself, for a model of many
// small tensors (100 Linear(32, 32) layers: 200 tensors, 420 KB) on two CPU towers
// (Replicated<InProcess>). With buckets (the default, 25 MB) the reduction is one call per
// bucket; with bucket_bytes(1) it is one call per tensor. Every iteration times, for both, a
// few training steps and as many reductions alone; the counters are per step.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <chrono>

#include <tp/tp.hpp>
#include <torch/torch.h>

namespace {

using clock_type = std::chrono::steady_clock;
constexpr int steps = 20;

auto many_small_tensors() {
  return tp::model_desc([] {
           torch::manual_seed(0);
           torch::nn::Sequential s;
           for (int i = 0; i < 100; ++i) s->push_back(torch::nn::Linear(32, 32));
           return s;
         })
      .tower_function([](const tp::TowerContext&, torch::nn::Sequential& m, const torch::Tensor& x) { return m->forward(x).pow(2).mean(); })
      .optimizer([](torch::nn::Sequential& m) { return torch::optim::SGD(m->parameters(), 1e-3); });
}

auto trainer(std::size_t bucket_bytes) {
  return tp::Trainer(tp::DummyInput((torch::manual_seed(1), torch::randn({16, 32}))), many_small_tensors(),
                     tp::Replicated<>::cpu(2).bucket_bytes(bucket_bytes), tp::TrainOptions().model_summary(false).intra_op_threads(-1).steps_per_epoch(steps));
}

template <class F>
double seconds(F&& f) {
  const auto start = clock_type::now();
  f();
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

void reduction(benchmark::State& state) {
  auto fused = trainer(25u << 20), per_tensor = trainer(1);
  double step_fused = 0, reduce_fused = 0, step_split = 0, reduce_split = 0;
  for (auto _ : state) {
    step_fused += seconds([&] { fused.train(); });
    reduce_fused += seconds([&] { for (int i = 0; i < steps; ++i) fused.replicas().reduce_gradients(); });
    step_split += seconds([&] { per_tensor.train(); });
    reduce_split += seconds([&] { for (int i = 0; i < steps; ++i) per_tensor.replicas().reduce_gradients(); });
  }
  const double n = static_cast<double>(state.iterations() * steps);
  state.counters["tensors"] = static_cast<double>(fused.model()->parameters().size());
  state.counters["calls_bucketed"] = static_cast<double>(fused.replicas().buckets());
  state.counters["calls_per_tensor"] = static_cast<double>(per_tensor.replicas().buckets());
  state.counters["step_ms_bucketed"] = 1e3 * step_fused / n;
  state.counters["reduce_ms_bucketed"] = 1e3 * reduce_fused / n;
  state.counters["reduce/step_bucketed"] = reduce_fused / step_fused;
  state.counters["step_ms_per_tensor"] = 1e3 * step_split / n;
  state.counters["reduce_ms_per_tensor"] = 1e3 * reduce_split / n;
  state.counters["reduce/step_per_tensor"] = reduce_split / step_split;
}

BENCHMARK(reduction)->Unit(benchmark::kMillisecond)->Iterations(3)->Repetitions(5)->ReportAggregatesOnly(true);

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);  // the two cores are the two towers
  if (auto set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
