#pragma once
// The shrinking windows of resample_rgb8.hpp's AVX2 horizontal pass (resample_rgb8_avx2.hpp has
// the enlarging ones): rgb8_plane_windows below.
#if defined(__SSE2__)
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include <tp/data/image/filter_taps.hpp>
#include <tp/data/image/resample_rgb8_avx2.hpp>

namespace tp::data::detail {

// Shrinking by up to about 3 (3 to 6 taps per output: a random resized crop a little larger than
// its output, say): the general loop spends a load, two unpacks and a madd per pixel and pair of
// taps, then a transpose, and a 4-output window of interleaved pixels (16 bytes: 5 pixels) is too
// narrow for 3 taps. So each source row is first split into three byte planes (split_rgb8), where
// 16 bytes hold 16 pixels of a channel: one load then holds the taps of 4 outputs, and a byte
// shuffle per pair of taps and channel makes their pairs, with masks and weights shared by the
// three channels.
struct rgb8_plane_windows {
  std::vector<std::int32_t> base;     // per 4 outputs: their window's first column (from lo)
  std::vector<std::uint8_t> masks;    // per 8 outputs and pair of taps: 32 bytes (4 outputs' words per half)
  std::vector<std::int16_t> weights;  // per 8 outputs and pair of taps: 16 words
};

// The plane windows of `tx` (equalized, `q` its Q14 weights), or false: 1 or 2 taps (rgb8_windows
// or the general loop take those), more than 6, or 4 outputs whose taps span more than 16 pixels.
// The planes hold the source columns the taps read, [tx.lo, tx.hi).
inline bool plan_rgb8_plane_windows(const filter_taps& tx, const std::vector<std::int16_t>& q, std::int64_t out_w,
                                    rgb8_plane_windows& plan) {
  const std::int64_t taps = tx.stride, pairs = (taps + 1) / 2, groups = (out_w + 7) / 8 * 2;
  if (pairs < 2 || pairs > 3) return false;  // 7 or 8 taps rarely fit 16 pixels
  plan.base.assign(groups, 0);
  plan.masks.assign(groups / 2 * pairs * 32, 0x80);  // 0x80: the shuffle writes 0 (high bytes, padding)
  plan.weights.assign(groups / 2 * pairs * 16, 0);
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t x0 = g * 4, n = std::clamp<std::int64_t>(out_w - x0, 0, 4);
    if (n == 0) continue;
    const auto [lo, hi] = window_span(tx, x0, n);
    if (hi + taps - lo > 16) return false;
    plan.base[g] = static_cast<std::int32_t>(lo - tx.lo);
    for (std::int64_t m = 0; m < n; ++m)
      for (std::int64_t k = 0; k < taps; ++k) {  // tap k of output m: word 2 m + k % 2 of pair k / 2, in half g % 2
        const std::int64_t block = (g / 2 * pairs + k / 2), word = (g % 2) * 8 + m * 2 + k % 2;
        plan.masks[block * 32 + word * 2] = static_cast<std::uint8_t>(tx.first[x0 + m] - lo + k);
        plan.weights[block * 16 + word] = q[(x0 + m) * taps + k];
      }
  }
  return true;
}

// Pixels [0, n) of an interleaved RGB row to three planes at out, out + stride and out + 2 stride,
// 16 a step (three loads, then three shuffles and two ors per channel), the rest one by one.
__attribute__((target("avx2"))) inline void split_rgb8(const std::uint8_t* s, std::int64_t n, std::uint8_t* out, std::int64_t stride) {
  // Mask (c, k): the bytes of channel c that source vector k holds, in their pixel's place.
  static const auto masks = [] {
    std::array<std::array<std::uint8_t, 16>, 9> m{};
    for (int c = 0; c < 3; ++c)
      for (int k = 0; k < 3; ++k)
        for (int i = 0; i < 16; ++i) {
          const int at = 3 * i + c - 16 * k;
          m[c * 3 + k][i] = at >= 0 && at < 16 ? static_cast<std::uint8_t>(at) : 0x80;
        }
    return m;
  }();
  // In registers: the stores below may alias the masks, which would otherwise be loaded again
  // every step.
  __m128i mask[9];
  for (int i = 0; i < 9; ++i) mask[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(masks[i].data()));
  std::int64_t x = 0;
  for (; x + 16 <= n; x += 16) {
    const __m128i v[3] = {_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 3 * x)),
                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 3 * x + 16)),
                          _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 3 * x + 32))};
    for (int c = 0; c < 3; ++c) {
      __m128i plane = _mm_setzero_si128();
      for (int k = 0; k < 3; ++k) plane = _mm_or_si128(plane, _mm_shuffle_epi8(v[k], mask[c * 3 + k]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c * stride + x), plane);
    }
  }
  for (; x < n; ++x)
    for (int c = 0; c < 3; ++c) out[c * stride + x] = s[3 * x + c];
}

// horizontal_rgb8 from the planes of split_rgb8 (a column's bytes at planes + c * plane_stride,
// 16 readable bytes from any of the plan's columns), for the plan's 2 or 3 pairs of taps (Pairs).
template <int Pairs>
__attribute__((target("avx2"))) inline void horizontal_rgb8_plane_windows(const std::uint8_t* planes, std::int64_t plane_stride,
                                                                   const rgb8_plane_windows& plan, std::int64_t out_w, std::int16_t* row,
                                                                   std::int64_t stride) {
  const __m256i round = _mm256_set1_epi32(1 << 6);
  const std::int32_t* base = plan.base.data();  // locals: the stores below may alias anything
  const std::int16_t* weights = plan.weights.data();
  const std::uint8_t* masks = plan.masks.data();
  for (std::int64_t x = 0, g = 0; x < out_w; x += 8, g += 2) {
    const std::uint8_t* mask = masks + g / 2 * Pairs * 32;
    const std::int16_t* w = weights + g / 2 * Pairs * 16;
    __m256i c[3];
    for (int k = 0; k < 3; ++k) {
      const __m256i v = load_window_pair(planes + k * plane_stride, base, g);
      __m256i sum = round;
      for (int j = 0; j < Pairs; ++j) {
        const __m256i taps = _mm256_shuffle_epi8(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mask + 32 * j)));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(taps, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 * j))));
      }
      c[k] = _mm256_srai_epi32(sum, 7);  // outputs 0-3 | 4-7 of channel k
    }
    store_rgb16_planes(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[2]), row + x, stride);
  }
}

}  // namespace tp::data::detail
#endif
