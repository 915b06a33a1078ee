#pragma once
// TokenWindows: the input of a language model, random windows of a token file (nanoGPT's
// get_batch). Each batch is torch::data::Example{x, y}: x int64 [batch_size, block_size], y the
// same windows shifted by one token.
//
//   tp::TokenWindows(tp::data::TokenFile("train.bin", 65),
//                    tp::TokenWindowsOptions(/*block_size=*/64, /*batch_size=*/12)
//                        .seed(1337).rank(env.rank).world_size(env.world_size).micro_batches(k))
//
// Every window is a pure function of (seed, optimizer step, its place in the step's global
// batch) (data::window_offset). A step's global batch is world_size x micro_batches x
// batch_size windows; rank r's micro-batch m takes places (r * micro_batches + m) * batch_size
// onwards. So:
//   - the ranks draw disjoint parts of one global batch, with no communication;
//   - a resumed run draws exactly the windows the uninterrupted one would, and so does a run
//     resumed on another number of ranks with the same global batch (world_size x
//     micro_batches kept, as nanoGPT divides gradient accumulation by the world size);
//   - with another global batch it goes on at the same step, with that step's first windows.
// micro_batches must be the distribution policy's accumulate(k): the input counts the batches
// it gives to know the step. Its position (checkpoints) is the steps it has drawn.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/arg.h>
#include <torch/data/example.h>
#include <torch/types.h>

#include <tp/data/state.hpp>
#include <tp/data/token_file.hpp>
#include <tp/batch.hpp>

namespace tp {

// TokenWindows' options, in LibTorch's fluent style: the window and batch sizes, the seed, this
// rank's place, and the micro-batches per step.
struct TokenWindowsOptions {
  TokenWindowsOptions(std::int64_t block_size, std::int64_t batch_size) : block_size_(block_size), batch_size_(batch_size) {}
  // Tokens the model sees (x's length); a window holds one more.
  TORCH_ARG(std::int64_t, block_size);
  // Windows in each batch this rank gives.
  TORCH_ARG(std::int64_t, batch_size);
  TORCH_ARG(std::uint64_t, seed) = 0;
  TORCH_ARG(int, rank) = 0;
  TORCH_ARG(int, world_size) = 1;
  // Batches per optimizer step on this rank (gradient accumulation).
  TORCH_ARG(int, micro_batches) = 1;
};

class TokenWindows {
 public:
  TokenWindows(data::TokenFile file, TokenWindowsOptions options) : file_(std::move(file)), options_(std::move(options)) {
    const auto& o = options_;
    const std::string who = "tp::TokenWindows";
    if (o.block_size() < 1) throw std::invalid_argument(who + ": block_size must be >= 1, not " + std::to_string(o.block_size()));
    if (o.batch_size() < 1) throw std::invalid_argument(who + ": batch_size must be >= 1, not " + std::to_string(o.batch_size()));
    if (o.world_size() < 1 || o.rank() < 0 || o.rank() >= o.world_size())
      throw std::invalid_argument(who + ": rank " + std::to_string(o.rank()) + " is not in [0, world_size " + std::to_string(o.world_size()) + ")");
    if (o.micro_batches() < 1) throw std::invalid_argument(who + ": micro_batches must be >= 1, not " + std::to_string(o.micro_batches()));
    file_.require_window(o.block_size() + 1, who);
  }

  torch::data::Example<> next_batch() {
    const auto& o = options_;
    const std::int64_t step = given_ / o.micro_batches(), micro = given_ % o.micro_batches();
    const std::int64_t first = (o.rank() * std::int64_t{o.micro_batches()} + micro) * o.batch_size();
    std::vector<std::int64_t> offsets(static_cast<std::size_t>(o.batch_size()));
    for (std::int64_t j = 0; j < o.batch_size(); ++j)
      offsets[static_cast<std::size_t>(j)] = data::window_offset(o.seed(), step, first + j, file_.size(), o.block_size() + 1);
    auto both = file_.windows(offsets, o.block_size() + 1, pinned_);
    ++given_;
    return {both.narrow(1, 0, o.block_size()), both.narrow(1, 1, o.block_size())};
  }

  // Windows in page-locked memory (StagingInput asks for it for a CUDA device).
  void pin_memory(bool on) {
    if (on) detail::check_pinned_memory_available("tp::TokenWindows::pin_memory");
    pinned_ = on;
  }

  // Where the next batch comes from: the optimizer steps whose windows were given (the state,
  // in `flow`), with the windows every rank together drew (datapoints) on how many ranks, in
  // batches of how many, for the trainer's account of the layout.
  data::position position() const {
    const auto& o = options_;
    const std::int64_t steps = given_ / o.micro_batches();
    return {{static_cast<std::uint64_t>(steps)}, given_, steps * o.world_size() * o.micro_batches() * o.batch_size(), o.world_size(), o.batch_size()};
  }
  void restore(const data::position& where) {
    if (where.flow.size() != 1)
      throw std::invalid_argument("tp::TokenWindows::restore: the position was not saved by TokenWindows (its state is one number, the "
                                  "steps drawn; this one has " + std::to_string(where.flow.size()) + ")");
    given_ = static_cast<std::int64_t>(where.flow[0]) * options_.micro_batches();
  }

  // Optimizer steps whose windows were given (whole steps; a step part-given counts not).
  std::int64_t steps() const noexcept { return given_ / options_.micro_batches(); }
  const data::TokenFile& file() const noexcept { return file_; }
  const TokenWindowsOptions& options() const noexcept { return options_; }

 private:
  data::TokenFile file_;
  TokenWindowsOptions options_;
  std::int64_t given_ = 0;  // batches given
  bool pinned_ = false;
};

}  // namespace tp
