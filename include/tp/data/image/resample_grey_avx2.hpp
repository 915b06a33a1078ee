#pragma once
// resample.hpp's horizontal pass for rows of one 8-bit channel (grey files) with two taps per
// output (an enlarged box: every crop of a small file), with AVX2 where the CPU has it
// (use_avx2). The outputs of an enlarged axis step by at most one source pixel, so 8 of them
// read a window of 9 pixels: 8 bytes at the window and 8 a pixel later, widened to floats, give
// each output's two taps after one permute each, where the scalar loop loads them one by one
// (SSE2 has no such permute). The bytes are read where the decoder wrote them, not from a row
// of floats just written: a load spanning two recent stores waits for both (store-to-load
// forwarding fails), which cost more than the permutes saved. The sums are the scalar loop's in
// its order (0 + w0 p0, then + w1 p1): the same floats, bitwise.
#if defined(__SSE2__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include <tp/data/image/filter_taps.hpp>
#include <tp/data/image/use_avx2.hpp>

namespace tp::data::detail {

struct grey_windows {
  std::vector<std::int32_t> start;  // per group of 8 outputs: its first output (the last group may overlap the one before)
  std::vector<std::int32_t> base;   // per group: the first pixel of its window, counted from tx.lo
  std::vector<std::int32_t> index;  // per output of a group: its first tap's pixel in the window, 0 to 7
  std::vector<float> w0, w1;        // per output of a group: its two weights
  std::int64_t reach = 0;           // the bytes a row must have readable from tx.lo: the furthest window's first + 9
};

// The windows of `tx` (equalized) over out_w outputs, or false when it has not two taps, has
// fewer than 8 outputs, or some group's taps do not fit in a window (a shrunk axis).
inline bool plan_grey_windows(const filter_taps& tx, std::int64_t out_w, grey_windows& plan) {
  if (tx.stride != 2 || out_w < 8) return false;
  const std::int64_t groups = (out_w + 7) / 8;
  plan.start.resize(groups);
  plan.base.resize(groups);
  plan.index.resize(groups * 8);
  plan.w0.resize(groups * 8);
  plan.w1.resize(groups * 8);
  plan.reach = 0;
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t x0 = std::min(g * 8, out_w - 8);  // the last group ends at out_w: outputs again, the same values
    std::int32_t lo = tx.first[x0], hi = lo;
    for (std::int64_t m = 1; m < 8; ++m) lo = std::min(lo, tx.first[x0 + m]), hi = std::max(hi, tx.first[x0 + m]);
    if (hi - lo > 7) return false;
    plan.start[g] = static_cast<std::int32_t>(x0);
    plan.base[g] = static_cast<std::int32_t>(lo - tx.lo);
    plan.reach = std::max<std::int64_t>(plan.reach, lo - tx.lo + 9);
    for (std::int64_t m = 0; m < 8; ++m) {
      plan.index[g * 8 + m] = tx.first[x0 + m] - lo;
      plan.w0[g * 8 + m] = tx.weights[(x0 + m) * 2];
      plan.w1[g * 8 + m] = tx.weights[(x0 + m) * 2 + 1];
    }
  }
  return true;
}

// out[x] = w0 s[first] + w1 s[first + 1] for every output x (s: the row's bytes from tx.lo,
// plan.reach of them readable).
__attribute__((target("avx2"))) inline __m256 grey8_floats(const std::uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
__attribute__((target("avx2"))) inline void horizontal_grey8_windows(const std::uint8_t* s, const grey_windows& plan, float* out) {
  const __m256 zero = _mm256_setzero_ps();
  // The plan's arrays as locals: a vector store may alias anything, so the compiler would
  // otherwise load the vectors' pointers (and the size) again every step.
  const auto* start = plan.start.data();
  const auto* base = plan.base.data();
  const auto* index = plan.index.data();
  const float *w0 = plan.w0.data(), *w1 = plan.w1.data();
  const std::size_t groups = plan.start.size();
  for (std::size_t g = 0; g < groups; ++g) {
    const std::uint8_t* window = s + base[g];
    const __m256i at = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(index + g * 8));
    const __m256 p0 = _mm256_permutevar8x32_ps(grey8_floats(window), at);
    const __m256 p1 = _mm256_permutevar8x32_ps(grey8_floats(window + 1), at);
    const __m256 first = _mm256_add_ps(zero, _mm256_mul_ps(_mm256_loadu_ps(w0 + g * 8), p0));
    _mm256_storeu_ps(out + start[g], _mm256_add_ps(first, _mm256_mul_ps(_mm256_loadu_ps(w1 + g * 8), p1)));
  }
}

}  // namespace tp::data::detail
#endif
