// The step's own speed: the example's Fashion-MNIST CNN (batch 64, SGD) trained in bf16-mixed
// precision with channels-last memory, through tp::Trainer, against the same step written by
// hand in LibTorch (the same autocast calls, the weights and batch converted the same way), and
// against tp in fp32 with the default (NCHW) memory order.
//
// One benchmark runs all four variants in every iteration, each timed on its own, in an order
// that rotates; the counters are ratios within an iteration, reported as medians over the
// repetitions, so the load of the shared machine affects both sides of a ratio alike:
//   tp_bf16cl_over_hand_bf16cl   tp's overhead on the fast step (target <= 1.01)
//   tp_bf16cl_over_tp_fp32       what bf16-mixed + channels-last buy over fp32 NCHW
//   hand_bf16cl_over_hand_fp32   the same, written by hand
//   tp_fp32_over_hand_fp32       tp's overhead on the fp32 step
#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <functional>
#include <iostream>

#include <tp/tp.hpp>
#include <tp/data.hpp>
#include <torch/torch.h>

#include "../examples/fashion_mnist_net.hpp"

namespace {

using fashion_mnist::Net;
constexpr std::int64_t steps_per_iteration = 8;

torch::data::Example<> batch() {
  torch::manual_seed(0);
  return {torch::randn({64, 1, 28, 28}), torch::randint(0, 10, {64}, torch::kLong)};
}

Net make_net() {
  torch::manual_seed(1);
  return Net();
}

// What a LibTorch user writes: forward (under autocast for bf16), loss, zero_grad, backward, step.
struct HandWritten {
  tp::precision precision;
  bool channels_last;
  torch::data::Example<> b = batch();
  Net model = make_net();
  torch::optim::SGD sgd{model->parameters(), 0.01};

  HandWritten(tp::precision p, bool cl) : precision(p), channels_last(cl) {
    if (channels_last) {
      tp::channels_last_module(*model);
      b.data = b.data.contiguous(torch::MemoryFormat::ChannelsLast);
    }
  }
  void run() {
    for (std::int64_t i = 0; i < steps_per_iteration; ++i) {
      const auto input = b;
      torch::Tensor loss;
      {
        const tp::autocast_scope autocast(precision, c10::DeviceType::CPU);
        loss = torch::nn::functional::cross_entropy(model->forward(input.data), input.target);
      }
      sgd.zero_grad();
      loss.backward();
      sgd.step();
      benchmark::DoNotOptimize(loss);
    }
  }
};

auto tp_trainer(tp::precision p, bool channels_last) {
  auto desc = tp::model_desc(make_net)
                  .tower_function([](const tp::TowerContext&, Net& net, const torch::data::Example<>& b) {
                    return torch::nn::functional::cross_entropy(net->forward(b.data), b.target);
                  })
                  .optimizer([](Net& net) { return torch::optim::SGD(net->parameters(), 0.01); })
                  .precision(p)
                  .channels_last(channels_last);
  return tp::Trainer(tp::DummyInput(batch()), std::move(desc), tp::SingleDevice(), tp::TrainOptions().model_summary(false).steps_per_epoch(steps_per_iteration));
}

void precision_and_memory_format(benchmark::State& state) {
  HandWritten hand_fp32(tp::precision::fp32, false), hand_bf16cl(tp::precision::bf16_mixed, true);
  auto tp_fp32 = tp_trainer(tp::precision::fp32, false);
  auto tp_bf16cl = tp_trainer(tp::precision::bf16_mixed, true);
  const std::array<std::function<void()>, 4> variants = {[&] { hand_fp32.run(); }, [&] { hand_bf16cl.run(); },
                                                          [&] { tp_fp32.train(); }, [&] { tp_bf16cl.train(); }};
  for (auto& v : variants) v();  // warm-up: oneDNN's kernels, autocast's first casts
  std::array<double, 4> seconds{};
  int first = 0;
  for (auto _ : state) {
    for (int k = 0; k < 4; ++k) {
      const int i = (first + k) % 4;
      const auto start = std::chrono::steady_clock::now();
      variants[static_cast<std::size_t>(i)]();
      seconds[static_cast<std::size_t>(i)] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    first = (first + 1) % 4;
  }
  state.counters["ms_per_step_hand_fp32"] = 1000 * seconds[0] / (state.iterations() * steps_per_iteration);
  state.counters["ms_per_step_tp_bf16cl"] = 1000 * seconds[3] / (state.iterations() * steps_per_iteration);
  state.counters["tp_bf16cl_over_hand_bf16cl"] = seconds[3] / seconds[1];
  state.counters["tp_bf16cl_over_tp_fp32"] = seconds[3] / seconds[2];
  state.counters["hand_bf16cl_over_hand_fp32"] = seconds[1] / seconds[0];
  state.counters["tp_fp32_over_hand_fp32"] = seconds[2] / seconds[0];
}

BENCHMARK(precision_and_memory_format)->Unit(benchmark::kMillisecond)->Iterations(4)->Repetitions(7)->ReportAggregatesOnly(true);

}  // namespace

int main(int argc, char** argv) {
  const auto cpu = tp::cpu_features::detect();
  std::cout << "CPU " << cpu.model << ": AVX-512 " << (cpu.avx512 ? "yes" : "no") << ", AVX-512 BF16 " << (cpu.avx512_bf16 ? "yes" : "no")
            << ", AMX-BF16 " << (cpu.amx_bf16 ? "yes" : "no") << "; " << at::get_num_threads() << " intra-op thread(s)\n";
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
