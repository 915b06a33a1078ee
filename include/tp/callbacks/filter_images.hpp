#pragma once
// FilterImages: a convolution's filters as one image, each epoch (tensorpack's
// DumpParamAsImage), put as `filters/<parameter>`; TensorBoardWriter shows it in the Images tab.
//
//   tp::FilterImages("conv1.weight")
//
// The weight [out, in, kh, kw] becomes a grid of `out` tiles with a one-pixel gap, as square as
// it goes: a tile is in colour where in = 3 and the mean over `in` otherwise, each tile scaled
// to [0, 1] on its own so that every filter's pattern shows. The parameter is looked up when
// training starts: a name the model lacks, or a weight that is not [out, in, kh, kw], stops
// there with a message that lists the 4-dimensional parameters, as does a parameter inside a unit
// of a parameter-sharded run (never whole between steps).
#include <cmath>
#include <stdexcept>
#include <string>

#include <torch/nn/module.h>
#include <torch/types.h>

#include <tp/policies/distribution/detail/unit_runtime.hpp>

namespace tp {

namespace detail {
// [out, in, kh, kw] -> [3 or 1, H, W] in [0, 1].
inline torch::Tensor filter_grid(const torch::Tensor& weight) {
  torch::NoGradGuard no_grad;
  auto w = weight.detach().to(torch::kCPU, torch::kFloat);
  w = w.size(1) == 3 ? w : w.mean(1, /*keepdim=*/true);
  const auto lo = w.amin({1, 2, 3}, true), hi = w.amax({1, 2, 3}, true);
  w = (w - lo) / (hi - lo).clamp_min(1e-12);
  const auto n = w.size(0), c = w.size(1), kh = w.size(2), kw = w.size(3);
  const auto columns = static_cast<std::int64_t>(std::ceil(std::sqrt(static_cast<double>(n))));
  const auto rows = (n + columns - 1) / columns;
  auto grid = torch::zeros({c, rows * (kh + 1) - 1, columns * (kw + 1) - 1});
  for (std::int64_t i = 0; i < n; ++i) {
    const auto r = i / columns, col = i % columns;
    grid.slice(1, r * (kh + 1), r * (kh + 1) + kh).slice(2, col * (kw + 1), col * (kw + 1) + kw).copy_(w[i]);
  }
  return grid;
}
}  // namespace detail

class FilterImages {
 public:
  static constexpr bool chief_only = true;

  explicit FilterImages(std::string parameter) : parameter_(std::move(parameter)) {
    if (parameter_.empty()) throw std::invalid_argument("tp::FilterImages: name the convolution's weight, as \"conv1.weight\"");
  }

  template <class Trainer>
  void before_train(Trainer& trainer) {
    // A unit's parameters are whole only while it runs (tp::sharding::parameters), and this
    // callback runs on the chief alone: it cannot gather them.
    if (trainer.parameters_are_sharded())
      for (const auto& item : trainer.model_module()->named_modules("", /*include_self=*/false))
        if (dynamic_cast<const detail::sharded_unit*>(item.value().get()) && parameter_.starts_with(item.key() + "."))
          throw std::invalid_argument("tp::FilterImages: \"" + parameter_ + "\" is in unit '" + item.key() + "', whose parameters this run "
                                      "shards (tp::sharding::parameters), so no rank holds it whole between steps; keep the "
                                      "convolution outside tp::Sharded, or draw it in a run that shards the gradients at most");
    weight(trainer);  // a wrong name stops the run now, not at the end of the first epoch
  }
  template <class Trainer>
  void after_epoch(Trainer& trainer) {
    trainer.put_image("filters/" + parameter_, detail::filter_grid(weight(trainer)));
  }

 private:
  template <class Trainer>
  torch::Tensor weight(Trainer& trainer) {
    std::string four_dimensional;
    for (const auto& p : trainer.model_module()->named_parameters()) {
      if (p.key() == parameter_ && p.value().dim() == 4) return p.value();
      if (p.value().dim() == 4) four_dimensional += (four_dimensional.empty() ? "" : ", ") + p.key();
    }
    throw std::invalid_argument("tp::FilterImages: the model has no convolution weight [out, in, kh, kw] named \"" + parameter_ +
                                "\"; its 4-dimensional parameters: " + (four_dimensional.empty() ? "none" : four_dimensional));
  }

  std::string parameter_;
};

}  // namespace tp
