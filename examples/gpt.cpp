// Trains nanoGPT's GPT on a text or token file, with nanoGPT's recipe and flags, and samples
// from what it trained.
//
//   gpt --data input.txt --out-dir out [nanoGPT's flags, with dashes: --n-layer 4 --block-size 64 ...]
//   gpt --preset shakespeare-char --data input.txt ...     config/train_shakespeare_char.py's values
//   gpt --sample 500 --out-dir out [--start TEXT] [--temperature 0.8] [--top-k 200]
//   tp-run -n 2 gpt ...                                    one process per rank (Gloo, or NCCL on GPUs)
//
// --data is a UTF-8 text (its characters become the tokens: OUT/data/train.bin, val.bin and
// vocab.json, the first 90% for training) or a token file (uint16, nanoGPT's train.bin; val.bin
// beside it, and vocab.json if tp wrote it, else --vocab-size). The flags are nanoGPT's train.py
// with its defaults; `--preset shakespeare-char` starts from its shakespeare_char config, and
// flags given override it. Every eval-interval steps it prints nanoGPT's
// `step N: train loss X, val loss Y`, on eval-iters fixed batches of each split (the same
// windows at every evaluation). The model is nanoGPT's (gpt_model.hpp); AdamW with decay on the
// 2-D weights only, cosine learning rate with warm-up, global-norm clipping.
//
// OUT holds tp's checkpoints (the newest 3, and min-val_loss.ckpt, the best): running the same
// command again resumes exactly where it stopped (Ctrl-C saves and stops). Beside them,
// OUT/ckpt.pt is nanoGPT's checkpoint, written when the val loss improves: nanoGPT's sample.py
// --out_dir=OUT and any GPT with nanoGPT's names load it (load_state_dict(strict=True)), and
// --init-from DIR starts from DIR/ckpt.pt, one written by nanoGPT included.
// tp's levers: --precision bf16 (autocast), --recompute (each block's activations recomputed in
// backward), --threads N (intra-op threads), --shard optimizer|gradients|parameters (under
// tp-run; parameters: each block's parameters too, tp::Sharded, built sharded so that no rank
// holds the whole model, and gathered in bf16 with --precision bf16).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>
#include <tp/data.hpp>
#include <tp/distributed.hpp>
#include <tp/monitors.hpp>
#include <tp/policies/comm/nccl_backend.hpp>
#include <tp/tp.hpp>
#include <torch/torch.h>

#include "flags.hpp"
#include "gpt_model.hpp"

namespace {

struct flags {
  std::string data, out_dir = "out", preset, init_from;
  std::int64_t n_layer = 12, n_head = 12, n_embd = 768, block_size = 1024, batch_size = 12, vocab_size = 0;
  std::int64_t max_iters = 600000, lr_decay_iters = 600000, warmup_iters = 2000, eval_interval = 2000, eval_iters = 200, log_interval = 1;
  int gradient_accumulation_steps = 40;
  double learning_rate = 6e-4, min_lr = 6e-5, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, grad_clip = 1.0, dropout = 0.0;
  bool bias = false, decay_lr = true;
  std::uint64_t seed = 1337;
  double max_val_loss = 0;  // 0: no check
  std::string precision = "fp32", shard = "none", device;
  bool recompute = false;
  int threads = 0;
  // sampling
  std::int64_t sample = 0, top_k = 200;
  double temperature = 0.8;
  std::string start = "\n";
};

// config/train_shakespeare_char.py
void shakespeare_char(flags& f) {
  f.out_dir = "out-shakespeare-char";
  f.eval_interval = 250;
  f.eval_iters = 200;
  f.log_interval = 10;
  f.gradient_accumulation_steps = 1;
  f.batch_size = 64;
  f.block_size = 256;
  f.n_layer = 6;
  f.n_head = 6;
  f.n_embd = 384;
  f.dropout = 0.2;
  f.learning_rate = 1e-3;
  f.max_iters = 5000;
  f.lr_decay_iters = 5000;
  f.min_lr = 1e-4;
  f.beta2 = 0.99;
  f.warmup_iters = 100;
}

flags parse(int argc, char** argv) {
  flags f;
  // The preset goes first, so that the flags given override it.
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--preset" && std::string(argv[i + 1]) == "shakespeare-char") shakespeare_char(f);
  CLI::App app("Trains nanoGPT's GPT with tp on a text or token file (nanoGPT's flags and defaults), or samples from a trained one.", "gpt");
  // A flag given twice takes its last value, as nanoGPT's configurator does.
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--preset", f.preset, "shakespeare-char: start from nanoGPT's config/train_shakespeare_char.py")
      ->check(CLI::IsMember({"shakespeare-char"}));
  app.add_option("--data", f.data, "a UTF-8 text file, or a token file (uint16, nanoGPT's train.bin, with val.bin beside it)");
  app.add_option("--out-dir", f.out_dir, "checkpoints (tp's and nanoGPT's ckpt.pt), stats.json and the prepared data");
  app.add_option("--init-from", f.init_from, "a folder with a nanoGPT ckpt.pt to start from (its model_args win over the flags)");
  app.add_option("--n-layer", f.n_layer)->check(CLI::PositiveNumber);
  app.add_option("--n-head", f.n_head)->check(CLI::PositiveNumber);
  app.add_option("--n-embd", f.n_embd)->check(CLI::PositiveNumber);
  app.add_option("--block-size", f.block_size)->check(CLI::PositiveNumber);
  app.add_option("--batch-size", f.batch_size, "windows per micro-batch and rank")->check(CLI::PositiveNumber);
  app.add_option("--vocab-size", f.vocab_size, "for a token file without tp's vocab.json (0: nanoGPT's 50304)")->check(CLI::NonNegativeNumber);
  app.add_option("--bias", f.bias, "biases in the Linear layers and LayerNorms");
  app.add_option("--dropout", f.dropout)->check(CLI::Range(0.0, 0.999));
  app.add_option("--max-iters", f.max_iters, "optimizer steps in all")->check(CLI::PositiveNumber);
  app.add_option("--learning-rate", f.learning_rate)->check(CLI::PositiveNumber);
  app.add_option("--min-lr", f.min_lr)->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-iters", f.warmup_iters)->check(CLI::NonNegativeNumber);
  app.add_option("--lr-decay-iters", f.lr_decay_iters)->check(CLI::PositiveNumber);
  app.add_option("--decay-lr", f.decay_lr, "cosine decay with warm-up (else a constant learning rate)");
  app.add_option("--weight-decay", f.weight_decay)->check(CLI::NonNegativeNumber);
  app.add_option("--beta1", f.beta1)->check(CLI::Range(0.0, 0.999999));
  app.add_option("--beta2", f.beta2)->check(CLI::Range(0.0, 0.999999));
  app.add_option("--grad-clip", f.grad_clip, "global-norm clipping (0: none)")->check(CLI::NonNegativeNumber);
  app.add_option("--eval-interval", f.eval_interval, "steps between evaluations; it must divide --max-iters")->check(CLI::PositiveNumber);
  app.add_option("--log-interval", f.log_interval, "steps between nanoGPT's `iter N: loss X, time Yms` lines")->check(CLI::PositiveNumber);
  app.add_option("--eval-iters", f.eval_iters, "batches of each split an evaluation averages")->check(CLI::PositiveNumber);
  app.add_option("--gradient-accumulation-steps", f.gradient_accumulation_steps, "micro-batches per step, over all ranks")->check(CLI::PositiveNumber);
  app.add_option("--seed", f.seed);
  app.add_option("--max-val-loss", f.max_val_loss, "exit with status 1 if the best val loss is above this (0: no check)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--device", f.device, "cpu or cuda (default: cuda where LibTorch has it)")->check(CLI::IsMember({"", "cpu", "cuda"}));
  app.add_option("--precision", f.precision, "fp32, or bf16 (autocast: bf16 matrix products, fp32 weights)")->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_flag("--recompute", f.recompute, "recompute each block's activations in backward (less memory, one more forward)");
  app.add_option("--shard", f.shard, "under tp-run: none, optimizer (ZeRO 1), gradients (ZeRO 2) or parameters (ZeRO 3: each block's too)")
      ->check(CLI::IsMember({"none", "optimizer", "gradients", "parameters"}));
  app.add_option("--threads", f.threads, "intra-op threads (0: one per physical core)")->check(CLI::NonNegativeNumber);
  app.add_option("--sample", f.sample, "print this many characters sampled from OUT/ckpt.pt, and exit")->check(CLI::NonNegativeNumber);
  app.add_option("--start", f.start, "the text samples start from");
  app.add_option("--temperature", f.temperature)->check(CLI::PositiveNumber);
  app.add_option("--top-k", f.top_k, "sample from the k likeliest tokens (0: all)")->check(CLI::NonNegativeNumber);
  app.failure_message(examples::failure_message("gpt"));
  try {
    app.parse(argc, argv);
    if (f.sample == 0 && f.data.empty()) throw CLI::ValidationError("--data is required to train (a text file or a token file)");
    if (f.max_iters % f.eval_interval != 0)
      throw CLI::ValidationError("--eval-interval (" + std::to_string(f.eval_interval) + ") must divide --max-iters (" + std::to_string(f.max_iters) +
                                 "): evaluations close tp's epochs");
    if (f.n_embd % f.n_head != 0) throw CLI::ValidationError("--n-embd must be a multiple of --n-head");
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    std::exit(e.get_exit_code() == 0 ? 0 : 2);
  }
  return f;
}

// The train and val token files and the vocabulary size, from --data.
struct token_data {
  std::filesystem::path train, val, vocabulary;  // vocabulary: a vocab.json, or empty
  std::int64_t vocab_size;
};

token_data prepare(const flags& f) {
  const std::filesystem::path data = f.data;
  if (!std::filesystem::exists(data)) throw std::invalid_argument("--data " + f.data + ": no such file");
  if (data.extension() != ".bin") {
    // Every rank writes the same files, each atomically: a reader sees a whole one.
    auto prepared = tp::data::prepare_character_tokens(data, std::filesystem::path(f.out_dir) / "data");
    return {prepared.train, prepared.val, prepared.vocabulary_file, prepared.vocabulary.size()};
  }
  const auto dir = data.parent_path();
  const auto val = dir / "val.bin";
  if (!std::filesystem::exists(val)) throw std::invalid_argument("--data " + f.data + ": no val.bin beside it (nanoGPT's layout: train.bin and val.bin)");
  if (std::filesystem::exists(dir / "vocab.json"))
    return {data, val, dir / "vocab.json", tp::data::CharacterVocabulary::load(dir / "vocab.json").size()};
  return {data, val, {}, f.vocab_size > 0 ? f.vocab_size : 50304};
}

// nanoGPT's model_args, from a ckpt.pt (what --init-from and --sample read).
gpt::Config model_args_of(const tp::detail::py_value& ckpt, const std::string& source) {
  const auto* args = ckpt.is_dict() ? ckpt.find("model_args") : nullptr;
  if (!args || !args->is_dict()) throw tp::checkpoint_error(source + " has no model_args: it is not a nanoGPT checkpoint");
  gpt::Config c;
  const auto integer = [&](const char* name, std::int64_t& into) {
    const auto* v = args->find(name);
    if (!v) throw tp::checkpoint_error(source + ": model_args has no " + name);
    into = v->as_int();
  };
  integer("n_layer", c.n_layer);
  integer("n_head", c.n_head);
  integer("n_embd", c.n_embd);
  integer("block_size", c.block_size);
  integer("vocab_size", c.vocab_size);
  if (const auto* v = args->find("bias")) c.bias = v->as_bool();
  if (const auto* v = args->find("dropout")) c.dropout = v->as_double();
  if (c.n_layer < 1 || c.n_head < 1 || c.n_embd < 1 || c.block_size < 1 || c.vocab_size < 1 || c.n_embd % c.n_head != 0)
    throw tp::checkpoint_error(source + ": model_args (n_layer " + std::to_string(c.n_layer) + ", n_head " + std::to_string(c.n_head) + ", n_embd " +
                               std::to_string(c.n_embd) + ", block_size " + std::to_string(c.block_size) + ", vocab_size " +
                               std::to_string(c.vocab_size) + ") is no GPT: each must be >= 1 and n_embd a multiple of n_head");
  // The sizes must be those of the weights beside them, checked before a model of those sizes
  // is built: a damaged model_args could ask for terabytes.
  const auto* weights = ckpt.find("model");
  const auto shape_of = [&](const char* name) -> std::vector<std::int64_t> {
    const auto* w = weights && weights->is_dict() ? weights->find(name) : nullptr;
    if (!w && weights && weights->is_dict()) w = weights->find("_orig_mod." + std::string(name));  // saved by a torch.compile'd model
    if (!w || w->type() != tp::detail::py_value::kind::tensor) throw tp::checkpoint_error(source + " has no tensor '" + std::string(name) + "' in its model");
    return w->tensor().sizes().vec();
  };
  const auto expect = [&](const char* name, std::vector<std::int64_t> sizes) {
    if (const auto found = shape_of(name); found != sizes)
      throw tp::checkpoint_error(source + ": model_args says '" + name + "' is " + c10::str(c10::IntArrayRef(sizes)) + " but the weight is " +
                                 c10::str(c10::IntArrayRef(found)) + ": the file is damaged, or its model_args are another model's");
  };
  expect("transformer.wte.weight", {c.vocab_size, c.n_embd});
  expect("transformer.wpe.weight", {c.block_size, c.n_embd});
  expect(("transformer.h." + std::to_string(c.n_layer - 1) + ".attn.c_attn.weight").c_str(), {3 * c.n_embd, c.n_embd});
  return c;
}

c10::impl::GenericDict model_args_dict(const gpt::Config& c) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("n_layer", c.n_layer);
  d.insert("n_head", c.n_head);
  d.insert("n_embd", c.n_embd);
  d.insert("block_size", c.block_size);
  d.insert("bias", c.bias);
  d.insert("vocab_size", c.vocab_size);
  d.insert("dropout", c.dropout);
  return d;
}

// Prints nanoGPT's evaluation line and writes OUT/ckpt.pt, nanoGPT's checkpoint, when the val
// loss improves (the chief only). Its best val loss is checkpointed with tp's state.
class NanoGptCheckpoint {
 public:
  NanoGptCheckpoint(std::filesystem::path out_dir, gpt::Config config, c10::impl::GenericDict settings)
      : out_dir_(std::move(out_dir)), config_(config), settings_(std::move(settings)) {}

  template <class Trainer>
  void on_scalar(Trainer&, std::string_view name, double value) {
    if (name == "train_loss") train_ = value;
    if (name == "val_loss") val_ = value;
  }

  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    if (!train_ || !val_) return;
    if (trainer.is_chief())
      std::cout << "step " << trainer.global_step() << ": train loss " << std::fixed << std::setprecision(4) << *train_ << ", val loss " << *val_
                << std::defaultfloat << std::endl;
    if (*val_ < best_) {
      best_ = *val_;
      trainer.gather_parameters();  // every rank (they agree on val_): whole where they are sharded
      if (trainer.is_chief()) write(trainer);
    }
    train_.reset();
    val_.reset();
  }

  double best_val_loss() const noexcept { return best_; }

  template <class Trainer>
  void save_state(Trainer&, tp::state_tree& out) const {
    out.put("best_val_loss", best_);
  }
  template <class Trainer>
  void load_state(Trainer&, const tp::state_tree& in) {
    best_ = in.real("best_val_loss");
  }

 private:
  template <class Trainer>
  void write(Trainer& trainer) {
    c10::impl::GenericDict ckpt(c10::StringType::get(), c10::AnyType::get());
    ckpt.insert("model", gpt::nanogpt_state_dict(trainer.model()));
    ckpt.insert("model_args", model_args_dict(config_));
    ckpt.insert("iter_num", trainer.global_step());
    ckpt.insert("best_val_loss", torch::tensor(best_));
    ckpt.insert("config", settings_);
    tp::detail::write_torch_save(out_dir_ / "ckpt.pt", ckpt);
  }

  std::filesystem::path out_dir_;
  gpt::Config config_;
  c10::impl::GenericDict settings_;
  std::optional<double> train_, val_;
  double best_ = 1e9;  // nanoGPT's initial best_val_loss
};

// Prints nanoGPT's `iter N: loss X, time Yms` line (the chief only) whenever StepTimes puts a
// step's time: every --log-interval steps, so that a stall shows when it happens.
struct IterationLog {
  template <class Trainer>
  void on_scalar(Trainer& trainer, std::string_view name, double ms) {
    if (name != "step_ms" || !trainer.is_chief()) return;
    const auto& loss = trainer.last_cost();  // the step's mean loss over its micro-batches
    std::cout << "iter " << trainer.global_step() << ": loss " << std::fixed << std::setprecision(4) << (loss.defined() ? loss.template item<double>() : std::nan(""))
              << ", time " << std::setprecision(2) << ms << "ms" << std::defaultfloat << std::endl;
  }
};

// What eval_iters batches of a split give: their mean loss, as <split>_loss.
auto evaluation(tp::data::TokenFile file, const flags& f, const tp::process_environment& env, const std::string& split) {
  auto windows = tp::data::fixed_windows(std::move(file), f.block_size, f.eval_iters * f.batch_size, f.seed + 1) |
                 tp::data::shard(env.rank, env.world_size) | tp::data::batch(f.batch_size);
  auto loss = [](gpt::GPT& model, const torch::data::Example<>& b) { return tp::outputs{{"loss", gpt::loss(model->forward(b.data), b.target)}}; };
  return tp::InferenceRunner(std::move(windows), loss, tp::ScalarStats({"loss"}, split + "_"));
}

struct result {
  tp::train_outcome outcome;
  double best_val_loss = 0;
};

template <class Input, class Distribution>
result train(Input input, Distribution distribution, const flags& f, const gpt::Config& config, const token_data& data,
                        const tp::process_environment& env, std::optional<std::filesystem::path> init) {
  auto desc = tp::model_desc([config, recompute = f.recompute] {
                gpt::GPT model(config);
                model->recompute = recompute;
                return model;
              })
                  .tower_function([](const tp::TowerContext&, gpt::GPT& model, const torch::data::Example<>& b) {
                    return gpt::loss(model->forward(b.data), b.target);
                  })
                  .optimizer([f](gpt::GPT& model) {
                    auto options = torch::optim::AdamWOptions(f.learning_rate).betas({f.beta1, f.beta2});
                    return torch::optim::AdamW(tp::optim::weight_decay_groups(model->parameters(), options, f.weight_decay), options);
                  })
                  .precision(f.precision == "bf16" ? tp::precision::bf16_mixed : tp::precision::fp32);
  c10::impl::GenericDict settings(c10::StringType::get(), c10::AnyType::get());
  for (const auto& [k, v] : std::map<std::string, double>{{"learning_rate", f.learning_rate}, {"min_lr", f.min_lr}, {"weight_decay", f.weight_decay},
                                                          {"beta1", f.beta1}, {"beta2", f.beta2}, {"grad_clip", f.grad_clip}, {"dropout", f.dropout}})
    settings.insert(k, v);
  for (const auto& [k, v] : std::map<std::string, std::int64_t>{{"max_iters", f.max_iters}, {"lr_decay_iters", f.lr_decay_iters},
                                                                {"warmup_iters", f.warmup_iters}, {"eval_interval", f.eval_interval},
                                                                {"eval_iters", f.eval_iters}, {"batch_size", f.batch_size},
                                                                {"block_size", f.block_size}, {"gradient_accumulation_steps", f.gradient_accumulation_steps}})
    settings.insert(k, v);
  settings.insert("dataset", std::filesystem::path(data.train).parent_path().filename().string());
  const double peak = f.learning_rate, floor = f.decay_lr ? f.min_lr : f.learning_rate;
  tp::Trainer trainer(std::move(input), std::move(desc), std::move(distribution),
                      tp::TrainOptions().steps_per_epoch(f.eval_interval).max_epoch(static_cast<int>(f.max_iters / f.eval_interval)).intra_op_threads(f.threads),
                      tp::RunEnvironment(), tp::ProgressBar(), tp::StepTimes(f.log_interval), IterationLog(),
                      tp::CosineSchedule(tp::learning_rate(), peak, floor, f.warmup_iters, std::max(f.lr_decay_iters, f.warmup_iters + 1)),
                      // the training file's ids were checked when main() opened it; the val file's are here
                      evaluation(tp::data::TokenFile(data.train), f, env, "train"),
                      evaluation(tp::data::TokenFile(data.val, config.vocab_size), f, env, "val"),
                      NanoGptCheckpoint(f.out_dir, config, settings), tp::JSONWriter(f.out_dir),
                      tp::ModelSaver(f.out_dir).keep_last(3), tp::MinSaver(f.out_dir, "val_loss"));
  if (init) {  // after the trainer is made: a model built sharded is whole only once gathered (every rank)
    trainer.gather_parameters();
    gpt::load_nanogpt_weights(trainer.model(), *init);
  }
  if (trainer.is_chief())
    std::cout << "number of parameters: " << std::fixed << std::setprecision(2) << static_cast<double>(trainer.model()->parameter_count()) / 1e6
              << "M" << std::defaultfloat << std::endl;
  const auto outcome = trainer.train();
  return {outcome, trainer.template callback<NanoGptCheckpoint>().best_val_loss()};
}

template <class Distribution>
Distribution with_update(Distribution d, const flags& f, int micro_batches) {
  if (f.grad_clip > 0) d.gradients(tp::GradientProcessing().clip_global_norm(f.grad_clip));
  if constexpr (requires { d.compress_parameters(torch::kBFloat16); })  // bf16 computes with bf16 weights: gather them so
    if (f.precision == "bf16") d.compress_parameters(torch::kBFloat16);
  if (micro_batches > 1) d.accumulate(micro_batches);
  // Dropout keyed by (seed, step, global micro-batch), as the windows are: a run on many ranks
  // resumes to its own bits, and a micro-batch's masks do not depend on which rank runs it.
  d.keyed_randomness(f.seed);
  return d;
}

int sample(const flags& f) {
  const std::filesystem::path dir = f.init_from.empty() ? f.out_dir : f.init_from;
  const auto path = dir / "ckpt.pt";
  const auto ckpt = tp::detail::read_torch_save(path);
  gpt::GPT model(model_args_of(ckpt, path.string()));
  gpt::load_nanogpt_weights(model, path);
  const auto vocab_file = dir / "data" / "vocab.json";
  if (!std::filesystem::exists(vocab_file))
    throw std::invalid_argument("gpt --sample: no " + vocab_file.string() + " (the vocabulary of a run trained on a text); tp samples characters only");
  const auto vocabulary = tp::data::CharacterVocabulary::load(vocab_file);
  model->eval();
  torch::manual_seed(f.seed);
  torch::NoGradGuard no_grad;
  const auto start = vocabulary.encode(f.start);
  auto idx = torch::tensor(std::vector<std::int64_t>(start.begin(), start.end()), torch::kLong).unsqueeze(0);
  const auto block = model->config.block_size;
  for (std::int64_t i = 0; i < f.sample; ++i) {
    const auto context = idx.size(1) <= block ? idx : idx.slice(1, idx.size(1) - block);
    auto logits = model->forward(context).select(1, -1) / f.temperature;
    if (f.top_k > 0) {
      const auto kth = std::get<0>(logits.topk(std::min(f.top_k, logits.size(-1)))).select(1, -1).unsqueeze(1);
      logits = logits.masked_fill(logits < kth, -std::numeric_limits<double>::infinity());
    }
    idx = torch::cat({idx, torch::multinomial(torch::softmax(logits, -1), 1)}, 1);
  }
  const auto ids = idx[0];
  std::cout << vocabulary.decode(std::vector<std::int64_t>(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + ids.numel())) << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const flags f = parse(argc, argv);
  if (f.sample > 0) return sample(f);
  const auto env = tp::read_process_environment();
  if (f.gradient_accumulation_steps % env.world_size != 0)
    throw std::invalid_argument("--gradient-accumulation-steps (" + std::to_string(f.gradient_accumulation_steps) + ") must be a multiple of the " +
                                std::to_string(env.world_size) + " ranks: each rank runs its share of the micro-batches");
  const int micro_batches = f.gradient_accumulation_steps / env.world_size;
  torch::manual_seed(f.seed + static_cast<std::uint64_t>(env.rank));
  std::filesystem::create_directories(f.out_dir);
  const auto data = prepare(f);
  gpt::Config config{.block_size = f.block_size, .vocab_size = data.vocab_size, .n_layer = f.n_layer, .n_head = f.n_head,
                     .n_embd = f.n_embd, .dropout = f.dropout, .bias = f.bias};
  std::optional<std::filesystem::path> init;
  if (!f.init_from.empty()) {
    init = std::filesystem::path(f.init_from) / "ckpt.pt";
    config = model_args_of(tp::detail::read_torch_save(*init), init->string());
    config.dropout = f.dropout;  // as nanoGPT's resume: the architecture from the checkpoint, the dropout from the flags
    if (config.vocab_size < data.vocab_size)
      throw std::invalid_argument(init->string() + " has a vocabulary of " + std::to_string(config.vocab_size) + ", smaller than the data's " +
                                  std::to_string(data.vocab_size));
  }
  if (env.is_chief())
    std::cout << "tokens per iteration: " << f.gradient_accumulation_steps * f.batch_size * f.block_size << " (" << f.gradient_accumulation_steps
              << " micro-batches of " << f.batch_size << " x " << f.block_size << (env.world_size > 1 ? ", over " + std::to_string(env.world_size) + " ranks" : "")
              << ")" << std::endl;
  tp::data::TokenFile train_file(data.train, config.vocab_size);
  auto windows = tp::TokenWindows(train_file, tp::TokenWindowsOptions(f.block_size, f.batch_size)
                                                  .seed(f.seed)
                                                  .rank(env.rank)
                                                  .world_size(env.world_size)
                                                  .micro_batches(micro_batches));
  const bool cuda = f.device == "cuda" || (f.device.empty() && torch::cuda::is_available());
  const auto shard = f.shard == "optimizer"    ? tp::sharding::optimizer_state
                     : f.shard == "gradients"  ? tp::sharding::gradients
                     : f.shard == "parameters" ? tp::sharding::parameters
                                               : tp::sharding::none;
  result outcome{};
  if (env.world_size > 1) {
#ifdef TP_WITH_CUDA
    if (cuda) {
      auto policy = with_update(tp::MultiProcess<tp::backend::NCCL>(env).shard(shard).build_sharded(shard == tp::sharding::parameters), f, micro_batches);
      outcome = train(tp::StagingInput(std::move(windows), tp::backend::NCCL::device(env)), std::move(policy), f, config, data, env, init);
    }
#endif
    if (!cuda) outcome = train(std::move(windows), with_update(tp::MultiProcess<tp::backend::Gloo>(env).shard(shard).build_sharded(shard == tp::sharding::parameters), f, micro_batches), f, config, data, env, init);
  } else if (cuda) {
    const torch::Device gpu(torch::kCUDA, 0);
    outcome = train(tp::StagingInput(std::move(windows), gpu), with_update(tp::SingleDevice(gpu), f, micro_batches), f, config, data, env, init);
  } else {
    outcome = train(std::move(windows), with_update(tp::SingleDevice(), f, micro_batches), f, config, data, env, init);
  }
  if (outcome.outcome.interrupted()) {
    if (env.is_chief()) std::cout << "interrupted at global step " << outcome.outcome.global_step << "; run the same command to resume" << std::endl;
    return outcome.outcome.exit_status();
  }
  if (env.is_chief()) std::cout << "best val loss " << outcome.best_val_loss << std::endl;
  if (f.max_val_loss > 0 && outcome.best_val_loss > f.max_val_loss) {
    std::cerr << "gpt: the best val loss " << outcome.best_val_loss << " is above the required " << f.max_val_loss << "\n";
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "gpt: " << e.what() << "\n";
  return 1;
}
