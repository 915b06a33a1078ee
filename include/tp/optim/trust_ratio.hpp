#pragma once
// The layer-wise trust ratio that LARS and LAMB scale each parameter tensor's step by, and the
// norms it is made of: each tensor's own, or, in a sharded run (tp::sharding), the norm of the
// whole tensor (a layer) summed over the pieces every rank holds of it.
#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace tp::optim::detail {

// ratio where both norms are > 0, 1 elsewhere; a 0-dim tensor, so no device sync.
inline torch::Tensor trust_ratio(const torch::Tensor& weight_norm, const torch::Tensor& other_norm, const torch::Tensor& ratio) {
  return torch::where((weight_norm > 0).logical_and(other_norm > 0), ratio, torch::ones_like(ratio));
}

// Which layer each of this rank's pieces belongs to, and how to add per-layer numbers over the
// ranks (an all-reduce, in place). Set by MultiProcess's sharding (policies/distribution/sharded_optimizer.hpp).
struct layer_shards {
  struct layer {
    std::int64_t index = 0;  // the whole tensor's index in the model
    std::int64_t dim = 0;    // the whole tensor's number of dimensions
  };
  std::map<const void*, layer> of;  // by the piece's TensorImpl
  std::int64_t layers = 0;
  torch::Device device = torch::kCPU;  // where the sums are made (NCCL sums on the GPU)
  std::function<void(torch::Tensor&)> sum;
};

// The number of dimensions of p's whole tensor (what exclude_bias_and_norm looks at).
inline std::int64_t whole_dim(const torch::Tensor& p, const layer_shards* shards) {
  if (!shards) return p.dim();
  const auto found = shards->of.find(p.unsafeGetTensorImpl());
  return found == shards->of.end() ? p.dim() : found->second.dim;
}

// ‖x_i‖ and ‖y_i‖ for each i, as 0-dim tensors: x_i's own norms, or, where x_i is a piece, the
// norms of the whole tensors whose pieces x_i and y_i are (one collective for all of them).
inline std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> layer_norms(const std::vector<torch::Tensor>& xs,
                                                                                     const std::vector<torch::Tensor>& ys,
                                                                                     const layer_shards* shards) {
  std::vector<torch::Tensor> nx, ny;
  if (!shards) {
    for (std::size_t i = 0; i < xs.size(); ++i) nx.push_back(xs[i].norm()), ny.push_back(ys[i].norm());
    return {nx, ny};
  }
  // Squares per layer, x's then y's, summed over the ranks (every rank sums all layers, even
  // those it holds no piece of: the collective is the same everywhere).
  auto squares = torch::zeros({2 * shards->layers}, torch::TensorOptions(torch::kDouble).device(shards->device));
  std::vector<std::int64_t> at;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const auto layer = shards->of.at(xs[i].unsafeGetTensorImpl()).index;
    at.push_back(layer);
    squares[layer] += xs[i].to(torch::kDouble).pow(2).sum();
    squares[shards->layers + layer] += ys[i].to(torch::kDouble).pow(2).sum();
  }
  shards->sum(squares);
  const auto norms = squares.sqrt();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    nx.push_back(norms[at[i]].to(xs[i].options()));
    ny.push_back(norms[shards->layers + at[i]].to(ys[i].options()));
  }
  return {nx, ny};
}

}  // namespace tp::optim::detail
