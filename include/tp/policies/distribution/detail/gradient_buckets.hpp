#pragma once
// Gradients fused into buckets: a reduction makes one call per bucket, not one per tensor, so
// a model of many small tensors costs a few large operations (as DDP and Horovod fuse them).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

namespace tp::detail {

struct bucket {
  std::vector<std::size_t> parameters;  // indices into the model's parameter list
  std::vector<std::int64_t> sizes;      // numel of each
};

// Consecutive parameters of one dtype, at most `bucket_bytes` a bucket (a larger tensor gets a
// bucket of its own).
inline std::vector<bucket> make_buckets(const std::vector<torch::Tensor>& parameters, std::size_t bucket_bytes) {
  std::vector<bucket> buckets;
  std::size_t bytes = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    const auto& p = parameters[i];
    const auto size = static_cast<std::size_t>(p.numel()) * p.element_size();
    if (buckets.empty() || p.scalar_type() != dtype || bytes + size > bucket_bytes) {
      buckets.emplace_back();
      bytes = 0;
      dtype = p.scalar_type();
    }
    buckets.back().parameters.push_back(i);
    buckets.back().sizes.push_back(p.numel());
    bytes += size;
  }
  return buckets;
}

// The bucket's gradients in one flat tensor (zeros for a parameter the cost did not reach).
inline torch::Tensor flatten_gradients(const bucket& b, const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> parts;
  parts.reserve(b.parameters.size());
  for (auto i : b.parameters) {
    const auto& g = parameters[i].grad();
    parts.push_back(g.defined() ? g.reshape(-1) : torch::zeros({parameters[i].numel()}, parameters[i].options()));
  }
  return torch::cat(parts);
}

// Writes a flat bucket back into the parameters' gradients.
inline void unflatten_gradients(const bucket& b, const torch::Tensor& flat, std::vector<torch::Tensor>& parameters) {
  torch::NoGradGuard no_grad;
  const auto parts = flat.split_with_sizes(b.sizes);
  for (std::size_t k = 0; k < b.parameters.size(); ++k) {
    auto& p = parameters[b.parameters[k]];
    const auto part = parts[k].view_as(p).to(p.device(), /*non_blocking=*/true);
    if (p.grad().defined()) p.mutable_grad().copy_(part);
    else p.mutable_grad() = part.clone();
  }
}

// "conv1.weight, conv1.bias, ..." for messages about a bucket, one text a bucket.
inline std::vector<std::string> bucket_names(const std::vector<bucket>& buckets, const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const auto& b : buckets) {
    std::string text = b.parameters.size() == 1 ? "" : "one of ";
    for (std::size_t k = 0; k < b.parameters.size() && k < 4; ++k) text += (k ? ", " : "") + names[b.parameters[k]];
    if (b.parameters.size() > 4) text += ", ...";
    out.push_back(text);
  }
  return out;
}

}  // namespace tp::detail
