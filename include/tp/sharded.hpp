#pragma once
// tp::Sharded<Block>: a unit of parameter sharding (tp::sharding::parameters, ZeRO stage 3), as
// FSDP's fully_shard is applied to a block. In a run that shards parameters, each rank keeps
// 1/N of the unit's parameters; the whole parameters exist only while the unit's forward or
// backward runs (policies/distribution/detail/parameter_units.hpp gathers and releases them).
// In any other run it is its block, nothing more: the same model trains sharded or not, and its
// checkpoints load either way.
//
//   struct GptImpl : torch::nn::Module {
//     GptImpl() { for (int i = 0; i < 6; ++i) blocks->push_back(tp::Sharded<Block>(Block(options))); ... }
//   };
//   tp::MultiProcess<tp::backend::Gloo>().shard(tp::sharding::parameters)
//
// The contract:
// - Block is a module holder whose forward takes one tensor and returns one (a transformer
//   block, torch::nn::Sequential, tp::Recomputed<...>). Its parameters, buffers and submodules
//   are the wrapper's under their own names (no "block." between): wrapping a block or not
//   changes no name, so a model's checkpoints and state_dicts are the same either way. A unit
//   inside another unit is refused when the run starts, naming both.
// - Its forward returns everything the rest of the model uses of it: backward reaches the unit
//   through that output (a hook there gathers the parameters again).
// - A parameter registered under two names (a module shared by two units, or by a unit and the
//   rest of the model) is refused by every sharding: LibTorch's optimizers step it once per name.
//   Tie weights by using one module's tensor in another's forward (the GPT example's lm_head
//   uses its embedding's weight); kept outside units, such a parameter stays whole.
// - Between steps a sharded unit's parameters are empty tensors (0 elements): read the model
//   after MultiProcess's gather_parameters() (checkpoints do it for you). A forward between
//   steps (evaluation) gathers and releases as in training.
// - Clones (Cloneable) are plain blocks until a run attaches to them.
// - Built sharded (MultiProcess's build_sharded), the unit keeps its row as soon as the block is
//   built, and its parameters are empty from then on: initialise the block's parameters in its
//   constructor (or before wrapping it). whole_parameter_count() counts them whole.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <type_traits>
#include <utility>

#include <c10/util/accumulate.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <tp/policies/distribution/detail/unit_runtime.hpp>
#include <tp/recompute.hpp>

namespace tp {


// The module behind tp::Sharded (LibTorch's Impl): the block's parameters, buffers and submodules
// as its own, sharded in a run that shards parameters.
template <class Block>
class ShardedImpl : public torch::nn::Cloneable<ShardedImpl<Block>>, public detail::sharded_unit {
 public:
  // Builds the block from the arguments, or takes a block (sharing it with the caller).
  template <class... Args>
    requires std::is_constructible_v<Block, Args&&...>
  explicit ShardedImpl(Args&&... args) : block(std::forward<Args>(args)...) {
    adopt();
  }

  // For clone(): a copy of the block, attached to no run.
  void reset() override {
    attach(nullptr, 0);
    if (block.is_empty()) return;
    block = Block(std::dynamic_pointer_cast<typename Block::ContainedType>(block->clone()));
    adopt();
  }

  torch::Tensor forward(const torch::Tensor& x) {
    if (!runtime_) return block->forward(x);
    runtime_->before_forward(index_, recomputing());
    auto output = block->forward(x);
    runtime_->after_forward(index_, output);
    return output;
  }

  // The block is not a child (its parts are): its own training flag follows the wrapper's.
  void train(bool on = true) override {
    torch::nn::Module::train(on);
    block->train(on);
  }
  void pretty_print(std::ostream& stream) const override { stream << "tp::Sharded"; }

  Block block;

 private:
  // The block's own parameters, buffers and submodules, registered here under their names.
  void adopt() {
    for (const auto& item : block->named_parameters(/*recurse=*/false))
      this->register_parameter(item.key(), item.value(), item.value().requires_grad());
    for (const auto& item : block->named_buffers(/*recurse=*/false)) this->register_buffer(item.key(), item.value());
    for (const auto& item : block->named_children()) this->register_module(item.key(), item.value());
    this->keep_row_if_building(*this);  // a run that builds its model sharded keeps only its row
  }
};

template <class Block>
class Sharded : public torch::nn::ModuleHolder<ShardedImpl<Block>> {
 public:
  using torch::nn::ModuleHolder<ShardedImpl<Block>>::ModuleHolder;
  using Impl = ShardedImpl<Block>;
};

// How many elements a model's parameters have when whole: a unit built sharded holds empty
// parameters (MultiProcess's build_sharded), counted here by their whole shapes.
inline std::int64_t whole_parameter_count(const torch::nn::Module& model) {
  std::int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  const auto count = [&](const torch::nn::Module& module) {
    if (const auto* unit = dynamic_cast<const detail::sharded_unit*>(&module); unit && unit->built())
      for (const auto& shape : unit->built()->shapes) n += c10::multiply_integers(shape);
  };
  count(model);  // (the model itself may not be in a shared_ptr, which named_modules would need for it)
  for (const auto& item : model.named_modules("", /*include_self=*/false)) count(*item.value());
  return n;
}

}  // namespace tp
