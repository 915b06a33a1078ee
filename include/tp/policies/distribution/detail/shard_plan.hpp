#pragma once
// Which rank owns which part of each gradient bucket when optimizer state (and gradients) are
// sharded (tp::sharding, ZeRO): bucket k of B elements is cut into world equal shards of
// S = ceil(B / world) elements, rank r owning [r·S, min((r+1)·S, B)). The cut goes through
// tensors, so one tensor that dominates the model (the example's fc1.weight is 95% of it) is
// spread over every rank; whole tensors placed least-loaded could not balance it. The plan
// depends only on the model, the bucket size and the number of ranks: every rank computes the
// same one.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <tp/policies/distribution/detail/gradient_buckets.hpp>

namespace tp::detail {

struct shard_plan {
  // A piece: the part of one parameter that falls in this rank's shard of one bucket.
  struct piece {
    std::size_t parameter = 0;     // index into the parameter list
    std::size_t bucket = 0;
    std::int64_t in_parameter = 0;  // offset in the parameter, flattened
    std::int64_t in_bucket = 0;     // offset in the bucket
    std::int64_t length = 0;
  };

  int rank = 0, world = 1;
  std::vector<std::int64_t> bucket_numel;  // gradient elements of each bucket
  std::vector<piece> pieces;               // this rank's, bucket by bucket, in bucket order

  // Elements of each rank's shard of bucket k (the last ones may be shorter, even empty).
  std::int64_t shard_numel(std::size_t k) const { return (bucket_numel[k] + world - 1) / world; }
  // {offset, length} of rank r's shard of bucket k.
  std::pair<std::int64_t, std::int64_t> range(std::size_t k, int r) const {
    const auto s = shard_numel(k);
    const auto begin = std::min(bucket_numel[k], s * r);
    return {begin, std::min(bucket_numel[k], begin + s) - begin};
  }
  // Elements this rank owns in all.
  std::int64_t owned() const {
    std::int64_t n = 0;
    for (const auto& p : pieces) n += p.length;
    return n;
  }
};

inline shard_plan make_shard_plan(const std::vector<bucket>& buckets, int rank, int world) {
  shard_plan plan;
  plan.rank = rank, plan.world = world;
  for (const auto& b : buckets) {
    std::int64_t numel = 0;
    for (auto n : b.sizes) numel += n;
    plan.bucket_numel.push_back(numel);
  }
  for (std::size_t k = 0; k < buckets.size(); ++k) {
    const auto [lo, length] = plan.range(k, rank);
    const auto hi = lo + length;
    std::int64_t offset = 0;
    for (std::size_t j = 0; j < buckets[k].parameters.size(); ++j) {
      const auto begin = std::max(lo, offset), end = std::min(hi, offset + buckets[k].sizes[j]);
      if (begin < end) plan.pieces.push_back({buckets[k].parameters[j], k, begin - offset, begin, end - begin});
      offset += buckets[k].sizes[j];
    }
  }
  return plan;
}

}  // namespace tp::detail
