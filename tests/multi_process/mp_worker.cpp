// One rank of the multi-process tests (or, with --single W, the one-process reference with W
// times the batch). A small MLP regression, shuffled and sharded by rank, SGD with momentum.
//
//   mp_worker --steps N --batch B --out FILE [--single W] [--logdir DIR --save-every K]
//             [--timeout-ms T] [--overlap 0|1] [--compress fp32|fp16] [--die-rank R --die-at S] [--stall-rank R --stall-at S]
//             [--die-once MARKER] [--step-ms M] [--accumulate K] [--loss-scale S] [--optimizer sgd|adam|nadam|lamb|lars|lbfgs]
//             [--scripted MODEL.pt] [--steps-per-epoch E] [--ids 1] [--shard none|optimizer|gradients|parameters] [--clip NORM]
//             [--units 1|3|4|5] [--recompute 1] [--depth D] [--bf16 1] [--ema 1] [--build-sharded 1] [--init-after 1]
//             [--nan-at S] [--dropout P [--keyed SEED]] [--val-examples N]
//
// Writes the final weights, raw, to FILE.<rank> (FILE for --single). It prints "step N" after
// each step. --die-rank/--die-at: that rank kills itself with SIGKILL after step S;
// --die-once: only if the file MARKER does not exist (it makes it first), so that a restarted job
// does not die again; --stall-rank/--stall-at: that rank stops itself (SIGSTOP) there; --step-ms: each step works M
// ms longer (so that a signal lands while it trains); --accumulate: K micro-batches of B per
// optimizer step (with --single, one batch of W·K·B), and it prints "all-reduces N (E before a
// last micro-batch) in S steps of B buckets" at the end. A stop signal ends it after the step the
// ranks agree on: it prints "interrupted at global step N" and exits with 128 + the signal.
// --optimizer: SGD with momentum (the default), tp::optim::NAdam or LAMB. --scripted: the model
// is that TorchScript file (tp::ScriptedModule, inside a Sequential) instead of the C++ MLP.
// --loss-scale: dynamic loss scaling from S (growth every 3 updates); it prints "loss scale X
// after K skipped updates" at the end. --ids 1: each rank writes the ids of the examples it
// trained on (0-255, as text) to FILE.ids.<rank>: the resharding tests count them. --shard:
// MultiProcess's sharding (tp::sharding); --clip: clip the gradients' global norm. It prints
// "optimizer state N bytes" and "gradient buffers N bytes" after the first step, and at the end "collectives: N to agree on
// stopping, N all-gathers of shards". --hidden H: the MLP's hidden width (32); --narrow-rank R:
// that rank builds it 16 wide (a model that differs between ranks). --depth D: D more hidden
// layers (H x H). --units 1: each Linear is a tp::Sharded unit (what --shard parameters shards);
// --recompute 1: and recomputed too; --units 3: the first Linear is a unit inside another (a
// mistake); --units 4: only the hidden layers are units (the others stay whole). --bf16 1: bf16
// autocast, and sharded parameters gathered in bf16 (MultiProcess::compress_parameters). With
// --shard parameters it prints "parameter rows N bytes, whole units at most N bytes" after the
// first step, and at the end "units gathered N times, N bytes sent". --ema 1: with a WeightEMA.
// --build-sharded 1: the model is built sharded (MultiProcess::build_sharded); it prints "built
// N units sharded, at most N bytes whole" at the start. --init-after 1: the model's parameters
// are initialised again once the whole model is built (what build_sharded refuses). --units 5:
// each hidden layer a unit, every one of them the same Linear (weights tied across units).
// --nan-at S: the loss is NaN from step S on, with a tp::NumericsWatch. --dropout P: a Dropout
// after the first hidden layer, each rank's generator seeded apart; --keyed SEED: the step's
// randomness keyed by place (UpdateOptions::keyed_randomness). --val-examples N: an
// InferenceRunner on this rank's share of the first N examples; rank 0 prints "epoch E val_loss V".
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>
#include <vector>
#include <string>
#include <string_view>
#include <thread>

#include <tp/policies/comm/gloo.hpp>
#include <tp/policies/distribution/multi_process.hpp>
#include <tp/recompute.hpp>
#include <tp/scripted_module.hpp>
#include <tp/sharded.hpp>
#include <tp/tp.hpp>
#include <tp/data.hpp>
#include <tp/distributed.hpp>
#include <torch/torch.h>

namespace {

// The ids of the examples this process trained on (the target's second column), when --ids.
std::mutex ids_mutex;
double dropout = 0;  // --dropout
std::int64_t nan_at = 0, losses = 0;  // --nan-at; the losses computed so far (one a step: no accumulation)
std::vector<long long> trained_ids;

std::map<std::string, std::string> parse(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i + 1 < argc; i += 2) flags[argv[i]] = argv[i + 1];
  return flags;
}

struct Step {
  int rank;
  std::int64_t die_at, stall_at;
  bool die, stall;
  int step_ms = 0;
  std::string die_once;  // a marker file: die only if it does not exist yet
  bool state_printed = false;
  void after_step(auto& trainer) {
    if (!state_printed) {  // after the first step: the optimizer state exists
      // The state's tensors alone (what sharding divides; the serialized form adds a fixed overhead).
      std::int64_t bytes = 0;
      trainer.replicas().for_each_optimizer([&](auto& o) { bytes += tp::detail::state_tensor_bytes(o); });
      std::printf("optimizer state %lld bytes\n", static_cast<long long>(bytes));
      if constexpr (requires { trainer.replicas().gradient_bytes(); })
        std::printf("gradient buffers %lld bytes\n", static_cast<long long>(trainer.replicas().gradient_bytes()));
      if constexpr (requires { trainer.replicas().parameter_shard_bytes(); })
        if (trainer.replicas().parameter_shard_bytes() > 0)
          std::printf("parameter rows %lld bytes, whole units at most %lld bytes\n", static_cast<long long>(trainer.replicas().parameter_shard_bytes()),
                      static_cast<long long>(trainer.replicas().peak_whole_unit_bytes()));
      state_printed = true;
    }
    if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
    std::printf("step %lld\n", static_cast<long long>(trainer.global_step()));
    std::fflush(stdout);
    if (die && trainer.global_step() == die_at) {
      if (!die_once.empty()) {
        if (std::ifstream(die_once)) return;
        std::ofstream(die_once) << "died\n";
      }
      std::raise(SIGKILL);
    }
    if (stall && trainer.global_step() == stall_at) std::raise(SIGSTOP);
  }
};

tp::optim::AnyOptimizer make_optimizer(const std::string& name, torch::nn::Sequential& m) {
  if (name == "nadam") return tp::optim::NAdam(m->parameters(), tp::optim::NAdamOptions(0.01).weight_decay(1e-3));
  if (name == "lamb") return tp::optim::LAMB(m->parameters(), tp::optim::LAMBOptions(0.01).weight_decay(1e-3));
  if (name == "adam") return torch::optim::Adam(m->parameters(), torch::optim::AdamOptions(0.01).weight_decay(1e-3));
  if (name == "lars") return tp::optim::LARS(m->parameters(), tp::optim::LARSOptions(0.05).weight_decay(1e-3));
  if (name == "lbfgs") return torch::optim::LBFGS(m->parameters(), torch::optim::LBFGSOptions(0.1));
  if (name != "sgd") throw std::invalid_argument("--optimizer must be sgd, adam, nadam, lamb, lars or lbfgs, not " + name);
  return torch::optim::SGD(m->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
}

// Layer i of the MLP: a Linear, or one wrapped as a unit of parameter sharding (and recomputed).
torch::nn::AnyModule layer(int in, int out, int units) {
  torch::nn::Linear linear(in, out);
  if (units == 3) return torch::nn::AnyModule(tp::Sharded<torch::nn::Sequential>(torch::nn::Sequential(tp::Sharded<torch::nn::Linear>(linear))));
  if (units == 2) return torch::nn::AnyModule(tp::Sharded<tp::Recomputed<torch::nn::Linear>>(tp::Recomputed<torch::nn::Linear>(linear)));
  if (units == 1) return torch::nn::AnyModule(tp::Sharded<torch::nn::Linear>(linear));
  return torch::nn::AnyModule(linear);
}

auto desc(double loss_scale, const std::string& optimizer, const std::string& scripted, int hidden = 32, int units = 0, int depth = 0,
          bool bf16 = false, bool init_after = false) {
  auto scaling = tp::LossScaler().growth_interval(3);
  if (loss_scale > 0) scaling.init_scale(loss_scale);
  auto with = [&](auto d) { return loss_scale > 0 ? std::move(d).loss_scaling(scaling) : std::move(d); };
  return with(tp::model_desc([scripted, hidden, units, depth, init_after] {
           if (!scripted.empty()) return torch::nn::Sequential(tp::ScriptedModule(scripted));
           torch::manual_seed(5);
           torch::nn::Sequential m;
           const int outer = units == 4 || units == 5 ? 0 : units;  // --units 4 and 5: only the hidden layers are units
           m->push_back(layer(6, hidden, outer));
           m->push_back(torch::nn::Tanh());
           if (dropout > 0) m->push_back(torch::nn::Dropout(dropout));
           torch::nn::Linear shared(hidden, hidden);  // --units 5: every hidden layer
           for (int i = 0; i < depth; ++i) {
             if (units == 5) m->push_back(tp::Sharded<torch::nn::Linear>(shared));
             else m->push_back(layer(hidden, hidden, units == 3 || units == 4 ? 1 : units));
             m->push_back(torch::nn::Tanh());
           }
           m->push_back(layer(hidden, 1, outer));
           if (init_after) {
             torch::NoGradGuard no_grad;
             for (auto& p : m->parameters()) p.normal_(0.0, 0.1);
           }
           return m;
         })
      .tower_function([](const tp::TowerContext&, torch::nn::Sequential& m, const torch::data::Example<>& b) {
        {
          std::lock_guard lock(ids_mutex);
          const auto ids = b.target.select(1, 1).to(torch::kLong).contiguous();
          trained_ids.insert(trained_ids.end(), ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + ids.numel());
        }
        const auto loss = torch::mse_loss(m->forward(b.data), b.target.slice(1, 0, 1));
        return nan_at > 0 && ++losses >= nan_at ? loss * std::numeric_limits<float>::quiet_NaN() : loss;
      })
      .optimizer([optimizer](torch::nn::Sequential& m) { return make_optimizer(optimizer, m); })
      .precision(bf16 ? tp::precision::bf16_mixed : tp::precision::fp32));
}

// --val-examples: rank 0 prints the validation loss.
struct print_val {
  template <class Trainer>
  void on_scalar(Trainer& trainer, std::string_view name, double value) {
    if (trainer.is_chief() && name == "val_loss") std::printf("epoch %d val_loss %.9g\n", trainer.epoch_num(), value);
  }
};

void print_loss_scale(auto& trainer) {
  if (const auto* scaler = trainer.tower().loss_scaler())
    std::printf("loss scale %g after %lld skipped updates\n", scaler->scale(), static_cast<long long>(scaler->skipped()));
}

void write_weights(const std::string& path, torch::nn::Sequential& model) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& p : model->parameters()) {
    const auto c = p.detach().contiguous();
    out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  }
}

}  // namespace

int main(int argc, char** argv) try {
  auto flags = parse(argc, argv);
  auto get = [&](const std::string& name, const std::string& fallback) { return flags.count(name) ? flags[name] : fallback; };
  const auto steps = std::stoll(get("--steps", "20"));
  const auto batch = std::stoll(get("--batch", "8"));
  const std::string out = get("--out", "weights.bin");
  const int accumulate = std::stoi(get("--accumulate", "1"));
  const double loss_scale = std::stod(get("--loss-scale", "0"));
  const std::string optimizer = get("--optimizer", "sgd");
  const std::string scripted = get("--scripted", "");
  torch::set_num_threads(1);
  torch::manual_seed(1);
  const auto x = torch::randn({256, 6});
  const auto y = torch::cat({x.sum(1, true).sin(), torch::arange(256).unsqueeze(1).to(torch::kFloat)}, 1);  // the target, and the id
  const auto per_epoch = std::stoll(get("--steps-per-epoch", "5"));
  const auto options = tp::TrainOptions().model_summary(false).intra_op_threads(-1).steps_per_epoch(per_epoch).max_epoch(
      static_cast<int>((steps + per_epoch - 1) / per_epoch));
  const bool write_ids = flags.count("--ids") > 0;

  if (flags.count("--single")) {
    const int world = std::stoi(flags["--single"]);
    tp::Trainer trainer(tp::FeedInput(tp::data::examples(x, y) | tp::data::shuffle(7) | tp::data::batch(batch * world * accumulate)), desc(loss_scale, optimizer, scripted),
                        tp::SingleDevice(), options);
    trainer.train();
    write_weights(out, trainer.model());
    print_loss_scale(trainer);
    return 0;
  }

  const auto env = tp::read_process_environment();
  dropout = std::stod(get("--dropout", "0"));
  auto distribution = tp::MultiProcess<tp::backend::Gloo>(env)
                          .timeout(std::chrono::milliseconds(std::stoll(get("--timeout-ms", "60000"))))
                          .overlap(get("--overlap", "1") == "1")
                          .compress_gradients(get("--compress", "fp32") == "fp16" ? torch::kHalf : torch::kFloat)
                          .bucket_bytes(std::stoull(get("--bucket-bytes", "1024")))  // small: several buckets
                          .accumulate(accumulate);
  const std::string shard = get("--shard", "none");
  if (shard != "none" && shard != "optimizer" && shard != "gradients" && shard != "parameters")
    throw std::invalid_argument("--shard must be none, optimizer, gradients or parameters, not " + shard);
  distribution.shard(shard == "optimizer"    ? tp::sharding::optimizer_state
                     : shard == "gradients"  ? tp::sharding::gradients
                     : shard == "parameters" ? tp::sharding::parameters
                                             : tp::sharding::none);
  const int units = get("--recompute", "0") == "1" ? 2 : std::stoi(get("--units", "0"));
  const bool bf16 = get("--bf16", "0") == "1";
  if (bf16) distribution.compress_parameters(torch::kBFloat16);
  if (get("--build-sharded", "0") == "1") distribution.build_sharded();
  if (flags.count("--keyed")) distribution.keyed_randomness(std::stoull(flags["--keyed"]));
  if (flags.count("--clip")) distribution.gradients(tp::GradientProcessing().clip_global_norm(std::stod(flags["--clip"])));
  Step step{env.rank, std::stoll(get("--die-at", "0")), std::stoll(get("--stall-at", "0")),
            get("--die-rank", "-1") == std::to_string(env.rank), get("--stall-rank", "-1") == std::to_string(env.rank),
            std::stoi(get("--step-ms", "0")), get("--die-once", "")};
  auto flow = tp::data::examples(x, y) | tp::data::shuffle(7) | tp::data::shard(env.rank, env.world_size) | tp::data::batch(batch);
  const std::string logdir = get("--logdir", "");
  auto train = [&](auto... saver) {
    const int hidden = get("--narrow-rank", "-1") == std::to_string(env.rank) ? 16 : std::stoi(get("--hidden", "32"));
    tp::Trainer trainer(tp::FeedInput(std::move(flow)), desc(loss_scale, optimizer, scripted, hidden, units, std::stoi(get("--depth", "0")), bf16, get("--init-after", "0") == "1"), std::move(distribution), options,
                        step, std::move(saver)...);
    // Each rank's own generator once the model is built (the same on every rank), as a user
    // seeds them: a resume restores rank 0's only.
    if (dropout > 0) torch::manual_seed(100 + static_cast<std::uint64_t>(env.rank));
    if (trainer.replicas().units_built_sharded() > 0)
      std::printf("built %lld units sharded, at most %lld bytes whole\n", static_cast<long long>(trainer.replicas().units_built_sharded()),
                  static_cast<long long>(trainer.replicas().largest_unit_built_bytes()));
    if (const auto outcome = trainer.train(); outcome.interrupted()) {
      std::printf("interrupted at global step %lld\n", static_cast<long long>(outcome.global_step));
      return outcome.exit_status();
    }
    trainer.replicas().gather_parameters();  // sharded parameters: whole on every rank
    write_weights(out + "." + std::to_string(env.rank), trainer.model());
    if (write_ids) {
      std::ofstream ids(out + ".ids." + std::to_string(env.rank));
      for (const auto id : trained_ids) ids << id << "\n";
    }
    std::printf("all-reduces %lld (%lld before a last micro-batch) in %lld steps of %zu buckets\n",
                static_cast<long long>(trainer.replicas().gradient_all_reduces()),
                static_cast<long long>(trainer.replicas().early_gradient_all_reduces()), static_cast<long long>(trainer.global_step()),
                trainer.replicas().buckets());
    std::printf("collectives: %lld to agree on stopping, %lld all-gathers of shards\n", static_cast<long long>(trainer.replicas().stop_collectives()),
                static_cast<long long>(trainer.replicas().shard_gathers()));
    print_loss_scale(trainer);
    if (trainer.replicas().unit_gathers() > 0)
      std::printf("units gathered %lld times, %lld bytes sent\n", static_cast<long long>(trainer.replicas().unit_gathers()),
                  static_cast<long long>(trainer.replicas().unit_gather_bytes()));
    return 0;
  };
  if (get("--ema", "0") == "1") return train(tp::WeightEMA(0.9));
  nan_at = std::stoll(get("--nan-at", "0"));
  if (nan_at > 0) return train(tp::NumericsWatch());
  if (flags.count("--val-examples")) {
    const auto n = std::stoll(flags["--val-examples"]);
    // The first n examples, this rank's share of them, at every epoch's end: printed by rank 0.
    auto val = tp::data::examples(x.slice(0, 0, n), y.slice(0, 0, n)) | tp::data::shard(env.rank, env.world_size) | tp::data::batch(batch);
    auto mse = [](torch::nn::Sequential& m, const torch::data::Example<>& b) {
      return tp::outputs{{"loss", torch::mse_loss(m->forward(b.data), b.target.slice(1, 0, 1))}};
    };
    return train(tp::InferenceRunner(std::move(val), mse, tp::ScalarStats({"loss"}, "val_")), print_val{});
  }
  if (logdir.empty()) return train();
  return train(tp::ModelSaver(logdir).every_n_steps(std::stoll(get("--save-every", "4"))).keep_last(3));
} catch (const std::exception& e) {
  std::cerr << "mp_worker: " << e.what() << "\n";
  return 1;
}
