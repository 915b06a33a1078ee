#pragma once
// The random numbers of the dataflows: one small generator, the same stream on every platform,
// seeded per (seed, pass) so that a pass can be replayed without replaying the ones before it.
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

namespace tp::data::detail {

// SplitMix64: small, fast, and the same stream everywhere.
inline std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The generator state for pass `pass` of a view seeded with `seed`.
inline std::uint64_t pass_state(std::uint64_t seed, std::uint64_t pass) noexcept {
  return seed ^ (0xd1b54a32d192ed03ULL * (pass + 1));
}

// A uniform integer in [0, bound), bound > 0. Multiply-shift maps 64 random bits onto the range
// with a bias below 2^-40 for any bound a dataset has.
inline std::int64_t uniform_below(std::uint64_t& state, std::int64_t bound) noexcept {
  return static_cast<std::int64_t>((static_cast<unsigned __int128>(splitmix64(state)) * static_cast<std::uint64_t>(bound)) >> 64);
}

// The permutation of [0, n) used by pass `pass` of shuffle(seed).
inline std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed, std::uint64_t pass) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::uint64_t state = pass_state(seed, pass);
  for (std::int64_t i = n - 1; i > 0; --i)
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(uniform_below(state, i + 1))]);
  return order;
}

}  // namespace tp::data::detail
