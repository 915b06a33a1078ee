#pragma once
// What a parameter-sharded run (policies/distribution/detail/parameter_units.hpp) attaches to
// each unit of the model (tp::Sharded, tp/sharded.hpp), and the part of every unit it sees,
// whatever the unit's block; and, when the run builds its model sharded (MultiProcess's
// build_sharded()), what keeps each unit's row as soon as the unit is built.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

namespace tp::detail {

class unit_runtime {
 public:
  virtual ~unit_runtime() = default;
  // Makes the unit's parameters whole (waiting for a prefetched gather, or gathering now);
  // `recomputation`: the call is tp::recompute's second, in backward.
  virtual void before_forward(std::size_t unit, bool recomputation) = 0;
  // The forward is done: the parameters go, and come back before backward reaches `output`.
  virtual void after_forward(std::size_t unit, torch::Tensor& output) = 0;
};

// Set while a run that builds its model sharded makes the model (every rank runs the model's
// constructor, so every rank builds every unit, in the same order): keep_row() takes a unit's
// parameters, flattened, and returns this rank's row of rank 0's values of them (so that the
// model is rank 0's, as a run that builds it whole starts from rank 0's weights).
class unit_builder {
 public:
  virtual ~unit_builder() = default;
  virtual torch::Tensor keep_row(const torch::Tensor& flat) = 0;

  // The builder of the model being made on this thread, if any.
  static unit_builder*& current() noexcept {
    thread_local unit_builder* builder = nullptr;
    return builder;
  }
  // Makes `builder` current for the scope's life.
  class scope {
   public:
    explicit scope(unit_builder* builder) : before_(std::exchange(current(), builder)) {}
    ~scope() { current() = before_; }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;

   private:
    unit_builder* before_;
  };
};

class sharded_unit {
 public:
  virtual ~sharded_unit() = default;
  void attach(unit_runtime* runtime, std::size_t index) noexcept { runtime_ = runtime, index_ = index; }

  // A unit built sharded: its row, and its parameters' shapes and versions when it was built
  // (its parameters, in named_parameters()'s order, are empty tensors from then on; a version
  // that moved says something wrote to one afterwards).
  struct built_row {
    torch::Tensor row;
    std::vector<std::vector<std::int64_t>> shapes;
    std::vector<std::int64_t> versions;
  };
  const std::optional<built_row>& built() const noexcept { return built_; }
  // Built sharded, the unit `self`'s parameters take their whole shapes (`whole`: a zero
  // broadcast, no memory; for what reads shapes only) or become empty again.
  void shape_parameters(torch::nn::Module& self, bool whole) const {
    if (!built_) return;
    torch::NoGradGuard no_grad;
    auto parameters = self.parameters();
    for (std::size_t j = 0; j < parameters.size() && j < built_->shapes.size(); ++j) {
      const auto options = parameters[j].options().requires_grad(false);
      parameters[j].set_data(whole ? torch::zeros({}, options).expand(built_->shapes[j]) : torch::empty({0}, options));
    }
  }
  // The shape a parameter of the unit has when whole (the one it has, unless built sharded).
  std::vector<std::int64_t> whole_shape(const torch::Tensor& parameter, const torch::nn::Module& self) const {
    if (built_) {
      const auto mine = self.parameters();
      for (std::size_t j = 0; j < mine.size(); ++j)
        if (mine[j].unsafeGetTensorImpl() == parameter.unsafeGetTensorImpl()) return built_->shapes[j];
    }
    return parameter.sizes().vec();
  }

 protected:
  // With a builder current, the unit `self` keeps its row and gives its parameters' memory back.
  void keep_row_if_building(torch::nn::Module& self) {
    auto* builder = unit_builder::current();
    if (!builder) return;
    torch::NoGradGuard no_grad;
    built_row kept;
    std::vector<torch::Tensor> flat;
    auto parameters = self.parameters();
    for (const auto& p : parameters) {
      flat.push_back(p.detach().reshape(-1));
      kept.shapes.push_back(p.sizes().vec());
    }
    if (flat.empty()) return;  // nothing of its own to shard
    kept.row = builder->keep_row(torch::cat(flat));
    flat.clear();
    for (auto& p : parameters) {
      p.set_data(torch::empty({0}, p.options()));
      kept.versions.push_back(static_cast<std::int64_t>(p._version()));
    }
    built_ = std::move(kept);
  }

  unit_runtime* runtime_ = nullptr;
  std::size_t index_ = 0;
  std::optional<built_row> built_;
};

// While it lives, the parameters of `model`'s units built sharded have their whole shapes
// (sharded_unit::shape_parameters): what an optimizer's param groups are made from (weight
// decay by dimension, tp::optim::weight_decay_groups).
class whole_shaped {
 public:
  explicit whole_shaped(torch::nn::Module& model) {
    for (const auto& item : model.named_modules("", /*include_self=*/true))
      if (auto* unit = dynamic_cast<sharded_unit*>(item.value().get()); unit && unit->built()) {
        unit->shape_parameters(*item.value(), true);
        units_.emplace_back(unit, item.value());
      }
  }
  ~whole_shaped() {
    for (auto& [unit, module] : units_) unit->shape_parameters(*module, false);
  }
  whole_shaped(const whole_shaped&) = delete;
  whole_shaped& operator=(const whole_shaped&) = delete;

 private:
  std::vector<std::pair<sharded_unit*, std::shared_ptr<torch::nn::Module>>> units_;
};

}  // namespace tp::detail
