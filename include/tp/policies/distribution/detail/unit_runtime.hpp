#pragma once
// What a parameter-sharded run (policies/distribution/detail/parameter_units.hpp) attaches to
// each unit of the model (tp::Sharded, tp/sharded.hpp), and the part of every unit it sees,
// whatever the unit's block.
#include <cstddef>

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

class sharded_unit {
 public:
  virtual ~sharded_unit() = default;
  void attach(unit_runtime* runtime, std::size_t index) noexcept { runtime_ = runtime, index_ = index; }

 protected:
  unit_runtime* runtime_ = nullptr;
  std::size_t index_ = 0;
};

}  // namespace tp::detail
