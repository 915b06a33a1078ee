// What recomputed activations (tp/recompute.hpp) save and cost: a deep MLP, 16 blocks of
// Linear(1024) + GELU + dropout(0.1) on a batch of 256, trained plain and with every block a
// tp::Recomputed. A measurement, not a test: it prints
// - the memory the autograd graph holds after forward (the activations kept for backward): the
//   heap in use after forward minus before it, from glibc's allocator (mallinfo2, all arenas;
//   LibTorch 1.13 keeps no CPU allocator statistics);
// - the peak resident memory of a process that builds the model and runs a few steps (each mode
//   in a child process of its own, so that one mode's peak does not hide the other's);
// - the step time (forward + backward), median over steps that alternate between the modes,
//   and the ratio recomputed / plain.
//
//   bench_recompute [blocks=16] [width=1024] [batch=256] [steps=10]
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <tp/recompute.hpp>
#include <torch/torch.h>

namespace {

struct config {
  int blocks = 16;
  std::int64_t width = 1024, batch = 256;
  int steps = 10;
};

struct NetImpl : torch::nn::Module {
  NetImpl(const config& c, bool recomputed) {
    torch::manual_seed(1);
    for (int k = 0; k < c.blocks; ++k) {
      auto b = torch::nn::Sequential(torch::nn::Linear(c.width, c.width), torch::nn::GELU(), torch::nn::Dropout(0.1));
      if (recomputed) {
        recomputed_.push_back(register_module("b" + std::to_string(k), tp::Recomputed<torch::nn::Sequential>(b)));
      } else {
        plain_.push_back(register_module("b" + std::to_string(k), b));
      }
    }
    head_ = register_module("head", torch::nn::Linear(c.width, 1));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& b : plain_) x = b->forward(x);
    for (auto& b : recomputed_) x = b->forward(x);
    return head_->forward(x);
  }
  std::vector<torch::nn::Sequential> plain_;
  std::vector<tp::Recomputed<torch::nn::Sequential>> recomputed_;
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(Net);

std::size_t heap_in_use() {
  const auto m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

torch::Tensor input(const config& c) {
  torch::manual_seed(2);
  return torch::randn({c.batch, c.width});
}

void step(Net& net, const torch::Tensor& x) {
  for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
  net->forward(x).pow(2).mean().backward();
}

// The heap the graph holds between forward and backward.
double graph_bytes(const config& c, bool recomputed) {
  Net net(c, recomputed);
  const auto x = input(c);
  step(net, x);  // warm up (and grads allocated once, as in training)
  for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
  const auto before = heap_in_use();
  auto loss = net->forward(x).pow(2).mean();
  const auto held = static_cast<double>(heap_in_use()) - static_cast<double>(before);
  loss.backward();
  return held;
}

// Peak resident memory (bytes) of a child that builds the model and runs 3 steps.
double peak_rss_of_child(const config& c, bool recomputed) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    {
      Net net(c, recomputed);
      const auto x = input(c);
      for (int i = 0; i < 3; ++i) step(net, x);
    }
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    const double kib = static_cast<double>(usage.ru_maxrss);
    if (::write(fds[1], &kib, sizeof kib) != sizeof kib) ::_exit(1);
    ::_exit(0);
  }
  ::close(fds[1]);
  double kib = 0;
  if (::read(fds[0], &kib, sizeof kib) != sizeof kib) kib = -1;
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return kib * 1024.0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  config c;
  if (argc > 1) c.blocks = std::atoi(argv[1]);
  if (argc > 2) c.width = std::atoll(argv[2]);
  if (argc > 3) c.batch = std::atoll(argv[3]);
  if (argc > 4) c.steps = std::atoi(argv[4]);
  std::printf("%d blocks of Linear(%lld) + GELU + dropout(0.1), batch %lld, %d intra-op threads\n", c.blocks,
              static_cast<long long>(c.width), static_cast<long long>(c.batch), torch::get_num_threads());
  std::printf("one block's activation tensor (batch x width x 4 B): %.2f MiB\n\n", mib(static_cast<double>(c.batch * c.width * 4)));

  // Children first, before this process has touched LibTorch's thread pools.
  const double rss_plain = peak_rss_of_child(c, false), rss_recomputed = peak_rss_of_child(c, true);

  const double graph_plain = graph_bytes(c, false), graph_recomputed = graph_bytes(c, true);
  std::printf("held by the graph after forward   plain %8.1f MiB   recomputed %8.1f MiB   saved %8.1f MiB (%.1fx less)\n",
              mib(graph_plain), mib(graph_recomputed), mib(graph_plain - graph_recomputed), graph_plain / graph_recomputed);
  std::printf("peak resident memory of a run     plain %8.1f MiB   recomputed %8.1f MiB   saved %8.1f MiB\n", mib(rss_plain),
              mib(rss_recomputed), mib(rss_plain - rss_recomputed));

  Net plain(c, false), recomputed(c, true);
  const auto x = input(c);
  step(plain, x), step(recomputed, x);  // warm up
  std::vector<double> t_plain, t_recomputed, ratios;
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < c.steps; ++i) {
    // alternate the order, so that the machine's load weighs on both alike
    double t[2];
    for (int k = 0; k < 2; ++k) {
      const bool rec = (k == 0) == (i % 2 == 0);
      const auto start = clock::now();
      step(rec ? recomputed : plain, x);
      t[rec ? 1 : 0] = std::chrono::duration<double, std::milli>(clock::now() - start).count();
    }
    t_plain.push_back(t[0]), t_recomputed.push_back(t[1]), ratios.push_back(t[1] / t[0]);
  }
  std::printf("step time (median of %d)          plain %8.1f ms    recomputed %8.1f ms    ratio %.2f (median of the steps' ratios)\n",
              c.steps, median(t_plain), median(t_recomputed), median(ratios));
  return 0;
}
