#pragma once
// The random numbers of one example's augmentation. decode_images gives example `id` of pass
// `pass` the seed example_seed(seed, pass, id), and the transforms draw every crop and flip of
// that example from one example_random made from it: so an example's augmentation depends on
// (seed, pass, id) alone, not on the number of threads, their timing, or the examples before it,
// and a resumed pass makes the same crops.
//
//   tp::data::example_random random(tp::data::example_seed(7, pass, id));
//   double u = random.uniform(0.08, 1.0);    // [0.08, 1.0)
//   std::int64_t i = random.below(10);       // [0, 10)
#include <cstdint>

#include <tp/data/random.hpp>

namespace tp::data {

// Three rounds of SplitMix64, one per input: nearby (seed, pass, id) give unrelated seeds.
inline std::uint64_t example_seed(std::uint64_t seed, std::uint64_t pass, std::uint64_t id) noexcept {
  std::uint64_t state = seed;
  state = detail::splitmix64(state) ^ pass;
  state = detail::splitmix64(state) ^ id;
  return detail::splitmix64(state);
}

class example_random {
 public:
  explicit example_random(std::uint64_t seed) noexcept : state_(seed) {}

  std::uint64_t next() noexcept { return detail::splitmix64(state_); }
  // Uniform in [a, b), from the top 53 bits.
  double uniform(double a, double b) noexcept { return a + (b - a) * (double(next() >> 11) * 0x1.0p-53); }
  // Uniform in [0, n), n > 0.
  std::int64_t below(std::int64_t n) noexcept { return detail::uniform_below(state_, n); }

 private:
  std::uint64_t state_;
};

}  // namespace tp::data
