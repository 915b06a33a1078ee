#pragma once
// resample_rgb8.hpp's loops for AVX2, chosen at run time (use_avx2): its two passes on twice the
// lanes, the enlarging windows (rgb8_windows: byte shuffles instead of a load per pixel) and the
// float conversion; resample_rgb8_plane_windows.hpp adds the shrinking ones. Each computes the
// same products, sums and roundings as the SSE2 loops, so the results are bitwise theirs, and a
// run resumed on another machine makes the same images. g++ and clang++ compile these functions
// for AVX2 whatever the target (the target attribute); only CPUs that have it run them.
#if defined(__SSE2__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include <tp/data/image/filter_taps.hpp>
#include <tp/data/image/use_avx2.hpp>

namespace tp::data::detail {

// 8 pixels of the three int16 planes at row, row + stride and row + 2 stride, from the packs of
// their halves: rg = [R0-3 G0-3 | R4-7 G4-7], bb = [B0-3 B0-3 | B4-7 B4-7]. Two 128-bit unpacks
// where two cross-lane permutes were: about 1% less time for a 224 x 224 crop on this project's
// 2-core AMD EPYC (uint8 output in one thread, best of 8 runs: 197.9 to 195.3 us an image).
__attribute__((target("avx2"))) inline void store_rgb16_planes(__m256i rg, __m256i bb, std::int16_t* row, std::int64_t stride) {
  const __m128i rg_lo = _mm256_castsi256_si128(rg), rg_hi = _mm256_extracti128_si256(rg, 1);
  const __m128i b = _mm_unpacklo_epi64(_mm256_castsi256_si128(bb), _mm256_extracti128_si256(bb, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(row), _mm_unpacklo_epi64(rg_lo, rg_hi));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(row + stride), _mm_unpackhi_epi64(rg_lo, rg_hi));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(row + 2 * stride), b);
}

// The smallest and the largest first source pixel of outputs [x0, x0 + n): a window's span.
inline std::pair<std::int64_t, std::int64_t> window_span(const filter_taps& tx, std::int64_t x0, std::int64_t n) {
  std::int64_t lo = tx.first[x0], hi = lo;
  for (std::int64_t m = 1; m < n; ++m) {
    lo = std::min<std::int64_t>(lo, tx.first[x0 + m]);
    hi = std::max<std::int64_t>(hi, tx.first[x0 + m]);
  }
  return {lo, hi};
}

// The windows of groups g and g + 1 (16 bytes each, from p + base[g] and p + base[g + 1]) in the
// two halves of one vector, for the byte shuffles of the 8 outputs they serve.
__attribute__((target("avx2"))) inline __m256i load_window_pair(const std::uint8_t* p, const std::int32_t* base, std::int64_t g) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + base[g]))),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + base[g + 1])), 1);
}

// Pixels m and m + 4 of a group of 8, in the two halves: [R G B 0 | R G B 0] in Q21 (+ rounding).
// Pairs: the number of tap pairs when known at compile time (the loop unrolled), 0 for `pairs`.
template <int Pairs>
__attribute__((target("avx2"))) inline __m256i rgb8_taps_avx2(const std::uint8_t* a, const std::uint8_t* b, const std::int16_t* w,
                                                              std::int64_t pairs) {
  const __m256i zero = _mm256_setzero_si256();
  __m256i sum = _mm256_set1_epi32(1 << 6);
  const std::int64_t n = Pairs > 0 ? Pairs : pairs;
  for (std::int64_t j = 0; j < n; ++j) {
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + 6 * j))),
                                              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 6 * j)), 1);
    const __m256i pair = _mm256_unpacklo_epi8(_mm256_unpacklo_epi8(v, _mm256_srli_si256(v, 3)), zero);
    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pair, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * j))));
  }
  return sum;
}

// horizontal_rgb8 (weights at weight_slot, 8 pixels a step); Pairs as rgb8_taps_avx2's.
template <int Pairs>
__attribute__((target("avx2"))) inline void horizontal_rgb8_avx2(const std::uint8_t* s, const std::int32_t* offset, const std::int16_t* w,
                                                                 std::int64_t pairs, std::int64_t out_w, std::int16_t* row,
                                                                 std::int64_t stride) {
  for (std::int64_t x = 0; x < out_w; x += 8) {
    const std::int16_t* wg = w + 8 * x * pairs;
    // (No lambda here: it would not inherit the target attribute.)
    const __m256i p0 = rgb8_taps_avx2<Pairs>(s + offset[x], s + offset[x + 4], wg, pairs);
    const __m256i p1 = rgb8_taps_avx2<Pairs>(s + offset[x + 1], s + offset[x + 5], wg + 16, pairs);
    const __m256i p2 = rgb8_taps_avx2<Pairs>(s + offset[x + 2], s + offset[x + 6], wg + 32, pairs);
    const __m256i p3 = rgb8_taps_avx2<Pairs>(s + offset[x + 3], s + offset[x + 7], wg + 48, pairs);
    const __m256i rg01 = _mm256_unpacklo_epi32(p0, p1), rg23 = _mm256_unpacklo_epi32(p2, p3);  // to planes, pixels 0-3 | 4-7
    const __m256i b01 = _mm256_unpackhi_epi32(p0, p1), b23 = _mm256_unpackhi_epi32(p2, p3);
    const __m256i r = _mm256_srai_epi32(_mm256_unpacklo_epi64(rg01, rg23), 7), g = _mm256_srai_epi32(_mm256_unpackhi_epi64(rg01, rg23), 7);
    const __m256i b = _mm256_srai_epi32(_mm256_unpacklo_epi64(b01, b23), 7);
    store_rgb16_planes(_mm256_packs_epi32(r, g), _mm256_packs_epi32(b, b), row + x, stride);
  }
}

// 16 values of the vertical pass, in order (unpack, madd and pack all work within 128-bit lanes).
template <int Pairs>
__attribute__((target("avx2"))) inline __m256i vertical_rgb8_avx2(const std::int16_t* const* in, const std::int16_t* w, std::int64_t pairs,
                                                                  std::int64_t i) {
  __m256i lo = _mm256_set1_epi32(1 << 20), hi = lo;
  const std::int64_t n = Pairs > 0 ? Pairs : pairs;
  for (std::int64_t j = 0; j < n; ++j) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in[2 * j] + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in[2 * j + 1] + i));
    const __m256i wj = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 8 * j)));
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), wj));
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), wj));
  }
  return _mm256_packs_epi32(_mm256_srai_epi32(lo, 21), _mm256_srai_epi32(hi, 21));
}

// vertical_rgb8_avx2 for a known number of pairs, from rows and weights held in registers.
template <int Pairs>
__attribute__((target("avx2"))) inline __m256i vertical_rgb8_held(const std::int16_t* const (&rows)[2 * Pairs], const __m256i (&w)[Pairs],
                                                                  std::int64_t i) {
  __m256i lo = _mm256_set1_epi32(1 << 20), hi = lo;
  for (int j = 0; j < Pairs; ++j) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[2 * j] + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[2 * j + 1] + i));
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), w[j]));
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), w[j]));
  }
  return _mm256_packs_epi32(_mm256_srai_epi32(lo, 21), _mm256_srai_epi32(hi, 21));
}

// vertical_rgb8_row, 32 values a step (n is a multiple of 32); Pairs as there (0: any).
template <int Pairs>
__attribute__((target("avx2"))) inline void vertical_rgb8_row_avx2(const std::int16_t* const* in, const std::int16_t* w, std::int64_t pairs,
                                                                   std::int64_t n, std::uint8_t* out) {
  if constexpr (Pairs > 0) {
    // The rows and weights in registers: `out` is bytes, which may alias anything, so after
    // each store the compiler would load them again.
    const std::int16_t* rows[2 * Pairs];
    __m256i weights[Pairs];
    for (int k = 0; k < 2 * Pairs; ++k) rows[k] = in[k];
    for (int j = 0; j < Pairs; ++j) weights[j] = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 8 * j)));
    for (std::int64_t i = 0; i < n; i += 32) {
      const __m256i v = _mm256_packus_epi16(vertical_rgb8_held<Pairs>(rows, weights, i), vertical_rgb8_held<Pairs>(rows, weights, i + 16));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permute4x64_epi64(v, 0xD8));
    }
  } else {
    for (std::int64_t i = 0; i < n; i += 32) {
      const __m256i v = _mm256_packus_epi16(vertical_rgb8_avx2<Pairs>(in, w, pairs, i), vertical_rgb8_avx2<Pairs>(in, w, pairs, i + 16));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permute4x64_epi64(v, 0xD8));
    }
  }
}

// Bytes [0, n - n % 8) of p to a * byte + b at o, 8 a step (the SSE2 loop's 16 take twice the
// instructions); streamed (o 32-byte aligned: see streams_floats) or stored. The same
// multiply, then add, as bytes_to_floats and the scalar tail: the same floats. Returns how many.
__attribute__((target("avx2"))) inline std::int64_t bytes_to_floats_avx2(const std::uint8_t* p, std::int64_t n, float a, float b, float* o,
                                                                         bool stream) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  const std::int64_t end = n - n % 8;
  for (std::int64_t i = 0; i < end; i += 8) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i)));
    const __m256 f = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), va), vb);
    if (stream) _mm256_stream_ps(o + i, f);
    else _mm256_storeu_ps(o + i, f);
  }
  return end;
}

// Enlarging (at most two taps per output pixel, and every 4 neighbouring outputs within 5 source
// pixels, as a crop smaller than its output size is): 4 outputs read one 16-byte load, which
// byte shuffles (pshufb, in AVX2) turn into each channel's tap pairs, already in plane order.
// Half the work of the general loop, which needs a load, two unpacks and a transpose per pixel.
struct rgb8_windows {
  std::vector<std::int32_t> base;    // per 4 outputs: the first byte of their window
  std::vector<std::uint8_t> masks;   // per 8 outputs: 3 channels x (16 bytes of each half)
  std::vector<std::int16_t> weights; // per 4 outputs: 2 taps each
};

// The windows of `tx` (equalized, `q` its Q14 weights), or false when some outputs do not fit.
inline bool plan_rgb8_windows(const filter_taps& tx, const std::vector<std::int16_t>& q, std::int64_t out_w, rgb8_windows& plan) {
  const std::int64_t taps = tx.stride, groups = (out_w + 7) / 8 * 2;
  if (taps > 2) return false;
  plan.base.assign(groups, 0);
  plan.masks.assign(groups * 48, 0x80);
  plan.weights.assign(groups * 8, 0);
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t x0 = g * 4, n = std::clamp<std::int64_t>(out_w - x0, 0, 4);
    if (n == 0) continue;  // padding: weight 0, mask "zero"
    const auto [lo, hi] = window_span(tx, x0, n);
    if (hi + 2 - lo > 5) return false;  // 5 pixels: 15 of the 16 bytes
    plan.base[g] = static_cast<std::int32_t>(lo * 3);
    for (std::int64_t m = 0; m < n; ++m)
      for (std::int64_t t = 0; t < 2; ++t) {
        plan.weights[g * 8 + m * 2 + t] = t < taps ? q[(x0 + m) * taps + t] : 0;
        for (std::int64_t c = 0; c < 3; ++c)  // the low byte of word (m, t); the high one stays 0x80: zero
          plan.masks[(g / 2) * 96 + c * 32 + (g % 2) * 16 + (m * 2 + t) * 2] = static_cast<std::uint8_t>((tx.first[x0 + m] - lo + t) * 3 + c);
      }
  }
  return true;
}

__attribute__((target("avx2"))) inline void horizontal_rgb8_windows(const std::uint8_t* s, const rgb8_windows& plan, std::int64_t out_w,
                                                                    std::int16_t* row, std::int64_t stride) {
  const __m256i round = _mm256_set1_epi32(1 << 6);
  // The plan's arrays as locals: the stores below may alias anything, so the compiler would
  // otherwise load the vectors' pointers again every step.
  const std::int32_t* base = plan.base.data();
  const std::int16_t* weights = plan.weights.data();
  const std::uint8_t* masks = plan.masks.data();
  for (std::int64_t x = 0, g = 0; x < out_w; x += 8, g += 2) {
    const __m256i v = load_window_pair(s, base, g);
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(weights + g * 8));
    const std::uint8_t* mask = masks + g * 48;
    __m256i c[3];
    for (int k = 0; k < 3; ++k) {
      const __m256i taps = _mm256_shuffle_epi8(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mask + 32 * k)));
      c[k] = _mm256_srai_epi32(_mm256_add_epi32(_mm256_madd_epi16(taps, w), round), 7);  // pixels 0-3 | 4-7 of channel k
    }
    store_rgb16_planes(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[2]), row + x, stride);
  }
}

}  // namespace tp::data::detail
#endif
