#pragma once
// What every distribution policy has alike, written once (CRTP): the update setters
// (tp/update_options.hpp) and build(). Each setter checks the options at once, in the policy's
// name, so a wrong value fails where it is written. Policy gives `policy_name` (for messages)
// and `Replicas<Tower>`, built from (Tower&, const Policy&).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include <tp/gradient_processing.hpp>
#include <tp/update_options.hpp>

namespace tp::detail {

// FusesGradients: the policy fuses gradients into buckets, so it has bucket_bytes().
// KeysRandomness: its default step runs the micro-batches on one thread, so it has
// keyed_randomness() (policies/distribution/detail/keyed_randomness.hpp).
template <class Policy, bool FusesGradients = false, bool KeysRandomness = false>
class policy_base {
 public:
  // All the update options at once.
  Policy& update(UpdateOptions options) {
    options.validate(Policy::policy_name);
    if (!KeysRandomness && options.keyed_randomness())
      throw std::invalid_argument("tp::" + std::string(Policy::policy_name) +
                                  ": keyed_randomness keys the default generators, which this policy's towers share between their threads; "
                                  "use tp::SingleDevice or tp::MultiProcess (one process per device) for randomness keyed by micro-batch");
    update_ = std::move(options);
    return static_cast<Policy&>(*this);
  }
  const UpdateOptions& update() const noexcept { return update_; }

  // Gradient processing before each update (clipping, NaN policy).
  Policy& gradients(GradientProcessing processing) {
    auto next = update_;
    next.gradients(std::move(processing));
    return update(std::move(next));
  }
  // Gradient accumulation: k micro-batches per optimizer step (policies/distribution/detail/micro_batches.hpp).
  Policy& accumulate(int k) {
    auto next = update_;
    next.accumulate(k);
    return update(std::move(next));
  }
  // The largest bucket of fused gradients (default 25 MB).
  Policy& bucket_bytes(std::size_t bytes)
    requires FusesGradients
  {
    auto next = update_;
    next.bucket_bytes(bytes);
    return update(std::move(next));
  }

  // Each micro-batch draws its random numbers from generators seeded by (seed, global step,
  // global micro-batch index): see UpdateOptions::keyed_randomness.
  Policy& keyed_randomness(std::uint64_t seed)
    requires KeysRandomness
  {
    auto next = update_;
    next.keyed_randomness(seed);
    return update(std::move(next));
  }

  // The replicas this policy trains the tower policy's models with. (P: Policy, named when
  // build is used, by which time Policy is complete.)
  template <class Tower, class P = Policy>
  typename P::template Replicas<Tower> build(Tower& tower) {
    return typename P::template Replicas<Tower>(tower, static_cast<const P&>(*this));
  }

 private:
  UpdateOptions update_;
};

}  // namespace tp::detail
