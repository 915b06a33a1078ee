#pragma once
// examples(data, target): the rows of two tensors as a random-access range of
// torch::data::Example, the usual start of a dataflow over tensors held in memory.
#include <cstdint>
#include <stdexcept>

#include <range/v3/view/iota.hpp>
#include <range/v3/view/transform.hpp>
#include <torch/data/example.h>
#include <torch/types.h>

// Dataflows: the ranges of datapoints input policies read (sources, views composed with `|`, image
// decoding), and their saved positions.
namespace tp::data {

// A random-access view of (data[i], target[i]) pairs; the tensors share their first dimension.
inline auto examples(torch::Tensor data, torch::Tensor target) {
  if (!data.defined() || !target.defined() || data.dim() == 0 || target.dim() == 0 ||
      data.size(0) != target.size(0))
    throw std::invalid_argument(
        "tp::data::examples: data and target must be tensors with the same first dimension (one "
        "row per example); got data " + (data.defined() ? c10::str(data.sizes()) : "undefined") +
        " and target " + (target.defined() ? c10::str(target.sizes()) : "undefined"));
  return ranges::views::iota(std::int64_t{0}, data.size(0)) |
         ranges::views::transform([data, target](std::int64_t i) {
           return torch::data::Example<>{data[i], target[i]};
         });
}

}  // namespace tp::data
