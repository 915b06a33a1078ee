#pragma once
// The fast path of resample.hpp: interleaved 8-bit RGB pixels (what a JPEG or PNG decodes to),
// resampled in 16-bit fixed point with SSE2 (every x86-64 CPU), as Pillow-SIMD does, or with
// the AVX2 loops of resample_rgb8_avx2.hpp where the CPU has them (the same bytes).
//
// - Weights are Q14 (1 << 14 = 1.0), quantized so that each output's weights sum to exactly
//   1 << 14: a flat area stays exactly flat. One _mm_madd_epi16 applies two taps at once.
// - Horizontal pass: each source row once, into three planes of int16 holding value x 128 (Q7:
//   255 x 128 fits in int16), so that the vertical pass loses nothing to a rounding between the
//   passes (PIL rounds to 8 bits there).
// - Vertical pass: 16 values of a plane a step, rounded once, packed to uint8 with saturation;
//   into the output itself where its rows need no padding (uint8 outputs 32k pixels wide).
// - Float outputs (normalize) are the uint8 result times scale plus offset: what torchvision does
//   after PIL's resize (uint8), then ToTensor and Normalize.
// The result is within one step of resampling in float (one value in a thousand differs, by 1).
// Reads: a pair of taps loads 8 bytes, up to 2 bytes past the pair's last pixel, a tap count
// made even reads one pixel more with weight 0, and AVX2's enlarging windows load 16 bytes for
// 15; within a row that is the next row's start, so only the image's last row is copied to a
// padded buffer first (not for AVX2's plane windows, which read the row's split, padded copy).
#if defined(__SSE2__)
#include <emmintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <tp/data/image/filter_taps.hpp>
#include <tp/data/image/resample_rgb8_avx2.hpp>
#include <tp/data/image/resample_rgb8_plane_windows.hpp>

namespace tp::data::detail {

// Along one axis, the taps of resample.hpp's filter_taps (all `taps` per output), in Q14: each
// rounded, and the rounding's remainder added to the largest (the first of equals), so that they
// sum to exactly 1 << 14. Without a branch: which of an enlarged pixel's two taps weighs more is
// a coin toss, and a branch on it was mispredicted half the time (1.2% of a 256 x 256 crop).
inline void quantize_taps(const float* weights, std::int64_t outputs, std::int64_t taps, std::vector<std::int16_t>& q) {
  q.resize(outputs * taps);
  const auto rounded = [](float w) { return int(static_cast<std::int16_t>(w * 16384.0f + 0.5f)); };  // w >= 0 (lrint is a libm call)
  if (taps == 2) {  // mostly an enlarged axis (every crop smaller than its output)
    for (std::int64_t o = 0; o < outputs; ++o) {
      const int a = rounded(weights[2 * o]), b = rounded(weights[2 * o + 1]), rest = 16384 - a - b;
      q[2 * o] = static_cast<std::int16_t>(b > a ? a : a + rest);
      q[2 * o + 1] = static_cast<std::int16_t>(b > a ? b + rest : b);
    }
    return;
  }
  for (std::int64_t o = 0; o < outputs; ++o) {
    std::int16_t* w = &q[o * taps];
    int sum = 0, most = -1;
    std::int64_t largest = 0;
    for (std::int64_t k = 0; k < taps; ++k) {
      const int v = rounded(weights[o * taps + k]);
      w[k] = static_cast<std::int16_t>(v);
      sum += v;
      const bool more = v > most;
      most = more ? v : most;
      largest = more ? k : largest;
    }
    w[largest] = static_cast<std::int16_t>(w[largest] + 16384 - sum);
  }
}

// Where pixel x's pair j of horizontal weights is: in groups of 8 pixels, pair j of pixels m and
// m + 4 side by side (the AVX2 path loads both at once).
inline std::int64_t weight_slot(std::int64_t x, std::int64_t j, std::int64_t pairs) {
  return (x / 8) * 8 * pairs + (j * 4 + x % 4) * 2 + (x % 8) / 4;
}

// One output pixel of the horizontal pass from its taps (in pairs): [R, G, B, 0] in Q21.
template <int Pairs>
inline __m128i rgb8_taps(const std::uint8_t* p, const std::int16_t* w, std::int64_t pairs) {  // w: pair j at w + 64 j
  const __m128i zero = _mm_setzero_si128();
  __m128i sum = _mm_set1_epi32(1 << 6);  // rounds the shift to Q7
  const std::int64_t n = Pairs > 0 ? Pairs : pairs;
  for (std::int64_t j = 0; j < n; ++j) {
    // Bytes r0 g0 b0 r1 g1 b1 ..., paired as r0 r1 g0 g1 b0 b1 in 16 bits: one madd, two taps.
    const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 6 * j));
    const __m128i pair = _mm_unpacklo_epi8(_mm_unpacklo_epi8(a, _mm_srli_si128(a, 3)), zero);
    sum = _mm_add_epi32(sum, _mm_madd_epi16(pair, _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 64 * j))));
  }
  return sum;
}

// One source row to the three Q7 planes of `row` (each `stride` long), 8 output pixels a step.
template <int Pairs>
void horizontal_rgb8(const std::uint8_t* s, const std::int32_t* offset, const std::int16_t* w, std::int64_t pairs, std::int64_t out_w,
                     std::int16_t* row, std::int64_t stride) {
  for (std::int64_t x = 0; x < out_w; x += 8) {
    __m128i r[2], g[2], b[2];
    for (int half = 0; half < 2; ++half) {
      const std::int64_t q = x + 4 * half;
      const auto pixel = [&](std::int64_t i) { return rgb8_taps<Pairs>(s + offset[i], w + 8 * weight_slot(i, 0, pairs), pairs); };
      const __m128i p0 = pixel(q), p1 = pixel(q + 1), p2 = pixel(q + 2), p3 = pixel(q + 3);
      const __m128i rg01 = _mm_unpacklo_epi32(p0, p1), rg23 = _mm_unpacklo_epi32(p2, p3);  // transposed to planes
      const __m128i b01 = _mm_unpackhi_epi32(p0, p1), b23 = _mm_unpackhi_epi32(p2, p3);
      r[half] = _mm_srai_epi32(_mm_unpacklo_epi64(rg01, rg23), 7);
      g[half] = _mm_srai_epi32(_mm_unpackhi_epi64(rg01, rg23), 7);
      b[half] = _mm_srai_epi32(_mm_unpacklo_epi64(b01, b23), 7);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(row + x), _mm_packs_epi32(r[0], r[1]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(row + stride + x), _mm_packs_epi32(g[0], g[1]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(row + 2 * stride + x), _mm_packs_epi32(b[0], b[1]));
  }
}

// 8 values of the vertical pass: rows in[0..2 pairs) at i, weighted, rounded from Q21 to int16.
template <int Pairs>
inline __m128i vertical_rgb8(const std::int16_t* const* in, const std::int16_t* w, std::int64_t pairs, std::int64_t i) {
  __m128i lo = _mm_set1_epi32(1 << 20), hi = lo;
  const std::int64_t n = Pairs > 0 ? Pairs : pairs;
  for (std::int64_t j = 0; j < n; ++j) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in[2 * j] + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in[2 * j + 1] + i));
    const __m128i wj = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 8 * j));
    lo = _mm_add_epi32(lo, _mm_madd_epi16(_mm_unpacklo_epi16(a, b), wj));
    hi = _mm_add_epi32(hi, _mm_madd_epi16(_mm_unpackhi_epi16(a, b), wj));
  }
  return _mm_packs_epi32(_mm_srai_epi32(lo, 21), _mm_srai_epi32(hi, 21));
}

template <int Pairs>
void vertical_rgb8_row(const std::int16_t* const* in, const std::int16_t* w, std::int64_t pairs, std::int64_t n, std::uint8_t* out) {
  for (std::int64_t i = 0; i < n; i += 16) {
    const __m128i v = _mm_packus_epi16(vertical_rgb8<Pairs>(in, w, pairs, i), vertical_rgb8<Pairs>(in, w, pairs, i + 8));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), v);
  }
}

// 16 bytes to a * byte + b (explicitly: GCC 12 at -O2 leaves the plain loop scalar). Stream:
// o is 16-byte aligned, and written with streaming stores (see streams_floats).
template <bool Stream = false>
inline void bytes_to_floats(const std::uint8_t* p, float a, float b, float* o) {
  const __m128i zero = _mm_setzero_si128(), v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i lo = _mm_unpacklo_epi8(v, zero), hi = _mm_unpackhi_epi8(v, zero);
  const __m128i words[4] = {_mm_unpacklo_epi16(lo, zero), _mm_unpackhi_epi16(lo, zero), _mm_unpacklo_epi16(hi, zero), _mm_unpackhi_epi16(hi, zero)};
  const __m128 va = _mm_set1_ps(a), vb = _mm_set1_ps(b);
  for (int k = 0; k < 4; ++k) {
    const __m128 f = _mm_add_ps(_mm_mul_ps(_mm_cvtepi32_ps(words[k]), va), vb);
    if constexpr (Stream) _mm_stream_ps(o + 4 * k, f);
    else _mm_storeu_ps(o + 4 * k, f);
  }
}

// Float images of 128 KiB and more are written with streaming stores where a row starts aligned
// for them (16 bytes, 32 for AVX2's: every row of a 224-pixel-wide image in a batch buffer): this
// thread never reads them again (the batch goes to the step's thread or to a GPU), and a plain
// store first reads each cache line it writes, which for a 3 x 224 x 224 float image (600 KB) is
// as much memory traffic again. A small image's batch stays in the shared cache until the step
// reads it, and streaming its short rows cost more than it saved (a 28 x 28 transform: 9.2 to
// 9.0 us without). The writer ends with a store fence (flush_streamed_floats) before the image
// is handed over.
inline bool streams_floats(const float* o, std::int64_t image_values, std::uintptr_t alignment = 16) {
  return image_values >= (std::int64_t(1) << 15) && reinterpret_cast<std::uintptr_t>(o) % alignment == 0;
}
inline void flush_streamed_floats() { _mm_sfence(); }

// out[c][y][x] for c < 3 from an interleaved RGB source (stride_x 3, stride_c 1), with the taps
// of resample(): equalized, tx possibly mirrored. uint8 out, or float: scale * value + offset.
template <class Out>
void resample_rgb8(const std::uint8_t* data, std::int64_t height, std::int64_t width, std::int64_t stride_y, const filter_taps& tx,
                   const filter_taps& ty, std::int64_t out_h, std::int64_t out_w, const float* scale, const float* offset, Out* out) {
  thread_local std::vector<std::int16_t> qx, qy, ring, zeros;
  thread_local std::vector<std::int16_t> wx, wy;  // weights as the madds take them, 8 per vector
  thread_local std::vector<std::int32_t> offsets;
  thread_local std::vector<const std::int16_t*> in, channel_in;
  thread_local std::vector<std::uint8_t> last_row, planes;
  thread_local rgb8_windows windows;
  thread_local rgb8_plane_windows plane_windows;
  thread_local std::vector<std::uint8_t> split_row;  // a source row in planes, for plane_windows
  const bool avx2 = use_avx2();
  const std::int64_t taps_x = tx.stride, pairs_x = (taps_x + 1) / 2, taps_y = ty.stride, pairs_y = (taps_y + 1) / 2;
  const std::int64_t padded_w = (out_w + 7) / 8 * 8, stride = (out_w + 31) / 32 * 32, row_n = 3 * stride;
  quantize_taps(tx.weights.data(), out_w, taps_x, qx);
  quantize_taps(ty.weights.data(), out_h, taps_y, qy);
  const bool enlarging = avx2 && plan_rgb8_windows(tx, qx, out_w, windows);
  const bool planar = avx2 && !enlarging && plan_rgb8_plane_windows(tx, qx, out_w, plane_windows);
  // 16 bytes readable from any column of each plane:
  const std::int64_t plane_stride = planar ? (tx.hi - tx.lo + 16 + 31) / 32 * 32 : 0;
  if (planar) split_row.resize(3 * plane_stride);
  // Otherwise, per output pixel: its first byte, and its weights in pairs as [a b a b a b 0 0],
  // at weight_slot (the padding pixels up to a multiple of 8 read pixel 0 with weight 0).
  if (!enlarging && !planar) {
    wx.assign(padded_w * pairs_x * 8, 0);
    offsets.assign(padded_w, 0);
    for (std::int64_t x = 0; x < out_w; ++x) {
      offsets[x] = static_cast<std::int32_t>(tx.first[x] * 3);
      for (std::int64_t j = 0; j < pairs_x; ++j) {
        const std::int16_t a = qx[x * taps_x + 2 * j], b = 2 * j + 1 < taps_x ? qx[x * taps_x + 2 * j + 1] : 0;
        std::int16_t* slot = &wx[8 * weight_slot(x, j, pairs_x)];
        slot[0] = slot[2] = slot[4] = a;
        slot[1] = slot[3] = slot[5] = b;
      }
    }
  }
  ring.assign(taps_y * row_n, 0);  // taps_y horizontally resampled rows, by source row modulo taps_y
  zeros.assign(row_n, 0);          // the partner of an odd last tap
  in.resize(2 * pairs_y);
  channel_in.resize(2 * pairs_y);
  wy.resize(pairs_y * 8);
  planes.resize(row_n);
  std::int64_t next = 0;  // the first source row not resampled yet
  for (std::int64_t y = 0; y < out_h; ++y) {
    const std::int64_t first = ty.first[y];
    for (std::int64_t r = std::max(next, first); r < first + taps_y; ++r) {
      const std::uint8_t* s = data + r * stride_y;
      if (r == height - 1 && !planar) {  // (the plane windows read the row's split copy)
        last_row.assign(s, s + width * 3);
        last_row.resize(last_row.size() + 16, 0);
        s = last_row.data();
      }
      std::int16_t* row = ring.data() + (r % taps_y) * row_n;
      if (enlarging) horizontal_rgb8_windows(s, windows, out_w, row, stride);
      else if (planar) {
        split_rgb8(s + 3 * tx.lo, tx.hi - tx.lo, split_row.data(), plane_stride);
        if (pairs_x == 2) horizontal_rgb8_plane_windows<2>(split_row.data(), plane_stride, plane_windows, out_w, row, stride);
        else horizontal_rgb8_plane_windows<3>(split_row.data(), plane_stride, plane_windows, out_w, row, stride);
      }
      else if (avx2 && pairs_x == 1) horizontal_rgb8_avx2<1>(s, offsets.data(), wx.data(), 1, out_w, row, stride);
      else if (avx2 && pairs_x == 2) horizontal_rgb8_avx2<2>(s, offsets.data(), wx.data(), 2, out_w, row, stride);
      else if (avx2) horizontal_rgb8_avx2<0>(s, offsets.data(), wx.data(), pairs_x, out_w, row, stride);
      else if (pairs_x == 1) horizontal_rgb8<1>(s, offsets.data(), wx.data(), 1, out_w, row, stride);
      else if (pairs_x == 2) horizontal_rgb8<2>(s, offsets.data(), wx.data(), 2, out_w, row, stride);
      else horizontal_rgb8<0>(s, offsets.data(), wx.data(), pairs_x, out_w, row, stride);
    }
    next = first + taps_y;
    for (std::int64_t k = 0; k < 2 * pairs_y; ++k) in[k] = k < taps_y ? ring.data() + ((first + k) % taps_y) * row_n : zeros.data();
    for (std::int64_t j = 0; j < pairs_y; ++j) {
      const std::int16_t a = qy[y * taps_y + 2 * j], b = 2 * j + 1 < taps_y ? qy[y * taps_y + 2 * j + 1] : std::int16_t(0);
      for (int k = 0; k < 8; k += 2) wy[8 * j + k] = a, wy[8 * j + k + 1] = b;
    }
    const auto vertical = [&](const std::int16_t* const* rows, std::int64_t n, std::uint8_t* to) {
      if (avx2 && pairs_y == 1) vertical_rgb8_row_avx2<1>(rows, wy.data(), 1, n, to);
      else if (avx2 && pairs_y == 2) vertical_rgb8_row_avx2<2>(rows, wy.data(), 2, n, to);
      else if (avx2) vertical_rgb8_row_avx2<0>(rows, wy.data(), pairs_y, n, to);
      else if (pairs_y == 1) vertical_rgb8_row<1>(rows, wy.data(), 1, n, to);
      else if (pairs_y == 2) vertical_rgb8_row<2>(rows, wy.data(), 2, n, to);
      else vertical_rgb8_row<0>(rows, wy.data(), pairs_y, n, to);
    };
    if constexpr (std::is_same_v<Out, std::uint8_t>) {
      if (stride == out_w) {  // rows without padding (224 pixels, say): straight into the output
        for (std::int64_t c = 0; c < 3; ++c) {
          for (std::int64_t k = 0; k < 2 * pairs_y; ++k) channel_in[k] = in[k] + c * stride;
          vertical(channel_in.data(), stride, out + (c * out_h + y) * out_w);
        }
        continue;
      }
    }
    vertical(in.data(), row_n, planes.data());
    for (std::int64_t c = 0; c < 3; ++c) {
      Out* o = out + (c * out_h + y) * out_w;
      const std::uint8_t* p = planes.data() + c * stride;
      if constexpr (std::is_same_v<Out, std::uint8_t>) {
        std::memcpy(o, p, std::size_t(out_w));
      } else {
        const float a = scale[c], b = offset[c];
        std::int64_t x = 0;
        if (avx2) x = bytes_to_floats_avx2(p, out_w, a, b, o, streams_floats(o, 3 * out_h * out_w, 32));
        else if (streams_floats(o, 3 * out_h * out_w))
          for (; x + 16 <= out_w; x += 16) bytes_to_floats<true>(p + x, a, b, o + x);
        for (; x + 16 <= out_w; x += 16) bytes_to_floats(p + x, a, b, o + x);
        // The tail in two statements: clang's default contraction fuses `v * a + b` written as one
        // (into an FMA with -march=haswell, say) but not the vector loops' separate multiply and
        // add, and the columns the tail takes differ between the SSE2 and AVX2 loops. (g++ contracts
        // across statements and intrinsics alike, -ffp-contract=fast being its default for C++,
        // wherever FMA is enabled: -mfma, -march=haswell, or a target attribute that brings it.)
        for (; x < out_w; ++x) {
          const float scaled = float(p[x]) * a;
          o[x] = scaled + b;
        }
      }
    }
  }
  if constexpr (!std::is_same_v<Out, std::uint8_t>) flush_streamed_floats();
}

}  // namespace tp::data::detail
#endif
