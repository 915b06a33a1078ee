#pragma once
// from_dataset(d): a LibTorch dataset (torch::data::datasets::Dataset: get(i) and size()) as a
// random-access dataflow, so that the datasets users already have compose with shuffle, batch
// and the rest.
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <utility>

#include <range/v3/view/iota.hpp>
#include <range/v3/view/transform.hpp>

namespace tp::data {

// A LibTorch dataset as a random-access dataflow of its examples (it must know its size).
template <class Dataset>
  requires requires(Dataset& d, std::size_t i) {
    d.get(i);
    { d.size() };
  }
auto from_dataset(Dataset dataset) {
  auto shared = std::make_shared<Dataset>(std::move(dataset));
  const auto size = shared->size();
  if (!size.has_value())
    throw std::invalid_argument("tp::data::from_dataset: the dataset does not know its size (a stream dataset); "
                                "wrap it in an input policy of your own, or give it a size()");
  return ranges::views::iota(std::size_t{0}, *size) |
         ranges::views::transform([shared](std::size_t i) { return shared->get(i); });
}

}  // namespace tp::data
